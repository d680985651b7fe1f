"""Elementwise ops: binary ops with broadcasting and PyTorch's type promotion (arithmetic,
comparisons, logical ops, where) and unary ops (exp, log, trigonometric, rounding, clamp...).

>>> import aotgrad
>>> from aotgrad.runtime import elementwise_ops as ew
>>> ew.add(aotgrad.tensor([1., 2.]), 1).tolist()
[2.0, 3.0]
"""
import builtins
import math

import numpy as np

from aotgrad.ir import dtypes as dt
from aotgrad.runtime.value_checks import checked
from aotgrad.runtime import eager_kernels
from aotgrad.runtime import tprims as tp
from aotgrad.runtime.dispatch import drop_scalar_edges
from aotgrad.runtime.op_base import (_binary, _binary_args, _named, _weak_or_scalar,
                                     as_tensor_like, broadcast_shapes, cast, is_weak, mark_weak,
                                     op, scalar_dtype)
from aotgrad.runtime.tensor import Tensor
from aotgrad.runtime.composite import composite, with_rule
from aotgrad.runtime.saved_hooks import mark_number_operand
from aotgrad.runtime.sizes import scalar_type_name


# ---- binary --------------------------------------------------------------------------------
add_ = _binary(tp.add)
mul_ = _binary(tp.mul)


def _times_alpha(b, alpha):
    """`alpha * b` for add/sub (Python numbers multiply as numbers: `x.add(1.0, alpha=2)`)."""
    if not isinstance(b, Tensor) and not isinstance(alpha, Tensor):
        return b * alpha
    return mul(b, alpha)


@op("add", "AddBackward0")
def add(a, b, *, alpha=1):
    if isinstance(alpha, Tensor) or alpha != 1:
        b = _times_alpha(b, alpha)
    return add_(a, b)


@op("sub", "SubBackward0")
def sub(a, b, *, alpha=1):
    if isinstance(alpha, Tensor) or alpha != 1:
        b = _times_alpha(b, alpha)
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


@op("rsub")
def rsub(a, b, *, alpha=1):
    """b - alpha * a (the reflected `b - a` of `Tensor.__rsub__`). grad_fn: RsubBackward1
    with the one edge of `a` when b is a Python number, RsubBackward0 when b is a tensor."""
    out = sub(b, a, alpha=alpha)
    if isinstance(b, Tensor):
        return _named(out, "RsubBackward0")
    if alpha != 1 or isinstance(alpha, Tensor):
        return _named(out, "RsubBackward1")
    return drop_scalar_edges(out, (1,), "RsubBackward1")


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
    """Python's (and PyTorch's) floor division of floats, from the exact fmod so that a
    quotient that rounds across an integer is not floored to the wrong side: (a - fmod(a, b))
    / b, minus 1 where the remainder's sign differs from b's, rounded to the nearest integer;
    a zero quotient keeps the sign of a / b, and b == 0 gives a / b (inf or NaN)."""
    q = tp.div(a, b)
    mod = tp.fmod(a, b)
    div = tp.div(tp.sub(a, mod), b)
    div = where(logical_and(ne(mod, 0), ne(lt(b, 0), lt(mod, 0))), sub(div, 1.0), div)
    fl = tp.floor(div)
    fl = where(gt(sub(div, fl), 0.5), add(fl, 1.0), fl)
    fl = where(eq(div, 0), mul(q, 0.0), fl)   # 0 * q: a zero with the sign of a / b
    return where(eq(b, 0), q, fl)


def _int_div(a, b, rounding_mode):
    """Integer trunc/floor division (through float64, exact below 2**53)."""
    b = checked(b, RuntimeError,   # eagerly, and at run time when compiled
                "ZeroDivisionError (integer division of {type0} by {type1} with a zero "
                "divisor)", nonzero=True, shown=(a, b))
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
    """C's fmod (exact); the result has a's sign, a zero too (fmod(-2., 1.) is -0.);
    gradients g and -trunc(a / b) g, as in PyTorch."""
    return tp.fmod(a, b)


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
    if isinstance(a, Tensor) and isinstance(b, (int, float)) and not isinstance(b, bool) and \
            a.dtype.is_floating_point:
        return _pow_number(a, b)
    a2, b2 = _binary_args(a, b)
    if not a2.dtype.is_floating_point:
        if isinstance(b, (int, np.integer)) and not isinstance(b, bool) and b < 0:
            raise RuntimeError("Integers to negative integer powers are not allowed.")
        r = tp.pow(cast(a2, dt.float64), cast(b2, dt.float64))
        return cast(r, dt.int64 if a2.dtype is dt.bool_ else a2.dtype)
    return _named(_binary(tp.pow, float_result=True)(a, b), name)


def _pow_number_rule(ctx, g):
    """PyTorch's pow_backward for a number exponent b: zeros for b == 0, else
    g * (b * a^(b - 1)) written with the user-level ops, so that a double backward saves what
    PyTorch's saves (a for the power, g for the product; b stays a number that saved-tensor
    hooks never see)."""
    a, b = ctx.args["a"], ctx.args["b"]
    if b == 0:
        return (tp.zeros(tuple(a.shape), a.dtype),)
    if b == 2:  # a^1 is a: the same values and gradients
        return (mul(g, mul(a, b)),)
    if b == 0.5:  # rsqrt, as sqrt's rule: compiled and eager agree bit for bit (a saved-tensor
        # hook around a double backward sees rsqrt's result where PyTorch's sees a)
        return (mul(g, mul(tp.rsqrt(a), b)),)
    # b - 1 is computed in the program, so compiled code raises a to it with the general
    # power, bit for bit as eagerly (a special-cased constant exponent rounds differently);
    # it stands for a number: saved-tensor hooks do not see it
    exponent = mark_number_operand(tp.sub(_bc_const(b, a), _bc_const(1, a)))
    return (mul(g, mul(tp.pow(a, exponent), b)),)


def _bc_const(v, like):
    return tp.broadcast_to(tp.constant(v, like.dtype), tuple(like.shape))


@with_rule("PowBackward0", ("a",), _pow_number_rule, save=("a",),
           saved_names={"exponent": "b"})
def _pow_number(a, b):
    """a ** b for a Python number b: one PowBackward0 node saving `a` only (a ** 2 as a * a,
    a ** 0.5 as sqrt(a))."""
    if b == 2:
        return tp.mul(a, a)
    if b == 0.5:
        return tp.sqrt(a)
    return tp.pow(a, _bc_const(b, a))


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


def _relu_rule(g, y):
    """relu's gradient from its output, as ops (the kernel node's rule under create_graph)."""
    return (where(le(y, 0), tp.zeros(g.shape, g.dtype), g),)


_RELU_KERNEL = eager_kernels.Kernel("ReluBackward0", eager_kernels.relu_forward,
                                    eager_kernels.relu_backward, output_rule=_relu_rule)


@op("relu", "ReluBackward0")
@composite("ReluBackward0", ("x",))
def relu(x):
    # PyTorch's rule: the gradient is 0 where x <= 0 (max(x, 0) would split it at 0, 0.5)
    # and NaN passes through; the backward needs only the mask, which is 1 byte/element
    out = eager_kernels.run(_RELU_KERNEL, (x,), _relu_prims)
    return out if out is not None else _relu_prims(x)


def _relu_prims(x):
    """relu as prims (the reference of the eager kernel, and what a trace records): 0 where
    x < 0, x's own zero where x is +-0.0 (relu(-0.0) is -0.0, like PyTorch) and x elsewhere
    (NaN passes). The gradient is PyTorch's through where's rule and one mask: 0 where
    x <= 0, g where x > 0 or NaN (the value taken where x <= 0 carries no gradient)."""
    zero = tp.zeros(x.shape, x.dtype)
    if not x.dtype.is_floating_point:
        return tp.where(tp.lt(x, zero), zero, x)
    at_most_zero = tp.where(tp.lt(x, zero), zero, x.detach())   # (no gradient, no tangent)
    return tp.where(tp.le(x, zero), at_most_zero, x)


def _softplus(z):
    """log(1 + exp(z)) = max(z, 0) + log1p(exp(-|z|)), stable everywhere, written with where
    (not abs/relu) so that the gradient is sigmoid(z) exactly, 0.5 at z == 0 (PyTorch)."""
    pos = gt(z, 0)
    return add(where(pos, z, 0.0), log1p(exp(where(pos, neg(z), z))))


@op("round")
def round(x, *, decimals=0):
    """Round half to even, like PyTorch; with `decimals`, to that many decimal digits (left
    of the point where negative), computed as PyTorch does in x's dtype: round(x * 10^d) /
    10^d, or round(x / 10^-d) * 10^-d. Zero gradient."""
    if not x.dtype.is_floating_point:
        if decimals != 0:
            raise NotImplementedError(f'"round_cpu" not implemented for '
                                      f"'{scalar_type_name(x.dtype)}'")
        return x
    return _round_digits(x, decimals) if decimals else _round(x)


@composite("RoundBackward0", ("x",))
def _round(x):
    return _round_half_even(x)


@composite("RoundBackward1", ("x",))
def _round_digits(x, decimals):
    scale = float(10 ** builtins.abs(int(decimals)))
    if decimals > 0:
        return div(_round_half_even(mul(x, scale)), scale)
    return mul(_round_half_even(div(x, scale)), scale)


def _round_half_even(x):
    f = tp.floor(x)
    diff = sub(x, f)
    half = tp.broadcast_to(tp.constant(0.5, x.dtype), x.shape)
    up = add(f, 1.0)
    f_even = eq(remainder(f, 2.0), 0.0)
    r = where(gt(diff, half), up, where(lt(diff, half), f, where(f_even, f, up)))
    # a zero result has x's sign (round(-0.4) is -0.0, C's nearbyint): picked, not computed
    # from x, so the gradient stays 0
    x_zero = where(lt(tp.reciprocal(x), 0.0), -0.0, 0.0)
    return where(eq(r, 0.0), x_zero, r)


@op("clamp")
def clamp(x, min=None, max=None):
    if min is None and max is None:
        raise RuntimeError("clamp: At least one of 'min' or 'max' must not be None")
    if isinstance(min, Tensor) or isinstance(max, Tensor):
        return _clamp_tensors(x, min, max)
    return _clamp_numbers(x, min, max)


def _clamp_grads(x, min, max, g, need_lo, need_hi):
    """PyTorch's gradients: x's where lo <= x <= hi (none at NaN); a tensor lo's where
    x < lo < hi; a tensor hi's where x > hi or hi < lo; nobody's elsewhere (NaN, or
    lo == hi with x outside)."""
    x, lo, hi = _clamp_operands(x, min, max)
    zero = tp.zeros(tuple(g.shape), g.dtype)
    pred_x = logical_and(ge(x, lo), le(x, hi)) if lo is not None and hi is not None else \
        (ge(x, lo) if lo is not None else le(x, hi))
    g_lo = None if not need_lo else where(
        lt(x, lo) if hi is None else logical_and(lt(x, lo), lt(lo, hi)), g, zero)
    g_hi = None if not need_hi else where(
        gt(x, hi) if lo is None else logical_or(gt(x, hi), lt(hi, lo)), g, zero)
    return where(pred_x, g, zero), g_lo, g_hi


def _clamp_rule(ctx, g):
    """clamp's rule: edges (x,) for number bounds, (x, min, max) for tensor ones."""
    a, need = ctx.args, ctx.needs_input_grad
    gx, g_lo, g_hi = _clamp_grads(a["x"], a["min"], a["max"], g,
                                  len(need) > 1 and need[1], len(need) > 1 and need[2])
    return [gx] if len(need) == 1 else [gx, g_lo, g_hi]


def _clamp_min_rule(ctx, g):
    a, need = ctx.args, ctx.needs_input_grad
    gx, g_lo, _ = _clamp_grads(a["x"], a["min"], None, g, len(need) > 1 and need[1], False)
    return [gx] if len(need) == 1 else [gx, g_lo]


def _clamp_max_rule(ctx, g):
    a, need = ctx.args, ctx.needs_input_grad
    gx, _, g_hi = _clamp_grads(a["x"], None, a["max"], g, False, len(need) > 1 and need[1])
    return [gx] if len(need) == 1 else [gx, g_hi]


def _clamp_operands(x, min, max):
    """x and the bounds in the promoted dtype (a float bound promotes an integer tensor, like
    PyTorch), broadcast to one shape; an absent bound is None."""
    dtype = x.dtype
    for bound in (min, max):
        if bound is not None:
            dtype = dt.promote(dtype, bound.dtype if isinstance(bound, Tensor) else
                               scalar_dtype(bound, dtype))
    x = cast(x, dtype)
    lo = None if min is None else cast(as_tensor_like(min, x.dtype), x.dtype)
    hi = None if max is None else cast(as_tensor_like(max, x.dtype), x.dtype)
    shape = broadcast_shapes(*[t.shape for t in (x, lo, hi) if t is not None])
    return (None if t is None else tp.broadcast_to(t, shape) for t in (x, lo, hi))


def _clamp_value(x, min, max):
    x, lo, hi = _clamp_operands(x, min, max)
    out = x  # min(max(x, lo), hi); NaN in x or a bound propagates
    if lo is not None:
        out = where(logical_or(lt(out, lo), ne(lo, lo)), lo, out)
    if hi is not None:
        out = where(logical_or(gt(out, hi), ne(hi, hi)), hi, out)
    return out


@with_rule("ClampBackward0", ("x", "min", "max"), _clamp_rule)
def _clamp_tensors(x, min, max):
    return _clamp_value(x, min, max)


@with_rule("ClampBackward1", ("x",), _clamp_rule)
def _clamp_numbers(x, min, max):
    return _clamp_value(x, min, max)


@op("clamp_min")
def clamp_min(x, min):
    """max(x, min), as clamp(x, min=min) but its own node (ClampMinBackward0/1)."""
    return (_clamp_min_tensor if isinstance(min, Tensor) else _clamp_min_number)(x, min)


@op("clamp_max")
def clamp_max(x, max):
    """min(x, max), as clamp(x, max=max) but its own node (ClampMaxBackward0/1)."""
    return (_clamp_max_tensor if isinstance(max, Tensor) else _clamp_max_number)(x, max)


@with_rule("ClampMinBackward0", ("x",), _clamp_min_rule)
def _clamp_min_number(x, min):
    return _clamp_value(x, min, None)


@with_rule("ClampMinBackward1", ("x", "min"), _clamp_min_rule)
def _clamp_min_tensor(x, min):
    return _clamp_value(x, min, None)


@with_rule("ClampMaxBackward0", ("x",), _clamp_max_rule)
def _clamp_max_number(x, max):
    return _clamp_value(x, None, max)


@with_rule("ClampMaxBackward1", ("x", "max"), _clamp_max_rule)
def _clamp_max_tensor(x, max):
    return _clamp_value(x, None, max)


clip = clamp


# nonzero and argwhere (index ops whose result shape depends on the data: a graph break
# while tracing) live here because where(cond) is nonzero; index_ops re-exports them
def nonzero(x, *, as_tuple=False):
    """Indices of the non-zero elements: an (n, ndim) int64 tensor, or one 1-D tensor per dim."""
    v = x._concrete("nonzero (data-dependent shape)")
    nz = np.nonzero(np.atleast_1d(v))
    if as_tuple:
        return tuple(as_tensor_like(i.astype(np.int64)) for i in nz)
    return as_tensor_like(np.stack(nz, axis=1).astype(np.int64).reshape(-1, builtins.max(
        v.ndim, 1)) if v.ndim else np.zeros((int(bool(v)), 0), dtype=np.int64))


def argwhere(x):
    return nonzero(x)


@op("where", "WhereBackward0")
def where(cond, a=None, b=None):
    if a is None and b is None:  # where(cond) is nonzero(cond, as_tuple=True)
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
