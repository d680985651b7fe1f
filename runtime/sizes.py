"""Sizes as an error message shows them: a symbolic size (a SymInt of a program traced with
dynamic sizes) shows its hint, its value in the call being traced, so that a message raised
while tracing names the sizes eager names for the same call. The IR printer keeps the
symbols (ir/text.py); this is the one formatter for user-facing messages.

>>> import aotgrad
>>> type_str(aotgrad.zeros(5, 3)), size_list((5, 3))
('f32[5,3]', [5, 3])
"""
from aotgrad.ir.symbolic import hint, hints

__all__ = ["hint", "hints", "size_list", "type_str"]


def size_list(shape):
    """`[5, 3]` for a message: the list of a shape's sizes in the call being traced."""
    return list(hints(shape))


def type_str(a):
    """`f32[5,3]`, for an error message: a symbolic size shows its hint."""
    return f"{a.dtype.short}[{','.join(map(str, hints(a.shape)))}]"


# PyTorch's ScalarType names, which its error messages use ("Got Double and Float")
_SCALAR_TYPE_NAMES = {"float64": "Double", "float32": "Float", "float16": "Half",
                      "bfloat16": "BFloat16", "int64": "Long", "int32": "Int", "int16": "Short",
                      "int8": "Char", "uint8": "Byte", "bool": "Bool",
                      "complex64": "ComplexFloat", "complex128": "ComplexDouble"}


def scalar_type_name(dtype):
    """PyTorch's name of `dtype` in error messages (`Double` for float64)."""
    return _SCALAR_TYPE_NAMES.get(dtype.name, dtype.name)
