"""Edge cases of the new ops: errors, dtype promotion, NaN/inf, 0-d and empty inputs,
the non-differentiable queries (isclose, allclose, equal, bucketize, searchsorted,
cummax/cummin indices) and Tensor.new_*; against PyTorch where installed, closed forms
otherwise. The last tests compile batches of the new ops with Numba."""
import math

import numpy as np
import pytest

import aotgrad as ag
from aotgrad.testing.compare import compare_with_eager
from aotgrad.testing import assert_close


def _v(t):
    return t.detach().numpy()


def _tensors(M, arrays, dtype):
    """The arrays as tensors of library M, the float ones in `dtype`."""
    return [M.tensor(x) if np.asarray(x).dtype.kind != "f" else
            M.tensor(x, dtype=getattr(M, dtype)) for x in arrays]


NAN, INF = math.nan, math.inf
SEQ_CASES = [
    ("cumprod_int", lambda M, x: M.cumprod(x, 0), np.array([2, -3, 0, 4])),
    ("cumprod_bool", lambda M, x: M.cumprod(x, 0), np.array([True, True, False])),
    ("cumprod_dtype", lambda M, x: M.cumprod(x, 0, dtype=M.float64), np.array([2, 3])),
    ("cumprod_0d", lambda M, x: M.cumprod(x, 0), np.array(3.0)),
    ("cumprod_empty", lambda M, x: M.cumprod(x, 1), np.zeros((2, 0))),
    ("cumprod_nan_inf", lambda M, x: M.cumprod(x, 0), np.array([2.0, INF, 0.0, NAN, 1.0])),
    ("cummax_nan", lambda M, x: tuple(M.cummax(x, 0)),
     np.array([1.0, 3.0, NAN, 2.0, NAN, 5.0])),
    ("cummin_ties_inf", lambda M, x: tuple(M.cummin(x, 0)),
     np.array([INF, 2.0, 2.0, -INF, -INF, 0.0])),
    ("cummax_int", lambda M, x: tuple(M.cummax(x, -1)), np.array([[1, 3, 3, 2], [5, 1, 7, 7]])),
    ("cummax_bool", lambda M, x: tuple(M.cummax(x, 0)), np.array([False, True, False])),
    ("cummax_0d", lambda M, x: tuple(M.cummax(x, 0)), np.array(2.0)),
    ("cummin_empty", lambda M, x: tuple(M.cummin(x, 0)), np.zeros((0, 3))),
    ("logcumsumexp_inf", lambda M, x: M.logcumsumexp(x, 0),
     np.array([-INF, -INF, 0.0, 800.0, -INF, INF, INF, 3.0])),
    ("logcumsumexp_nan", lambda M, x: M.logcumsumexp(x, 0), np.array([0.0, NAN, 1.0])),
    ("logcumsumexp_0d", lambda M, x: M.logcumsumexp(x, 0), np.array(2.0)),
    ("bucketize", lambda M, x, b: M.bucketize(x, b),
     np.array([[0.0, 1.0, 1.5], [NAN, 3.0, -INF]]), np.array([1.0, 2.0, 3.0])),
    ("bucketize_right_int32", lambda M, x, b: M.bucketize(x, b, right=True, out_int32=True),
     np.array([0.0, 1.0, 3.0, 9.0]), np.array([1.0, 2.0, 3.0])),
    ("bucketize_int_values", lambda M, x, b: M.bucketize(x, b), np.array([0, 1, 2, 5]),
     np.array([1.0, 2.5])),
    ("searchsorted", lambda M, s, v: M.searchsorted(s, v), np.array([1.0, 2.0, 2.0, 5.0]),
     np.array([[2.0, 0.0], [5.0, 7.0]])),
    ("searchsorted_side_right", lambda M, s, v: M.searchsorted(s, v, side="right"),
     np.array([1.0, 2.0, 2.0, 5.0]), np.array([2.0, 0.0, 5.0])),
    ("searchsorted_nd", lambda M, s, v: M.searchsorted(s, v, right=True),
     np.array([[1.0, 3.0, 5.0], [0.0, 0.0, 1.0]]), np.array([[3.0, 6.0], [0.0, -1.0]])),
    ("searchsorted_sorter", lambda M, s, v, o: M.searchsorted(s, v, sorter=o),
     np.array([5.0, 1.0, 3.0]), np.array([2.0, 4.0]), np.array([1, 2, 0])),
    ("searchsorted_nan_in_seq", lambda M, s, v: M.searchsorted(s, v),
     np.array([1.0, 2.0, NAN]), np.array([0.0, NAN, 5.0])),
    ("isclose", lambda M, a, b: M.isclose(a, b),
     np.array([1.0, INF, -INF, NAN, 1e-9, 1.0]), np.array([1.0 + 1e-6, INF, INF, NAN, 0.0, 2.0])),
    ("isclose_equal_nan", lambda M, a, b: M.isclose(a, b, rtol=0.1, atol=0.5, equal_nan=True),
     np.array([NAN, 1.0, 10.0]), np.array([NAN, 1.4, 12.0])),
    ("isclose_int", lambda M, a, b: M.isclose(a, b), np.array([1, 2, 3]), np.array([1, 3, 3])),
    ("allclose", lambda M, a, b: M.allclose(a, b), np.array([1.0, INF]),
     np.array([1.0 + 1e-9, INF])),
    ("allclose_false", lambda M, a, b: M.allclose(a, b, atol=0.1), np.array([1.0, 2.0]),
     np.array([1.0, 2.2])),
    ("equal", lambda M, a, b: M.equal(a, b), np.array([1.0, 2.0]), np.array([1, 2])),
    ("equal_nan", lambda M, a: M.equal(a, a), np.array([1.0, NAN])),
    ("equal_shape", lambda M, a, b: M.equal(a, b), np.ones(2), np.ones((1, 2))),
    ("addmm_beta0_ignores_nan", lambda M, i, a, b: M.addmm(i, a, b, beta=0),
     np.array([NAN, INF]), np.ones((3, 2)), np.ones((2, 2))),
    ("addcmul_promotes", lambda M, i, a, b: M.addcmul(i, a, b, value=2), np.array([1, 2]),
     np.array([1.5, 2.0]), np.array([3, 4])),
    ("addcmul_int", lambda M, i, a, b: M.addcmul(i, a, b, value=2), np.array([1, 2]),
     np.array([1, 2]), np.array([3, 4])),
    ("lerp_weight_one_exact", lambda M, a, b: M.lerp(a, b, 1.0), np.array([1e30, -3.0]),
     np.array([0.1, 7.0])),
    ("lerp_inf", lambda M, a, b, w: M.lerp(a, b, w), np.array([INF, 0.0, 1.0]),
     np.array([1.0, INF, NAN]), np.array([0.25, 0.75, 0.5])),
    ("cdist_p0", lambda M, a, b: M.cdist(a, b, p=0), np.array([[0.0, 1.0], [2.0, 2.0]]),
     np.array([[0.0, 1.0], [2.0, 0.0], [1.0, 1.0]])),
    ("cdist_empty", lambda M, a, b: M.cdist(a, b), np.zeros((0, 3)), np.ones((2, 3))),
    ("einsum_empty", lambda M, a, b: M.einsum("ij,jk->ik", a, b), np.zeros((2, 0)),
     np.zeros((0, 3))),
    ("einsum_int", lambda M, a, b: M.einsum("ij,j->i", a, b), np.array([[1, 2], [3, 4]]),
     np.array([5, 6])),
    ("einsum_0d", lambda M, a, b: M.einsum(",->", a, b), np.array(2.0), np.array(3.0)),
]


@pytest.mark.parametrize("fn,arrays", [pytest.param(c[1], c[2:], id=c[0]) for c in SEQ_CASES])
def test_like_torch(vs_torch, fn, arrays):
    for dtype in ("float64", "float32"):
        vs_torch.same(lambda M: fn(M, *_tensors(M, arrays, dtype)),
                      rtol=1e-12 if dtype == "float64" else 1e-6, atol=0)


def test_zero_distance_gradients_like_torch(torch):
    """cdist through both the difference and the matrix-product paths: duplicated rows give
    distance 0 and gradient 0 there, as in PyTorch."""
    rng = np.random.default_rng(3)
    for rows in (4, 30):
        x = rng.standard_normal((rows, 3))
        x[1] = x[0]
        y = np.concatenate([x[:2], rng.standard_normal((3, 3))])
        grads = []
        for M in (ag, torch):
            a = M.tensor(x, requires_grad=True)
            b = M.tensor(y, requires_grad=True)
            d = M.cdist(a, b)
            d.sum().backward()
            grads.append((d.detach().numpy(), a.grad.numpy(), b.grad.numpy()))
        for u, w in zip(*grads):
            assert_close(u, w, rtol=1e-7, atol=1e-7, equal_nan=True)
        assert grads[0][0][0, 0] == 0 and grads[0][0][1, 0] == 0


def test_cumprod_gradient_with_zeros_by_finite_differences():
    x = np.array([[2.0, 0.0, 3.0, 0.0, 5.0], [0.0, 1.5, -2.0, 4.0, 0.5], [1.0, 2.0, 3.0, 4.0, 0.0]])
    t = ag.tensor(x, requires_grad=True)
    assert ag.autograd.gradcheck(lambda a: ag.cumprod(a, 1), (t,))
    # the second derivative is exact away from zeros (at a zero the rule's masks are
    # constants, as the first derivative's formula is piecewise there)
    t2 = ag.tensor(np.abs(x) + 0.5, requires_grad=True)
    assert ag.autograd.gradgradcheck(lambda a: ag.cumprod(a, 1), (t2,))
    assert ag.autograd.gradcheck(lambda a: ag.logcumsumexp(a, 1), (t,))


def test_errors_name_the_op():
    m = ag.ones(2, 3)
    with pytest.raises(RuntimeError, match="einsum: .*subscript j has size 2 for operand 1"):
        ag.einsum("ij,jk->ik", m, ag.ones(2, 2))
    with pytest.raises(RuntimeError, match="einsum: .*same dtype"):
        ag.einsum("ij,jk->ik", m, ag.ones(3, 2, dtype=ag.float64))
    with pytest.raises(RuntimeError, match="einsum: .*more than once"):
        ag.einsum("ij->ii", m)
    with pytest.raises(RuntimeError, match="einsum: .*number of subscripts"):
        ag.einsum("ijk", m)
    with pytest.raises(RuntimeError, match="einsum: .*invalid subscript"):
        ag.einsum("i1", ag.ones(2))
    with pytest.raises(RuntimeError, match="addmm: .*same dtype"):
        ag.addmm(ag.ones(2), m, ag.ones(3, 2, dtype=ag.float64))
    with pytest.raises(RuntimeError, match="addmm: .*2-D"):
        ag.addmm(ag.ones(2), ag.ones(3), m)
    with pytest.raises(RuntimeError, match=r"addmm: The expanded size of the tensor \(2\) must "
                       r"match the existing size \(3\) at non-singleton dimension 1"):
        ag.addmm(ag.ones(3), ag.ones(2, 3), ag.ones(3, 2))
    with pytest.raises(RuntimeError, match=r"addmm: expand\(.*\[3, 2, 2\].* the number of sizes "
                                           r"provided \(2\) must be greater or equal"):
        ag.addmm(ag.ones(3, 2, 2), ag.ones(2, 3), ag.ones(3, 2))
    with pytest.raises(RuntimeError, match="addcdiv: .*integer"):
        ag.addcdiv(ag.tensor([1]), ag.tensor([1]), ag.tensor([2]))
    with pytest.raises(RuntimeError, match="lerp: .*float64"):
        ag.lerp(ag.ones(2), ag.ones(2, dtype=ag.float64), 0.5)
    with pytest.raises(RuntimeError, match="isclose: .*did not match"):
        ag.isclose(ag.ones(2), ag.ones(2, dtype=ag.float64))
    with pytest.raises(RuntimeError, match="searchsorted: .*opposites"):
        ag.searchsorted(ag.ones(2), ag.ones(2), right=True, side="left")
    with pytest.raises(RuntimeError, match="bucketize: .*1 dimension"):
        ag.bucketize(ag.ones(2), ag.ones(2, 2))
    with pytest.raises(RuntimeError, match="cdist: .*same number of columns"):
        ag.cdist(ag.ones(2, 3), ag.ones(2, 4))
    with pytest.raises(RuntimeError, match="cdist: .*floating-point"):
        ag.cdist(ag.ones(2, 3, dtype=ag.int64), ag.ones(2, 3, dtype=ag.int64))


def test_new_factories_like_torch(torch):
    for M in (ag, torch):
        x = M.ones(2, dtype=M.float64)
        out = [x.new_zeros(2, 3), x.new_zeros((2, 3)), x.new_ones(4, dtype=M.int64),
               x.new_empty(3).shape, x.new_full((2,), 7), x.new_full((2,), 7, dtype=M.int64),
               x.new_tensor([1, 2]), x.new_tensor([1, 2], requires_grad=True),
               x.new_zeros(2, requires_grad=True), x.new(), x.new(2, 3).shape,
               x.new([1, 2]), x.new((2, 3))]
        if M is ag:
            ours = out
        else:
            theirs = out
    for a, t in zip(ours, theirs):
        if isinstance(t, torch.Size):
            assert tuple(a) == tuple(t)
            continue
        assert a.dtype.name == str(t.dtype).replace("torch.", "")
        assert tuple(a.shape) == tuple(t.shape) and a.requires_grad == t.requires_grad
        np.testing.assert_array_equal(_v(a), t.detach().numpy())
    src = ag.tensor([1.0, 2.0], requires_grad=True)
    with pytest.warns(UserWarning, match="clone"):
        c = src.new_tensor(src)
    assert not c.requires_grad and c.grad_fn is None


def test_inplace_methods_bump_version_and_keep_dtype():
    y = ag.ones(2, 3)
    v = y._version
    y.addmm_(ag.ones(2, 4), ag.ones(4, 3), beta=2)
    assert y._version > v and y.dtype is ag.float32 and _v(y).tolist() == [[6.0] * 3] * 2
    z = ag.tensor([0.5, -0.5])
    z.atanh_().lerp_(ag.zeros(2), 0.5)
    assert_close(_v(z), [0.5 * math.atanh(0.5), -0.5 * math.atanh(0.5)], rtol=1e-6, atol=0,
                 equal_nan=True)


def test_allclose_under_compile_is_a_graph_break():
    import warnings

    def f(x, y):
        return x * 2 if ag.allclose(x, y) else x * 3

    cf = ag.compile(f, backend="interpret")
    x = ag.ones(3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert _v(cf(x, x)).tolist() == [2.0] * 3
        assert _v(cf(x, x + 1)).tolist() == [3.0] * 3


# ---- compiled with Numba: a few programs, each batching many of the new ops ----------------
def _pointwise_batch(x, u, p):
    """Each op's result is an output of its own (compared one by one, NaN where expected)."""
    return (ag.sinh(x), ag.cosh(x), ag.asinh(x), ag.atan(x), ag.asin(u), ag.acos(u),
            ag.atanh(u), ag.acosh(p + 1), ag.special.erfc(x), ag.special.erfinv(u),
            ag.special.gammaln(x), ag.special.digamma(x), ag.special.polygamma(1, p),
            ag.special.xlogy(x, p), ag.special.sinc(x), ag.special.log_ndtr(x),
            ag.logaddexp(x, u), ag.logaddexp2(x, p), ag.lerp(x, u, p * 0.3),
            ag.addcmul(x, u, p, value=0.5), ag.addcdiv(x, u, p), ag.special.logit(p * 0.3),
            ag.special.ndtri(u * 0.5 + 0.5), ag.special.i0(x), ag.special.i1e(x * 9),
            ag.special.erfcx(x * 6))


# (float64 under -m slow, for the default suite's time: float32 runs the same kernels' helpers)
@pytest.mark.parametrize("dtype", [ag.float32, pytest.param(ag.float64, marks=pytest.mark.slow)])
def test_numba_pointwise_batch(dtype):
    """Random inputs, and in the last row of x and u the special values (the kernels' helpers
    and libm calls give the reference implementations' NaN/inf/0 answers)."""
    rng = np.random.default_rng(5)
    xs = rng.standard_normal((5, 7))
    us = rng.uniform(-0.9, 0.9, (5, 7))
    xs[4] = [math.inf, -math.inf, math.nan, 0.0, -0.0, 40.0, -40.0]
    us[4] = [1.0, -1.0, 0.0, -0.0, math.nan, 0.999999, 2.0]
    x = ag.tensor(xs, dtype=dtype, requires_grad=True)
    u = ag.tensor(us, dtype=dtype, requires_grad=True)
    p = ag.tensor(rng.uniform(0.5, 2.0, (7,)), dtype=dtype, requires_grad=True)
    tol = dict(rtol=2e-5, atol=2e-5) if dtype is ag.float32 else {}
    compare_with_eager(_pointwise_batch, x, u, p, backend="numba", **tol)


def _structured_batch(a, b, c, w):
    e = ag.einsum("bij,bjk->bik", a, b) + ag.einsum("bii->bi", a @ a.transpose(1, 2))[..., None]
    m = ag.addmm(c, a[0], b[0], beta=0.5) + ag.baddbmm(c, a, b, alpha=2).sum(0)
    d = ag.cdist(a[0], b[0].t()) + ag.cdist(a[1], b[1].t(), p=1)
    s = ag.cumprod(w, 1) + ag.cummax(w, 1).values + ag.logcumsumexp(w, 0)
    idx = ag.bucketize(w, ag.tensor([-0.5, 0.0, 0.5], dtype=w.dtype))
    return e.sum(0) + m + d.sum() + s.sum() + idx.sum(), idx


def test_numba_structured_batch():
    rng = np.random.default_rng(6)
    a = ag.tensor(rng.standard_normal((2, 3, 4)), dtype=ag.float32, requires_grad=True)
    b = ag.tensor(rng.standard_normal((2, 4, 3)), dtype=ag.float32, requires_grad=True)
    c = ag.tensor(rng.standard_normal((3, 3)), dtype=ag.float32, requires_grad=True)
    w = ag.tensor(rng.standard_normal((3, 5)), dtype=ag.float32, requires_grad=True)
    compare_with_eager(_structured_batch, a, b, c, w, backend="numba", rtol=2e-5, atol=2e-5)
