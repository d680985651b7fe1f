"""Element types of IR values and tensors: a thin, printable wrapper over numpy dtypes."""
import ml_dtypes
import numpy as np


class DType:
    """An element type. `aotgrad.float32` prints as `aotgrad.float32`, has `.np` (the numpy
    dtype), `.short` (the IR annotation, `f32`) and `.is_floating_point`."""
    __slots__ = ("name", "np", "short", "is_floating_point", "itemsize")

    def __init__(self, name, np_dtype, short, floating=None):
        self.name, self.np, self.short = name, np.dtype(np_dtype), short
        # bfloat16 is a numpy extension type (kind 'V'): it says it is a float itself
        self.is_floating_point = self.np.kind == "f" if floating is None else floating
        self.itemsize = self.np.itemsize

    def __repr__(self):
        return f"aotgrad.{self.name}"

    def __reduce__(self):
        return (from_numpy, (self.np,))


float32 = DType("float32", np.float32, "f32")
float64 = DType("float64", np.float64, "f64")
int8 = DType("int8", np.int8, "i8")
int16 = DType("int16", np.int16, "i16")
uint8 = DType("uint8", np.uint8, "u8")
int32 = DType("int32", np.int32, "i32")
int64 = DType("int64", np.int64, "i64")
bool_ = DType("bool", np.bool_, "b1")
# 16-bit floats (bfloat16 is ml_dtypes' numpy type). Eagerly, ops compute in float32 and
# round their result, and reductions accumulate in float32, as PyTorch's CPU kernels do;
# compiled kernels hold them in float32, rounded to the 16-bit dtype wherever eager stores a
# 16-bit value (codegen/low_precision.py).
float16 = DType("float16", np.float16, "f16")
bfloat16 = DType("bfloat16", ml_dtypes.bfloat16, "bf16", floating=True)
LOW_PRECISION = frozenset((float16, bfloat16))
ALL = (float32, float64, int32, int64, bool_, float16, bfloat16, int8, int16, uint8)
INTEGRAL = frozenset((uint8, int8, int16, int32, int64))
_BY_NP = {d.np: d for d in ALL}
BY_SHORT = {d.short: d for d in ALL}
# PyTorch's lattice: bool < (uint8, int8) < int16 < int32 < int64 < (float16, bfloat16) <
# float32 < float64; a pair of equal rank that differ promotes to the next wider type
# (uint8 with int8 is int16, float16 with bfloat16 is float32)
_RANK = {bool_: 0, uint8: 1, int8: 1, int16: 2, int32: 3, int64: 4, float16: 5, bfloat16: 5,
         float32: 6, float64: 7}
_TIE = {frozenset((uint8, int8)): int16, frozenset((float16, bfloat16)): float32}


def from_numpy(np_dtype):
    """The DType for a numpy dtype; other numpy types raise a clear TypeError."""
    d = _BY_NP.get(np.dtype(np_dtype))
    if d is None:
        raise TypeError(f"aotgrad does not support dtype {np.dtype(np_dtype)}; "
                        f"supported: {', '.join(x.name for x in ALL)}")
    return d


def as_dtype(d):
    """Accept a DType, a numpy dtype/type or a name like 'float32'; Python's bool, int and
    float mean bool, int64 and float64, as in PyTorch."""
    if isinstance(d, DType):
        return d
    if d is bool:
        return bool_
    if d is float:
        return float64
    if d is int:
        return int64
    return from_numpy(d)


def promote(a, b):
    """Type promotion between two tensor dtypes (PyTorch's category-then-width lattice)."""
    if _RANK[a] == _RANK[b] and a is not b:  # neither holds the other
        return _TIE[frozenset((a, b))]
    return a if _RANK[a] >= _RANK[b] else b


def is_integer(d):
    """An index dtype (int32 or int64): what gather, scatter and index_select accept."""
    return d in (int32, int64)


def is_integral(d):
    """Any integer dtype, bool excluded (uint8, int8, int16, int32, int64)."""
    return d in INTEGRAL
