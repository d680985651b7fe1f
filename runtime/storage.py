"""`Tensor.untyped_storage()`: the memory a tensor's elements live in, shared by its views and
detached aliases (the numpy array that owns the buffer), as PyTorch's UntypedStorage is for
what scripts and tests ask of it: its address, its size in bytes, its device.

>>> import aotgrad
>>> x = aotgrad.zeros(5)
>>> x[1:3].untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
True
>>> x[1:3].untyped_storage().nbytes()
20
"""
import weakref

import numpy as np

from aotgrad.runtime.device import CPU

# id -> weak reference, of each array whose memory was handed out (`expose`); an entry goes
# with its array
_exposed = {}


def owner(a):
    """The array that owns the memory of array `a` (a itself, or the base of its views)."""
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


def expose(a):
    """Note that the memory of array `a` was handed out (`.numpy()`, `np.asarray`,
    `data_ptr()`, `untyped_storage()`): whoever got it may hold it or its address, so an
    in-place write must keep that memory (a compiled call's write-back writes into it rather
    than hand the tensor a new array). Returns `a`."""
    o = owner(a)
    k = id(o)
    if k not in _exposed:
        _exposed[k] = weakref.ref(o, lambda _, k=k: _exposed.pop(k, None))
    return a


def exposed(a):
    """Was the memory of array `a`, which owns its memory, handed out (`expose`)?"""
    return id(a) in _exposed


class UntypedStorage:
    """The owning buffer of a tensor's elements (bytes)."""

    def __init__(self, array):
        self._array = array

    def data_ptr(self):
        """The address of the first byte of the buffer."""
        return int(self._array.__array_interface__["data"][0])

    def nbytes(self):
        return int(self._array.nbytes)

    def size(self):
        return self.nbytes()

    def __len__(self):
        return self.nbytes()

    def element_size(self):
        return 1

    @property
    def device(self):
        return CPU

    def __repr__(self):
        return f"UntypedStorage(nbytes={self.nbytes()}, data_ptr={self.data_ptr():#x})"


def untyped_storage(self):
    """The storage of this tensor's elements (eager tensors)."""
    v = self._concrete("untyped_storage")
    v = v if isinstance(v, np.ndarray) else np.asarray(v)
    return UntypedStorage(expose(owner(v)))


METHODS = {"untyped_storage": untyped_storage}
