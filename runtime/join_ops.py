"""Joining and splitting: cat/stack/hstack/vstack, narrow/select, split/chunk/unbind/
tensor_split, and roll (a cut and a join).

>>> import aotgrad
>>> from aotgrad.runtime import join_ops
>>> tuple(join_ops.cat([aotgrad.ones(2, 3), aotgrad.ones(1, 3)]).shape)
(3, 3)
"""
import builtins

import numpy as np

from aotgrad.ir import dtypes as dt
from aotgrad.runtime import tprims as tp
from aotgrad.runtime import view_meta
from aotgrad.runtime.composite import share_node
from aotgrad.runtime.op_base import _named, as_tensor_like, cast, norm_dims, op, type_name
from aotgrad.runtime.sizes import hint, size_list
from aotgrad.runtime.tensor import Tensor
from aotgrad.runtime.view_ops import _alias, _dim, _view_of, flatten, reshape, unsqueeze


# ---- joining and splitting -----------------------------------------------------------------
def _tensor_list(tensors):
    """The sequence of tensors cat/stack take; anything else in it is PyTorch's TypeError."""
    if isinstance(tensors, Tensor) or not isinstance(tensors, (list, tuple)):
        raise TypeError(f"expected a tuple or list of Tensors as argument 0, but got "
                        f"{type_name(tensors)}")
    for i, t in enumerate(tensors):
        if not isinstance(t, Tensor):
            raise TypeError(f"expected Tensor as element {i} in argument 0, but got "
                            f"{type_name(t)}")
    return list(tensors)


@op("cat", "CatBackward0")
def cat(tensors, dim=0):
    tensors = _tensor_list(tensors)
    if not tensors:
        raise RuntimeError("cat(): expected a non-empty list of Tensors")
    for i, t in enumerate(tensors):
        if t.ndim == 0:
            raise RuntimeError(f"zero-dimensional tensor (at position {i}) cannot be "
                               f"concatenated")
    if any(t.ndim != 1 for t in tensors):  # (PyTorch's legacy rule: a 1-D empty tensor
        # joins tensors of any shape; among 1-D ones it stays, so its gradient reaches it)
        tensors = [t for t in tensors if not (t.ndim == 1 and t.shape[0] == 0)] or tensors[:1]
    d = _dim(dim, tensors[0].ndim)
    dtype = tensors[0].dtype
    for t in tensors[1:]:
        dtype = dt.promote(dtype, t.dtype)
    tensors = [cast(t, dtype) for t in tensors]
    first = tensors[0]
    for i, t in enumerate(tensors[1:], 1):
        if t.ndim != first.ndim:
            raise RuntimeError(f"Tensors must have same number of dimensions: got {first.ndim} "
                               f"and {t.ndim} (tensor number {i} in the list)")
        bad = [j for j, (a, b) in enumerate(zip(t.shape, first.shape)) if j != d and a != b]
        if bad:
            j = bad[0]
            raise RuntimeError(f"Sizes of tensors must match except in dimension {d}. Expected "
                               f"size {hint(first.shape[j])} but got size {hint(t.shape[j])} for "
                               f"tensor number {i} in the list (shapes {size_list(first.shape)} "
                               f"and {size_list(t.shape)}).")
    if len(tensors) == 1:
        return _alias(tensors[0])
    return tp.concatenate(*tensors, dim=d)


concat = concatenate = cat


@op("stack", "StackBackward0")
def stack(tensors, dim=0):
    tensors = _tensor_list(tensors)
    if not tensors:
        raise RuntimeError("stack expects a non-empty TensorList")
    s0 = tuple(tensors[0].shape)
    for i, t in enumerate(tensors):
        if tuple(t.shape) != s0:
            raise RuntimeError(f"stack expects each tensor to be equal size, but got "
                               f"{size_list(s0)} at entry 0 and {size_list(t.shape)} at entry {i}")
    d = norm_dims(dim, len(s0) + 1)[0]
    return cat([unsqueeze(t, d) for t in tensors], d)


def hstack(tensors):
    return cat(tensors, 0 if tensors[0].ndim == 1 else 1)


def vstack(tensors):
    return cat([t if t.ndim > 1 else reshape(t, 1, -1) for t in tensors], 0)


@op("narrow")
def narrow(x, dim, start, length):
    d = _dim(dim, x.ndim)
    start = start + x.shape[d] if start < 0 else start
    if not 0 <= start <= start + length <= x.shape[d]:
        raise IndexError(f"start ({hint(start)}) + length ({hint(length)}) exceeds dimension size "
                         f"({hint(x.shape[d])}).")
    lo, hi = [0] * x.ndim, list(x.shape)
    lo[d], hi[d] = start, start + length
    return _view_of(tp.slice(x, start=tuple(lo), limit=tuple(hi)), x)


def split(x, split_size_or_sections, dim=0):
    d = _dim(dim, x.ndim)
    n = x.shape[d]
    if isinstance(split_size_or_sections, int):
        s = split_size_or_sections
        sizes = [builtins.min(s, n - i) for i in range(0, n, s)] or [0]
    else:
        sizes = list(split_size_or_sections)
        if builtins.sum(sizes) != n:
            raise RuntimeError(f"split_with_sizes expects split_sizes to sum exactly to {hint(n)} "
                               f"(input tensor's size at dimension {d}), but got split_sizes="
                               f"{sizes}")
    out, off = [], 0
    for s in sizes:
        out.append(narrow(x, d, off, s))
        off += s
    view_meta.mark_multi_output(x, out)
    return share_node("SplitBackward0" if isinstance(split_size_or_sections, int)
                      else "SplitWithSizesBackward0", [x], tuple(out))


def chunk(x, chunks, dim=0):
    n = x.shape[_dim(dim, x.ndim)]
    return split(x, -(-n // chunks) if n else 1, dim)


def unbind(x, dim=0):
    d = _dim(dim, x.ndim)
    out = tuple(select(x, d, i) for i in range(x.shape[d]))
    view_meta.mark_multi_output(x, out)
    return share_node("UnbindBackward0", [x], out)


def select(x, dim, index):
    d = _dim(dim, x.ndim)
    n = x.shape[d]
    if not -n <= index < n:
        raise IndexError(f"index {index} is out of bounds for dimension {d} with size "
                         f"{hint(n)}")
    index %= n
    s = narrow(x, d, index, 1)
    return _view_of(tp.reshape(s, shape=tuple(x.shape[:d]) + tuple(x.shape[d + 1:])), x)


def tensor_split(x, indices_or_sections, dim=0):
    """Split into `n` parts whose sizes differ by at most one (the first ones larger), or at
    the given indices."""
    d = _dim(dim, x.ndim)
    n = x.shape[d]
    if isinstance(indices_or_sections, Tensor):
        indices_or_sections = indices_or_sections.tolist()
    if isinstance(indices_or_sections, (int, np.integer)):
        k = int(indices_or_sections)
        if k <= 0:
            raise RuntimeError(f"number of sections must be larger than 0, got {k}")
        sizes = [n // k + (1 if i < n % k else 0) for i in range(k)]
        bounds = list(np.cumsum([0] + sizes))
    else:
        bounds = [0] + [builtins.min(builtins.max(i + n if i < 0 else i, 0), n)
                        for i in indices_or_sections] + [n]
    return tuple(narrow(x, d, lo, builtins.max(hi - lo, 0))
                 for lo, hi in zip(bounds[:-1], bounds[1:]))


@op("roll")
def roll(x, shifts, dims=None):
    if dims is None:
        return reshape(roll(flatten(x), shifts, 0), tuple(x.shape))
    shifts = (shifts,) if isinstance(shifts, int) else tuple(shifts)
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    for s, d in zip(shifts, dims):
        d = _dim(d, x.ndim)
        n = x.shape[d]
        s %= n
        if s:
            x = cat([narrow(x, d, n - s, s), narrow(x, d, 0, n - s)], d)
    return x
