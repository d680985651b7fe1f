"""Statistics as decompositions into existing ops: quantile and nanquantile (the five
interpolation modes), cov, corrcoef, cross and chain_matmul.

>>> import aotgrad
>>> from aotgrad.runtime import stats_ops
>>> stats_ops.quantile(aotgrad.tensor([1., 2., 3., 4.]), 0.5).item()
2.5
"""
from aotgrad.ir import dtypes as dt
from aotgrad.runtime.sizes import hint, size_list
from aotgrad.runtime import elementwise_ops as ew
from aotgrad.runtime import linalg_ops as la
from aotgrad.runtime import reduction_ops as red
from aotgrad.runtime import shape_ops as so
from aotgrad.runtime.op_base import as_tensor_like, cast, norm_dims, op
from aotgrad.runtime.tensor import Tensor

_INTERPOLATIONS = ("linear", "lower", "higher", "midpoint", "nearest")


def _quantile(x, q, dim, keepdim, interpolation, ignore_nan, name):
    if not x.dtype.is_floating_point:
        raise RuntimeError(f"{name}() input tensor must be either float or double dtype")
    if interpolation not in _INTERPOLATIONS:
        raise ValueError(f"{name}() interpolation must be one of linear, lower, higher, "
                         f"midpoint or nearest. Got {interpolation}")
    scalar_q = not isinstance(q, Tensor)
    qt = cast(as_tensor_like(float(q), x.dtype) if scalar_q else q, x.dtype)
    if qt.ndim > 1:
        raise RuntimeError(f"{name}() q must be a scalar or 1D tensor")
    if isinstance(qt._value, type(x._value)) and hasattr(qt._value, "min") and qt.numel() and \
            (float(qt._value.min()) < 0 or float(qt._value.max()) > 1):
        raise RuntimeError(f"{name}() q values must be in the range [0, 1]")
    qt = so.reshape(qt, -1)
    if dim is None:
        src, d = so.reshape(x, -1), 0
    else:
        d = norm_dims(dim, x.ndim)[0] if x.ndim else 0
        src = x if x.ndim else so.reshape(x, 1)
    v = so.movedim(src, d, -1)                      # (..., n)
    n = v.shape[-1]
    if n == 0:
        raise RuntimeError(f"{name}() input tensor must be non-empty")
    s = so.sort(v, -1)[0]                           # NaN last
    nans = red.sum(ew.isnan(v.detach()), -1, keepdim=True)          # (..., 1)
    lead = (qt.shape[0],) + (1,) * (v.ndim - 1)
    qb = so.reshape(qt.detach(), *lead, 1)                           # (nq, 1.., 1)
    if ignore_nan:
        count = cast(ew.sub(n, nans), x.dtype)
        rank = ew.mul(qb, ew.maximum(ew.sub(count, 1), 0.0))
    else:
        rank = ew.where(ew.gt(nans, 0), float(n - 1), ew.mul(qb, float(n - 1)))
    lo, hi = ew.floor(rank), ew.ceil(rank)
    if interpolation == "lower":
        hi = lo
    elif interpolation == "higher":
        lo = hi
    elif interpolation == "nearest":
        lo = hi = ew.round(rank)
    shape = (qt.shape[0],) + tuple(v.shape[:-1]) + (1,)
    sb = so.expand(so.unsqueeze(s, 0), qt.shape[0], *s.shape)

    def take(r):
        return so.gather(sb, -1, so.expand(cast(r, dt.int64), *shape))
    a, b = take(lo), take(hi)
    if interpolation in ("linear",):
        w = so.expand(ew.sub(rank, lo), *shape)
        out = ew.add(a, ew.mul(ew.sub(b, a), w))
    elif interpolation == "midpoint":
        out = ew.mul(ew.add(a, b), 0.5)
    else:
        out = a
    if ignore_nan:   # a row of NaN only stays NaN
        out = ew.where(so.expand(ew.eq(nans, n), *shape), float("nan"), out)
    out = so.squeeze(out, -1)                       # (nq, ...)
    if keepdim:
        if dim is None:
            out = so.reshape(out, qt.shape[0], *([1] * x.ndim))
        elif x.ndim:
            out = so.unsqueeze(out, d + 1)
    return so.squeeze(out, 0) if scalar_q else out


@op("quantile")
def quantile(input, q, dim=None, keepdim=False, *, interpolation="linear"):
    """The q-th quantiles (q a number or a 1-D tensor: its dim comes first); NaN if the
    reduced values hold a NaN."""
    return _quantile(input, q, dim, keepdim, interpolation, False, "quantile")


@op("nanquantile")
def nanquantile(input, q, dim=None, keepdim=False, *, interpolation="linear"):
    """quantile ignoring NaN (NaN where all reduced values are NaN)."""
    return _quantile(input, q, dim, keepdim, interpolation, True, "nanquantile")


@op("cov")
def cov(input, *, correction=1, fweights=None, aweights=None):
    """Covariance of the rows (variables) of a 1-D or 2-D tensor of observations (columns),
    with optional integer frequency and float observation weights (numpy's formula)."""
    x = input if input.ndim == 2 else so.reshape(input, 1, -1)
    if input.ndim > 2:
        raise RuntimeError(f"cov(): expected input to have two or fewer dimensions but got an "
                           f"input with {input.ndim} dimensions")
    if not x.dtype.is_floating_point:
        x = cast(x, dt.float32)
    n = x.shape[1]
    w = None
    if fweights is not None:
        w = cast(fweights, x.dtype)
    if aweights is not None:
        w = cast(aweights, x.dtype) if w is None else ew.mul(w, cast(aweights, x.dtype))
    if w is None:
        avg = red.mean(x, 1, keepdim=True)
        norm = float(n - correction)
        xc = ew.sub(x, avg)
        c = ew.div(la.mm(xc, so.t(xc)), norm)
    else:
        wsum = red.sum(w)
        avg = ew.div(red.sum(ew.mul(x, w), 1, keepdim=True), wsum)
        if correction == 0:
            norm = wsum
        elif aweights is None:
            norm = ew.sub(wsum, correction)
        else:
            norm = ew.sub(wsum, ew.div(ew.mul(red.sum(ew.mul(w, cast(aweights, x.dtype))),
                                              correction), wsum))
        xc = ew.sub(x, avg)
        c = ew.div(la.mm(ew.mul(xc, w), so.t(xc)), ew.maximum(norm, 0.0))
    return so.reshape(c, ()) if input.ndim < 2 or x.shape[0] == 1 and input.ndim < 2 else c


@op("corrcoef")
def corrcoef(input):
    """Pearson correlation coefficients of the rows, clipped to [-1, 1]."""
    c = cov(input)
    if c.ndim == 0:
        return ew.div(c, c)
    d = ew.sqrt(so.diagonal(c))
    c = ew.div(ew.div(c, so.unsqueeze(d, 1)), so.unsqueeze(d, 0))
    return ew.clamp(c, -1, 1)


@op("cross")
def cross(input, other, dim=None):
    """Cross product of 3-vectors along dim (default: the first dim of size 3)."""
    a, b = so.broadcast_tensors(input, other)
    if dim is None:
        dims = [i for i, s in enumerate(a.shape) if s == 3]
        if not dims:
            raise RuntimeError(f"no dimension of size 3 in input (shape {size_list(a.shape)})")
        dim = dims[0]
    d = norm_dims(dim, a.ndim)[0]
    if a.shape[d] != 3:
        raise RuntimeError(f"linalg.cross: inputs dimension {dim} must have length 3. Got "
                           f"{hint(a.shape[d])} and {hint(b.shape[d])}")
    a0, a1, a2 = (so.narrow(a, d, i, 1) for i in range(3))
    b0, b1, b2 = (so.narrow(b, d, i, 1) for i in range(3))
    return so.cat([ew.sub(ew.mul(a1, b2), ew.mul(a2, b1)),
                   ew.sub(ew.mul(a2, b0), ew.mul(a0, b2)),
                   ew.sub(ew.mul(a0, b1), ew.mul(a1, b0))], d)


def chain_matmul(*matrices):
    """The product of the matrices, left to right."""
    if len(matrices) == 1 and isinstance(matrices[0], (list, tuple)):
        matrices = tuple(matrices[0])
    out = matrices[0]
    for m in matrices[1:]:
        out = la.mm(out, m)
    return out


FUNCTION_NAMES = "quantile nanquantile cov corrcoef cross chain_matmul".split()
METHOD_NAMES = "quantile nanquantile cov corrcoef cross".split()
