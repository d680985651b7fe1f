"""Linear-algebra prims: each runs as a library call (numpy's LAPACK) over a stack of
matrices (leading dims are batch dims), in the input's dtype.

A factorisation with several results is one prim per result (`linalg_qr_q`,
`linalg_qr_r`, ...): prims have one output, and a VJP is linear in the cotangents, so the
gradient of a use of both is the sum of each one's rule. Code generation runs them as
reference steps between kernels.

Tag: linalg (linalg_slogdet_sign: non-differentiable too). Shape rules check: floating-point
input, at least 2-d, square where the math needs it, matching batch dims.
"""
import numpy as np

from aotgrad.ir import dtypes as dt
from aotgrad.ir.core import Aval, check, register
from aotgrad.ir.tags import Tag


class LinAlgError(RuntimeError):
    """A matrix the factorisation cannot take (singular, not positive-definite, no
    convergence): PyTorch's `torch.linalg.LinAlgError`, a RuntimeError."""


def _matrix(a, square=False):
    check(a.dtype.is_floating_point, f"expected a floating-point input, got {a.dtype.name}")
    check(a.ndim >= 2, f"expected a matrix or a stack of matrices (2 or more dims), got "
                       f"{a.ndim} dims")
    if square:
        check(a.shape[-1] == a.shape[-2], f"expected square matrices, got "
                                          f"{a.shape[-2]} by {a.shape[-1]}")


def _same(a, shape):
    return Aval(shape, a.dtype)


def _square_rule(a):
    _matrix(a, True)
    return _same(a, a.shape)


def _scalar_rule(a):
    _matrix(a, True)
    return _same(a, a.shape[:-2])


def _solve_rule(a, b):
    _matrix(a, True)
    _matrix(b)
    check(a.dtype is b.dtype, f"dtypes {a.dtype.name} and {b.dtype.name} differ")
    check(a.shape[:-2] == b.shape[:-2], f"batch dims {list(a.shape[:-2])} and "
                                        f"{list(b.shape[:-2])} differ (prims do not broadcast)")
    check(b.shape[-2] == a.shape[-1], f"the right-hand side has {b.shape[-2]} rows, the "
                                      f"matrix is {a.shape[-1]} by {a.shape[-1]}")
    return _same(a, b.shape)


def _qr_q_rule(a, *, complete):
    _matrix(a)
    m, n = a.shape[-2:]
    return _same(a, a.shape[:-2] + (m, m if complete else min(m, n)))


def _qr_r_rule(a, *, complete):
    _matrix(a)
    m, n = a.shape[-2:]
    return _same(a, a.shape[:-2] + (m if complete else min(m, n), n))


def _svd_u_rule(a, *, full_matrices):
    _matrix(a)
    m, n = a.shape[-2:]
    return _same(a, a.shape[:-2] + (m, m if full_matrices else min(m, n)))


def _svd_vh_rule(a, *, full_matrices):
    _matrix(a)
    m, n = a.shape[-2:]
    return _same(a, a.shape[:-2] + (n if full_matrices else min(m, n), n))


def _svdvals_rule(a):
    _matrix(a)
    return _same(a, a.shape[:-2] + (min(a.shape[-2:]),))


def _eigvalsh_rule(a, *, upper):
    _matrix(a, True)
    return _same(a, a.shape[:-1])


def _eigh_vectors_rule(a, *, upper):
    _matrix(a, True)
    return _same(a, a.shape)


def _pinv_rule(a, *, rtol, atol, hermitian):
    _matrix(a, hermitian)
    return _same(a, a.shape[:-2] + (a.shape[-1], a.shape[-2]))


# ---- implementations ---------------------------------------------------------------------
def _lapack(name, fn, why):
    """Run fn; numpy's LinAlgError becomes LinAlgError naming the op and the reason."""
    def impl(*args, **params):
        try:
            with np.errstate(all="ignore"):
                out = fn(*args, **params)
        except np.linalg.LinAlgError as e:
            raise LinAlgError(f"linalg.{name}: {why} ({e})") from None
        out = np.asarray(out, dtype=args[0].dtype)  # (ascontiguousarray makes 0-d 1-d)
        return out if out.flags.c_contiguous else out.copy(order="C")
    impl.__name__ = f"linalg_{name}"
    return impl


_SINGULAR = "the input matrix is singular"


def _slogdet_sign(a):
    return np.linalg.slogdet(a)[0]


def _logabsdet(a):
    return np.linalg.slogdet(a)[1]


def _cholesky(a):
    if a.size == 0:
        return a.copy()
    return np.linalg.cholesky(a)


def _qr(part):
    def impl(a, *, complete):
        mode = "complete" if complete else "reduced"
        if a.size == 0:
            shape = (_qr_q_rule if part == 0 else _qr_r_rule)(
                Aval(a.shape, dt.from_numpy(a.dtype)), complete=complete).shape
            out = np.zeros(shape, a.dtype)
            if part == 0:  # an orthogonal Q of the empty factorisation: the identity
                out[...] = np.eye(shape[-2], shape[-1], dtype=a.dtype)
            return out
        return np.linalg.qr(a, mode=mode)[part]
    return impl


def _svd(part):
    def impl(a, *, full_matrices):
        return np.linalg.svd(a, full_matrices=full_matrices)[part]
    return impl


def _svdvals(a):
    return np.linalg.svd(a, compute_uv=False)


def _eigvalsh(a, *, upper):
    return np.linalg.eigvalsh(a, UPLO="U" if upper else "L")


def _eigh_vectors(a, *, upper):
    return np.linalg.eigh(a, UPLO="U" if upper else "L")[1]


def _pinv(a, *, rtol, atol, hermitian):
    """Through the SVD (the eigendecomposition when `hermitian`): singular values at or below
    max(atol, rtol * largest) count as zero (PyTorch's rule)."""
    if a.size == 0:
        return np.zeros(a.shape[:-2] + (a.shape[-1], a.shape[-2]), a.dtype)
    if hermitian:
        w, v = np.linalg.eigh(a)
        s, u, vh = np.abs(w), v * np.sign(w)[..., None, :], np.swapaxes(v, -1, -2)
    else:
        u, s, vh = np.linalg.svd(a, full_matrices=False)
    cut = np.maximum(atol, rtol * s.max(axis=-1, keepdims=True))
    keep = s > cut
    inv = np.where(keep, 1 / np.where(keep, s, 1), 0).astype(a.dtype)
    return np.swapaxes(vh, -1, -2) @ (inv[..., :, None] * np.swapaxes(u, -1, -2))


L = (Tag.LINALG,)
linalg_inv = register("linalg_inv", _square_rule, _lapack("inv", np.linalg.inv, _SINGULAR), L)
linalg_solve = register("linalg_solve", _solve_rule,
                        _lapack("solve", np.linalg.solve, _SINGULAR), L)
linalg_det = register("linalg_det", _scalar_rule, _lapack("det", np.linalg.det, _SINGULAR), L)
linalg_slogdet_sign = register("linalg_slogdet_sign", _scalar_rule,
                               _lapack("slogdet", _slogdet_sign, _SINGULAR),
                               (Tag.LINALG, Tag.NON_DIFFERENTIABLE))
linalg_logabsdet = register("linalg_logabsdet", _scalar_rule,
                            _lapack("slogdet", _logabsdet, _SINGULAR), L)
linalg_cholesky = register("linalg_cholesky", _square_rule, _lapack(
    "cholesky", _cholesky, "the factorization could not be completed because the input is not "
    "positive-definite"), L)
linalg_qr_q = register("linalg_qr_q", _qr_q_rule, _lapack("qr", _qr(0), "no convergence"), L)
linalg_qr_r = register("linalg_qr_r", _qr_r_rule, _lapack("qr", _qr(1), "no convergence"), L)
linalg_svd_u = register("linalg_svd_u", _svd_u_rule, _lapack("svd", _svd(0), "no convergence"), L)
linalg_svdvals = register("linalg_svdvals", _svdvals_rule,
                          _lapack("svd", _svdvals, "no convergence"), L)
linalg_svd_vh = register("linalg_svd_vh", _svd_vh_rule,
                         _lapack("svd", _svd(2), "no convergence"), L)
linalg_eigvalsh = register("linalg_eigvalsh", _eigvalsh_rule,
                           _lapack("eigh", _eigvalsh, "no convergence"), L)
linalg_eigh_vectors = register("linalg_eigh_vectors", _eigh_vectors_rule,
                               _lapack("eigh", _eigh_vectors, "no convergence"), L)
linalg_pinv = register("linalg_pinv", _pinv_rule, _lapack("pinv", _pinv, "no convergence"), L)
