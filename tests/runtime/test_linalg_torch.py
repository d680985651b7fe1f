"""aotgrad.linalg: forward values and gradients against closed forms, finite differences
(gradcheck, float64) and PyTorch (float32 and float64); compiled == eager."""
import math

import numpy as np
import pytest

import aotgrad as ag
from aotgrad import linalg as LA
from aotgrad.testing import assert_close

RNG = np.random.default_rng(1)


def _mat(*shape):
    return RNG.standard_normal(shape)


def _spd(n, batch=()):
    a = _mat(*batch, n, n)
    return a @ np.swapaxes(a, -1, -2) + n * np.eye(n)


def _sym(n, batch=()):
    a = _mat(*batch, n, n)
    return a + np.swapaxes(a, -1, -2)


# ---- closed forms (run without torch) -------------------------------------------------------
def test_closed_forms():
    a = ag.tensor([[4., 1.], [2., 3.]], dtype=ag.float64)
    assert LA.det(a).item() == pytest.approx(10.)
    assert_close(LA.inv(a).numpy(), np.array([[3., -1.], [-2., 4.]]) / 10, rtol=1e-7, atol=0,
                 equal_nan=True)
    assert_close(LA.solve(a, ag.tensor([6., 7.], dtype=ag.float64)).numpy(), [1.1, 1.6], rtol=1e-7,
                 atol=0, equal_nan=True)
    sign, logabs = LA.slogdet(-a)
    assert sign.item() == 1. and logabs.item() == pytest.approx(math.log(10.))
    assert math.isnan(ag.logdet(ag.tensor([[-1.]])).item())
    c = LA.cholesky(ag.tensor([[4., 2.], [2., 5.]]))
    assert_close(c.numpy(), [[2., 0.], [1., 2.]], rtol=1e-7, atol=0, equal_nan=True)
    assert_close(LA.cholesky(ag.tensor([[4., 2.], [2., 5.]]), upper=True).numpy(),
                 [[2., 1.], [0., 2.]], rtol=1e-7, atol=0, equal_nan=True)
    d = ag.tensor([[3., 0.], [0., -4.]])
    assert LA.svdvals(d).tolist() == [4., 3.]
    assert LA.eigvalsh(d).tolist() == [-4., 3.]
    assert LA.matrix_norm(d, "nuc").item() == 7. and LA.matrix_norm(d, 2).item() == 4.
    assert LA.matrix_norm(d, -2).item() == 3. and LA.matrix_norm(d).item() == 5.
    m = ag.tensor([[1., -2.], [3., 4.]])
    assert LA.matrix_norm(m, 1).item() == 6. and LA.matrix_norm(m, -1).item() == 4.
    assert LA.matrix_norm(m, math.inf).item() == 7. and LA.matrix_norm(m, -math.inf).item() == 3.
    v = ag.tensor([3., -4.])
    assert LA.vector_norm(v).item() == 5. and LA.vector_norm(v, 1).item() == 7.
    assert LA.vector_norm(v, math.inf).item() == 4. and LA.vector_norm(v, 0).item() == 2.
    assert LA.norm(v).item() == 5. and LA.norm(m).item() == pytest.approx(math.sqrt(30))
    assert_close(LA.pinv(ag.tensor([[2., 0.], [0., 0.]])).numpy(), [[.5, 0.], [0., 0.]], rtol=1e-7,
                 atol=0, equal_nan=True)
    assert LA.matrix_rank(ag.tensor([[1., 2.], [2., 4.]])).item() == 1
    x = LA.lstsq(ag.tensor([[1., 0.], [0., 1.], [1., 1.]]), ag.tensor([[1.], [2.], [3.]]))
    assert_close(x.solution.numpy(), [[1.], [2.]], rtol=1e-5, atol=0, equal_nan=True)
    assert_close(LA.matrix_power(a, 3).numpy(), np.linalg.matrix_power(
        a.numpy(), 3), rtol=1e-7, atol=0, equal_nan=True)
    assert_close(LA.matrix_power(a, -2).numpy(), np.linalg.matrix_power(
        a.numpy(), -2), rtol=1e-7, atol=0, equal_nan=True)


def test_factorisations_reconstruct_batched():
    a = ag.tensor(_mat(2, 3, 5, 4))
    for mode in ("reduced", "complete"):
        q, r = LA.qr(a, mode)
        assert_close((q @ r).numpy(), a.numpy(), rtol=1e-7, atol=1e-12, equal_nan=True)
        assert np.allclose(np.triu(r.numpy()), r.numpy())
    assert LA.qr(a, "r").Q.numel() == 0
    for full in (True, False):
        u, s, vh = LA.svd(a, full_matrices=full)
        k = 4
        recon = u[..., :k] * s.unsqueeze(-2) @ vh[..., :k, :]
        assert_close(recon.numpy(), a.numpy(), rtol=1e-7, atol=1e-12, equal_nan=True)
    assert LA.svd(a).U.shape == (2, 3, 5, 5) and LA.svd(a, False).U.shape == (2, 3, 5, 4)
    h = ag.tensor(_sym(4, (3,)))
    w, v = LA.eigh(h)
    assert_close((v * w.unsqueeze(-2) @ v.mT).numpy(), h.numpy(), rtol=1e-7, atol=1e-12,
                 equal_nan=True)
    spd = ag.tensor(_spd(4, (2,)))
    lo = LA.cholesky(spd)
    assert_close((lo @ lo.mT).numpy(), spd.numpy(), rtol=1e-7, atol=1e-12, equal_nan=True)
    # solve broadcasts batch dims and takes a stack of vectors
    A = ag.tensor(_spd(3, (2, 1)))
    B = ag.tensor(_mat(4, 3, 2))
    assert_close((A @ LA.solve(A, B)).numpy(), np.broadcast_to(B.numpy(), (2, 4, 3, 2)),
                 rtol=1e-7, atol=0, equal_nan=True)
    bv = ag.tensor(_mat(2, 1, 3))
    assert LA.solve(A, bv).shape == (2, 1, 3)
    bl = ag.tensor(_mat(2, 1, 2, 3))
    xl = LA.solve(A, bl, left=False)             # X A = B
    assert_close((xl @ A).numpy(), bl.numpy(), rtol=1e-7, atol=1e-12, equal_nan=True)


def test_dtypes_stay():
    a32 = ag.tensor(_spd(3).astype(np.float32))
    assert a32.dtype is ag.float32
    for out in (LA.inv(a32), LA.det(a32), LA.cholesky(a32), LA.qr(a32).Q, LA.svd(a32).S,
                LA.eigh(a32).eigenvectors, LA.pinv(a32), LA.solve(a32, a32),
                LA.matrix_norm(a32, "nuc"), LA.vector_norm(a32)):
        assert out.dtype is ag.float32


def test_errors():
    with pytest.raises(RuntimeError, match="square"):
        LA.inv(ag.ones(2, 3))
    with pytest.raises(RuntimeError, match="at least 2 dimensions"):
        LA.det(ag.ones(3))
    with pytest.raises(LA.LinAlgError, match="singular"):
        LA.inv(ag.zeros(2, 2))
    with pytest.raises(LA.LinAlgError, match="positive-definite"):
        LA.cholesky(-ag.eye(2))
    with pytest.raises(RuntimeError, match="mode"):
        LA.qr(ag.ones(2, 2), "full")
    with pytest.raises(RuntimeError, match="complete"):
        LA.qr(ag.randn(3, 2, dtype=ag.float64, requires_grad=True), "complete").Q.sum() \
            .backward()
    with pytest.raises(RuntimeError, match="floating point"):
        LA.inv(ag.ones(2, 2, dtype=ag.int64))
    assert issubclass(LA.LinAlgError, RuntimeError)


# ---- gradcheck (float64) ------------------------------------------------------------------
def _t(x):
    return ag.tensor(x, dtype=ag.float64, requires_grad=True)


def _spd_of(a):
    return a @ a.mT + a.shape[-1] * ag.eye(a.shape[-1], dtype=a.dtype)


GRADCHECKS = {
    "inv": (lambda a: LA.inv(a), [(2, 3, 3)]),
    "solve": (lambda a, b: LA.solve(a, b), [(2, 3, 3), (2, 3, 2)]),
    "solve_vec_right": (lambda a, b: LA.solve(a, b, left=False), [(3, 3), (2, 3)]),
    "det": (lambda a: LA.det(a), [(2, 3, 3)]),
    "slogdet": (lambda a: LA.slogdet(a).logabsdet, [(3, 3)]),
    "cholesky": (lambda a: LA.cholesky(_spd_of(a)), [(2, 3, 3)]),
    "cholesky_upper": (lambda a: LA.cholesky(_spd_of(a), upper=True), [(3, 3)]),
    "qr_tall": (lambda a: LA.qr(a), [(2, 4, 3)]),
    "qr_wide": (lambda a: LA.qr(a), [(3, 5)]),
    "qr_square_complete": (lambda a: LA.qr(a, "complete"), [(3, 3)]),
    "qr_r": (lambda a: LA.qr(a, "r").R, [(4, 3)]),
    # sign-invariant functions of U and V (each column is defined up to its sign)
    "svd_tall": (lambda a: (lambda r: (r.U * r.U, r.S, r.Vh * r.Vh))(LA.svd(a, False)),
                 [(2, 4, 3)]),
    "svd_wide": (lambda a: (lambda r: (r.U * r.U, r.S, r.Vh * r.Vh))(LA.svd(a, False)),
                 [(3, 5)]),
    "svd_full_square": (lambda a: (lambda r: r.U[..., :1] @ r.Vh[..., :1, :])(LA.svd(a)),
                        [(3, 3)]),
    "svdvals": (lambda a: LA.svdvals(a), [(4, 3)]),
    "eigh": (lambda a: (lambda r: (r.eigenvalues, r.eigenvectors ** 2))(LA.eigh(a + a.mT)),
             [(2, 3, 3)]),
    "eigh_upper": (lambda a: LA.eigh(a + a.mT, "U").eigenvectors[..., :1] ** 2, [(3, 3)]),
    "eigvalsh": (lambda a: LA.eigvalsh(a + a.mT), [(3, 3)]),
    "pinv": (lambda a: LA.pinv(a), [(2, 4, 3)]),
    "pinv_wide": (lambda a: LA.pinv(a), [(3, 5)]),
    "matrix_norm_nuc": (lambda a: LA.matrix_norm(a, "nuc"), [(2, 3, 4)]),
    "matrix_norm_2": (lambda a: LA.matrix_norm(a, 2, dim=(0, 2), keepdim=True), [(3, 2, 4)]),
    "matrix_norm_inf": (lambda a: LA.matrix_norm(a, math.inf), [(3, 4)]),
    "vector_norm_3": (lambda a: LA.vector_norm(a, 3, dim=(0, 1)), [(2, 3, 2)]),
    "lstsq": (lambda a, b: LA.lstsq(a, b).solution, [(5, 3), (5, 2)]),
    "logdet": (lambda a: ag.logdet(_spd_of(a)), [(3, 3)]),
}


@pytest.mark.parametrize("name", sorted(GRADCHECKS))
def test_gradcheck(name):
    fn, shapes = GRADCHECKS[name]
    args = [_t(_mat(*s)) for s in shapes]
    assert ag.autograd.gradcheck(fn, args)


def test_second_derivatives():
    a = _t(_mat(3, 3))
    assert ag.autograd.gradgradcheck(lambda a: LA.inv(a), [a])
    assert ag.autograd.gradgradcheck(lambda a: LA.det(a), [a])
    assert ag.autograd.gradgradcheck(lambda a: LA.svdvals(a), [a])


# ---- against PyTorch --------------------------------------------------------------------
TORCH_CASES = {  # name -> (fn(M, *args) -> tensor or tuple, input makers)
    "inv": (lambda M, a: M.linalg.inv(a), [lambda: _mat(2, 3, 3)]),
    "solve": (lambda M, a, b: M.linalg.solve(a, b), [lambda: _mat(3, 3), lambda: _mat(2, 3, 2)]),
    "solve_vec": (lambda M, a, b: M.linalg.solve(a, b), [lambda: _mat(2, 3, 3),
                                                         lambda: _mat(2, 3)]),
    "det": (lambda M, a: M.linalg.det(a), [lambda: _mat(2, 3, 3)]),
    "slogdet": (lambda M, a: M.linalg.slogdet(a), [lambda: _mat(2, 3, 3)]),
    "cholesky": (lambda M, a: M.linalg.cholesky(a), [lambda: _spd(3, (2,))]),
    "cholesky_upper": (lambda M, a: M.linalg.cholesky(a, upper=True), [lambda: _spd(3)]),
    "qr": (lambda M, a: M.linalg.qr(a), [lambda: _mat(2, 4, 3)]),
    "qr_wide": (lambda M, a: M.linalg.qr(a), [lambda: _mat(3, 5)]),
    "qr_complete": (lambda M, a: M.linalg.qr(a, mode="complete"), [lambda: _mat(3, 3)]),
    "svd": (lambda M, a: (lambda r: (r[0] * r[0], r[1], r[2] * r[2]))(
        M.linalg.svd(a, full_matrices=False)), [lambda: _mat(2, 4, 3)]),
    "svd_full": (lambda M, a: (lambda r: (r[0][..., :3] @ r[2], r[1]))(M.linalg.svd(a)),
                 [lambda: _mat(4, 3)]),
    "svdvals": (lambda M, a: M.linalg.svdvals(a), [lambda: _mat(3, 5)]),
    "eigh": (lambda M, a: (lambda r: (r[0], r[1] * r[1]))(M.linalg.eigh(a)),
             [lambda: _sym(4, (2,))]),
    "eigvalsh_U": (lambda M, a: M.linalg.eigvalsh(a, UPLO="U"), [lambda: _sym(3)]),
    "pinv": (lambda M, a: M.linalg.pinv(a), [lambda: _mat(2, 4, 3)]),
    "pinv_hermitian": (lambda M, a: M.linalg.pinv(a, hermitian=True), [lambda: _spd(3)]),
    "lstsq": (lambda M, a, b: M.linalg.lstsq(a, b).solution, [lambda: _mat(5, 3),
                                                               lambda: _mat(5, 2)]),
    "norm": (lambda M, a: M.linalg.norm(a), [lambda: _mat(3, 4)]),
    "norm_ord_dim": (lambda M, a: M.linalg.norm(a, 3, dim=1, keepdim=True), [lambda: _mat(3, 4)]),
    "norm_matrix_nuc": (lambda M, a: M.linalg.norm(a, "nuc"), [lambda: _mat(3, 4)]),
    "vector_norm_inf": (lambda M, a: M.linalg.vector_norm(a, -math.inf, dim=0),
                        [lambda: _mat(3, 4)]),
    "vector_norm_half": (lambda M, a: M.linalg.vector_norm(a, 0.5), [lambda: _mat(3, 4)]),
    "matrix_norm_ords": (lambda M, a: tuple(M.linalg.matrix_norm(a, o) for o in
                                            ("fro", "nuc", 1, -1, 2, -2, math.inf, -math.inf)),
                         [lambda: _mat(2, 3, 4)]),
    "matrix_norm_dims": (lambda M, a: M.linalg.matrix_norm(a, 1, dim=(2, 0), keepdim=True),
                         [lambda: _mat(3, 2, 4)]),
    "logdet": (lambda M, a: M.logdet(a), [lambda: _spd(3)]),
    "matrix_power": (lambda M, a: M.linalg.matrix_power(a, -3), [lambda: _spd(3)]),
    "solve_triangular": (lambda M, a, b: M.linalg.solve_triangular(a, b, upper=False),
                         [lambda: _spd(3, (2,)), lambda: _mat(2, 3, 2)]),
    "solve_triangular_unit_right": (
        lambda M, a, b: M.linalg.solve_triangular(a, b, upper=True, left=False,
                                                  unitriangular=True),
        [lambda: _mat(3, 3), lambda: _mat(2, 3)]),
    "cholesky_solve": (lambda M, b, a: M.cholesky_solve(b, M.linalg.cholesky(a)),
                       [lambda: _mat(3, 2), lambda: _spd(3)]),
    # (PyTorch's backward of cond with p='fro' or 1 fails on an in-place write of its own)
    "cond": (lambda M, a: (M.linalg.cond(a), M.linalg.cond(a, -2)), [lambda: _spd(3)]),
    "diagonal": (lambda M, a: M.linalg.diagonal(a, offset=1), [lambda: _mat(2, 3, 4)]),
    "torch_svd": (lambda M, a: (lambda r: (r[0] * r[0], r[1], r[2] * r[2]))(M.svd(a)),
                  [lambda: _mat(4, 3)]),
}


def _flat(out):
    return list(out) if isinstance(out, tuple) else [out]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", sorted(TORCH_CASES))
def test_matches_torch(torch, name, dtype):
    fn, makers = TORCH_CASES[name]
    data = [m().astype(dtype) for m in makers]
    res = {}
    for M in (ag, torch):
        args = [M.tensor(x, requires_grad=True) for x in data]
        outs = [o for o in _flat(fn(M, *args)) if o.dtype.is_floating_point]
        gs = [np.cos(np.arange(o.numel()).reshape(tuple(o.shape))).astype(dtype) for o in outs]
        loss = sum((o * M.tensor(g)).sum() for o, g in zip(outs, gs))
        loss.backward()
        res[M.__name__] = ([o.detach().numpy() for o in outs], [a.grad.numpy() for a in args])
    tol = dict(rtol=2e-3, atol=2e-3) if dtype == "float32" else dict(rtol=1e-8, atol=1e-9)
    for a, b in zip(res["aotgrad"][0] + res["aotgrad"][1], res["torch"][0] + res["torch"][1]):
        assert a.dtype == b.dtype
        assert_close(a, b, **tol, equal_nan=True, msg=f"{name}: ")


def test_cond_other_norms_match_torch(torch):
    a = _spd(3) + _mat(3, 3)
    for p in ("fro", "nuc", 1, -1, math.inf):
        assert LA.cond(ag.tensor(a), p).item() == pytest.approx(
            torch.linalg.cond(torch.tensor(a), p).item(), rel=1e-10)


def test_qr_mode_r_matches_torch(torch):
    # PyTorch refuses to differentiate mode='r' (it has no Q); aotgrad recomputes Q
    a = _mat(4, 3)
    assert_close(LA.qr(ag.tensor(a), "r").R.numpy(),
                 torch.linalg.qr(torch.tensor(a), mode="r")[1].numpy(), rtol=1e-7, atol=1e-12,
                 equal_nan=True)
    assert LA.qr(ag.tensor(a), "r").Q.shape == tuple(torch.linalg.qr(torch.tensor(a),
                                                                      mode="r")[0].shape)


# ---- compiled == eager ---------------------------------------------------------------------
def _step(a, b):
    spd = a @ a.mT + 3 * ag.eye(3)
    q, r = LA.qr(a)
    u, s, vh = LA.svd(b, full_matrices=False)
    w, v = LA.eigh(spd)
    return (LA.inv(spd).sum() + LA.det(spd) + LA.slogdet(a).logabsdet
            + LA.cholesky(spd).sum() + (q * q).sum() + r.sum() + s.sum() + (u * u)[:, 0].sum()
            + w.sum() + (v * v)[0].sum() + LA.pinv(b).sum() + LA.solve(spd, b).sum()
            + LA.matrix_norm(b, "nuc") + LA.vector_norm(b, 3) + LA.norm(a))


@pytest.mark.parametrize("backend", ["interpret", pytest.param("numba",
                                                               marks=pytest.mark.slow)])
def test_compiled_equals_eager(backend):
    a = ag.tensor(_mat(3, 3), dtype=ag.float64, requires_grad=True)
    b = ag.tensor(_mat(3, 2), dtype=ag.float64, requires_grad=True)
    out = _step(a, b)
    out.backward()
    eager = (out.item(), a.grad.numpy().copy(), b.grad.numpy().copy())
    a.grad = b.grad = None
    f = ag.compile(_step, backend=backend)
    for _ in range(2):
        a.grad = b.grad = None
        out = f(a, b)
        out.backward()
        assert_close(out.item(), eager[0], rtol=1e-10, atol=0, equal_nan=True)
        assert_close(a.grad.numpy(), eager[1], rtol=1e-9, atol=1e-12, equal_nan=True)
        assert_close(b.grad.numpy(), eager[2], rtol=1e-9, atol=1e-12, equal_nan=True)


def test_legacy_spellings_match_torch(torch):
    a = _mat(4, 3)
    for some in (True, False):
        for uv in (True, False):
            ours = ag.svd(ag.tensor(a), some=some, compute_uv=uv)
            theirs = torch.svd(torch.tensor(a), some=some, compute_uv=uv)
            for x, y in zip(ours, theirs):
                assert x.shape == tuple(y.shape)
            assert_close(ours.S.numpy(), theirs.S.numpy(), rtol=1e-7, atol=1e-12, equal_nan=True)
    sq = _spd(3)
    for name in ("det", "logdet", "inverse", "pinverse"):
        assert_close(getattr(ag.tensor(sq), name)().numpy(),
                     getattr(torch.tensor(sq), name)().numpy(), rtol=1e-10, atol=0,
                     equal_nan=True)
    assert_close(ag.tensor(sq).cholesky().numpy(), torch.linalg.cholesky(torch.tensor(sq)).numpy(),
                 rtol=1e-10, atol=0, equal_nan=True)
    assert_close(abs(ag.tensor(a).qr().R.numpy()), abs(torch.linalg.qr(torch.tensor(a)).R.numpy()),
                 rtol=1e-10, atol=0, equal_nan=True)
    s1, l1 = ag.tensor(sq).slogdet()
    s2, l2 = torch.tensor(sq).slogdet()
    assert s1.item() == s2.item() and l1.item() == pytest.approx(l2.item())
