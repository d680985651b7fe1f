"""Cumulative ops other than cumsum: cumprod, cummax, cummin and logcumsumexp.

cumprod and logcumsumexp are prims (compiled programs run them as reference steps, like
cumsum); cumprod's gradient is exact where the input has zeros. cummax/cummin take the
running arg-extreme (a non-differentiable prim) and gather the values with it, so the
values' gradient goes to the element their index names, as in PyTorch.

>>> import aotgrad
>>> from aotgrad.runtime import scan_ops
>>> scan_ops.cumprod(aotgrad.tensor([1., 2., 3., 0., 5.]), 0).tolist()
[1.0, 2.0, 6.0, 0.0, 0.0]
"""
import math

from aotgrad.ir import dtypes as dt
from aotgrad.runtime import tprims as tp
from aotgrad.runtime.elementwise_ops import mul
from aotgrad.runtime.index_ops import take_along_dim
from aotgrad.runtime.op_base import _binary_args, cast, norm_dims, op, return_types
from aotgrad.runtime.composite import composite


def _dim(x, dim):
    """The normalised dim, or None for a 0-d tensor (dim must then be 0 or -1)."""
    d = norm_dims(dim, x.ndim)
    return d[0] if x.ndim else None


def _copy(x):
    return mul(x, 1) if x.dtype is not dt.bool_ else tp.reshape(x, shape=tuple(x.shape))


@op("cumprod", "CumprodBackward0")
@composite("CumprodBackward0", ("x",))
def cumprod(x, dim, *, dtype=None):
    """Running products along dim (integer and bool inputs give int64, like PyTorch)."""
    if dtype is not None:
        x = cast(x, dt.as_dtype(dtype))
    elif x.dtype is dt.bool_ or (dt.is_integral(x.dtype) and x.dtype is not dt.int64):
        x = cast(x, dt.int64)
    d = _dim(x, dim)
    if d is None:
        return _copy(x)
    return tp.cumprod(x, dim=d)


def _cum_extreme(x, dim, name, prim):
    d = _dim(x, dim)
    if d is None:
        return return_types[name](_copy(x), tp.zeros((), dt.int64))
    if x.shape[d] == 0:
        return return_types[name](_copy(x), tp.zeros(tuple(x.shape), dt.int64))
    idx = prim(x, dim=d)
    return return_types[name](take_along_dim(x, idx, d), idx)


@op("cummax", "CummaxBackward0")
def cummax(x, dim):
    """(values, indices) of the running maximum along dim; an index names the last
    occurrence of the maximum so far, or the last NaN so far (a NaN stays the maximum)."""
    return _cum_extreme(x, dim, "cummax", tp.cumargmax)


@op("cummin", "CumminBackward0")
def cummin(x, dim):
    return _cum_extreme(x, dim, "cummin", tp.cumargmin)


@op("logcumsumexp", "LogcumsumexpBackward0")
@composite("LogcumsumexpBackward0", ("x",))
def logcumsumexp(x, dim):
    """log(cumsum(exp(x))) along dim, without overflow or underflow."""
    if not x.dtype.is_floating_point:
        x = cast(x, dt.float32)
    d = _dim(x, dim)
    if d is None:
        return _copy(x)
    return tp.logcumsumexp(x, dim=d)


def _logaddexp(a, b, exp_neg, log1p_scale):
    """max(a, b) + log1p(exp_neg(-|a - b|)) * scale; two equal infinities give themselves
    (their difference is NaN), as in PyTorch."""
    m = tp.maximum(a, b)
    t = tp.log1p(exp_neg(tp.neg(tp.abs(tp.sub(a, b)))))
    if log1p_scale != 1:
        t = tp.mul(t, tp.broadcast_to(tp.constant(log1p_scale, a.dtype), tuple(a.shape)))
    r = tp.add(m, t)
    inf = tp.broadcast_to(tp.constant(math.inf, a.dtype), tuple(a.shape))
    return tp.where(tp.logical_and(tp.eq(tp.abs(a), inf), tp.eq(a, b)), a, r)


@op("logaddexp", "LogaddexpBackward0")
@composite("LogaddexpBackward0", ("a", "b"))
def logaddexp(a, b):
    """log(exp(a) + exp(b)), computed without overflow."""
    a, b = _binary_args(a, b, float_result=True)
    return _logaddexp(a, b, tp.exp, 1)


@op("logaddexp2", "Logaddexp2Backward0")
@composite("Logaddexp2Backward0", ("a", "b"))
def logaddexp2(a, b):
    """log2(2**a + 2**b), computed without overflow."""
    a, b = _binary_args(a, b, float_result=True)

    def exp2(t):
        two = tp.broadcast_to(tp.constant(2.0, t.dtype), tuple(t.shape))
        return tp.pow(two, t)
    return _logaddexp(a, b, exp2, 1 / math.log(2))
