"""Indexing, gather and scatter: `x[index]` (basic, advanced and boolean-mask indexing),
gather/take_along_dim/index_select/take, scatter/scatter_add/index_add/index_copy/
index_fill/masked_fill/masked_select, one_hot, and the ops built on
constant-index gathers (unfold, repeat_interleave).

Known differences from PyTorch: `unfold` and `take` return copies, not views; `scatter`
with repeated target positions keeps the last write (PyTorch leaves it unspecified).

>>> import aotgrad
>>> from aotgrad.runtime import index_ops
>>> index_ops.getitem(aotgrad.arange(6).reshape(2, 3), (1, slice(1, None))).tolist()
[4, 5]
"""
import builtins
import math

import numpy as np

from aotgrad.ir import dtypes as dt
from aotgrad.runtime.sizes import size_list
from aotgrad.ir.symbolic import SymInt, slice_indices
from aotgrad.runtime.value_checks import checked, hint
from aotgrad.runtime import tprims as tp
from aotgrad.runtime.elementwise_ops import (add, argwhere, mul, nonzero,  # noqa: F401
                                             where)  # (nonzero, argwhere: index ops)
from aotgrad.runtime.join_ops import cat, narrow
from aotgrad.runtime.op_base import _named, as_tensor_like, broadcast_shapes, cast, op
from aotgrad.runtime.tensor import Tensor
from aotgrad.runtime.view_ops import _alias, _dim, _view_of, clone, expand, movedim, permute, \
    reshape
from aotgrad.runtime.dispatch import drop_scalar_edges, graph_break
from aotgrad.runtime.view_meta import mark_copy_of_view


# ---- gather / index ------------------------------------------------------------------------
@op("gather", "GatherBackward0")
def gather(x, dim, index):
    if index.dtype is not dt.int64:
        raise RuntimeError(f"gather(): Expected dtype int64 for index, got {index.dtype.name}")
    d = _dim(dim, x.ndim)
    if index.ndim == x.ndim and tuple(index.shape) != tuple(x.shape):
        for k in range(x.ndim):  # PyTorch allows a smaller index outside `dim`
            if k != d and index.shape[k] < x.shape[k]:
                x = narrow(x, k, 0, index.shape[k])
    return tp.gather(x, _normalize_index(index, x.shape[d], negative_ok=False), dim=d)


def take_along_dim(x, indices, dim=None):
    if dim is None:
        return take_along_dim(reshape(x, -1), reshape(indices, -1), 0)
    d = _dim(dim, x.ndim)
    shape = list(broadcast_shapes(tuple(n for i, n in enumerate(x.shape) if i != d),
                                  tuple(n for i, n in enumerate(indices.shape) if i != d)))
    ishape = shape[:d] + [indices.shape[d]] + shape[d:]
    xshape = shape[:d] + [x.shape[d]] + shape[d:]
    return tp.gather(expand(x, tuple(xshape)), expand(indices, tuple(ishape)), dim=d)


@op("index_select", "IndexSelectBackward0")
def index_select(x, dim, index):
    if index.ndim > 1:
        raise IndexError("index_select(): Index is supposed to be a vector")
    d = _dim(dim, x.ndim)
    index = _normalize_index(cast(reshape(index, -1), dt.int64), x.shape[d], negative_ok=False)
    k = index.shape[0]
    shape = tuple(x.shape[:d]) + (k,) + tuple(x.shape[d + 1:])
    idx = tp.broadcast_in_dim(index, shape=shape, dims=(d,))
    return tp.gather(x, idx, dim=d)


@op("scatter_add", "ScatterAddBackward0")
def scatter_add(x, dim, index, src):
    d = _dim(dim, x.ndim)
    _check_scatter_shapes(x, d, index, src)
    if index.numel() == 0:
        return clone(x)
    if x.ndim == 0 or index.ndim == 0:   # a 0-d operand counts as one element
        return reshape(scatter_add(reshape(x, (-1,)), 0, reshape(index, (-1,)),
                                   reshape(src, (-1,))), tuple(x.shape))
    return tp.scatter_add(x, index, _covered(src, index), dim=d)


def _covered(src, index):
    """The part of src that index covers (scatter reads src only there)."""
    for k in range(src.ndim):
        if index.shape[k] < src.shape[k]:
            src = narrow(src, k, 0, index.shape[k])
    return src


def _check_scatter_shapes(x, d, index, src):
    """PyTorch's rule for scatter's operands: index has self's number of dims (and src's),
    and its sizes are no larger than self's outside dim d nor than src's anywhere (an empty
    index writes nothing, whatever its shape; a 0-d tensor counts as one of one element)."""
    if index.numel() == 0 or max(x.ndim, index.ndim) == 0:
        return
    if max(index.ndim, 1) != max(x.ndim, 1):
        raise RuntimeError("Index tensor must have the same number of dimensions as self tensor")
    if isinstance(src, Tensor) and max(src.ndim, 1) != max(index.ndim, 1):
        raise RuntimeError("Index tensor must have the same number of dimensions as src tensor")
    def shape(t):
        return tuple(t.shape) or (1,)
    for k, n in enumerate(shape(index)):
        if (k != d and n > shape(x)[k]) or (isinstance(src, Tensor) and n > shape(src)[k]):
            src_shape = size_list(src.shape) if isinstance(src, Tensor) else None
            raise RuntimeError(f"Expected index {size_list(index.shape)} to be no larger than "
                               f"self {size_list(x.shape)} apart from dimension {d} and to be "
                               f"no larger size than src {src_shape}")


@op("masked_fill", "MaskedFillBackward0")
def masked_fill(x, mask, value):
    return where(mask, cast(as_tensor_like(value, x.dtype), x.dtype), x)


def _normalize_index(idx, n, negative_ok=True):
    """Negative indices wrap; out-of-range indices raise, eagerly and in compiled programs
    (a run-time check the index passes through). With negative_ok=False (gather,
    index_select) a negative index is out of range."""
    idx = checked(idx, IndexError,
                  "index {value} is out of bounds for dimension with size {high} "
                  "(index {type0})", low=-n if negative_ok else 0, high=n, shown=(idx,))
    if isinstance(idx._value, np.ndarray):
        v = idx._value
        if negative_ok and v.size and v.min() < 0:
            return as_tensor_like(np.where(v < 0, v + n, v))
        return idx
    if not negative_ok:
        return idx
    zero = tp.zeros(tuple(idx.shape), idx.dtype)
    return tp.where(tp.lt(idx, zero), tp.add(idx, tp.broadcast_to(tp.constant(n, idx.dtype),
                                                                 tuple(idx.shape))), idx)


# ---- __getitem__ ---------------------------------------------------------------------------
def _index_tensor(i):
    a = np.asarray(i)
    if a.size == 0 and a.dtype.kind == "f":  # `x[[]]` selects nothing (an empty int64 index)
        a = a.astype(np.int64)
    return as_tensor_like(a)


def _expand_index(x, index):
    if isinstance(index, list) and len(index) < 32 and builtins.any(
            isinstance(i, (list, tuple, slice, Tensor)) or i is None or i is Ellipsis
            for i in index):
        index = tuple(index)  # PyTorch reads such a list as a tuple of indices
    if not isinstance(index, tuple):
        index = (index,)
    index = tuple(_index_tensor(i) if isinstance(i, (list, np.ndarray)) else i for i in index)
    n_real = builtins.sum(1 if not (i is None or i is Ellipsis) else 0 for i in index)
    n_real += builtins.sum(i.ndim - 1 for i in index if isinstance(i, Tensor)
                           and i.dtype is dt.bool_)
    if builtins.sum(1 for i in index if i is Ellipsis) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if n_real > x.ndim:
        raise IndexError(f"too many indices for tensor of dimension {x.ndim}")
    out = []
    for i in index:
        if i is Ellipsis:
            out += [slice(None)] * (x.ndim - n_real)
        else:
            out.append(i)
    if not builtins.any(i is Ellipsis for i in index):
        out += [slice(None)] * (x.ndim - n_real)
    return out


@op("getitem")
def getitem(x, index):
    basic = _basic_index(x, index)
    if basic is not None:
        return _basic_getitem(x, *basic)
    if isinstance(index, Tensor):
        out = _take_rows(x, index)
        if out is not None:
            return out
    if isinstance(index, Tensor) and index.ndim == 0 and index.dtype is dt.bool_ and \
            isinstance(index._value, np.ndarray):
        index = bool(index._value)  # a 0-d mask acts like a bool scalar
    if builtins.any(isinstance(i, (bool, np.bool_))
                    for i in (index if isinstance(index, tuple) else (index,))):
        return _getitem_bool_scalars(x, index if isinstance(index, tuple) else (index,))
    idx = _expand_index(x, index)
    # basic indexing first: slices, ints, None; remember advanced (tensor) positions
    start, limit, strides, shape_after, adv = [], [], [], [], []
    dim = 0
    for i in idx:
        if i is None:
            shape_after.append(("new", None))
            continue
        if isinstance(i, Tensor) and i.dtype is dt.bool_:
            if x._is_traced:
                graph_break("boolean mask indexing (data-dependent shape)", x)
            want = tuple(x.shape[dim:dim + i.ndim])
            if tuple(i.shape) != want:
                bad = builtins.next((k for k in range(i.ndim) if k >= len(want) or
                                     i.shape[k] != want[k]), 0)
                raise IndexError(f"The shape of the mask {size_list(i.shape)} at index {bad} does "
                                 f"not "
                                 f"match the shape of the indexed tensor {size_list(x.shape)} at "
                                 f"index {dim + bad}")
            nz = np.nonzero(i._value)
            for k, arr in enumerate(nz):
                n = x.shape[dim]
                start.append(0), limit.append(n), strides.append(1)
                shape_after.append(("adv", len(adv)))
                adv.append((dim, as_tensor_like(arr.astype(np.int64))))
                dim += 1
            continue
        n = x.shape[dim]
        if isinstance(i, (bool, np.bool_)):
            raise IndexError("bool scalar indexing is not supported")
        if isinstance(i, (int, np.integer)) or (isinstance(i, Tensor) and i.ndim == 0 and
                                                not i._is_traced and
                                                i.dtype in (dt.int64, dt.int32)):
            i = int(i)
            if not -n <= i < n:
                raise IndexError(f"index {i} is out of bounds for dimension {dim} with size "
                                 f"{hint(n)}")
            i %= n
            start.append(i), limit.append(i + 1), strides.append(1)
            shape_after.append(("drop", None))
        elif isinstance(i, slice):
            if isinstance(n, SymInt) or isinstance(i.start, SymInt) or \
                    isinstance(i.stop, SymInt):
                s, e, st = slice_indices(i, n)  # symbolic sizes stay symbolic
            else:
                s, e, st = i.indices(n)
            if st <= 0:
                raise ValueError("step must be greater than zero")
            e = builtins.max(e, s)
            start.append(s), limit.append(e), strides.append(st)
            shape_after.append(("keep", None))
        elif isinstance(i, Tensor):
            if i.dtype.is_floating_point:
                raise IndexError("tensors used as indices must be long, int, byte or bool "
                                 "tensors")
            start.append(0), limit.append(n), strides.append(1)
            shape_after.append(("adv", len(adv)))
            adv.append((dim, i))
        else:
            raise IndexError(f"only integers, slices (`:`), ellipsis (`...`), None and long or "
                             f"byte Variables are valid indices (got {type(i).__name__})")
        dim += 1
    y = x
    if tuple(start) != (0,) * x.ndim or tuple(limit) != tuple(x.shape) or \
            builtins.any(s != 1 for s in strides):
        y = _view_of(tp.slice(x, start=tuple(start), limit=tuple(limit), strides=tuple(strides)),
                     x)
    # drop int dims, insert None dims; track where advanced dims are
    new_shape, adv_pos, src = [], [], 0
    for kind, k in shape_after:
        if kind == "new":
            new_shape.append(1)
        elif kind == "drop":
            src += 1
        else:
            if kind == "adv":
                adv_pos.append(len(new_shape))
            new_shape.append(y.shape[src])
            src += 1
    if tuple(new_shape) != tuple(y.shape):
        y = _view_of(tp.reshape(y, shape=tuple(new_shape)), x)
    if not adv:
        y = y if y is not x else _alias(x)
        if builtins.all(isinstance(i, (int, np.integer)) or i is Ellipsis
                        for i in (index if isinstance(index, tuple) else (index,))):
            _named(y, "SelectBackward0")
        return y
    return _named(_advanced(y, adv_pos, [t for _, t in adv]), "IndexBackward0")


def _basic_index(x, index):
    """Eager `x[index]` with Python ints and slices only, every int in range and every step
    positive: (start, limit, strides, the dims kept, whether every index is an int), which
    the general path below would compute; None for any other index (which it handles, or
    refuses with its error)."""
    shape = x._value.shape
    if type(x._value) is not np.ndarray:
        return None
    items = index if type(index) is tuple else (index,)
    if len(items) > len(shape):
        return None
    start, limit, strides, kept, all_ints = [], [], [], [], True
    for dim, i in enumerate(items):
        n = shape[dim]
        if type(i) is int:
            if not -n <= i < n:
                return None
            i %= n
            start.append(i), limit.append(i + 1), strides.append(1)
        elif type(i) is slice:
            if not (_plain_bound(i.start) and _plain_bound(i.stop) and _plain_bound(i.step)):
                return None   # (a symbolic size read here as an int would specialise it)
            s, e, st = i.indices(n)
            if st <= 0:
                return None
            start.append(s), limit.append(builtins.max(e, s)), strides.append(st)
            kept.append(dim)
            all_ints = False
        else:
            return None
    for dim in range(len(items), len(shape)):
        start.append(0), limit.append(shape[dim]), strides.append(1)
        kept.append(dim)
    return start, limit, strides, kept, all_ints


def _plain_bound(b):
    return b is None or type(b) is int


def _basic_getitem(x, start, limit, strides, kept, all_ints):
    """x[index] for what _basic_index found: the general path's slice and reshape."""
    shape = x._value.shape
    y = x
    if builtins.any(s != 0 for s in start) or tuple(limit) != shape or \
            builtins.any(s != 1 for s in strides):
        y = _view_of(tp.slice(x, start=tuple(start), limit=tuple(limit), strides=tuple(strides)),
                     x)
    y_shape = y._value.shape
    new_shape = tuple(y_shape[d] for d in kept)
    if new_shape != y_shape:
        y = _view_of(tp.reshape(y, shape=new_shape), x)
    if y is x:
        y = _alias(x)
    if all_ints:
        _named(y, "SelectBackward0")
    return y


_ROW_INDEX_DTYPES = (np.dtype(np.int64), np.dtype(np.int32))


def _take_rows(x, index):
    """Eager `x[index]` for a 1-d int64 or int32 tensor `index` whose values are in range:
    one gather along dim 0, the general path's values, with one node over x named
    IndexBackward0 (as PyTorch's: the result is no view). None otherwise (the general path
    then computes it, or raises its error)."""
    xv, v = x._value, index._value
    if type(xv) is not np.ndarray or type(v) is not np.ndarray or v.ndim != 1 or \
            xv.ndim == 0 or v.dtype not in _ROW_INDEX_DTYPES:
        return None
    n, k = xv.shape[0], v.shape[0]
    if k:
        lo, hi = np.minimum.reduce(v), np.maximum.reduce(v)
        if lo < -n or hi >= n:
            return None
        if lo < 0:
            v = np.where(v < 0, v + n, v)
    v = v.astype(np.int64, copy=False)
    if xv.ndim == 1:
        rows = v
    elif k and v.flags.c_contiguous:  # (np.broadcast_to's view, made directly)
        rows = np.ndarray((k,) + xv.shape[1:], np.int64, v, 0, (8,) + (0,) * (xv.ndim - 1))
        rows.flags.writeable = False
    else:
        rows = np.broadcast_to(v.reshape((-1,) + (1,) * (xv.ndim - 1)), v.shape + xv.shape[1:])
    # (the index is no edge of the node, as in PyTorch)
    return drop_scalar_edges(tp.gather(x, Tensor._make(rows), dim=0), (0,), "IndexBackward0")


def _getitem_bool_scalars(x, index):
    """`x[True]` adds a dim of size 1 (like None), `x[False]` one of size 0."""
    isb = [isinstance(i, (bool, np.bool_)) for i in index]
    y = getitem(x, tuple(None if b else i for b, i in zip(isb, index)))
    if builtins.all(bool(i) for b, i in zip(isb, index) if b):
        return y
    if builtins.any(isinstance(i, (Tensor, list, np.ndarray)) for i in index):
        raise IndexError("getitem: a False scalar index together with tensor indices is not "
                         "supported")
    n_real = builtins.sum(1 for b, i in zip(isb, index)
                          if not b and i is not None and i is not Ellipsis)
    pos = 0
    for b, i in zip(isb, index):
        if b and not i:
            y = narrow(y, pos, 0, 0)
        if b or i is None or isinstance(i, slice):
            pos += 1
        elif i is Ellipsis:
            pos += x.ndim - n_real
    return y


def _advanced(y, pos, idx):
    """numpy advanced indexing of y at dims `pos` by integer tensors `idx` (broadcast)."""
    bshape = broadcast_shapes(*[t.shape for t in idx])
    rest = [d for d in range(y.ndim) if d not in pos]
    yt = permute(y, *(pos + rest)) if pos + rest != list(range(y.ndim)) else y
    sizes = [y.shape[d] for d in pos]
    flat = None
    stride = 1
    for t, n in reversed(list(zip(idx, sizes))):
        t = _normalize_index(cast(expand(t, bshape), dt.int64), n)
        term = t if stride == 1 else mul(t, stride)
        flat = term if flat is None else add(flat, term)
        stride *= n
    rest_shape = tuple(y.shape[d] for d in rest)
    y2 = reshape(yt, (math.prod(sizes),) + rest_shape)
    out = index_select(y2, 0, reshape(flat, -1))
    out = reshape(out, tuple(bshape) + rest_shape)
    contiguous_adv = pos == list(range(pos[0], pos[0] + len(pos)))
    if contiguous_adv and pos[0] != 0:  # numpy puts the index dims where the indexed dims were
        nb = len(bshape)
        order = list(range(nb, nb + pos[0])) + list(range(nb)) + \
            list(range(nb + pos[0], out.ndim))
        out = permute(out, *order)
    return out


# ---- constant-index gathers, scatter/index variants ----------------------------------------
def _const_index(values):
    return as_tensor_like(np.asarray(values, dtype=np.int64))


@op("unfold", "UnfoldBackward0")
def unfold(x, dimension, size, step):
    """All windows of `size` elements, `step` apart, along `dimension`, as a new last dim."""
    d = _dim(dimension, x.ndim)
    n = x.shape[d] if x.ndim else 1
    if size > n:
        raise RuntimeError(f"maximum size for tensor at dimension {d} is {hint(n)} but size is "
                           f"{size}")
    if step <= 0:
        raise RuntimeError(f"step is {step} but must be > 0")
    count = (n - size) // step + 1
    idx = (np.arange(count)[:, None] * step + np.arange(size)).reshape(-1)
    if x.ndim == 0:
        return reshape(x, 1)
    y = index_select(x, d, _const_index(idx))
    y = reshape(y, tuple(x.shape[:d]) + (count, size) + tuple(x.shape[d + 1:]))
    return mark_copy_of_view(movedim(y, d + 1, -1), "unfold")


@op("repeat_interleave")
def repeat_interleave(x, repeats, dim=None, *, output_size=None):
    """Repeat each element (along dim; of the flattened input when dim is None)."""
    if dim is None:
        x, d = reshape(x, -1), 0
    else:
        d = _dim(dim, x.ndim)
    n = x.shape[d]
    r = repeats._concrete("repeat_interleave(repeats=Tensor)") \
        if isinstance(repeats, Tensor) else repeats
    r = np.broadcast_to(np.asarray(r, dtype=np.int64).reshape(-1), (n,)) \
        if np.ndim(r) == 0 or np.size(r) == 1 else np.asarray(r, dtype=np.int64)
    if r.shape != (n,):
        raise RuntimeError(f"repeats must have the same size as input along dim, but got "
                           f"repeats.size(0) = {r.shape[0]} and input.size({d}) = {hint(n)}")
    if (r < 0).any():
        raise RuntimeError("repeats can not be negative")
    return index_select(x, d, _const_index(np.repeat(np.arange(n), r)))


def _index_along(index, dim, shape):
    """A 1-D index broadcast along `dim` of `shape` (for index_add / index_copy)."""
    return tp.broadcast_in_dim(cast(reshape(index, -1), dt.int64), shape=tuple(shape),
                               dims=(dim,))


@op("index_add", "IndexAddBackward0")
def index_add(x, dim, index, source, *, alpha=1):
    """x with `alpha * source` slices added at `index` along dim (repeated indices add up)."""
    d = _dim(dim, x.ndim)
    if alpha != 1:
        source = mul(source, alpha)
    source = cast(source, x.dtype)
    idx = _normalize_index(_index_along(index, d, source.shape), x.shape[d], negative_ok=False)
    return tp.scatter_add(x, idx, source, dim=d)


def _scatter_winners(index, dim, n):
    """A 0/1 mask over index entries: the last write to each of the n target positions
    along dim wins (PyTorch leaves the winner among duplicates unspecified)."""
    v = index._value
    if not isinstance(v, np.ndarray):
        return _traced_scatter_winners(index, dim, n)
    keep = np.zeros(v.shape, dtype=bool)
    moved = np.moveaxis(v, dim, -1).reshape(-1, v.shape[dim]) if v.ndim else v.reshape(1, 1)
    km = np.moveaxis(keep, dim, -1).reshape(-1, v.shape[dim]) if v.ndim else keep.reshape(1, 1)
    for row, krow in zip(moved, km):
        seen = set()
        for j in range(len(row) - 1, -1, -1):
            if row[j] not in seen:
                seen.add(row[j])
                krow[j] = True
    keep = np.moveaxis(km.reshape(np.moveaxis(keep, dim, -1).shape), -1, dim) if v.ndim else \
        km.reshape(())
    return as_tensor_like(keep)


def _traced_scatter_winners(index, dim, n):
    """_scatter_winners of a traced (non-negative) index, as tensor ops: each entry's target
    as one key (its row's number * n + its index), a stable sort of the keys, and the last
    entry of each run of equal keys wins. None where no two entries can meet."""
    if index.ndim == 0 or index.shape[dim] == 1 or index.numel() == 0:
        return None
    moved = movedim(index, dim, -1)
    length = moved.shape[-1]
    rows = moved.numel() // length
    key = add(mul(tp.iota(shape=(rows, length), dim=0, dtype=dt.int64), n),
              reshape(moved, (rows, length)))
    key = reshape(key, (-1,))
    order = tp.argsort(key, dim=0)   # (stable)
    keys = gather(key, 0, order)
    m = key.shape[0]
    last = cat([tp.ne(narrow(keys, 0, 0, m - 1), narrow(keys, 0, 1, m - 1)),
                tp.constant(True, dt.bool_, (1,))])
    won = tp.scatter_add(tp.zeros((m,), dt.int64), order, cast(last, dt.int64), dim=0)
    return movedim(reshape(tp.gt(won, tp.zeros((m,), dt.int64)), tuple(moved.shape)), -1, dim)


@op("scatter", "ScatterBackward0")
def scatter(x, dim, index, src=None, *, value=None, reduce=None):
    """x with src (or the scalar value) written at `index` along dim."""
    if reduce is not None:
        raise NotImplementedError("scatter(reduce=...) is not supported; use scatter_add")
    if src is None:
        src = value
    d = _dim(dim, x.ndim)
    if index.dtype is not dt.int64:
        raise RuntimeError(f"scatter(): Expected dtype int64 for index, got {index.dtype.name}")
    _check_scatter_shapes(x, d, index, src)
    if index.numel() == 0:
        return clone(x)
    if not isinstance(src, Tensor):
        src = tp.constant(src, x.dtype, tuple(index.shape))
    if x.ndim == 0 or index.ndim == 0:   # a 0-d operand counts as one element
        return reshape(scatter(reshape(x, (-1,)), 0, reshape(index, (-1,)),
                               reshape(src, (-1,))), tuple(x.shape))
    src = _covered(cast(src, x.dtype), index)
    idx = _normalize_index(index, x.shape[d], negative_ok=False)
    keep = _scatter_winners(idx, d, x.shape[d])
    if keep is not None and (keep._is_traced or not bool(keep._value.all())):
        src = where(keep, src, tp.zeros(tuple(src.shape), x.dtype))
    written = tp.scatter_add(tp.zeros(tuple(x.shape), x.dtype), idx, src, dim=d)
    hit = tp.scatter_add(tp.zeros(tuple(x.shape), dt.int64), idx,
                         tp.constant(1, dt.int64, tuple(idx.shape)), dim=d)
    return where(tp.gt(hit, tp.zeros(tuple(x.shape), dt.int64)), written, x)


@op("index_copy", "IndexCopyBackward0")
def index_copy(x, dim, index, source):
    """x with the slices of `source` copied to positions `index` along dim."""
    d = _dim(dim, x.ndim)
    return scatter(x, d, _index_along(index, d, source.shape), source)


@op("index_fill", "IndexFillBackward0")
def index_fill(x, dim, index, value):
    """x with the slices at `index` along dim set to `value`."""
    d = _dim(dim, x.ndim)
    idx = _normalize_index(cast(reshape(index, -1), dt.int64), x.shape[d])
    n = x.shape[d] if x.ndim else 1
    hit = tp.scatter_add(tp.zeros((n,), dt.int64), idx,
                         tp.constant(1, dt.int64, tuple(idx.shape)), dim=0)
    mask = tp.gt(hit, tp.zeros((n,), dt.int64))
    if x.ndim:
        mask = tp.broadcast_in_dim(mask, shape=tuple(x.shape), dims=(d,))
    else:
        mask = reshape(mask, ())
    return masked_fill(x, mask, value)


@op("masked_select", "MaskedSelectBackward0")
def masked_select(x, mask):
    """The elements of x where the (broadcast) mask is True, as a 1-D tensor."""
    shape = broadcast_shapes(x.shape, mask.shape)
    return getitem(expand(x, shape), expand(mask, shape))


@op("take", "TakeBackward0")
def take(x, index):
    """x read as 1-D at `index` (any shape; negative indices count from the end)."""
    return getitem(reshape(x, -1), index)


@op("one_hot")
def one_hot(x, num_classes=-1):
    if x.dtype is not dt.int64 and x.dtype is not dt.int32:
        raise RuntimeError("one_hot is only applicable to index tensor.")
    x = checked(x, RuntimeError, "Class values must be non-negative (got {value} in "
                                 "{type0}).", low=0, shown=(x,))
    if num_classes == -1:
        num_classes = int(x._concrete("one_hot without num_classes").max()) + 1 \
            if x.numel() else 0
    else:
        x = checked(x, RuntimeError, f"Class values must be smaller than num_classes (got "
                                     f"{{value}} in {{type0}}, num_classes={num_classes}).",
                    high=num_classes, shown=(x,))
    shape = tuple(x.shape) + (num_classes,)
    classes = tp.iota(shape=shape, dim=x.ndim, dtype=x.dtype)
    xb = tp.broadcast_in_dim(x, shape=shape, dims=tuple(range(x.ndim)))
    return tp.convert_element_type(tp.eq(xb, classes), dtype=dt.int64)
