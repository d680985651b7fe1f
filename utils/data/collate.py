"""`default_collate` (a list of samples -> one batch) and `default_convert` (numpy -> tensors,
for batch_size=None), as in torch.utils.data.

default_collate stacks tensors (a new first dimension), turns numpy arrays into tensors and
stacks them, Python floats into a float64 tensor, ints into int64 (bools into bool), numpy
scalars into a tensor of their dtype; strings stay a list; dicts collate per key, named tuples
per field, and other sequences position by position (a tuple of fields gives a list of
batches, as in PyTorch: `x, y = batch` works for both).
"""
import collections.abc

import numpy as np

from aotgrad.ir import dtypes as dt
from aotgrad.ir.core import current_builder
from aotgrad.runtime.factories import as_tensor, from_numpy, tensor
from aotgrad.runtime.shape_ops import stack
from aotgrad.runtime.tensor import Tensor


def plain_values(tensors):
    """Whether these are concrete tensors that need no autograd bookkeeping (outside a
    trace, none requires grad): their numpy values can be used directly."""
    return current_builder() is None and all(
        isinstance(t, Tensor) and not t.requires_grad and isinstance(t._value, np.ndarray)
        for t in tensors)


def _error(elem_type):
    return TypeError(f"default_collate: batch must contain tensors, numpy arrays, numbers, "
                     f"dicts or lists; found {elem_type}")


def default_collate(batch):
    elem = batch[0]
    elem_type = type(elem)
    if isinstance(elem, Tensor):
        if plain_values(batch):
            # the same values as stack(), without the op layer's per-call cost (a batch of
            # plain data tensors has no autograd history to record)
            return from_numpy(np.stack([t._value for t in batch]))
        return stack(list(batch), 0)
    if isinstance(elem, np.ndarray):
        if elem.dtype.kind in "OSU":
            raise _error(elem.dtype)
        return stack([as_tensor(b) for b in batch], 0)
    if isinstance(elem, np.generic):
        if elem.dtype.kind in "OSU":
            raise _error(elem.dtype)
        return as_tensor(np.array(batch))
    if isinstance(elem, bool):
        return tensor(list(batch))
    if isinstance(elem, float):
        return tensor(list(batch), dtype=dt.float64)
    if isinstance(elem, int):
        return tensor(list(batch))
    if isinstance(elem, (str, bytes)):
        return batch
    if isinstance(elem, collections.abc.Mapping):
        out = {key: default_collate([d[key] for d in batch]) for key in elem}
        try:
            return elem_type(out)
        except TypeError:  # a mapping type that cannot be built from a dict
            return out
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):  # a namedtuple
        return elem_type(*(default_collate(list(s)) for s in zip(*batch)))
    if isinstance(elem, collections.abc.Sequence):
        size = len(elem)
        if any(len(e) != size for e in batch):
            raise RuntimeError("each element in list of batch should be of equal size")
        transposed = [default_collate(list(s)) for s in zip(*batch)]
        if isinstance(elem, tuple):
            return transposed
        try:
            return elem_type(transposed)
        except TypeError:
            return transposed
    raise _error(elem_type)


def default_convert(data):
    """numpy arrays (and numpy arrays inside dicts and sequences) -> tensors; the rest as is."""
    if isinstance(data, Tensor):
        return data
    if isinstance(data, np.ndarray):
        return data if data.dtype.kind in "OSU" else as_tensor(data)
    if isinstance(data, np.generic):
        return data if data.dtype.kind in "OSU" else as_tensor(np.asarray(data))
    if isinstance(data, collections.abc.Mapping):
        out = {k: default_convert(v) for k, v in data.items()}
        try:
            return type(data)(out)
        except TypeError:
            return out
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(default_convert(d) for d in data))
    if isinstance(data, tuple):
        return [default_convert(d) for d in data]
    if isinstance(data, collections.abc.Sequence) and not isinstance(data, (str, bytes)):
        try:
            return type(data)([default_convert(d) for d in data])
        except TypeError:
            return [default_convert(d) for d in data]
    return data
