"""PyTorch's legacy typed constructors: `FloatTensor(2, 3)` (a shape), `LongTensor([1, 2])`
(data), `DoubleTensor(aotgrad.Size([4]))`, and `isinstance(t, aotgrad.FloatTensor)`.

PyTorch leaves a shape-constructed tensor uninitialised; aotgrad's is zero-filled.

>>> import aotgrad
>>> aotgrad.FloatTensor(2, 3).shape, aotgrad.LongTensor([1, 2]).dtype
(aotgrad.Size([2, 3]), aotgrad.int64)
"""
import numbers
import warnings

import numpy as np

from aotgrad.ir import dtypes as dt
from aotgrad.runtime import device as _device
from aotgrad.runtime.tensor import Size, Tensor
from aotgrad.runtime.op_base import to_array as _to_array


class tensortype(type):  # noqa: N801  (torch.tensortype's spelling)
    """The metaclass of the legacy classes: calling one builds a tensor of its dtype,
    `isinstance` checks a tensor's dtype."""

    def __call__(cls, *args, device=None):
        if len(args) == 1 and isinstance(args[0], Tensor):
            if args[0].dtype is not cls.legacy_dtype:
                raise TypeError(f"{cls.__name__}(): expected a tensor of dtype "
                                f"{cls.legacy_dtype.name}, got {args[0].dtype.name}")
            _device.check(device, cls.__name__)
            return args[0]
        return Tensor._make(legacy_value(args, cls.legacy_dtype, device, cls.__name__))

    def __instancecheck__(cls, obj):
        return isinstance(obj, Tensor) and obj.dtype is cls.legacy_dtype

    def __repr__(cls):
        return f"<class 'aotgrad.{cls.__name__}'>"


def legacy_value(args, dtype, device, what="Tensor"):
    """The array of a legacy constructor call: sizes (ints or a Size) give zeros, one
    sequence gives its data, nothing gives an empty 1-d array; float32 unless `dtype`."""
    _device.check(device, what)
    d = dt.float32 if dtype is None else dt.as_dtype(dtype)
    if not args:
        return np.zeros(0, d.np)
    if all(isinstance(a, numbers.Integral) and not isinstance(a, bool) for a in args) or \
            (len(args) == 1 and isinstance(args[0], Size)):
        shape = tuple(int(a) for a in (args[0] if isinstance(args[0], Size) else args))
        if any(n < 0 for n in shape):
            raise RuntimeError(f"Trying to create tensor with negative dimension: "
                               f"{list(shape)}")
        return np.zeros(shape, d.np)
    if len(args) != 1:
        raise TypeError(f"{what}(): expected sizes (ints) or one sequence of data, got "
                        f"{tuple(type(a).__name__ for a in args)}")
    data = args[0]
    if not isinstance(data, (list, tuple, np.ndarray, Tensor)):
        raise TypeError(f"new(): data must be a sequence (got {type(data).__name__})")
    return _to_array(data, d)


def _legacy(name, dtype):
    return tensortype(name, (), {"legacy_dtype": dtype, "dtype": dtype,
                                 "__module__": "aotgrad"})


FloatTensor = _legacy("FloatTensor", dt.float32)
DoubleTensor = _legacy("DoubleTensor", dt.float64)
LongTensor = _legacy("LongTensor", dt.int64)
IntTensor = _legacy("IntTensor", dt.int32)
BoolTensor = _legacy("BoolTensor", dt.bool_)
HalfTensor = _legacy("HalfTensor", dt.float16)
BFloat16Tensor = _legacy("BFloat16Tensor", dt.bfloat16)
ByteTensor = _legacy("ByteTensor", dt.uint8)
CharTensor = _legacy("CharTensor", dt.int8)
ShortTensor = _legacy("ShortTensor", dt.int16)


def _volatile(self):
    """`Tensor.volatile`, removed from PyTorch long ago: always False, with a warning."""
    warnings.warn("volatile was removed (Variable.volatile is always False)", UserWarning,
                  stacklevel=2)
    return False


PROPERTIES = {"volatile": property(_volatile)}  # Tensor properties of the legacy API


def tensor_init(self, *args, dtype=None, requires_grad=False, device=None):
    """Tensor.__init__, PyTorch's legacy constructor: `Tensor(2, 3)` (a zero-filled shape),
    `Tensor([1, 2])` (data, float32 unless `dtype` is given), `Tensor()` (empty)."""
    self.__class__._init_from(self, legacy_value(args, dtype, device), requires_grad)
