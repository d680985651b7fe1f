"""`aotgrad.linalg`: PyTorch's torch.linalg functions over stacks of matrices (leading dims are
batch dims; they broadcast where PyTorch's do).

Factorisations are prims running as library calls (ir/linalg_prims.py, derivatives in
runtime/linalg_rules.py); norms, `lstsq`, `matrix_rank`, `multi_dot`, `matrix_power`,
`vecdot` are decompositions.

>>> import aotgrad
>>> a = aotgrad.tensor([[2., 1.], [1., 3.]])
>>> aotgrad.linalg.det(a).item()
5.0
>>> [round(v, 5) for v in aotgrad.linalg.solve(a, aotgrad.tensor([3., 5.])).tolist()]
[0.8, 1.4]
"""
import builtins
import collections
import math

import numpy as np

from aotgrad.ir import dtypes as dt
from aotgrad.runtime.sizes import hint
from aotgrad.ir.linalg_prims import LinAlgError  # noqa: F401  (aotgrad.linalg.LinAlgError)
from aotgrad.runtime import tprims as tp
from aotgrad.runtime.diag_ops import diagonal as _diagonal, tril, triu
from aotgrad.runtime.factories import eye, zeros
from aotgrad.runtime.elementwise_ops import abs, gt, lt, mul, where
from aotgrad.runtime.linalg_ops import matmul
from aotgrad.runtime.op_base import broadcast_shapes, cast, norm_dims, op
from aotgrad.runtime.reduction_ops import amax, amin, norm as _vector_pnorm, sum
from aotgrad.runtime.tensor import Tensor
from aotgrad.runtime.view_ops import transpose, unsqueeze, squeeze


def _rt(name, fields):
    cls = collections.namedtuple(name, fields)
    cls.__module__ = "aotgrad.return_types"
    return cls


SlogdetResult = _rt("linalg_slogdet", "sign logabsdet")
QRResult = _rt("linalg_qr", "Q R")
SVDResult = _rt("linalg_svd", "U S Vh")
EighResult = _rt("linalg_eigh", "eigenvalues eigenvectors")
LstsqResult = _rt("linalg_lstsq", "solution residuals rank singular_values")
TorchSVDResult = _rt("svd", "U S V")


def _check(fn, a, square=False):
    if not isinstance(a, Tensor):
        raise TypeError(f"linalg.{fn}(): argument 'A' must be Tensor, not {type(a).__name__}")
    if a.ndim < 2:
        raise RuntimeError(f"linalg.{fn}: The input tensor A must have at least 2 dimensions.")
    if not a.dtype.is_floating_point:
        raise RuntimeError(f"linalg.{fn}: Expected a floating point tensor as input. Got "
                           f"{a.dtype.name}")
    if square and a.shape[-1] != a.shape[-2]:
        raise RuntimeError(f"linalg.{fn}: A must be batches of square matrices, but they are "
                           f"{hint(a.shape[-2])} by {hint(a.shape[-1])} matrices")


def mT(x):  # noqa: N802
    return transpose(x, -2, -1)


# ---- inverse, solve, determinants ---------------------------------------------------------
@op("linalg.inv", "LinalgInvExBackward0")
def inv(A):  # noqa: N803  (PyTorch's argument names)
    _check("inv", A, True)
    return tp.linalg_inv(A)


def inverse(input):  # noqa: A002
    return inv(input)


@op("linalg.solve", "LinalgSolveExBackward0")
def solve(A, B, *, left=True):  # noqa: N803
    """X with A X = B (X A = B when left=False); B may be a vector (or a stack of them)."""
    _check("solve", A, True)
    if B.dtype is not A.dtype:
        raise RuntimeError(f"linalg.solve: Expected A and B to have the same dtype, but found "
                           f"A of type {A.dtype.name} and B of type {B.dtype.name} instead")
    if not left:
        return mT(solve(mT(A), mT(B)))
    n = A.shape[-1]
    vector = B.ndim == 1 or (B.ndim == A.ndim - 1 and tuple(B.shape) == tuple(A.shape[:-1]))
    b = unsqueeze(B, -1) if vector else B
    if b.shape[-2] != n:
        raise RuntimeError(f"linalg.solve: Incompatible shapes of A and B for the equation AX "
                           f"= B ({'x'.join(map(str, A.shape))} and "
                           f"{'x'.join(map(str, B.shape))})")
    batch = broadcast_shapes(tuple(A.shape[:-2]), tuple(b.shape[:-2]))
    a = tp.broadcast_to(A, batch + (n, n))
    b = tp.broadcast_to(b, batch + tuple(b.shape[-2:]))
    x = tp.linalg_solve(a, b)
    return squeeze(x, -1) if vector else x


@op("linalg.det", "LinalgDetBackward0")
def det(A):  # noqa: N803
    _check("det", A, True)
    return tp.linalg_det(A)


@op("linalg.slogdet", "LinalgSlogdetBackward0")
def slogdet(A):  # noqa: N803
    """(sign, log|det|): the sign has no gradient."""
    _check("slogdet", A, True)
    return SlogdetResult(tp.linalg_slogdet_sign(A), tp.linalg_logabsdet(A))


@op("logdet", "LogdetBackward0")
def logdet(A):  # noqa: N803
    """log det A: NaN where the determinant is negative, -inf where it is zero."""
    sign, logabs = slogdet(A)
    return where(lt(sign, 0.0), math.nan, logabs)


@op("linalg.solve_triangular", "LinalgSolveTriangularBackward0")
def solve_triangular(A, B, *, upper, left=True, unitriangular=False):  # noqa: N803
    """X with A X = B (X A = B when left=False) reading only A's upper or lower triangle
    (its diagonal taken as ones when unitriangular); A's gradient is zero outside it."""
    _check("solve_triangular", A, True)
    if unitriangular:
        t = triu(A, 1) if upper else tril(A, -1)
        t = t + eye(A.shape[-1], dtype=A.dtype)
    else:
        t = triu(A) if upper else tril(A)
    return solve(t, B, left=left) if B.ndim >= 2 else solve(t, B)


def cholesky_solve(B, L, upper=False):  # noqa: N803
    """`torch.cholesky_solve`: X with (L L^T) X = B for the Cholesky factor L (or U^T U)."""
    lo = mT(L) if upper else L
    y = solve_triangular(lo, B, upper=False)
    return solve_triangular(mT(lo), y, upper=True)


@op("linalg.cond")
def cond(A, p=None):  # noqa: N803
    """The condition number: largest over smallest singular value for p None/2 (-2: the
    inverse), else norm(A, p) * norm(inv(A), p)."""
    _check("cond", A)
    if p in (None, 2, -2):
        s = svdvals(A)
        big, small = amax(s, -1), amin(s, -1)
        return big / small if p in (None, 2) else small / big
    _check("cond", A, True)
    return matrix_norm(A, p) * matrix_norm(inv(A), p)


def diagonal(A, *, offset=0, dim1=-2, dim2=-1):  # noqa: N803
    return _diagonal(A, offset, dim1, dim2)


# ---- factorisations ------------------------------------------------------------------------
@op("linalg.cholesky", "LinalgCholeskyExBackward0")
def cholesky(A, *, upper=False):  # noqa: N803
    """The lower factor L of A = L L^T (its transpose when upper=True); A must be symmetric
    positive-definite (its lower triangle is read)."""
    _check("cholesky", A, True)
    lo = tp.linalg_cholesky(A)
    return mT(lo) if upper else lo


@op("linalg.qr", "LinalgQrBackward0")
def qr(A, mode="reduced"):  # noqa: N803
    """(Q, R): mode 'reduced' (Q m x k), 'complete' (Q m x m) or 'r' (Q empty)."""
    _check("qr", A)
    if mode not in ("reduced", "complete", "r"):
        raise RuntimeError(f"qr received unrecognized mode '{mode}' but expected one of "
                           f"'reduced' (default), 'r', or 'complete'")
    complete = mode == "complete"
    r = tp.linalg_qr_r(A, complete=complete)
    if mode == "r":
        return QRResult(zeros(0, dtype=A.dtype), r)
    return QRResult(tp.linalg_qr_q(A, complete=complete), r)


@op("linalg.svd", "LinalgSvdBackward0")
def svd(A, full_matrices=True, *, driver=None):  # noqa: N803
    """(U, S, Vh) with A = U diag(S) Vh, S descending. With full_matrices (the default, as in
    PyTorch) U and Vh are square; their columns/rows past min(m, n) get no gradient."""
    _check("svd", A)
    f = bool(full_matrices)
    return SVDResult(tp.linalg_svd_u(A, full_matrices=f), tp.linalg_svdvals(A),
                     tp.linalg_svd_vh(A, full_matrices=f))


@op("linalg.svdvals", "LinalgSvdBackward0")
def svdvals(A, *, driver=None):  # noqa: N803
    _check("svdvals", A)
    return tp.linalg_svdvals(A)


def _uplo(uplo):
    if uplo not in ("L", "U"):
        raise RuntimeError(f"Expected UPLO argument to be 'L' or 'U', but got {uplo}")
    return uplo == "U"


@op("linalg.eigh", "LinalgEighBackward0")
def eigh(A, UPLO="L"):  # noqa: N803
    """(eigenvalues ascending, eigenvectors as columns) of a symmetric matrix, reading its
    lower (UPLO='L') or upper triangle."""
    _check("eigh", A, True)
    upper = _uplo(UPLO)
    return EighResult(tp.linalg_eigvalsh(A, upper=upper), tp.linalg_eigh_vectors(A, upper=upper))


@op("linalg.eigvalsh", "LinalgEighBackward0")
def eigvalsh(A, UPLO="L"):  # noqa: N803
    _check("eigvalsh", A, True)
    return tp.linalg_eigvalsh(A, upper=_uplo(UPLO))


def _tolerances(A, atol, rtol):
    """PyTorch's defaults: rtol = eps * max(m, n) unless atol > 0 is given."""
    for name, v in (("atol", atol), ("rtol", rtol)):
        if isinstance(v, Tensor):
            raise NotImplementedError(f"{name} as a tensor is not supported; pass a float")
    eps = float(np.finfo(A.dtype.np).eps)
    if rtol is None:
        rtol = 0.0 if atol is not None and atol > 0 else eps * builtins.max(A.shape[-2:])
    return float(atol or 0.0), float(rtol)


@op("linalg.pinv", "LinalgPinvBackward0")
def pinv(A, *, atol=None, rtol=None, hermitian=False):  # noqa: N803
    """The Moore-Penrose pseudo-inverse; singular values <= max(atol, rtol * largest) are
    dropped. Its derivative holds where the rank does not change."""
    _check("pinv", A, hermitian)
    atol, rtol = _tolerances(A, atol, rtol)
    return tp.linalg_pinv(A, rtol=rtol, atol=atol, hermitian=bool(hermitian))


def pinverse(input, rcond=1e-15):  # noqa: A002
    return pinv(input, rtol=rcond)


@op("linalg.matrix_rank")
def matrix_rank(A, *, atol=None, rtol=None, hermitian=False):  # noqa: N803
    _check("matrix_rank", A, hermitian)
    atol, rtol = _tolerances(A, atol, rtol)
    s = abs(eigvalsh(A)) if hermitian else svdvals(A)
    s = s.detach()
    cut = tp.broadcast_to(unsqueeze(amax(s, -1), -1), tuple(s.shape)) if s.shape[-1] else s
    limit = where(gt(mul(cut, rtol), atol), mul(cut, rtol), atol)
    return sum(cast(gt(s, limit), dt.int64), -1)


@op("linalg.lstsq")
def lstsq(A, B, rcond=None, *, driver=None):  # noqa: N803
    """The least-squares (minimum-norm) solution through the pseudo-inverse; `residuals`,
    `rank` and `singular_values` are filled as PyTorch's drivers fill them ('gelsy', the CPU
    default: rank only; 'gelsd'/'gelss': rank and singular values; residuals for tall
    full-rank systems except with 'gelsy')."""
    _check("lstsq", A)
    driver = driver or "gelsy"
    if driver not in ("gels", "gelsy", "gelsd", "gelss"):
        raise RuntimeError(f"linalg.lstsq: parameter `driver` should be one of (gels, "
                           f"gelsy, gelsd, gelss), got {driver}")
    vector = B.ndim == A.ndim - 1
    b = unsqueeze(B, -1) if vector else B
    x = matmul(pinv(A, rtol=rcond), b)
    empty = zeros(0, dtype=A.dtype)
    m, n = A.shape[-2:]
    rank = matrix_rank(A, rtol=rcond) if driver != "gels" else zeros(0, dtype=dt.int64)
    sv = svdvals(A) if driver in ("gelsd", "gelss") else empty
    residuals = empty
    if m > n and driver != "gelsy":
        full_rank = bool((rank._concrete("lstsq residuals") == n).all()) if driver != "gels" \
            else True
        if full_rank:
            r = matmul(A, x) - b
            residuals = sum(mul(r, r), -2)
    return LstsqResult(squeeze(x, -1) if vector else x, residuals, rank, sv)


# ---- norms ---------------------------------------------------------------------------------
def _dims(dim, ndim):
    if dim is None:
        return None
    return norm_dims(dim, ndim)


@op("linalg.vector_norm", "LinalgVectorNormBackward0")
def vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None):  # noqa: A002
    """The vector ord-norm over `dim` (all elements by default): ord 2, 1, inf, -inf, 0 or any
    real p, with PyTorch's subgradients (0 where the norm is 0)."""
    if dtype is not None:
        x = cast(x, dt.as_dtype(dtype))
    if not x.dtype.is_floating_point:
        raise RuntimeError(f"linalg.vector_norm: Expected a floating point or complex tensor "
                           f"as input. Got {x.dtype.name}")
    if isinstance(ord, str):
        raise RuntimeError(f"linalg.vector_norm: ord must be a number, got '{ord}'")
    dims = _dims(dim, x.ndim)
    if ord in (math.inf, -math.inf):   # max/min of |x| has no identity: PyTorch's errors
        name = "inf" if ord > 0 else "-inf"
        if dims is None and x.numel() == 0:
            raise RuntimeError(f"linalg.vector_norm cannot compute the {name} norm on an empty "
                               f"tensor because the operation does not have an identity")
        for d in dims or ():
            if x.shape[d] == 0:   # (sic: PyTorch's text has no space after the dim)
                raise RuntimeError(f"linalg.vector_norm cannot compute the {name} norm on the "
                                   f"dimension {d}because this dimension is empty and the "
                                   f"operation does not have an identity")
    if dims is None and not keepdim:
        return _vector_pnorm(x, ord, None, False)
    if dims is None:
        dims = tuple(range(x.ndim))
    return _vector_pnorm(x, ord, dims, keepdim)


def _matrix_dims(dim, ndim):
    if len(dim) != 2:
        raise RuntimeError(f"linalg.matrix_norm: dim must be a 2-tuple. Got {dim}")
    d = tuple(norm_dims(x, ndim)[0] for x in dim)    # in the order given: (rows, columns)
    if d[0] == d[1]:
        raise RuntimeError(f"linalg.matrix_norm: dim must be a 2-tuple of different dims. "
                           f"Got {dim}")
    return d


def _to_last(x, d):
    """x with dims d moved to the last two positions (in order)."""
    rest = [i for i in range(x.ndim) if i not in d]
    return x.permute(*rest, d[0], d[1])


def _restore(y, d, ndim, keepdim):
    """A reduced result over the two dims d: put back size-1 dims when keepdim."""
    if not keepdim:
        return y
    for i in sorted(d):
        y = unsqueeze(y, i)
    return y


@op("linalg.matrix_norm", "LinalgMatrixNormBackward0")
def matrix_norm(A, ord="fro", dim=(-2, -1), keepdim=False, *, dtype=None):  # noqa: N803,A002
    """Matrix norms: 'fro', 'nuc', inf, -inf, 1, -1 (max/min absolute row or column sums),
    2, -2 (largest/smallest singular value)."""
    if dtype is not None:
        A = cast(A, dt.as_dtype(dtype))
    if A.ndim < 2:
        raise RuntimeError(f"linalg.matrix_norm: The input tensor A must have at least 2 "
                           f"dimensions.")
    if not A.dtype.is_floating_point:
        raise RuntimeError(f"linalg.matrix_norm: Expected a floating point tensor as input. "
                           f"Got {A.dtype.name}")
    d = _matrix_dims(dim, A.ndim)
    if ord == "fro":
        return _vector_pnorm(A, 2, d, keepdim)
    if ord in ("nuc", 2, -2):
        s = svdvals(_to_last(A, d))
        y = sum(s, -1) if ord == "nuc" else (amax(s, -1) if ord == 2 else amin(s, -1))
        return _restore(y, d, A.ndim, keepdim)
    if ord in (math.inf, -math.inf, 1, -1):
        # inf: max over rows of the sum along a row (sum over d[1]); 1: over columns
        along, across = (d[1], d[0]) if ord in (math.inf, -math.inf) else (d[0], d[1])
        s = sum(abs(A), along, True)
        red = amax if ord in (math.inf, 1) else amin
        y = red(s, across, True)
        return y if keepdim else squeeze(squeeze(y, builtins.max(d)), builtins.min(d))
    raise RuntimeError(f"linalg.matrix_norm: Order {ord} not supported.")


@op("linalg.norm", "LinalgNormBackward0")
def norm(A, ord=None, dim=None, keepdim=False, *, dtype=None):  # noqa: N803,A002
    """A vector or a matrix norm, as PyTorch picks: a matrix norm when `dim` is a 2-tuple, or
    when `dim` is None, `ord` is given and the input is 2-d; else a vector norm (of all
    elements when neither `dim` nor `ord` is given)."""
    if isinstance(dim, int):
        dim = (dim,)
    if dim is not None and len(dim) == 2 or (dim is None and ord is not None and A.ndim == 2):
        return matrix_norm(A, "fro" if ord is None else ord, (-2, -1) if dim is None else dim,
                           keepdim, dtype=dtype)
    if isinstance(ord, str):
        raise RuntimeError(f"linalg.norm: If dim is not specified but ord is, the input must "
                           f"be 1D or 2D. Got {A.ndim}D." if dim is None else
                           f"linalg.norm: ord '{ord}' needs a 2-d dim")
    if dim is None and ord is not None and A.ndim != 1:
        raise RuntimeError(f"linalg.norm: If dim is not specified but ord is, the input must "
                           f"be 1D or 2D. Got {A.ndim}D.")
    return vector_norm(A, 2 if ord is None else ord, dim, keepdim, dtype=dtype)


# ---- products --------------------------------------------------------------------------------
def vecdot(x, y, *, dim=-1):
    return sum(mul(x, y), dim)


def multi_dot(tensors):
    """A chain of matrix products (a 1-d first/last operand is a row/column vector)."""
    if len(tensors) < 2:
        raise RuntimeError("multi_dot(): expected at least 2 tensors but got "
                           f"{len(tensors)}")
    out = tensors[0]
    for t in tensors[1:]:
        out = matmul(out, t)
    return out


def matrix_power(A, n):  # noqa: N803
    """A^n by repeated squaring (n < 0: of the inverse; n = 0: the identity)."""
    _check("matrix_power", A, True)
    if n == 0:
        return tp.broadcast_to(eye(A.shape[-1], dtype=A.dtype), tuple(A.shape))
    base = inv(A) if n < 0 else A
    n = builtins.abs(int(n))
    out = None
    while n:
        if n & 1:
            out = base if out is None else matmul(out, base)
        n >>= 1
        if n:
            base = matmul(base, base)
    return out


def svd_legacy(input, some=True, compute_uv=True):  # noqa: A002
    """`torch.svd`: (U, S, V) with V, not Vh; reduced unless some=False."""
    if not compute_uv:  # U (m x m) and V (n x n) zero-filled whatever `some`, as PyTorch's
        m, n = input.shape[-2:]
        batch = tuple(input.shape[:-2])
        return TorchSVDResult(zeros(batch + (m, m), dtype=input.dtype), svdvals(input),
                              zeros(batch + (n, n), dtype=input.dtype))
    U, S, Vh = svd(input, full_matrices=not some)
    return TorchSVDResult(U, S, mT(Vh))


def cholesky_legacy(input, upper=False):  # noqa: A002
    return cholesky(input, upper=upper)


def qr_legacy(input, some=True):  # noqa: A002
    return qr(input, "reduced" if some else "complete")


__all__ = ["inv", "solve", "solve_triangular", "cholesky_solve", "cond", "diagonal", "det", "slogdet", "cholesky", "qr", "svd", "svdvals", "eigh",
           "eigvalsh", "pinv", "matrix_rank", "lstsq", "vector_norm", "matrix_norm", "norm",
           "vecdot", "multi_dot", "matrix_power", "LinAlgError"]
