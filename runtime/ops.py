"""User-level math ops: broadcasting, type promotion and decomposition into prims.

Every function here is a composition of `tprims` calls; its derivative comes from the
prims' rules. The `op` decorator names the user-level op (for IR provenance, profiler rows
and the grad_fn name PyTorch users expect, e.g. `MeanBackward0`).
"""
import builtins
import functools
import math

import numpy as np

from aotgrad.ir import dtypes as dt
from aotgrad.ir.core import current_op, format_location
from aotgrad.runtime import profiling
from aotgrad.runtime import tprims as tp
from aotgrad.runtime.tensor import Tensor


def op(name, grad_name=None):
    """Mark a user-level op: provenance name, profiler row, and the grad_fn name of its result."""
    def deco(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            if current_op.get() is not None:
                return fn(*args, **kwargs)
            token = current_op.set(name)
            try:
                if profiling._profilers:
                    with profiling.record(name, kind="op"):
                        out = fn(*args, **kwargs)
                else:
                    out = fn(*args, **kwargs)
            except (RuntimeError, ValueError, TypeError, IndexError) as e:
                _add_user_line(e, name)
                raise
            finally:
                current_op.reset(token)
            if grad_name is not None:
                t = out if type(out) is Tensor else \
                    (out[0] if isinstance(out, ReturnType) else None)
                if t is not None and t.grad_fn is not None:
                    t.grad_fn._name = grad_name
            return out
        return wrapper
    return deco


def _add_user_line(err, name):
    """Errors raised inside an op name the op and the user's source line (once)."""
    msg = str(err.args[0]) if err.args and isinstance(err.args[0], str) else None
    if msg is None or " (at " in msg or type(err).__module__ != "builtins":
        return
    err.args = (f"{name}: {msg}{format_location()}",) + err.args[1:]


def _named(out, grad_name):
    """Set the grad_fn name of an op whose PyTorch name depends on its arguments."""
    if out.grad_fn is not None:
        out.grad_fn._name = grad_name
    return out


class ReturnType(tuple):
    """(values, indices) returned by max/min/sort/topk with a dim, like torch.return_types.

    >>> aotgrad.tensor([[1., 3.]]).max(1)
    aotgrad.return_types.max(
    values=tensor([3.]),
    indices=tensor([1]))
    """
    __slots__ = ()
    _fields = ("values", "indices")

    def __new__(cls, values, indices):
        return tuple.__new__(cls, (values, indices))

    values = property(lambda self: self[0])
    indices = property(lambda self: self[1])

    def __repr__(self):
        return (f"aotgrad.return_types.{type(self).__name__}(\nvalues={self[0]!r},\n"
                f"indices={self[1]!r})")

    def __reduce__(self):
        return (type(self), tuple(self))


def _return_type(name):
    return type(name, (ReturnType,), {"__slots__": (), "__module__": "aotgrad.return_types",
                                      "__qualname__": name})


return_types = {n: _return_type(n) for n in ("max", "min", "sort", "topk", "kthvalue", "mode")}


# ---- conversion helpers --------------------------------------------------------------------
def scalar_dtype(s, other=None):
    """PyTorch promotion of a Python scalar against a tensor dtype."""
    if isinstance(s, (bool, np.bool_)):
        return other or dt.bool_
    if isinstance(s, (int, np.integer)):
        return other if other is not None and other is not dt.bool_ else dt.int64
    if isinstance(s, (float, np.floating)):
        return other if other is not None and other.is_floating_point else dt.float32
    raise TypeError(f"expected a Tensor or a Python number, got {type(s).__name__}")


def as_tensor_like(x, dtype=None):
    """x if it is a Tensor; a Python scalar becomes a 0-d constant of the promoted dtype."""
    if isinstance(x, Tensor):
        return x
    if isinstance(x, np.ndarray):
        from aotgrad.runtime.factories import tensor
        return tensor(x)
    return tp.constant(x, scalar_dtype(x, dtype))


def cast(t, dtype):
    return t if t.dtype is dtype else tp.convert_element_type(t, dtype=dtype)


def broadcast_shapes(*shapes):
    try:
        return tuple(np.broadcast_shapes(*[tuple(s) for s in shapes]))
    except ValueError:
        raise RuntimeError(
            f"The size of tensor a ({shapes[0][-1] if shapes[0] else 1}) must match the size of "
            f"tensor b ({shapes[1][-1] if shapes[1] else 1}): shapes {[list(s) for s in shapes]} "
            f"are not broadcastable") from None


def _binary_args(a, b, float_result=False):
    ta, tb = isinstance(a, Tensor), isinstance(b, Tensor)
    if not ta and not tb:
        raise TypeError("at least one argument must be a Tensor")
    if ta and tb:
        wa, wb = is_weak(a), is_weak(b)
        if wa != wb:  # a weakly typed scalar tensor promotes like the Python number it holds
            s, t = (a, b) if wa else (b, a)
            dtype = scalar_dtype(0.0 if s.dtype.is_floating_point else 0, t.dtype)
        else:
            dtype = dt.promote(a.dtype, b.dtype)
    elif ta:
        dtype, b = scalar_dtype(b, a.dtype), b
    else:
        dtype = scalar_dtype(a, b.dtype)
    if float_result and not dtype.is_floating_point:
        dtype = dt.float32
    a, b = as_tensor_like(a, dtype), as_tensor_like(b, dtype)
    a, b = cast(a, dtype), cast(b, dtype)
    if tuple(a.shape) != tuple(b.shape):
        shape = broadcast_shapes(a.shape, b.shape)
        a, b = tp.broadcast_to(a, shape), tp.broadcast_to(b, shape)
    return a, b


def _binary(prim, float_result=False):
    def f(a, b):
        weak = _weak_or_scalar(a) and _weak_or_scalar(b)
        a, b = _binary_args(a, b, float_result)
        out = prim(a, b)
        return mark_weak(out) if weak else out
    return f


def is_weak(t):
    """A weakly typed 0-d tensor stands for a Python number that may change between calls of
    a compiled function (an optimizer's learning rate): in type promotion it acts like that
    number, so `p * lr` stays float32 exactly as with a Python float (JAX's weak types)."""
    return t.__dict__.get("_weak_scalar", False)


def mark_weak(t):
    t.__dict__["_weak_scalar"] = True
    return t


def _weak_or_scalar(x):
    return not isinstance(x, Tensor) or is_weak(x)


add_ = _binary(tp.add)
mul_ = _binary(tp.mul)


@op("add", "AddBackward0")
def add(a, b, *, alpha=1):
    if isinstance(alpha, Tensor) or alpha != 1:
        b = mul(b, alpha)
    return add_(a, b)


@op("sub", "SubBackward0")
def sub(a, b, *, alpha=1):
    if isinstance(alpha, Tensor) or alpha != 1:
        b = mul(b, alpha)
    weak = _weak_or_scalar(a) and _weak_or_scalar(b)
    a2, b2 = _binary_args(a, b)
    if a2.dtype is dt.bool_:
        raise RuntimeError("Subtraction, the `-` operator, with two bool tensors is not "
                           "supported. Use the `^` or `logical_xor()` operator instead.")
    out = tp.sub(a2, b2)
    return mark_weak(out) if weak else out


@op("mul", "MulBackward0")
def mul(a, b):
    return mul_(a, b)


@op("div", "DivBackward0")
def div(a, b, *, rounding_mode=None):
    out = _binary(tp.div, float_result=True)(a, b)
    if rounding_mode == "floor":
        return tp.floor(out)
    if rounding_mode == "trunc":
        return mul(sign(out), tp.floor(tp.abs(out)))
    return out


true_divide = divide = div


@op("floor_divide")
def floor_divide(a, b):
    a2, b2 = _binary_args(a, b)
    if a2.dtype.is_floating_point:
        return tp.floor(tp.div(a2, b2))
    f = tp.floor(tp.div(cast(a2, dt.float64), cast(b2, dt.float64)))
    return cast(f, a2.dtype)


@op("remainder")
def remainder(a, b):
    a2, b2 = _binary_args(a, b)
    return sub(a2, mul(floor_divide(a2, b2), b2))


@op("pow")
def pow(a, b):
    """a ** b. grad_fn: PowBackward0 (tensor ** number), PowBackward1 (tensor ** tensor),
    PowBackward2 (number ** tensor), as in PyTorch."""
    if not isinstance(a, Tensor):
        return _named(_binary(tp.pow, float_result=True)(a, b), "PowBackward2")
    if not isinstance(b, Tensor):
        if isinstance(b, (int, float)) and not isinstance(b, bool):
            if b == 2:
                return _named(tp.mul(a, a), "PowBackward0")
            if b == 0.5 and a.dtype.is_floating_point:
                return _named(tp.sqrt(a), "PowBackward0")
        return _named(_binary(tp.pow, float_result=True)(a, b), "PowBackward0")
    return _named(_binary(tp.pow, float_result=True)(a, b), "PowBackward1")


@op("maximum", "MaximumBackward0")
def maximum(a, b):
    return _binary(tp.maximum)(a, b)


@op("minimum", "MinimumBackward0")
def minimum(a, b):
    return _binary(tp.minimum)(a, b)


@op("atan2", "Atan2Backward0")
def atan2(a, b):
    return _binary(tp.atan2, float_result=True)(a, b)


def _cmp(prim, name):
    @op(name)
    def f(a, b):
        return prim(*_binary_args(a, b))
    f.__name__ = name
    return f


eq, ne, lt, le, gt, ge = (_cmp(p, n) for p, n in [(tp.eq, "eq"), (tp.ne, "ne"), (tp.lt, "lt"),
                                                   (tp.le, "le"), (tp.gt, "gt"), (tp.ge, "ge")])


def _logical(prim, name):
    @op(name)
    def f(a, b):
        a, b = _binary_args(a, b)
        return prim(cast(a, dt.bool_) if a.dtype is not dt.bool_ else a,
                    cast(b, dt.bool_) if b.dtype is not dt.bool_ else b)
    f.__name__ = name
    return f


logical_and, logical_or = _logical(tp.logical_and, "logical_and"), _logical(tp.logical_or,
                                                                            "logical_or")


@op("logical_xor")
def logical_xor(a, b):
    return ne(cast(as_tensor_like(a), dt.bool_), cast(as_tensor_like(b), dt.bool_))


@op("logical_not")
def logical_not(a):
    return tp.logical_not(cast(a, dt.bool_))


# ---- unary ---------------------------------------------------------------------------------
def _unary(prim, name, grad_name, float_only=True):
    @op(name, grad_name)
    def f(x):
        if float_only and not x.dtype.is_floating_point:
            x = cast(x, dt.float32)
        out = prim(x)
        return mark_weak(out) if is_weak(x) else out
    f.__name__ = name
    return f


exp = _unary(tp.exp, "exp", "ExpBackward0")
log = _unary(tp.log, "log", "LogBackward0")
log1p = _unary(tp.log1p, "log1p", "Log1PBackward0")
expm1 = _unary(tp.expm1, "expm1", "Expm1Backward0")
sqrt = _unary(tp.sqrt, "sqrt", "SqrtBackward0")
rsqrt = _unary(tp.rsqrt, "rsqrt", "RsqrtBackward0")
sin = _unary(tp.sin, "sin", "SinBackward0")
cos = _unary(tp.cos, "cos", "CosBackward0")
tanh = _unary(tp.tanh, "tanh", "TanhBackward0")
sigmoid = _unary(tp.logistic, "sigmoid", "SigmoidBackward0")
erf = _unary(tp.erf, "erf", "ErfBackward0")
_floor = _unary(tp.floor, "floor", "FloorBackward0")
_ceil = _unary(tp.ceil, "ceil", "CeilBackward0")


def floor(x):
    """Round down; integer tensors come back unchanged (as a copy), like PyTorch."""
    return _floor(x) if x.dtype.is_floating_point or x.dtype is dt.bool_ else mul(x, 1)


def ceil(x):
    return _ceil(x) if x.dtype.is_floating_point or x.dtype is dt.bool_ else mul(x, 1)
reciprocal = _unary(tp.reciprocal, "reciprocal", "ReciprocalBackward0")
neg = _unary(tp.neg, "neg", "NegBackward0", float_only=False)
abs = _unary(tp.abs, "abs", "AbsBackward0", float_only=False)
sign = _unary(tp.sign, "sign", "SignBackward0", float_only=False)
negative, absolute = neg, abs


@op("tan")
def tan(x):
    return div(sin(x), cos(x))


@op("log2")
def log2(x):
    return mul(log(x), 1 / math.log(2))


@op("log10")
def log10(x):
    return mul(log(x), 1 / math.log(10))


@op("exp2")
def exp2(x):
    return exp(mul(x, math.log(2)))


@op("square")
def square(x):
    return mul(x, x)


@op("relu", "ReluBackward0")
def relu(x):
    # PyTorch's rule: 0 where x <= 0, so the gradient at 0 is 0 (max(x, 0) would split it,
    # 0.5) and NaN passes through; the backward needs only the mask, which is 1 byte/element
    zero = tp.zeros(x.shape, x.dtype)
    return tp.where(tp.le(x, zero), zero, x)


@op("round")
def round(x):
    """Round half to even, like PyTorch."""
    return _round_half_even(x) if x.dtype.is_floating_point else x


def _round_half_even(x):
    f = tp.floor(x)
    diff = sub(x, f)
    half = tp.broadcast_to(tp.constant(0.5, x.dtype), x.shape)
    up = add(f, 1.0)
    f_even = eq(remainder(f, 2.0), 0.0)
    return where(gt(diff, half), up, where(lt(diff, half), f, where(f_even, f, up)))


@op("clamp", "ClampBackward1")
def clamp(x, min=None, max=None):
    if min is None and max is None:
        raise RuntimeError("clamp: At least one of 'min' or 'max' must not be None")
    dtype = x.dtype  # a float bound promotes an integer tensor, like PyTorch
    for bound in (min, max):
        if bound is not None:
            dtype = dt.promote(dtype, bound.dtype if isinstance(bound, Tensor) else
                               scalar_dtype(bound, dtype))
    x = cast(x, dtype)
    out = x
    if min is not None:  # PyTorch passes the gradient where min <= x <= max
        lo = tp.broadcast_to(cast(as_tensor_like(min, x.dtype), x.dtype), x.shape)
        out = where(lt(out, lo), lo, out)
    if max is not None:
        hi = tp.broadcast_to(cast(as_tensor_like(max, x.dtype), x.dtype), x.shape)
        out = where(gt(out, hi), hi, out)
    return out


clip = clamp


@op("where", "WhereBackward0")
def where(cond, a, b):
    cond = as_tensor_like(cond)
    if cond.dtype is not dt.bool_:
        cond = cast(cond, dt.bool_)
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        a = as_tensor_like(a, scalar_dtype(b))
    a, b = _binary_args(a, b)
    shape = broadcast_shapes(cond.shape, a.shape)
    return tp.where(tp.broadcast_to(cond, shape), tp.broadcast_to(a, shape),
                    tp.broadcast_to(b, shape))


@op("nan_to_num")
def nan_to_num(x, nan=0.0, posinf=None, neginf=None):
    info = np.finfo(x.dtype.np)
    x = where(ne(x, x), nan, x)
    x = where(eq(x, float("inf")), info.max if posinf is None else posinf, x)
    return where(eq(x, float("-inf")), info.min if neginf is None else neginf, x)


def isnan(x):
    return ne(x, x)


def isinf(x):
    return eq(abs(x), float("inf"))


def isfinite(x):
    return logical_not(logical_or(isnan(x), isinf(x)))


# ---- matmul --------------------------------------------------------------------------------
@op("matmul", "MmBackward0")
def matmul(a, b):
    """numpy/PyTorch matmul: 1-d vectors, 2-d matrices, broadcast batch dims."""
    if a.dtype is not b.dtype:
        raise RuntimeError(f"expected m1 and m2 to have the same dtype, but got: "
                           f"{a.dtype.name} != {b.dtype.name}")
    if a.ndim == 0 or b.ndim == 0:
        raise RuntimeError("both arguments to matmul need to be at least 1D, but they are "
                           f"{a.ndim}D and {b.ndim}D")
    if a.shape[-1] != b.shape[-2 if b.ndim > 1 else 0]:
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied "
                           f"({'x'.join(map(str, a.shape))} and {'x'.join(map(str, b.shape))})")
    if a.ndim == 1 and b.ndim == 1:
        return tp.dot_general(a, b, contract=((0,), (0,)))
    if b.ndim == 1:
        return tp.dot_general(a, b, contract=((a.ndim - 1,), (0,)))
    if a.ndim == 1:
        return tp.dot_general(a, b, contract=((0,), (b.ndim - 2,)))
    if b.ndim == 2:  # (..., m, k) @ (k, n): one contraction, no batch dims
        return tp.dot_general(a, b, contract=((a.ndim - 1,), (0,)))
    batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = tp.broadcast_to(a, batch + tuple(a.shape[-2:]))
    b = tp.broadcast_to(b, batch + tuple(b.shape[-2:]))
    nb = len(batch)
    return tp.dot_general(a, b, contract=((nb + 1,), (nb,)),
                          batch=(tuple(range(nb)), tuple(range(nb))))


def mm(a, b):
    if a.ndim != 2 or b.ndim != 2:
        raise RuntimeError(f"mm: expected 2D tensors, got {a.ndim}D and {b.ndim}D")
    return matmul(a, b)


def bmm(a, b):
    if a.ndim != 3 or b.ndim != 3:
        raise RuntimeError(f"bmm: expected 3D tensors, got {a.ndim}D and {b.ndim}D")
    if a.shape[0] != b.shape[0]:
        raise RuntimeError(f"bmm: batch sizes differ: {a.shape[0]} and {b.shape[0]}")
    return matmul(a, b)


def dot(a, b):
    if a.ndim != 1 or b.ndim != 1:
        raise RuntimeError(f"1D tensors expected, but got {a.ndim}D and {b.ndim}D tensors")
    return matmul(a, b)


def mv(a, b):
    return matmul(a, b)


def outer(a, b):
    return mul(a.reshape(-1, 1), b.reshape(1, -1))


@op("einsum")
def einsum(eq_, *operands):
    raise NotImplementedError("einsum is not supported yet; use matmul/permute")


# ---- reductions ----------------------------------------------------------------------------
def norm_dims(dim, ndim, allow_none=True):
    """Normalise `dim` (None, int or tuple, negatives allowed) to a sorted tuple."""
    if dim is None:
        return tuple(range(ndim))
    dims = (dim,) if isinstance(dim, (int, np.integer)) else tuple(dim)
    out = []
    for d in dims:
        d = int(d)
        if not -builtins.max(ndim, 1) <= d < builtins.max(ndim, 1):
            raise IndexError(f"Dimension out of range (expected to be in range of "
                             f"[{-builtins.max(ndim, 1)}, {builtins.max(ndim, 1) - 1}], but got {d})")
        out.append(d % ndim if ndim else 0)
    if len(set(out)) != len(out):
        raise RuntimeError(f"dim {tuple(dims)} appears multiple times in the list of dims")
    return tuple(sorted(out)) if ndim else ()


def _keep(r, shape, dims, keepdim):
    if not keepdim or not dims and len(shape) == 0:
        return r
    new = tuple(1 if i in dims else n for i, n in enumerate(shape))
    return tp.reshape(r, shape=new) if tuple(r.shape) != new else r


def _reduce_dtype(x, dtype):
    if dtype is not None:
        return cast(x, dt.as_dtype(dtype))
    if x.dtype is dt.bool_ or x.dtype is dt.int32:
        return cast(x, dt.int64)
    return x


@op("sum")
def sum(x, dim=None, keepdim=False, *, dtype=None):
    x = _reduce_dtype(x, dtype)
    dims = norm_dims(dim, x.ndim)
    r = _keep(tp.reduce_sum(x, dims=dims), x.shape, dims, keepdim)
    if r.grad_fn is not None:
        r.grad_fn._name = "SumBackward0" if dim is None else "SumBackward1"
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
    r = tp.div(r, tp.broadcast_to(tp.constant(n, x.dtype), r.shape))
    return _named(_keep(r, x.shape, dims, keepdim), "MeanBackward0" if dim is None else
                  "MeanBackward1")


@op("prod")
def prod(x, dim=None, keepdim=False, *, dtype=None):
    x = _reduce_dtype(x, dtype)
    dims = norm_dims(dim, x.ndim)
    return _named(_keep(tp.reduce_prod(x, dims=dims), x.shape, dims, keepdim),
                  "ProdBackward0" if dim is None else "ProdBackward1")


@op("amax", "AmaxBackward0")
def amax(x, dim=(), keepdim=False):
    dims = norm_dims(None if dim == () else dim, x.ndim)
    return _keep(tp.reduce_max(x, dims=dims), x.shape, dims, keepdim)


@op("amin", "AminBackward0")
def amin(x, dim=(), keepdim=False):
    dims = norm_dims(None if dim == () else dim, x.ndim)
    return _keep(tp.reduce_min(x, dims=dims), x.shape, dims, keepdim)


def _minmax(x, dim, keepdim, other, amax_fn, arg_fn, pair_fn, name):
    if isinstance(dim, Tensor) and other is None:
        return _named(pair_fn(x, dim), "MaximumBackward0" if name == "max" else
                      "MinimumBackward0")
    if dim is None:
        if x.numel() == 0:
            raise RuntimeError(f"{name}(): Expected reduction dim to be specified for "
                               f"input.numel() == 0. Specify the reduction dim with the 'dim' "
                               f"argument.")
        return _named(amax_fn(x), "MaxBackward1" if name == "max" else "MinBackward1")
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
    return _minmax(x, dim, keepdim, None, amax, argmax, maximum, "max")


@op("min")
def min(x, dim=None, keepdim=False):
    return _minmax(x, dim, keepdim, None, amin, argmin, minimum, "min")


def _arg(prim):
    def f(x, dim=None, keepdim=False):
        if dim is None:
            r = prim(tp.reshape(x, shape=(x.numel(),)), dim=0)
            return tp.reshape(r, shape=(1,) * x.ndim) if keepdim else r
        if x.ndim == 0:
            return tp.constant(0, dt.int64)
        d = norm_dims(dim, x.ndim)[0]
        return _keep(prim(x, dim=d), x.shape, (d,), keepdim)
    return f


argmax, argmin = op("argmax")(_arg(tp.argmax)), op("argmin")(_arg(tp.argmin))


def _var(x, dim, correction, keepdim):
    dims = norm_dims(dim, x.ndim)
    n = math.prod(x.shape[d] for d in dims)
    mu = mean(x, dims, keepdim=True)
    d = sub(x, mu)
    s = sum(mul(d, d), dims, keepdim=keepdim)
    return div(s, float(builtins.max(0, n - correction)))


def _correction(unbiased, correction):
    if correction is not None:
        return correction
    return 1 if unbiased in (None, True) else 0


@op("var", "VarBackward0")
def var(x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    if isinstance(unbiased, bool) is False and unbiased is not None and dim is None:
        dim, unbiased = unbiased, None
    return _var(x, dim, _correction(unbiased, correction), keepdim)


@op("std", "StdBackward0")
def std(x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    return sqrt(var(x, dim, unbiased, keepdim, correction=correction))


def var_mean(x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    return var(x, dim, unbiased, keepdim, correction=correction), mean(x, dim, keepdim)


def std_mean(x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    return std(x, dim, unbiased, keepdim, correction=correction), mean(x, dim, keepdim)


@op("norm", "NormBackward1")
def norm(x, p="fro", dim=None, keepdim=False):
    if p in ("fro", 2, 2.0):
        return sqrt(sum(mul(x, x), dim, keepdim))
    if p in (1, 1.0):
        return sum(abs(x), dim, keepdim)
    if p in (float("inf"), "inf"):
        return amax(abs(x), () if dim is None else dim, keepdim)
    return pow(sum(pow(abs(x), float(p)), dim, keepdim), 1.0 / float(p))


@op("logsumexp", "LogsumexpBackward0")
def logsumexp(x, dim, keepdim=False):
    """Stable: max-shifted; rows that are all -inf give -inf, not NaN."""
    if not x.dtype.is_floating_point:
        x = cast(x, dt.float32)
    dims = norm_dims(dim, x.ndim)
    m = tp.reduce_max(x, dims=dims)
    m = where(isfinite(m), m, 0.0).detach()
    mb = tp.broadcast_in_dim(m, shape=tuple(x.shape),
                             dims=tuple(d for d in range(x.ndim) if d not in dims))
    s = tp.reduce_sum(tp.exp(tp.sub(x, mb)), dims=dims)
    return _keep(tp.add(tp.log(s), m), x.shape, dims, keepdim)


@op("softmax", "SoftmaxBackward0")
def softmax(x, dim, dtype=None):
    if dtype is not None:
        x = cast(x, dt.as_dtype(dtype))
    d = norm_dims(dim, x.ndim)
    m = amax(x, d, keepdim=True).detach()
    e = exp(sub(x, m))
    return div(e, sum(e, d, keepdim=True))


@op("log_softmax", "LogSoftmaxBackward0")
def log_softmax(x, dim, dtype=None):
    if dtype is not None:
        x = cast(x, dt.as_dtype(dtype))
    return sub(x, logsumexp(x, dim, keepdim=True))


@op("cumsum", "CumsumBackward0")
def cumsum(x, dim, *, dtype=None):
    x = _reduce_dtype(x, dtype)
    return tp.cumsum(x, dim=norm_dims(dim, x.ndim)[0])


def all(x, dim=None, keepdim=False):
    return eq(amin(cast(x, dt.bool_), () if dim is None else dim, keepdim), True)


def any(x, dim=None, keepdim=False):
    return eq(amax(cast(x, dt.bool_), () if dim is None else dim, keepdim), True)


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


# late imports used above (shape ops live in shape_ops.py)
from aotgrad.runtime.shape_ops import squeeze, take_along_dim  # noqa: E402
