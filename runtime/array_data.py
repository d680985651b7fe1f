"""Python data, a numpy array or a Tensor -> the numpy array a new tensor holds (PyTorch's
dtype inference: Python floats give float32, ints int64), below the op layer so that the ops
and the factories share it."""
import numpy as np

from aotgrad.ir import dtypes as dt
from aotgrad.runtime.tensor import Tensor


def to_array(data, dtype=None):
    """Python data / numpy array / Tensor -> numpy array of the right dtype (a new copy)."""
    if isinstance(data, Tensor):
        arr = np.array(data._concrete("tensor(Tensor)"), copy=True)
        return arr if dtype is None else arr.astype(dt.as_dtype(dtype).np)
    if isinstance(data, (list, tuple)) and any(isinstance(d, Tensor) for d in _flat(data)):
        data = _nested(data)
    if isinstance(data, np.generic):  # a numpy scalar keeps its dtype, like an array
        data = np.asarray(data)
    if isinstance(data, np.ndarray):
        target = dt.as_dtype(dtype) if dtype is not None else dt.from_numpy(data.dtype)
        return np.array(data, dtype=target.np, copy=True)
    arr = np.array(data)
    if dtype is not None:
        return arr.astype(dt.as_dtype(dtype).np)
    if arr.dtype.kind == "f":
        return arr.astype(np.float32)  # Python floats default to float32, like PyTorch
    if arr.dtype.kind in "iu":
        return arr.astype(np.int64)
    if arr.dtype.kind == "b":
        return arr
    raise TypeError(f"Could not infer dtype of {type(data).__name__}")


def _flat(data):
    for d in data:
        if isinstance(d, (list, tuple)):
            yield from _flat(d)
        else:
            yield d


def _nested(data):
    return [(_nested(d) if isinstance(d, (list, tuple)) else
             (d.item() if isinstance(d, Tensor) else d)) for d in data]
