"""Reductions: sum, mean, prod, amax/amin, max/min (with indices), argmax/argmin, var/std,
norm, logsumexp, softmax/log_softmax, cumsum, all/any, count_nonzero, and sum_to_shape
(the inverse of broadcasting, used by gradients).

>>> import aotgrad
>>> from aotgrad.runtime import reduction_ops
>>> reduction_ops.sum(aotgrad.ones(2, 3), 1).tolist()
[3.0, 3.0]
"""
import builtins
import math

from aotgrad.ir import dtypes as dt
from aotgrad.runtime import eager_kernels
from aotgrad.runtime import tprims as tp
from aotgrad.runtime.composite import share_node
from aotgrad.runtime.elementwise_ops import (_zero_grad, abs, div, eq, exp, isfinite, isnan,
                                             log, logical_and, logical_or, maximum, minimum,
                                             mul, ne, pow, sqrt, sub, where)
from aotgrad.runtime.index_ops import take_along_dim
from aotgrad.runtime.op_base import _named, cast, norm_dims, op, return_types
from aotgrad.runtime.tensor import Tensor
from aotgrad.runtime.view_ops import squeeze
from aotgrad.runtime.composite import composite, one_node, with_rule


# ---- reductions ----------------------------------------------------------------------------


def _keep(r, shape, dims, keepdim):
    if not keepdim or not dims and len(shape) == 0:
        return r
    new = tuple(1 if i in dims else n for i, n in enumerate(shape))
    return tp.reshape(r, shape=new) if tuple(r.shape) != new else r


def _reduce_dtype(x, dtype):
    if dtype is not None:
        return cast(x, dt.as_dtype(dtype))
    if x.dtype is dt.bool_ or (dt.is_integral(x.dtype) and x.dtype is not dt.int64):
        return cast(x, dt.int64)
    return x


@op("sum")
def sum(x, dim=None, keepdim=False, *, dtype=None):
    x = _reduce_dtype(x, dtype)
    dims = norm_dims(dim, x.ndim)
    r = _keep(tp.reduce_sum(x, dims=dims), x.shape, dims, keepdim)
    if r.grad_fn is not None:
        one_node("SumBackward0" if dim is None else "SumBackward1", [x], r)
    return r


@op("mean")
def mean(x, dim=None, keepdim=False, *, dtype=None):
    if dtype is not None:
        x = cast(x, dt.as_dtype(dtype))
    if not x.dtype.is_floating_point:
        raise RuntimeError(f"mean(): could not infer output dtype. Input dtype must be either a "
                           f"floating point or complex dtype. Got: {x.dtype.name}")
    dims = norm_dims(dim, x.ndim)
    n = math.prod(x.shape[d] for d in dims)
    r = tp.reduce_sum(x, dims=dims)
    r = _keep(tp.div(r, tp.broadcast_to(tp.constant(n, x.dtype), r.shape)), x.shape, dims,
              keepdim)
    if r.grad_fn is not None:
        one_node("MeanBackward0" if dim is None else "MeanBackward1", [x], r)
    return r


@op("prod")
def prod(x, dim=None, keepdim=False, *, dtype=None):
    x = _reduce_dtype(x, dtype)
    dims = norm_dims(dim, x.ndim)
    return _named(_keep(tp.reduce_prod(x, dims=dims), x.shape, dims, keepdim),
                  "ProdBackward0" if dim is None else "ProdBackward1")


@op("amax", "AmaxBackward0")
@composite("AmaxBackward0", ("x",))
def _check_nonempty(name, x, dim, all_dims_error=RuntimeError):
    """PyTorch's errors of a reduction without an identity (amax, max, argmax, aminmax) over
    an empty dim: over all elements of an empty tensor (`all_dims_error`; argmax's is an
    IndexError), or over a given dim of size 0 (named as the user gave it)."""
    if dim is None or dim == ():
        if x.numel() == 0:
            tail = "" if all_dims_error is IndexError else \
                " Specify the reduction dim with the 'dim' argument."
            raise all_dims_error(f"{name}(): Expected reduction dim to be specified for "
                                 f"input.numel() == 0.{tail}")
        return
    for d in (tuple(dim) if isinstance(dim, (tuple, list)) else (dim,)):
        if x.ndim and x.shape[norm_dims(d, x.ndim)[0]] == 0:
            sep = ":" if name == "aminmax" else "():"
            raise IndexError(f"{name}{sep} Expected reduction dim {d} to have non-zero size.")


def amax(x, dim=(), keepdim=False):
    _check_nonempty("amax", x, dim)
    dims = norm_dims(None if dim == () else dim, x.ndim)
    return _keep(tp.reduce_max(x, dims=dims), x.shape, dims, keepdim)


@op("amin", "AminBackward0")
@composite("AminBackward0", ("x",))
def amin(x, dim=(), keepdim=False):
    _check_nonempty("amin", x, dim)
    dims = norm_dims(None if dim == () else dim, x.ndim)
    return _keep(tp.reduce_min(x, dims=dims), x.shape, dims, keepdim)


def evenly_distribute_rule(ctx, g):
    """PyTorch's gradient of a full reduction that picks one value (max(), min(), median(),
    nanmedian() without a dim): g split evenly among the elements equal to the result, a NaN
    result counting as equal to every NaN element (so max() of an input with NaN sends the
    gradient to its NaNs, where amax's rule gives NaN everywhere)."""
    x, out = ctx.args["x"], ctx.result
    hit = eq(x, out)
    if x.dtype.is_floating_point:
        hit = logical_or(hit, logical_and(isnan(x), isnan(out)))
    return (where(hit, div(g, sum(hit)), 0.0),)


@with_rule("MaxBackward1", ("x",), evenly_distribute_rule, nan_result_tangent=True)
def _max_all(x):
    return amax(x)


@with_rule("MinBackward1", ("x",), evenly_distribute_rule, nan_result_tangent=True)
def _min_all(x):
    return amin(x)


def _minmax(x, dim, keepdim, other, all_fn, arg_fn, pair_fn, name):
    if isinstance(dim, Tensor) and other is None:
        return _named(pair_fn(x, dim), "MaximumBackward0" if name == "max" else
                      "MinimumBackward0")
    _check_nonempty(name, x, dim)
    if dim is None:
        return all_fn(x)
    d = norm_dims(dim, x.ndim)[0] if x.ndim else 0
    idx = arg_fn(x, d, keepdim=True)
    vals = take_along_dim(x, idx, d) if x.ndim else x
    if not keepdim and x.ndim:
        vals, idx = squeeze(vals, d), squeeze(idx, d)
    _named(vals, "MaxBackward0" if name == "max" else "MinBackward0")
    return return_types[name](vals, idx)


@op("max")
def max(x, dim=None, keepdim=False):
    """max(x) -> max value; max(x, dim) -> (values, indices); max(x, other) -> maximum."""
    return _minmax(x, dim, keepdim, None, _max_all, argmax, maximum, "max")


@op("min")
def min(x, dim=None, keepdim=False):
    return _minmax(x, dim, keepdim, None, _min_all, argmin, minimum, "min")


def _arg(prim, name):
    def f(x, dim=None, keepdim=False):
        _check_nonempty(name, x, dim, all_dims_error=IndexError)
        if dim is None:
            r = prim(tp.reshape(x, shape=(x.numel(),)), dim=0)
            return tp.reshape(r, shape=(1,) * x.ndim) if keepdim else r
        if x.ndim == 0:
            return tp.constant(0, dt.int64)
        d = norm_dims(dim, x.ndim)[0]
        return _keep(prim(x, dim=d), x.shape, (d,), keepdim)
    return f


argmax, argmin = op("argmax")(_arg(tp.argmax, "argmax")), op("argmin")(_arg(tp.argmin, "argmin"))


def _wide_float(x):
    """x in float64 where it is a narrower float: PyTorch accumulates var/std (and var_mean's
    mean) in double, so a row of 3e38 float32 values has a finite mean and variance, and a
    float32 std is finite where the variance itself overflows float32."""
    if x.dtype.is_floating_point and x.dtype is not dt.float64:
        return cast(x, dt.float64)
    return x


def _var(x, dim, correction, keepdim, *, one_output_centre_in_dtype=False):
    """The variance in float64 (for float inputs); the caller narrows it to x's dtype.
    `one_output_centre_in_dtype`: PyTorch's CPU var/std (not var_mean) with a single output
    element centre on mean(x) taken in x's dtype (float32), which overflows where the sum of
    x does; other shapes and var_mean accumulate the mean in double too."""
    dims = norm_dims(dim, x.ndim)
    n = math.prod(x.shape[d] for d in dims)
    xw = _wide_float(x)
    one_output = math.prod(x.shape[d] for d in range(x.ndim) if d not in dims) == 1
    if one_output_centre_in_dtype and one_output and x.dtype is dt.float32:
        mu = cast(mean(x, dims, keepdim=True), xw.dtype)
    else:
        mu = mean(xw, dims, keepdim=True)
    d = sub(xw, mu)
    s = sum(mul(d, d), dims, keepdim=keepdim)
    return div(s, float(builtins.max(0, n - correction)))


def _narrow(v, like):
    return cast(v, like.dtype) if v.dtype is not like.dtype else v


def _correction(unbiased, correction):
    if correction is not None:
        return correction
    return 1 if unbiased in (None, True) else 0


def _dim_and_correction(dim, unbiased, correction):
    """var(x, dims) given as the second positional argument, where `unbiased` stands."""
    if isinstance(unbiased, bool) is False and unbiased is not None and dim is None:
        dim, unbiased = unbiased, None
    return dim, _correction(unbiased, correction)


@op("var", "VarBackward0")
@composite("VarBackward0", ("x",))
def var(x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    dim, c = _dim_and_correction(dim, unbiased, correction)
    return _narrow(_var(x, dim, c, keepdim, one_output_centre_in_dtype=True), x)


@op("std", "StdBackward0")
@composite("StdBackward0", ("x",))
def std(x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """sqrt(var), taken before the variance is narrowed to x's dtype (PyTorch); its gradient
    is 0 (not NaN) where std is 0, as in PyTorch."""
    dim, c = _dim_and_correction(dim, unbiased, correction)
    return _narrow(_sqrt0(_var(x, dim, c, keepdim, one_output_centre_in_dtype=True)), x)


def _sqrt0(v):
    """sqrt(v) with gradient 0 where v == 0 (PyTorch's std and 2-norm subgradient)."""
    is0 = eq(v, 0.0)
    return where(is0, 0.0, sqrt(where(is0, 1.0, v)))


def _wide_mean(x, dim, keepdim):
    """var_mean's mean: accumulated in double like its variance (PyTorch), so it is finite
    where mean(x) overflows."""
    return _narrow(mean(_wide_float(x), dim, keepdim), x)


def var_mean(x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    dim, c = _dim_and_correction(dim, unbiased, correction)
    return share_node("VarMeanBackward0", [x], (_narrow(_var(x, dim, c, keepdim), x),
                                                _wide_mean(x, dim, keepdim)))


def std_mean(x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    dim, c = _dim_and_correction(dim, unbiased, correction)
    return share_node("StdMeanBackward0", [x], (_narrow(_sqrt0(_var(x, dim, c, keepdim)), x),
                                                _wide_mean(x, dim, keepdim)))


def _norm_rule(ctx, g):
    """PyTorch's norm_backward: sign(x)|x|^(p-1) g / norm^(p-1), 0 where the norm is 0 (and at
    x == 0 for p < 1); for p = +-inf the gradient is shared by the elements whose |x| is the
    norm; for p = 0 it is 0."""
    a = ctx.args
    x, p, dim, keepdim = a["x"], a["p"], a["dim"], a["keepdim"]
    out = ctx.result
    dims = norm_dims(() if dim is None else dim, x.ndim) if dim is not None else \
        tuple(range(x.ndim))
    if not keepdim:  # g and the norm at x's rank, 1 over the reduced dims
        kept = tuple(1 if d in dims else n for d, n in enumerate(x.shape))
        g, out = tp.reshape(g, shape=kept), tp.reshape(out, shape=kept)
    g, out = tp.broadcast_to(g, x.shape), tp.broadcast_to(out, x.shape)
    if p == 0:
        return (mul(x, 0.0),)
    if p in (1, 1.0):
        return (mul(tp.sign_nan0(x), g),)
    if p in (float("inf"), "inf", float("-inf"), "-inf"):
        hit = cast(eq(abs(x), out), x.dtype)
        count = tp.broadcast_to(sum(hit, dims, keepdim=True), x.shape)
        return (div(mul(mul(tp.sign_nan0(x), hit), g), count),)
    p = 2.0 if p == "fro" else float(p)
    zero = eq(out, 0.0)
    if p == 2.0:
        scaled = x
    else:
        ax = abs(x)
        scaled = mul(tp.sign_nan0(x), pow(ax, p - 1.0))
        if p < 1.0:
            scaled = where(eq(ax, 0.0), 0.0, scaled)
    scale = div(g, pow(where(zero, 1.0, out), p - 1.0)) if p != 2.0 else \
        div(g, where(zero, 1.0, out))
    return (where(zero, 0.0, mul(scaled, scale)),)


@op("norm")
def norm(x, p="fro", dim=None, keepdim=False):
    return _norm(x, p, dim, keepdim)


@with_rule("LinalgVectorNormBackward0", ("x",), _norm_rule)
def _norm(x, p="fro", dim=None, keepdim=False):
    """The vector p-norm over `dim` (all dims by default), with PyTorch's subgradients: 0
    where the norm is 0, and 0 at x == 0 for p < 1."""
    if p in ("fro", 2, 2.0):
        return _sqrt0(sum(mul(x, x), dim, keepdim))
    if p in (1, 1.0):
        return sum(abs(x), dim, keepdim)
    if p in (float("inf"), "inf"):
        return amax(abs(x), () if dim is None else dim, keepdim)
    if p in (float("-inf"), "-inf"):
        return amin(abs(x), () if dim is None else dim, keepdim)
    if p == 0:  # the number of nonzeros; no gradient
        n = sum(cast(ne(x, 0), x.dtype), dim, keepdim)
        return _zero_grad(n, sum(x, dim, keepdim)) if x.requires_grad else n
    p = float(p)
    a = abs(x)
    a0 = eq(a, 0.0)  # |x|^p with gradient 0 at x == 0 (p < 1 would give inf * 0)
    ap = where(a0, 0.0 if p > 0 else math.inf, pow(where(a0, 1.0, a), p))
    s = sum(ap, dim, keepdim)
    if p < 0:
        return pow(s, 1.0 / p)
    s0 = eq(s, 0.0)
    return where(s0, 0.0, pow(where(s0, 1.0, s), 1.0 / p))


@op("logsumexp", "LogsumexpBackward0")
@composite("LogsumexpBackward0", ("x",))
def logsumexp(x, dim, keepdim=False):
    """Stable: max-shifted; rows that are all -inf give -inf, not NaN."""
    if not x.dtype.is_floating_point:
        x = cast(x, dt.float32)
    dims = norm_dims(dim, x.ndim)
    if builtins.any(x.shape[d] == 0 for d in dims):  # log(0) = -inf, like PyTorch
        return _keep(tp.log(tp.reduce_sum(tp.exp(x), dims=dims)), x.shape, dims, keepdim)
    m = tp.reduce_max(x, dims=dims)
    m = where(isfinite(m), m, 0.0).detach()
    mb = tp.broadcast_in_dim(m, shape=tuple(x.shape),
                             dims=tuple(d for d in range(x.ndim) if d not in dims))
    s = tp.reduce_sum(tp.exp(tp.sub(x, mb)), dims=dims)
    return _keep(tp.add(tp.log(s), m), x.shape, dims, keepdim)


def _softmax_rule(g, y, *, dim):
    """softmax's gradient from its output, as ops (the kernel node's rule under
    create_graph)."""
    gy = mul(g, y)
    return (sub(gy, mul(y, sum(gy, dim, keepdim=True))),)


def _log_softmax_rule(g, out, *, dim):
    """log_softmax's gradient from its output, as ops (as _softmax_rule)."""
    return (sub(g, mul(exp(out), sum(g, dim, keepdim=True))),)


_SOFTMAX_KERNEL = eager_kernels.Kernel(
    "SoftmaxBackward0", eager_kernels.softmax_forward, eager_kernels.softmax_backward,
    accepts=lambda arrays, p: arrays[0].size > 0, output_rule=_softmax_rule,
    generated=eager_kernels.Generated(eager_kernels.rows_layout))
_LOG_SOFTMAX_KERNEL = eager_kernels.Kernel(
    "LogSoftmaxBackward0", eager_kernels.log_softmax_forward,
    eager_kernels.log_softmax_backward, accepts=lambda arrays, p: arrays[0].size > 0,
    output_rule=_log_softmax_rule, generated=eager_kernels.Generated(eager_kernels.rows_layout))


@op("softmax", "SoftmaxBackward0")
@composite("SoftmaxBackward0", ("x",))
def softmax(x, dim, dtype=None):
    if dtype is not None:  # the cast is a node of its own before SoftmaxBackward0 (PyTorch)
        return softmax(cast(x, dt.as_dtype(dtype)), dim)
    d = norm_dims(dim, x.ndim)
    if x.numel() == 0:
        return mul(x, 1.0)
    out = eager_kernels.run(_SOFTMAX_KERNEL, (x,), _softmax_prims, dim=d)
    return out if out is not None else _softmax_prims(x, dim=d)


def _softmax_prims(x, *, dim):
    """softmax over the dims `dim` as tensor ops (the reference of the eager kernel, and what
    a trace records)."""
    m = amax(x, dim, keepdim=True).detach()
    e = exp(sub(x, m))
    return div(e, sum(e, dim, keepdim=True))


@op("log_softmax", "LogSoftmaxBackward0")
@composite("LogSoftmaxBackward0", ("x",))
def log_softmax(x, dim, dtype=None):
    """(x - max) - log(sum(exp(x - max))), PyTorch's formula: a +inf in a row gives NaN."""
    if dtype is not None:  # the cast is a node of its own (as softmax's)
        return log_softmax(cast(x, dt.as_dtype(dtype)), dim)
    if not x.dtype.is_floating_point:
        x = cast(x, dt.float32)
    d = norm_dims(dim, x.ndim)
    if x.numel() == 0:
        return mul(x, 1.0)
    out = eager_kernels.run(_LOG_SOFTMAX_KERNEL, (x,), _log_softmax_prims, dim=d)
    return out if out is not None else _log_softmax_prims(x, dim=d)


def _log_softmax_prims(x, *, dim):
    """log_softmax over the dims `dim` as tensor ops (the reference of the eager kernel, and
    what a trace records)."""
    shifted = sub(x, amax(x, dim, keepdim=True).detach())
    return sub(shifted, log(sum(exp(shifted), dim, keepdim=True)))


@op("cumsum", "CumsumBackward0")
def cumsum(x, dim, *, dtype=None):
    x = _reduce_dtype(x, dtype)
    if x.ndim == 0:
        norm_dims(dim, 0)
        return mul(x, 1)
    return tp.cumsum(x, dim=norm_dims(dim, x.ndim)[0])


def all(x, dim=None, keepdim=False):
    """True where every element is nonzero; True over an empty dim."""
    return _all_any(x, dim, keepdim, amin, True)


def any(x, dim=None, keepdim=False):
    """True where some element is nonzero; False over an empty dim."""
    return _all_any(x, dim, keepdim, amax, False)


def _all_any(x, dim, keepdim, reduce, empty):
    dims = norm_dims(dim, x.ndim)
    if builtins.any(x.shape[d] == 0 for d in dims):
        shape = tuple(1 if i in dims else n for i, n in enumerate(x.shape)) if keepdim else \
            tuple(n for i, n in enumerate(x.shape) if i not in dims)
        return tp.constant(empty, dt.bool_, shape)
    return eq(reduce(cast(x, dt.bool_), () if dim is None else dim, keepdim), True)


def count_nonzero(x, dim=None):
    return sum(ne(x, 0), dim)


def sum_to_shape(g, shape):
    """Sum a broadcast gradient back to `shape` (the inverse of broadcasting)."""
    shape = tuple(shape)
    if tuple(g.shape) == shape:
        return g
    lead = g.ndim - len(shape)
    dims = tuple(range(lead)) + tuple(lead + i for i, n in enumerate(shape)
                                      if n == 1 and g.shape[lead + i] != 1)
    r = tp.reduce_sum(g, dims=dims)
    return tp.reshape(r, shape=shape)
