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
        elif (a.ndim == 0) != (b.ndim == 0):  # PyTorch: a 0-d tensor does not widen a
            z, t = (a, b) if a.ndim == 0 else (b, a)  # dimensioned one of its category
            dtype = t.dtype if _category(z.dtype) <= _category(t.dtype) else z.dtype
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


def _category(d):
    return 2 if d.is_floating_point else (0 if d is dt.bool_ else 1)


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
    nbool = builtins.sum(1 for v in (a, b) if isinstance(v, (bool, np.bool_)) or
                         (isinstance(v, Tensor) and v.dtype is dt.bool_))
    if nbool == 2:
        raise RuntimeError("Subtraction, the `-` operator, with two bool tensors is not "
                           "supported. Use the `^` or `logical_xor()` operator instead.")
    if nbool:
        raise RuntimeError("Subtraction, the `-` operator, with a bool tensor is not "
                           "supported. If you are trying to invert a mask, use the `~` or "
                           "`logical_not()` operator instead.")
    out = tp.sub(a2, b2)
    return mark_weak(out) if weak else out


@op("mul", "MulBackward0")
def mul(a, b):
    return mul_(a, b)


@op("div", "DivBackward0")
def div(a, b, *, rounding_mode=None):
    """a / b; rounding_mode "trunc" or "floor" rounds the quotient, keeps integer dtypes and,
    like PyTorch, has a zero gradient (never NaN, even where b == 0)."""
    if rounding_mode is None:
        return _binary(tp.div, float_result=True)(a, b)
    if rounding_mode not in ("trunc", "floor"):
        raise ValueError(f"div expected rounding_mode to be one of None, 'trunc', or 'floor' "
                         f"but found '{rounding_mode}'")
    a2, b2 = _binary_args(a, b)
    if not a2.dtype.is_floating_point:
        return _int_div(a2, b2, rounding_mode)
    if rounding_mode == "floor":
        return _zero_grad(_floor_div_float(a2.detach(), b2.detach()), a2, b2)
    return _zero_grad(_trunc(tp.div(a2.detach(), b2.detach())), a2, b2)


true_divide = divide = div


def _zero_grad(r, *inputs):
    """r, joined to the graph of `inputs` with a zero gradient (where(True, r, input))."""
    for t in inputs:
        if t.requires_grad:
            r = tp.where(tp.constant(True, dt.bool_, tuple(r.shape)), r, t)
    return r


def _trunc(q):
    return tp.where(tp.lt(q, tp.zeros(tuple(q.shape), q.dtype)), tp.ceil(q), tp.floor(q))


def _floor_div_float(a, b):
    """Python's (and PyTorch's) floor division of floats: floor(a / b), except that a finite
    nonzero a over an infinite b of the other sign is -1 and an infinite a over a finite
    nonzero b is NaN."""
    q = tp.floor(tp.div(a, b))
    fin_a, fin_b = isfinite(a), isfinite(b)
    q = where(logical_and(logical_and(logical_not(fin_a), fin_b), ne(b, 0)), math.nan, q)
    other_sign = logical_and(ne(a, 0), ne(lt(a, 0), lt(b, 0)))
    return where(logical_and(logical_and(isinf(b), fin_a), other_sign), -1.0, q)


def _int_div(a, b, rounding_mode):
    """Integer trunc/floor division (through float64, exact below 2**53)."""
    if isinstance(b._value, np.ndarray) and not b._value.all():
        raise RuntimeError("ZeroDivisionError")
    q = tp.div(cast(a, dt.float64), cast(b, dt.float64))
    return cast(tp.floor(q) if rounding_mode == "floor" else _trunc(q), a.dtype)


@op("floor_divide")
def floor_divide(a, b):
    """Floor division with Python's rounding (-7 // 2 == -4); no gradient (zero)."""
    a2, b2 = _binary_args(a, b)
    if a2.dtype.is_floating_point:
        return _zero_grad(_floor_div_float(a2.detach(), b2.detach()), a2, b2)
    return _int_div(a2, b2, "floor")


def _fmod(a, b):
    """C's fmod, a - trunc(a / b) * b with the quotient held constant (gradients g and
    -trunc(a / b) g, as in PyTorch); fmod(a, +-inf) is a for finite a."""
    m = sub(a, mul(_trunc(tp.div(a.detach(), b.detach())), b))
    return where(logical_and(isinf(b), isfinite(a)), a, m)


@op("remainder")
def remainder(a, b):
    """Python's modulus: the result takes the sign of b (-1 % 3 == 2), computed like
    PyTorch from fmod; gradient g for a and -floor(a / b) g for b."""
    a2, b2 = _binary_args(a, b)
    if not a2.dtype.is_floating_point:
        return sub(a2, mul(floor_divide(a2, b2), b2))
    m = _fmod(a2, b2)
    zero = tp.zeros(tuple(m.shape), m.dtype)
    fix = logical_and(ne(m, zero), ne(lt(b2, zero), lt(m, zero)))
    return where(fix, add(m, b2), m)


@op("pow")
def pow(a, b):
    """a ** b. grad_fn: PowBackward0 (tensor ** number), PowBackward1 (tensor ** tensor),
    PowBackward2 (number ** tensor), as in PyTorch. Integer ** integer stays integer."""
    name = "PowBackward2" if not isinstance(a, Tensor) else \
        ("PowBackward0" if not isinstance(b, Tensor) else "PowBackward1")
    if isinstance(a, Tensor) and isinstance(b, (int, float)) and not isinstance(b, bool):
        if b == 2 and a.dtype is not dt.bool_:
            return _named(tp.mul(a, a), name)
        if b == 0.5 and a.dtype.is_floating_point:
            return _named(tp.sqrt(a), name)
    a2, b2 = _binary_args(a, b)
    if not a2.dtype.is_floating_point:
        if isinstance(b, (int, np.integer)) and not isinstance(b, bool) and b < 0:
            raise RuntimeError("Integers to negative integer powers are not allowed.")
        r = tp.pow(cast(a2, dt.float64), cast(b2, dt.float64))
        return cast(r, dt.int64 if a2.dtype is dt.bool_ else a2.dtype)
    return _named(_binary(tp.pow, float_result=True)(a, b), name)


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
negative, absolute = neg, abs


@op("sign", "SignBackward0")
def sign(x):
    """-1, 0 or 1; 0 for NaN (PyTorch); a bool tensor comes back as it is."""
    if x.dtype is dt.bool_:
        return tp.reshape(x, shape=tuple(x.shape))
    s = tp.sign_nan0(x)
    return mark_weak(s) if is_weak(x) else s


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
    return pow(2.0, x)  # exp(x * log 2) loses ~1e-6 in float32


@op("square")
def square(x):
    return mul(x, x) if x.dtype is not dt.bool_ else mul(cast(x, dt.int64), cast(x, dt.int64))


@op("relu", "ReluBackward0")
def relu(x):
    # PyTorch's rule: 0 where x <= 0, so the gradient at 0 is 0 (max(x, 0) would split it,
    # 0.5) and NaN passes through; the backward needs only the mask, which is 1 byte/element
    zero = tp.zeros(x.shape, x.dtype)
    return tp.where(tp.le(x, zero), zero, x)


def _softplus(z):
    """log(1 + exp(z)) = max(z, 0) + log1p(exp(-|z|)), stable everywhere, written with where
    (not abs/relu) so that the gradient is sigmoid(z) exactly, 0.5 at z == 0 (PyTorch)."""
    pos = gt(z, 0)
    return add(where(pos, z, 0.0), log1p(exp(where(pos, neg(z), z))))


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
    lo = hi = None
    if min is not None:
        lo = cast(as_tensor_like(min, x.dtype), x.dtype)
    if max is not None:
        hi = cast(as_tensor_like(max, x.dtype), x.dtype)
    shape = broadcast_shapes(*[t.shape for t in (x, lo, hi) if t is not None])
    x, lo, hi = (None if t is None else tp.broadcast_to(t, shape) for t in (x, lo, hi))
    out = x  # the value: min(max(x, lo), hi); NaN in x or a bound propagates
    if lo is not None:
        out = where(logical_or(lt(out, lo), ne(lo, lo)), lo, out)
    if hi is not None:
        out = where(logical_or(gt(out, hi), ne(hi, hi)), hi, out)
    if not builtins.any(t.requires_grad for t in (x, lo, hi) if t is not None):
        return out
    # PyTorch's gradients: x's where lo <= x <= hi (none at NaN); lo's where x < lo < hi; hi's
    # where x > hi or hi < lo; nobody's elsewhere (NaN, or lo == hi with x outside)
    pred_x = logical_and(ge(x, lo), le(x, hi)) if lo is not None and hi is not None else \
        (ge(x, lo) if lo is not None else le(x, hi))
    res = out.detach()
    if hi is not None and hi.requires_grad:
        res = where(gt(x, hi) if lo is None else logical_or(gt(x, hi), lt(hi, lo)), hi, res)
    if lo is not None and lo.requires_grad:
        res = where(lt(x, lo) if hi is None else logical_and(lt(x, lo), lt(lo, hi)), lo, res)
    return where(pred_x, x, res)


clip = clamp


@op("where", "WhereBackward0")
def where(cond, a=None, b=None):
    if a is None and b is None:  # where(cond) is nonzero(cond, as_tuple=True)
        from aotgrad.runtime.shape_ops import nonzero
        return nonzero(cond, as_tuple=True)
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
    if not x.dtype.is_floating_point:
        return mul(x, 1) if x.dtype is not dt.bool_ else logical_and(x, True)
    info = np.finfo(x.dtype.np)
    x = where(ne(x, x), nan, x)
    x = where(eq(x, float("inf")), info.max if posinf is None else posinf, x)
    return where(eq(x, float("-inf")), info.min if neginf is None else neginf, x)


def isnan(x):
    return ne(x, x)


def isinf(x):
    if not x.dtype.is_floating_point:
        return tp.constant(False, dt.bool_, tuple(x.shape))
    return eq(abs(x), float("inf"))


def isfinite(x):
    if not x.dtype.is_floating_point:
        return tp.constant(True, dt.bool_, tuple(x.shape))
    return logical_not(logical_or(isnan(x), isinf(x)))


# ---- matmul --------------------------------------------------------------------------------
@op("matmul")
def matmul(a, b):
    """numpy/PyTorch matmul: 1-d vectors, 2-d matrices, broadcast batch dims."""
    out = _matmul(a, b)
    return _named(out, "DotBackward0" if a.ndim == b.ndim == 1 else
                  "MvBackward0" if (a.ndim, b.ndim) == (2, 1) else "MmBackward0")


def _matmul(a, b):
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
    """sqrt(var); its gradient is 0 (not NaN) where std is 0, as in PyTorch."""
    return _sqrt0(var(x, dim, unbiased, keepdim, correction=correction))


def _sqrt0(v):
    """sqrt(v) with gradient 0 where v == 0 (PyTorch's std and 2-norm subgradient)."""
    is0 = eq(v, 0.0)
    return where(is0, 0.0, sqrt(where(is0, 1.0, v)))


def var_mean(x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    return var(x, dim, unbiased, keepdim, correction=correction), mean(x, dim, keepdim)


def std_mean(x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    return std(x, dim, unbiased, keepdim, correction=correction), mean(x, dim, keepdim)


@op("norm", "NormBackward1")
def norm(x, p="fro", dim=None, keepdim=False):
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


@op("softmax", "SoftmaxBackward0")
def softmax(x, dim, dtype=None):
    if dtype is not None:
        x = cast(x, dt.as_dtype(dtype))
    d = norm_dims(dim, x.ndim)
    if x.numel() == 0:
        return mul(x, 1.0)
    m = amax(x, d, keepdim=True).detach()
    e = exp(sub(x, m))
    return div(e, sum(e, d, keepdim=True))


@op("log_softmax", "LogSoftmaxBackward0")
def log_softmax(x, dim, dtype=None):
    """(x - max) - log(sum(exp(x - max))), PyTorch's formula: a +inf in a row gives NaN."""
    if dtype is not None:
        x = cast(x, dt.as_dtype(dtype))
    if not x.dtype.is_floating_point:
        x = cast(x, dt.float32)
    d = norm_dims(dim, x.ndim)
    if x.numel() == 0:
        return mul(x, 1.0)
    shifted = sub(x, amax(x, d, keepdim=True).detach())
    return sub(shifted, log(sum(exp(shifted), d, keepdim=True)))


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


# late imports used above (shape ops live in shape_ops.py)
from aotgrad.runtime.shape_ops import squeeze, take_along_dim  # noqa: E402
