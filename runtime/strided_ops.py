"""as_strided, diagonal_scatter and resize_.

aotgrad tensors have no shared storage with an offset: `as_strided` reads the input's
elements in its logical (row-major, contiguous) order, which is PyTorch's storage order for a
contiguous tensor; a view (non-contiguous or offset) reads its contiguous base's elements
from the view's storage offset, as PyTorch reads the base's storage. It is a gather, so it is
differentiable (overlapping windows sum their gradients) and compiles; on a view inside a
compiled function it is a graph break (the storage layout is known eagerly only).
`resize_` runs eagerly only; elements past the old size are zero (PyTorch leaves them
uninitialised).

>>> import aotgrad
>>> aotgrad.arange(6.).as_strided((2, 2), (1, 2)).tolist()
[[0.0, 2.0], [1.0, 3.0]]
"""
import math

import numpy as np

from aotgrad.runtime import layout
from aotgrad.runtime.sizes import size_list
from aotgrad.runtime.grad_mode import state as _mode
from aotgrad.runtime.index_ops import _const_index, index_copy, take
from aotgrad.runtime.inplace_ops import _inplace_guard
from aotgrad.runtime.view_meta import mark_copy_of_view
from aotgrad.runtime.op_base import cast, op
from aotgrad.runtime.factories import zeros
from aotgrad.runtime.tensor import Tensor
from aotgrad.runtime.view_ops import _dim, movedim, reshape
from aotgrad.runtime.write_hooks import before_write


def _sizes(size, what):
    size = tuple(int(s) for s in (size if isinstance(size, (tuple, list)) else (size,)))
    if any(s < 0 for s in size):
        raise RuntimeError(f"{what}: negative size in {list(size)}")
    return size


def _probe_offset(p):
    root = p
    while isinstance(root.base, np.ndarray):
        root = root.base
    return (p.__array_interface__["data"][0] - root.__array_interface__["data"][0]) \
        // p.itemsize


def _storage_of(t):
    """The tensor whose row-major elements are t's storage: t itself, or the contiguous
    base of a view whose layout differs from its own row-major order. Reading a view's base
    needs its eager layout: inside a compiled function that is a graph break."""
    base = getattr(t, "_base", None)
    if not isinstance(t._value, np.ndarray):    # traced: its eager layout is its probe's
        p = layout.probe(t)
        if p is not None and not (p.flags.c_contiguous and _probe_offset(p) == 0):
            t._concrete("as_strided on a view (it indexes the base's storage)")
        return t
    if base is None:
        return t
    if not base.is_contiguous() or base.storage_offset() != 0:
        return t                 # no contiguous storage to index: the view's own order
    if t.is_contiguous() and t.storage_offset() == 0:
        return t                 # the same elements in the same order
    return base


def _storage_through(view, base):
    """base's elements, flat, with those the view covers taken from the view itself: the
    values of the storage, differentiable with respect to the view only (as PyTorch's
    as_strided backward, which gives storage outside the view no gradient)."""
    pos = np.full(tuple(view.shape), view.storage_offset(), dtype=np.int64)
    for d, (n, st) in enumerate(zip(view.shape, view.stride())):
        shape = [1] * view.ndim
        shape[d] = n
        pos = pos + (np.arange(n, dtype=np.int64) * st).reshape(shape)
    return index_copy(reshape(base.detach(), (-1,)), 0, _const_index(pos.reshape(-1)),
                      reshape(view, (-1,)))


@op("as_strided", "AsStridedBackward0")
def as_strided(input, size, stride, storage_offset=None):
    """The elements at storage_offset + sum(i_k * stride_k) of the input's contiguous
    order, for each index (i_0, i_1, ...) of `size`."""
    size, stride = _sizes(size, "as_strided"), tuple(int(s) for s in stride)
    storage = _storage_of(input)
    if storage is not input:     # a view: PyTorch indexes its base's storage
        if storage_offset is None:
            storage_offset = input.storage_offset()
        input = _storage_through(input, storage)
    offset = int(storage_offset or 0)
    if len(size) != len(stride):
        raise RuntimeError(f"as_strided: mismatch in length of strides and shape "
                           f"(size {list(size)}, stride {list(stride)})")
    if any(s < 0 for s in stride) or offset < 0:
        raise RuntimeError(f"as_strided: negative strides or offset are not supported "
                           f"(stride {list(stride)}, storage_offset {offset})")
    pos = np.full(size, offset, dtype=np.int64)
    for d, (n, st) in enumerate(zip(size, stride)):
        shape = [1] * len(size)
        shape[d] = n
        pos = pos + (np.arange(n, dtype=np.int64) * st).reshape(shape)
    numel = math.prod(input.shape)
    if pos.size and pos.max() >= numel:
        raise RuntimeError(f"as_strided: size {list(size)}, stride {list(stride)} and "
                           f"storage_offset {offset} reach element {int(pos.max())}, out of "
                           f"bounds for a tensor of {numel} elements (shape "
                           f"{size_list(input.shape)})")
    if not size:
        return mark_copy_of_view(reshape(take(input, _const_index(pos.reshape(1))), ()),
                                 "as_strided")
    return mark_copy_of_view(take(input, _const_index(pos)), "as_strided")


@op("diagonal_scatter", "DiagonalScatterBackward0")
def diagonal_scatter(input, src, offset=0, dim1=0, dim2=1):
    """input with input.diagonal(offset, dim1, dim2) replaced by src (a new tensor)."""
    d1, d2 = _dim(dim1, input.ndim), _dim(dim2, input.ndim)
    if d1 == d2:
        raise RuntimeError(f"diagonal_scatter: diagonal dimensions cannot be identical "
                           f"{dim1}, {dim2}")
    y = movedim(input, (d1, d2), (-2, -1))
    r, c = y.shape[-2], y.shape[-1]
    k = max(0, min(r, c - offset) if offset >= 0 else min(r + offset, c))
    want = tuple(y.shape[:-2]) + (k,)
    if tuple(src.shape) != want:
        raise RuntimeError(f"diagonal_scatter: src must have the shape of the diagonal "
                           f"{list(want)}, got {size_list(src.shape)}")
    rows = np.arange(k) + max(0, -offset)
    flat = reshape(y, tuple(y.shape[:-2]) + (r * c,))
    out = index_copy(flat, flat.ndim - 1, _const_index(rows * c + rows + offset),
                     cast(src, input.dtype))
    return movedim(reshape(out, tuple(y.shape)), (-2, -1), (d1, d2))


def resize_(self, *sizes, memory_format=None):
    """Give the tensor a new shape in place, keeping its first elements in row-major order;
    new elements are zero. Eager only (a graph break inside a compiled function)."""
    size = _sizes(sizes[0] if len(sizes) == 1 and isinstance(sizes[0], (tuple, list))
                  else sizes, "resize_")
    old = self._concrete("resize_ (changes a tensor's shape in place)")
    if self.requires_grad and not _mode.inference:  # (inference mode records nothing)
        raise RuntimeError("cannot resize variables that require grad")
    if tuple(size) == tuple(old.shape):  # nothing changes (nor the version, as in PyTorch)
        return self
    flat = np.zeros(math.prod(size), dtype=old.dtype)
    n = min(flat.size, old.size)
    flat[:n] = old.reshape(-1)[:n]
    before_write(self)
    self._value = flat.reshape(size)
    self._version_counter.v += 1
    return self


def resize_as_(self, other, memory_format=None):
    return resize_(self, tuple(other.shape))


def set_(self, source=None):
    """Make the tensor share `source`'s memory, shape and strides (an empty tensor without
    one), in place: an in-place op (version bumped; refused on a leaf that requires grad
    where autograd records). Eager only; PyTorch's Storage sources are not supported."""
    if source is not None and not isinstance(source, Tensor):
        raise TypeError(f"set_(): source must be a Tensor (Storage sources are not supported), "
                        f"got {type(source).__name__}")
    self._concrete("set_ (changes a tensor's storage in place)")
    _inplace_guard(self, "set_", source is not None and source.requires_grad)
    if source is not None and source.requires_grad and _mode.grad_enabled:
        raise RuntimeError("set_: the derivative for 'set_' is not implemented (the source "
                           "requires grad); call it under no_grad or give a detached source")
    if source is not None and source.dtype is not self.dtype:
        raise RuntimeError(f"set_(): expected source of dtype {self.dtype.name}, got "
                           f"{source.dtype.name}")
    self._value = source._concrete("set_") if source is not None else \
        np.zeros((0,), dtype=self._value.dtype)
    self._version_counter.v += 1
    return self


def empty_strided(size, stride, *, dtype=None, device=None, requires_grad=False, layout=None,
                  pin_memory=False):
    """A zero-filled tensor (uninitialised in PyTorch) of shape `size` whose elements lie
    `stride` elements apart in its memory (eagerly; a traced one is contiguous)."""
    size, stride = _sizes(size, "empty_strided"), tuple(int(s) for s in stride)
    if len(size) != len(stride):
        raise RuntimeError(f"empty_strided: mismatch in length of strides and shape (size "
                           f"{list(size)}, stride {list(stride)})")
    if any(s < 0 for s in stride):
        raise RuntimeError(f"empty_strided: negative strides are not supported (stride "
                           f"{list(stride)})")
    extent = 1 + sum((n - 1) * s for n, s in zip(size, stride)) if all(size) else 0
    buf = zeros(extent, dtype=dtype, device=device)
    if not isinstance(buf._value, np.ndarray):
        return zeros(size, dtype=dtype, requires_grad=requires_grad)
    v = buf._value
    out = Tensor._make(np.lib.stride_tricks.as_strided(v, size, tuple(s * v.itemsize
                                                                      for s in stride)))
    return out.requires_grad_(requires_grad)


METHODS = {"as_strided": as_strided, "diagonal_scatter": diagonal_scatter,
           "resize_": resize_, "resize_as_": resize_as_, "set_": set_}
