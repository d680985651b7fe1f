"""More elementwise ops, each a decomposition into existing ops (so each compiles and takes
its gradient from the ops it is made of): trunc/fix, frac, sgn, signbit, copysign, hypot,
heaviside, fmod, float_power, deg2rad, rad2deg, positive, fmax, fmin,
isneginf, isposinf, isreal, ldexp, frexp, conj, real,
imag and angle for real tensors.

>>> import aotgrad
>>> from aotgrad.runtime import elementwise_more_ops as em
>>> em.trunc(aotgrad.tensor([-1.5, 2.7])).tolist()
[-1.0, 2.0]
"""
import math

from aotgrad.ir import dtypes as dt
from aotgrad.runtime import elementwise_ops as ew
from aotgrad.runtime import tprims as tp
from aotgrad.runtime.composite import with_rule
from aotgrad.runtime.op_base import _binary_args, as_tensor_like, cast, op
from aotgrad.runtime.tensor import Tensor


def _float(x):
    return x if x.dtype.is_floating_point else cast(x, dt.float32)


@op("trunc", "TruncBackward0")
def trunc(x):
    """Round towards zero; integer tensors come back as a copy. Zero gradient (PyTorch)."""
    if not x.dtype.is_floating_point:
        return ew.mul(x, 1) if x.dtype is not dt.bool_ else tp.reshape(x, shape=tuple(x.shape))
    return tp.where(tp.lt(x, tp.zeros(tuple(x.shape), x.dtype)), tp.ceil(x), tp.floor(x))


fix = trunc


@op("frac", "FracBackward0")
def frac(x):
    """x - trunc(x) (sign of x kept); gradient 1."""
    if not x.dtype.is_floating_point:
        raise RuntimeError(f"frac: expected a floating point tensor, got {x.dtype.name}")
    return ew.sub(x, trunc(x).detach())


@op("sgn", "SgnBackward0")
def sgn(x):
    """sign(x) for real tensors."""
    return ew.sign(x)


@op("signbit")
def signbit(x):
    """True where the sign bit is set: x < 0, and -0.0 (NaN counts as positive here)."""
    if x.dtype is dt.bool_:
        return tp.zeros(tuple(x.shape), dt.bool_)
    neg = ew.lt(x, 0)
    if not x.dtype.is_floating_point:
        return neg
    x = x.detach()
    neg_zero = ew.logical_and(ew.eq(x, 0), ew.lt(tp.reciprocal(x), 0))
    return ew.logical_or(neg, neg_zero)


@op("copysign", "CopysignBackward0")
def copysign(a, b):
    """|a| with the sign of b (-0.0 counts as negative); floats. Gradient to a only."""
    a, b = _binary_args(a, b, float_result=True)
    mag = ew.abs(a)
    return ew.where(signbit(b), ew.neg(mag), mag)


def _hypot_rule(ctx, g):
    """PyTorch's: g * a / hypot(a, b) and g * b / hypot(a, b) (NaN at (0, 0))."""
    a, b, out, need = ctx.args["a"], ctx.args["b"], ctx.result, ctx.needs_input_grad
    return [ew.div(ew.mul(g, a), out) if need[0] else None,
            ew.div(ew.mul(g, b), out) if len(need) > 1 and need[1] else None]


@op("hypot", "HypotBackward0")
def hypot(a, b):
    """sqrt(a^2 + b^2) without overflow or underflow of the squares (C's hypot, as PyTorch):
    max * sqrt(1 + (min / max)^2); an infinite input gives inf, even with a NaN."""
    return _hypot(a, b)


@with_rule("HypotBackward0", ("a", "b"), _hypot_rule)
def _hypot(a, b):
    a, b = _binary_args(a, b, float_result=True)
    x, y = ew.abs(a), ew.abs(b)
    big, small = ew.maximum(x, y), ew.minimum(x, y)
    r = ew.div(small, ew.where(ew.eq(big, 0), 1.0, big))
    h = ew.mul(big, ew.sqrt(ew.add(ew.mul(r, r), 1.0)))
    return ew.where(ew.logical_or(ew.isinf(x), ew.isinf(y)), math.inf, h)


@op("heaviside")
def heaviside(input, values):
    """0 where input < 0, values where input == 0, 1 where input > 0 (no gradient, and both
    need one dtype, as in PyTorch)."""
    values = as_tensor_like(values, input.dtype)
    if input.dtype is not values.dtype:
        raise RuntimeError(f"heaviside is not yet implemented for tensors with different "
                           f"dtypes ({input.dtype.name} and {values.dtype.name})")
    x, v = _binary_args(input.detach(), values.detach())
    step = cast(ew.gt(x, 0), x.dtype)
    return ew.where(ew.eq(x, 0), v, step)


@op("fmod", "FmodBackward0")
def fmod(a, b):
    """C's fmod: the remainder takes the sign of a (fmod(-7, 2) == -1)."""
    a2, b2 = _binary_args(a, b)
    if not a2.dtype.is_floating_point:
        return ew.sub(a2, ew.mul(ew.div(a2, b2, rounding_mode="trunc"), b2))
    return ew._fmod(a2, b2)


@op("float_power", "PowBackward1")
def float_power(a, b):
    """a ** b computed in float64."""
    a = cast(a, dt.float64) if isinstance(a, Tensor) else float(a)
    b = cast(b, dt.float64) if isinstance(b, Tensor) else float(b)
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        raise TypeError("float_power: at least one argument must be a Tensor")
    if not isinstance(a, Tensor):
        a = tp.constant(a, dt.float64)
    return ew.pow(a, b)


@op("deg2rad")
def deg2rad(x):
    return ew.mul(_float(x), math.pi / 180)


@op("rad2deg")
def rad2deg(x):
    return ew.mul(_float(x), 180 / math.pi)


def positive(x):
    """x itself (PyTorch refuses bool tensors)."""
    if x.dtype is dt.bool_:
        raise RuntimeError("The `+` operator, on a bool tensor is not supported.")
    return x


@op("fmax", "FmaxBackward0")
def fmax(a, b):
    """Elementwise maximum that ignores a NaN when the other value is a number; ties give
    the gradient to a (as PyTorch's fmax)."""
    a, b = _binary_args(a, b)
    if not a.dtype.is_floating_point:
        return ew.maximum(a, b)
    return ew.where(ew.logical_or(ew.ge(a, b), ew.isnan(b)), a, b)


@op("fmin", "FminBackward0")
def fmin(a, b):
    a, b = _binary_args(a, b)
    if not a.dtype.is_floating_point:
        return ew.minimum(a, b)
    return ew.where(ew.logical_or(ew.le(a, b), ew.isnan(b)), a, b)


@op("isneginf")
def isneginf(x):
    if not x.dtype.is_floating_point:
        return tp.zeros(tuple(x.shape), dt.bool_)
    return ew.eq(x, -math.inf)


@op("isposinf")
def isposinf(x):
    if not x.dtype.is_floating_point:
        return tp.zeros(tuple(x.shape), dt.bool_)
    return ew.eq(x, math.inf)


@op("isreal")
def isreal(x):
    """True everywhere: aotgrad tensors are real."""
    return tp.constant(True, dt.bool_, tuple(x.shape))


@op("ldexp")
def ldexp(input, other):
    """input * 2 ** other (float result)."""
    a, e = _binary_args(input, other, float_result=True)
    return ew.mul(a, ew.pow(2.0, e))


@op("frexp")
def frexp(input):
    """(mantissa, exponent) with input == mantissa * 2 ** exponent, 0.5 <= |mantissa| < 1
    (0, inf and NaN give (input, 0)); exponent is int32. Computed in float64."""
    if not input.dtype.is_floating_point:
        raise RuntimeError(f"torch.frexp() only supports floating-point dtypes, got "
                           f"{input.dtype.name}")
    x = cast(input.detach(), dt.float64)
    special = ew.logical_or(ew.eq(x, 0), ew.logical_not(ew.isfinite(x)))
    safe = ew.where(special, 1.0, ew.abs(x))
    e = ew.add(ew.floor(ew.log2(safe)), 1.0)
    m = ew.div(safe, ew.pow(2.0, e))
    # log2 may be off by one next to powers of two: move m into [0.5, 1)
    e = ew.where(ew.ge(m, 1.0), ew.add(e, 1.0), ew.where(ew.lt(m, 0.5), ew.sub(e, 1.0), e))
    m = ew.div(safe, ew.pow(2.0, e))
    mant = ew.where(special, x, ew.where(ew.lt(x, 0), ew.neg(m), m))
    expo = ew.where(special, 0.0, e)
    return _Frexp(cast(mant, input.dtype), cast(expo, dt.int32))


class _Frexp(tuple):
    """(mantissa, exponent), like torch.return_types.frexp."""
    __slots__ = ()

    def __new__(cls, mantissa, exponent):
        return tuple.__new__(cls, (mantissa, exponent))

    mantissa = property(lambda self: self[0])
    exponent = property(lambda self: self[1])


@op("angle", "AngleBackward0")
def angle(x):
    """pi for negative numbers, 0 otherwise, NaN for NaN (real tensors); zero gradient."""
    x = _float(x)
    z = ew.where(ew.lt(x.detach(), 0), math.pi, 0.0)
    z = cast(z, x.dtype)
    z = ew.where(ew.isnan(x.detach()), x.detach(), z)
    return ew._zero_grad(z, x)


def conj(x):
    """x itself (real tensors)."""
    return x


def real(x):
    """x itself (real tensors)."""
    return x


def imag(x):
    raise RuntimeError("imag is not implemented for tensors with non-complex dtypes.")


METHOD_NAMES = ("trunc fix frac sgn signbit copysign hypot heaviside fmod float_power deg2rad "
                "rad2deg positive fmax fmin isneginf isposinf isreal "
                "ldexp frexp angle conj").split()
INPLACE_NAMES = ("trunc fix frac sgn copysign hypot heaviside fmod deg2rad rad2deg "
                 "ldexp").split()
