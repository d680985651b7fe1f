"""PyTorch's legacy typed constructors: `FloatTensor(2, 3)` (a shape), `LongTensor([1, 2])`
(data), `DoubleTensor(aotgrad.Size([4]))`, and `isinstance(t, aotgrad.FloatTensor)`.

PyTorch leaves a shape-constructed tensor uninitialised; aotgrad's is zero-filled.
`ByteTensor` names uint8, a dtype aotgrad does not have: it raises saying so.

>>> import aotgrad
>>> aotgrad.FloatTensor(2, 3).shape, aotgrad.LongTensor([1, 2]).dtype
(aotgrad.Size([2, 3]), aotgrad.int64)
"""
import numbers

import numpy as np

from aotgrad.ir import dtypes as dt
from aotgrad.runtime import device as _device
from aotgrad.runtime.tensor import Size, Tensor


class tensortype(type):  # noqa: N801  (torch.tensortype's spelling)
    """The metaclass of the legacy classes: calling one builds a tensor of its dtype,
    `isinstance` checks a tensor's dtype."""

    def __call__(cls, *args, device=None):
        _device.check(device, cls.__name__)
        if cls.legacy_dtype is None:
            raise TypeError(f"{cls.__name__} holds uint8, a dtype aotgrad does not have; use "
                            f"aotgrad.tensor(data, dtype=aotgrad.int64) (or aotgrad.bool for a "
                            f"mask)")
        from aotgrad.runtime import factories
        dtype = cls.legacy_dtype
        if not args:
            return factories.zeros(0, dtype=dtype)
        if all(isinstance(a, numbers.Integral) and not isinstance(a, bool) for a in args) or \
                (len(args) == 1 and isinstance(args[0], Size)):
            return factories.zeros(*args, dtype=dtype)
        if len(args) != 1:
            raise TypeError(f"{cls.__name__}(): expected sizes (ints) or one sequence of data, "
                            f"got {tuple(type(a).__name__ for a in args)}")
        data = args[0]
        if isinstance(data, Tensor):
            if data.dtype is not dtype:
                raise TypeError(f"{cls.__name__}(): expected a tensor of dtype {dtype.name}, "
                                f"got {data.dtype.name}")
            return data
        if not isinstance(data, (list, tuple, np.ndarray)):
            raise TypeError(f"new(): data must be a sequence (got {type(data).__name__})")
        return factories.tensor(data, dtype=dtype)

    def __instancecheck__(cls, obj):
        return isinstance(obj, Tensor) and cls.legacy_dtype is not None and \
            obj.dtype is cls.legacy_dtype

    def __repr__(cls):
        return f"<class 'aotgrad.{cls.__name__}'>"


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
ByteTensor = _legacy("ByteTensor", None)
