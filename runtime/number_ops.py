"""Number-theoretic and float-stepping ops: gcd, lcm (integer tensors) and nextafter
(floating-point tensors), with PyTorch's type promotion. None has a derivative.

>>> import aotgrad
>>> aotgrad.gcd(aotgrad.tensor([12, -18, 0]), aotgrad.tensor([8, 12, 0])).tolist()
[4, 6, 0]
"""
from aotgrad.ir import dtypes as dt
from aotgrad.runtime import elementwise_ops as ew
from aotgrad.runtime import tprims as tp
from aotgrad.runtime.op_base import _binary_args, cast, op


def _need(name, ok, what, *ts):
    for t in ts:
        if not ok(t.dtype):
            raise RuntimeError(f"{name}: not implemented for {t.dtype.name} tensors ({what} "
                               f"only)")


@op("gcd")
def gcd(input, other):
    """Greatest common divisor, non-negative; gcd(0, 0) = 0."""
    a, b = _binary_args(input, other)
    _need("gcd", dt.is_integral, "integer", a, b)
    return tp.gcd(a, b)


@op("lcm")
def lcm(input, other):
    """Least common multiple, non-negative; 0 where either input is 0."""
    a, b = _binary_args(input, other)
    _need("lcm", dt.is_integral, "integer", a, b)
    out = a.dtype
    if out.itemsize < 4:
        # C's integer promotion: int8/int16/uint8 multiply in int, abs, then narrow
        a, b = cast(a, dt.int64), cast(b, dt.int64)
    g = tp.gcd(a, b)
    zero = ew.eq(g, 0)
    safe = ew.where(zero, 1, g)  # a // g is exact: g divides a
    return cast(ew.where(zero, 0, ew.abs(ew.mul(ew.floor_divide(a, safe), b))), out)


@op("nextafter")
def nextafter(input, other):
    """The next floating-point value after input towards other."""
    a, b = _binary_args(input, other)
    _need("nextafter", lambda d: d.is_floating_point, "floating-point", a, b)
    return tp.nextafter(a, b)


METHODS = {"gcd": gcd, "lcm": lcm, "nextafter": nextafter}
