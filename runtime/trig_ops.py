"""Hyperbolic and inverse trigonometric functions (sinh, cosh, asinh, acosh, atanh, asin,
acos, atan) and their numpy-style aliases (arcsin, ...). Integer inputs give float32.

>>> import aotgrad
>>> from aotgrad.runtime import trig_ops
>>> round(trig_ops.asin(aotgrad.tensor(1.)).item(), 6)
1.570796
"""
from aotgrad.ir import dtypes as dt
from aotgrad.runtime import tprims as tp
from aotgrad.runtime.elementwise_ops import _unary, atan2
from aotgrad.runtime.op_base import cast, is_weak, mark_weak, op

sinh = _unary(tp.sinh, "sinh", "SinhBackward0")
cosh = _unary(tp.cosh, "cosh", "CoshBackward0")
asinh = _unary(tp.asinh, "asinh", "AsinhBackward0")
acosh = _unary(tp.acosh, "acosh", "AcoshBackward0")
atanh = _unary(tp.atanh, "atanh", "AtanhBackward0")
asin = _unary(tp.asin, "asin", "AsinBackward0")
acos = _unary(tp.acos, "acos", "AcosBackward0")


@op("atan", "AtanBackward0")
def atan(x):
    """atan2(x, 1): the same value as atan, and atan2's gradient there is 1 / (1 + x^2)."""
    if not x.dtype.is_floating_point:
        x = cast(x, dt.float32)
    out = tp.atan2(x, tp.broadcast_to(tp.constant(1, x.dtype), tuple(x.shape)))
    return mark_weak(out) if is_weak(x) else out


arcsin, arccos, arctan, arcsinh, arccosh, arctanh = asin, acos, atan, asinh, acosh, atanh
arctan2 = atan2
