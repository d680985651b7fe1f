"""Bitwise ops on integer and bool tensors, with PyTorch's type promotion: bitwise_and/or/xor/
not and the shifts (`&`, `|`, `^`, `~`, `<<`, `>>` on Tensor). Bool tensors take the logical
prims; integer tensors the bitwise prims. Floating-point inputs raise, as in PyTorch.

>>> import aotgrad
>>> (aotgrad.tensor([12, -3]) & 10).tolist(), (aotgrad.tensor([1, -8]) >> 2).tolist()
([8, 8], [0, -2])
"""
from aotgrad.ir import dtypes as dt
from aotgrad.runtime import elementwise_ops as ew
from aotgrad.runtime import tprims as tp
from aotgrad.runtime.op_base import _binary_args, _weak_or_scalar, cast, mark_weak, op
from aotgrad.runtime.tensor import Tensor


def _no_float(name, *ts):
    for t in ts:
        if isinstance(t, Tensor) and t.dtype.is_floating_point:
            raise TypeError(f"{name}: not implemented for {t.dtype.name} tensors (integer "
                            f"and bool only)")
        if isinstance(t, float):
            raise TypeError(f"{name}: not implemented for a float scalar ({t!r})")


def _binary(name, int_prim, bool_fn):
    @op(name)
    def fn(input, other):
        _no_float(name, input, other)
        weak = _weak_or_scalar(input) and _weak_or_scalar(other)
        a, b = _binary_args(input, other)
        out = bool_fn(a, b) if a.dtype is dt.bool_ else int_prim(a, b)
        return mark_weak(out) if weak else out
    fn.__name__ = fn.__qualname__ = name
    return fn


bitwise_and = _binary("bitwise_and", tp.bitwise_and, tp.logical_and)
bitwise_or = _binary("bitwise_or", tp.bitwise_or, tp.logical_or)
bitwise_xor = _binary("bitwise_xor", tp.bitwise_xor, ew.logical_xor)


def _bool_shift(name):
    def fn(a, b):  # two bool tensors: PyTorch shifts them as integers
        return _shift_ints(name, cast(a, dt.int64), cast(b, dt.int64))
    return fn


def _shift_ints(name, a, b):
    prim = tp.shift_left if name == "bitwise_left_shift" else tp.shift_right
    return prim(a, b)


bitwise_left_shift = _binary("bitwise_left_shift", tp.shift_left,
                             _bool_shift("bitwise_left_shift"))
bitwise_right_shift = _binary("bitwise_right_shift", tp.shift_right,
                              _bool_shift("bitwise_right_shift"))


@op("bitwise_not")
def bitwise_not(input):
    """~x: logical not for bool, the two's complement inversion for integers."""
    _no_float("bitwise_not", input)
    if input.dtype is dt.bool_:
        return ew.logical_not(input)
    return tp.bitwise_not(input)


def _r(fn):
    return lambda self, other: fn(other, self)


# Tensor methods and operators (methods.py installs them; in-place variants too)
METHODS = {
    "bitwise_and": bitwise_and, "bitwise_or": bitwise_or, "bitwise_xor": bitwise_xor,
    "bitwise_not": bitwise_not, "bitwise_left_shift": bitwise_left_shift,
    "bitwise_right_shift": bitwise_right_shift,
    "__and__": bitwise_and, "__or__": bitwise_or, "__xor__": bitwise_xor,
    "__rand__": _r(bitwise_and), "__ror__": _r(bitwise_or), "__rxor__": _r(bitwise_xor),
    "__invert__": bitwise_not, "__lshift__": bitwise_left_shift,
    "__rshift__": bitwise_right_shift, "__rlshift__": _r(bitwise_left_shift),
    "__rrshift__": _r(bitwise_right_shift),
}
INPLACE = {"bitwise_and_": "bitwise_and", "bitwise_or_": "bitwise_or",
           "bitwise_xor_": "bitwise_xor", "bitwise_not_": "bitwise_not",
           "bitwise_left_shift_": "bitwise_left_shift",
           "bitwise_right_shift_": "bitwise_right_shift",
           "__iand__": "bitwise_and", "__ior__": "bitwise_or", "__ixor__": "bitwise_xor",
           "__ilshift__": "bitwise_left_shift", "__irshift__": "bitwise_right_shift"}
