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
int32 = DType("int32", np.int32, "i32")
int64 = DType("int64", np.int64, "i64")
bool_ = DType("bool", np.bool_, "b1")
# 16-bit floats: eager only (compiled functions run them eagerly, see runtime/dispatch.py);
# bfloat16 is ml_dtypes' numpy type. Ops compute in float32 and round their result, and
# reductions accumulate in float32, as PyTorch's CPU kernels do.
float16 = DType("float16", np.float16, "f16")
bfloat16 = DType("bfloat16", ml_dtypes.bfloat16, "bf16", floating=True)
LOW_PRECISION = frozenset((float16, bfloat16))
ALL = (float32, float64, int32, int64, bool_, float16, bfloat16)
_BY_NP = {d.np: d for d in ALL}
BY_SHORT = {d.short: d for d in ALL}
_RANK = {bool_: 0, int32: 1, int64: 2, float16: 3, bfloat16: 3, float32: 4, float64: 5}


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
    if _RANK[a] == _RANK[b] and a is not b:  # float16 with bfloat16: neither holds the other
        return float32
    return a if _RANK[a] >= _RANK[b] else b


def is_integer(d):
    return d in (int32, int64)
