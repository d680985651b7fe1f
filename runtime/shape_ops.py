"""Shape, joining, indexing, sorting and in-place ops, decomposed into prims.

In eager mode, ops that numpy computes as views (reshape, transpose, slicing, expand)
share storage and the version counter with their input, as PyTorch views do.

In-place ops are computed out of place and written back (`commit_inplace`), which bumps the
version counter. Known difference from PyTorch: an in-place op on a *view* of a tensor that
requires grad (`y[1:].mul_(2)` with `y` requiring grad) raises instead of rebasing the view's
history onto the base; use the out-of-place op, or write into the base with `y[1:] = ...`.
Other known differences: `diagonal`, `diag`, `unfold` and `take` return copies, not views
(writing into them leaves the input unchanged); writing into an expanded tensor raises;
`view(dtype)` and integer bitwise operators are not supported; `scatter` with repeated target
positions keeps the last write (PyTorch leaves it unspecified).
"""
import builtins
import math

import numpy as np

from aotgrad.ir import dtypes as dt
from aotgrad.ir.core import current_builder
from aotgrad.runtime import tprims as tp
from aotgrad.runtime.grad_mode import state as _mode
from aotgrad.runtime.ops import (_named, as_tensor_like, broadcast_shapes, cast, norm_dims, op,
                                 where, eq, lt, add, mul, ge, logical_and)
from aotgrad.runtime.tensor import Tensor


def _view_of(out, base):
    """Share the version counter with `base` when numpy made a view (eager only)."""
    v = out._value
    if isinstance(v, np.ndarray) and isinstance(base._value, np.ndarray) and \
            np.may_share_memory(v, base._value):
        out._version = base._version
        out._base = base if base._base is None else base._base
    return out


def _dim(d, ndim):
    return norm_dims(d, ndim)[0] if ndim else 0


def _shape_arg(shape):
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    return tuple(int(s) for s in shape)


def infer_shape(shape, numel):
    shape = list(shape)
    if shape.count(-1) > 1:
        raise RuntimeError("only one dimension can be inferred")
    if -1 in shape:
        known = math.prod(s for s in shape if s != -1)
        if known == 0 or numel % known:
            raise RuntimeError(f"shape '{shape}' is invalid for input of size {numel}")
        shape[shape.index(-1)] = numel // known
    if math.prod(shape) != numel:
        raise RuntimeError(f"shape '{shape}' is invalid for input of size {numel}")
    return tuple(shape)


@op("reshape", "ViewBackward0")
def reshape(x, *shape):
    shape = infer_shape(_shape_arg(shape), x.numel())
    return _view_of(tp.reshape(x, shape=shape), x)


def _alias(x):
    """A same-shape view: reshape to the same shape (keeps autograd history, like view)."""
    return _view_of(tp.reshape(x, shape=tuple(x.shape)), x)


def view(x, *shape):
    """reshape that must not copy: an incompatible non-contiguous layout raises (as in
    PyTorch); `view(dtype)` is not supported."""
    if len(shape) == 1 and isinstance(shape[0], dt.DType):
        raise NotImplementedError(f"view: reinterpreting {x.dtype.name} as {shape[0].name} "
                                  f"(view(dtype)) is not supported")
    out = reshape(x, *shape)
    v, xv = out._value, x._value
    if isinstance(v, np.ndarray) and isinstance(xv, np.ndarray) and v.size > 1 and \
            not np.may_share_memory(v, xv):
        raise RuntimeError("view size is not compatible with input tensor's size and stride (at "
                           "least one dimension spans across two contiguous subspaces). Use "
                           ".reshape(...) instead.")
    return out


def view_as(x, other):
    return reshape(x, tuple(other.shape))


def reshape_as(x, other):
    return reshape(x, tuple(other.shape))


def flatten(x, start_dim=0, end_dim=-1):
    if x.ndim == 0:
        return reshape(x, 1)
    s, e = _dim(start_dim, x.ndim), _dim(end_dim, x.ndim)
    shape = tuple(x.shape[:s]) + (math.prod(x.shape[s:e + 1]),) + tuple(x.shape[e + 1:])
    return reshape(x, shape)


def unflatten(x, dim, sizes):
    d = _dim(dim, x.ndim)
    sizes = infer_shape(sizes, x.shape[d])
    return reshape(x, tuple(x.shape[:d]) + sizes + tuple(x.shape[d + 1:]))


@op("permute", "PermuteBackward0")
def permute(x, *dims):
    dims = _shape_arg(dims)
    if len(dims) != x.ndim:
        raise RuntimeError(f"permute(sparse_coo): number of dimensions in the tensor input does "
                           f"not match the length of the desired ordering of dimensions i.e. "
                           f"input.dim() = {x.ndim} is not equal to len(dims) = {len(dims)}")
    perm = tuple(_dim(d, x.ndim) for d in dims)
    return _view_of(tp.transpose(x, perm=perm), x)


@op("transpose", "TransposeBackward0")
def transpose(x, dim0, dim1):
    if x.ndim < 2 and x.ndim == 0:
        return x
    a, b = _dim(dim0, x.ndim), _dim(dim1, x.ndim)
    perm = list(range(x.ndim))
    perm[a], perm[b] = perm[b], perm[a]
    return _view_of(tp.transpose(x, perm=tuple(perm)), x)


swapaxes = swapdims = transpose


def t(x):
    if x.ndim > 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {x.ndim}D")
    if x.ndim < 2:
        return _alias(x)
    out = transpose(x, 0, 1)
    if out.grad_fn is not None:
        out.grad_fn._name = "TBackward0"
    return out


def movedim(x, source, destination):
    src = [_dim(d, x.ndim) for d in ((source,) if isinstance(source, int) else source)]
    dst = [_dim(d, x.ndim) for d in ((destination,) if isinstance(destination, int)
                                      else destination)]
    if len(src) != len(dst):
        raise RuntimeError(f"movedim: Invalid source or destination dims: source ({list(src)} "
                           f"dims) should contain the same number of dims as destination "
                           f"({list(dst)} dims)")
    order = [None] * x.ndim
    for s, d in zip(src, dst):
        order[d] = s
    rest = iter(d for d in range(x.ndim) if d not in src)
    return permute(x, *[next(rest) if o is None else o for o in order])


@op("unsqueeze", "UnsqueezeBackward0")
def unsqueeze(x, dim):
    d = norm_dims(dim, x.ndim + 1)[0]
    return reshape(x, tuple(x.shape[:d]) + (1,) + tuple(x.shape[d:]))


@op("squeeze")
def squeeze(x, dim=None):
    if dim is None:
        dims = [i for i, n in enumerate(x.shape) if n == 1]
    else:
        dims = [d for d in norm_dims(dim, x.ndim) if x.shape[d] == 1] if x.ndim else []
    out = reshape(x, tuple(n for i, n in enumerate(x.shape) if i not in dims))
    return _named(out, "SqueezeBackward0" if dim is None else
                  "SqueezeBackward1" if isinstance(dim, (int, np.integer)) else "SqueezeBackward2")


@op("expand", "ExpandBackward0")
def expand(x, *sizes):
    sizes = _shape_arg(sizes)
    if len(sizes) < x.ndim:
        raise RuntimeError(f"expand: the number of sizes provided ({len(sizes)}) must be greater "
                           f"or equal to the number of dimensions in the tensor ({x.ndim})")
    lead = len(sizes) - x.ndim
    for i in range(lead):
        if sizes[i] < 0:
            raise RuntimeError(f"The expanded size of the tensor ({sizes[i]}) isn't allowed in a "
                               f"leading, non-existing dimension {i}")
    shape = tuple(x.shape[i - lead] if s == -1 else s for i, s in enumerate(sizes))
    for i, n in enumerate(x.shape):
        if n != 1 and n != shape[lead + i]:
            raise RuntimeError(f"The expanded size of the tensor ({shape[lead + i]}) must match "
                               f"the existing size ({n}) at non-singleton dimension {lead + i}. "
                               f" Target sizes: {list(sizes)}.  Tensor sizes: {list(x.shape)}")
    return _view_of(tp.broadcast_to(x, shape), x)


def expand_as(x, other):
    return expand(x, tuple(other.shape))


def broadcast_to(x, shape):
    return expand(x, tuple(shape))


def broadcast_tensors(*ts):
    shape = broadcast_shapes(*[t.shape for t in ts])
    return tuple(expand(t, shape) for t in ts)


@op("repeat", "RepeatBackward0")
def repeat(x, *reps):
    reps = _shape_arg(reps)
    if len(reps) < x.ndim:
        raise RuntimeError("Number of dimensions of repeat dims can not be smaller than number "
                           "of dimensions of tensor")
    x = reshape(x, (1,) * (len(reps) - x.ndim) + tuple(x.shape))
    # (r0, n0, r1, n1, ...) broadcast then merge
    inter = []
    for r, n in zip(reps, x.shape):
        inter += [r, n]
    y = tp.broadcast_in_dim(x, shape=tuple(inter), dims=tuple(range(1, 2 * x.ndim, 2)))
    return tp.reshape(y, shape=tuple(r * n for r, n in zip(reps, x.shape)))


def tile(x, *reps):
    reps = _shape_arg(reps)
    reps = (1,) * (x.ndim - len(reps)) + reps
    return repeat(x, reps)


@op("clone", "CloneBackward0")
def clone(x, *, memory_format=None):
    if isinstance(x._value, np.ndarray):
        out = tp.reshape(x, shape=tuple(x.shape))
        out._value = np.array(out._value, copy=True)
        return out
    return tp.reshape(x, shape=tuple(x.shape))


def contiguous(x, memory_format=None):
    """x itself when its memory is already C-contiguous, else a contiguous copy."""
    if is_contiguous(x):
        return x
    out = clone(x)
    out._value = np.ascontiguousarray(out._value)
    return out


def is_contiguous(x, memory_format=None):
    """Whether the eager buffer is C-contiguous (traced values always count as contiguous)."""
    v = x._value
    return not isinstance(v, np.ndarray) or v.flags.c_contiguous or v.size <= 1 or \
        _c_contiguous_ignoring_unit_dims(v)


def _c_contiguous_ignoring_unit_dims(v):
    expect = v.itemsize
    for n, st in reversed(list(zip(v.shape, v.strides))):
        if n != 1:
            if st != expect:
                return False
            expect *= n
    return True


@op("flip", "FlipBackward0")
def flip(x, *dims):
    return tp.rev(x, dims=norm_dims(_shape_arg(dims) if dims else (), x.ndim))


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


# ---- joining and splitting -----------------------------------------------------------------
@op("cat", "CatBackward0")
def cat(tensors, dim=0):
    tensors = [as_tensor_like(t) for t in tensors]
    if not tensors:
        raise RuntimeError("cat(): expected a non-empty list of Tensors")
    for i, t in enumerate(tensors):
        if t.ndim == 0:
            raise RuntimeError(f"zero-dimensional tensor (at position {i}) cannot be "
                               f"concatenated")
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
                               f"size {first.shape[j]} but got size {t.shape[j]} for tensor "
                               f"number {i} in the list (shapes {list(first.shape)} and "
                               f"{list(t.shape)}).")
    if len(tensors) == 1:
        return _alias(tensors[0])
    return tp.concatenate(*tensors, dim=d)


concat = concatenate = cat


@op("stack", "StackBackward0")
def stack(tensors, dim=0):
    tensors = list(tensors)
    if not tensors:
        raise RuntimeError("stack expects a non-empty TensorList")
    s0 = tuple(tensors[0].shape)
    for i, t in enumerate(tensors):
        if tuple(t.shape) != s0:
            raise RuntimeError(f"stack expects each tensor to be equal size, but got {list(s0)} "
                               f"at entry 0 and {list(t.shape)} at entry {i}")
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
        raise IndexError(f"start ({start}) + length ({length}) exceeds dimension size "
                         f"({x.shape[d]}).")
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
            raise RuntimeError(f"split_with_sizes expects split_sizes to sum exactly to {n} "
                               f"(input tensor's size at dimension {d}), but got split_sizes="
                               f"{sizes}")
    out, off = [], 0
    for s in sizes:
        out.append(_named(narrow(x, d, off, s),
                          "SplitBackward0" if isinstance(split_size_or_sections, int)
                          else "SplitWithSizesBackward0"))
        off += s
    return tuple(out)


def chunk(x, chunks, dim=0):
    n = x.shape[_dim(dim, x.ndim)]
    return split(x, -(-n // chunks) if n else 1, dim)


def unbind(x, dim=0):
    d = _dim(dim, x.ndim)
    return tuple(_named(select(x, d, i), "UnbindBackward0") for i in range(x.shape[d]))


def select(x, dim, index):
    d = _dim(dim, x.ndim)
    n = x.shape[d]
    if not -n <= index < n:
        raise IndexError(f"index {index} is out of bounds for dimension {d} with size {n}")
    index %= n
    s = narrow(x, d, index, 1)
    return _view_of(tp.reshape(s, shape=tuple(x.shape[:d]) + tuple(x.shape[d + 1:])), x)


# ---- triangular, one_hot, sort -------------------------------------------------------------
def _tri_mask(x, diagonal, upper):
    if x.ndim < 2:
        raise RuntimeError(f"{'triu' if upper else 'tril'}: input tensor must have at least 2 "
                           f"dimensions")
    r, c = x.shape[-2], x.shape[-1]
    rows = tp.iota(shape=(r, c), dim=0, dtype=dt.int64)
    cols = tp.iota(shape=(r, c), dim=1, dtype=dt.int64)
    diff = tp.sub(cols, rows)
    k = tp.broadcast_to(tp.constant(diagonal, dt.int64), (r, c))
    m = tp.ge(diff, k) if upper else tp.le(diff, k)
    return tp.broadcast_to(m, tuple(x.shape))


@op("tril", "TrilBackward0")
def tril(x, diagonal=0):
    return where(_tri_mask(x, diagonal, False), x, tp.zeros(tuple(x.shape), x.dtype))


@op("triu", "TriuBackward0")
def triu(x, diagonal=0):
    return where(_tri_mask(x, diagonal, True), x, tp.zeros(tuple(x.shape), x.dtype))


@op("one_hot")
def one_hot(x, num_classes=-1):
    if x.dtype is not dt.int64 and x.dtype is not dt.int32:
        raise RuntimeError("one_hot is only applicable to index tensor.")
    if num_classes == -1:
        num_classes = int(x._concrete("one_hot without num_classes").max()) + 1
    shape = tuple(x.shape) + (num_classes,)
    classes = tp.iota(shape=shape, dim=x.ndim, dtype=x.dtype)
    xb = tp.broadcast_in_dim(x, shape=shape, dims=tuple(range(x.ndim)))
    return tp.convert_element_type(tp.eq(xb, classes), dtype=dt.int64)


@op("argsort")
def argsort(x, dim=-1, descending=False, stable=False):
    """Indices that sort x along dim; always stable: equal elements keep their order, also
    when descending (NaN sorts as the largest value, as in PyTorch)."""
    d = _dim(dim, x.ndim)
    if x.ndim == 0:
        return tp.constant(0, dt.int64)
    if not descending:
        return tp.argsort(x, dim=d)
    # ascending stable sort of the reversed input, read backwards: ties keep their order
    n = x.shape[d]
    idx = tp.rev(tp.argsort(tp.rev(x, dims=(d,)), dim=d), dims=(d,))
    return tp.sub(tp.broadcast_to(tp.constant(n - 1, dt.int64), tuple(idx.shape)), idx)


@op("sort", "SortBackward0")
def sort(x, dim=-1, descending=False, stable=False):
    from aotgrad.runtime.ops import return_types
    idx = argsort(x, dim, descending)
    if x.ndim == 0:
        return return_types["sort"](_alias(x), idx)
    return return_types["sort"](take_along_dim(x, idx, _dim(dim, x.ndim)), idx)


@op("topk", "TopkBackward0")
def topk(x, k, dim=-1, largest=True, sorted=True):
    """The k largest (smallest) elements along dim, in order; among equal elements the
    first ones are taken (PyTorch leaves that order unspecified)."""
    from aotgrad.runtime.ops import return_types
    d = _dim(dim, x.ndim)
    if x.ndim == 0:
        if k not in (0, 1):
            raise RuntimeError(f"selected index k out of range (k={k}, size 1)")
        return return_types["topk"](_alias(x), argsort(x))
    if not 0 <= k <= x.shape[d]:
        raise RuntimeError(f"selected index k out of range (k={k}, size {x.shape[d]})")
    idx = narrow(argsort(x, d, descending=largest), d, 0, k)
    return return_types["topk"](take_along_dim(x, idx, d), idx)


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
    if k > x.shape[d]:  # gather needs index dims <= input dims outside `dim`: fine; inside: ok
        pass
    return tp.gather(x, idx, dim=d)


@op("scatter_add", "ScatterAddBackward0")
def scatter_add(x, dim, index, src):
    return tp.scatter_add(x, index, src, dim=_dim(dim, x.ndim))


@op("masked_fill", "MaskedFillBackward0")
def masked_fill(x, mask, value):
    return where(mask, cast(as_tensor_like(value, x.dtype), x.dtype), x)


def _normalize_index(idx, n, negative_ok=True):
    """Negative indices wrap; out-of-range indices raise (checked eagerly on concrete values).
    With negative_ok=False (gather, index_select) a negative index is out of range."""
    if isinstance(idx._value, np.ndarray):
        v = idx._value
        if v.size and (v.min() < (-n if negative_ok else 0) or v.max() >= n):
            bad = v[(v < (-n if negative_ok else 0)) | (v >= n)].flat[0]
            raise IndexError(f"index {bad} is out of bounds for dimension with size {n}")
        if v.size and v.min() < 0:
            return as_tensor_like(np.where(v < 0, v + n, v))
        return idx
    zero = tp.zeros(tuple(idx.shape), idx.dtype)
    return tp.where(tp.lt(idx, zero), tp.add(idx, tp.broadcast_to(tp.constant(n, idx.dtype),
                                                                 tuple(idx.shape))), idx)


# ---- __getitem__ / __setitem__ -------------------------------------------------------------
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
                from aotgrad.runtime.dispatch import graph_break
                graph_break("boolean mask indexing (data-dependent shape)", x)
            want = tuple(x.shape[dim:dim + i.ndim])
            if tuple(i.shape) != want:
                bad = builtins.next((k for k in range(i.ndim) if k >= len(want) or
                                     i.shape[k] != want[k]), 0)
                raise IndexError(f"The shape of the mask {list(i.shape)} at index {bad} does not "
                                 f"match the shape of the indexed tensor {list(x.shape)} at "
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
                raise IndexError(f"index {i} is out of bounds for dimension {dim} with size {n}")
            i %= n
            start.append(i), limit.append(i + 1), strides.append(1)
            shape_after.append(("drop", None))
        elif isinstance(i, slice):
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


def _inplace_guard(x, opname):
    if _mode.grad_enabled:
        if x.grad_fn is None and x.requires_grad:
            raise RuntimeError(f"a leaf Variable that requires grad is being used in an in-place "
                               f"operation ({opname}).")
        if x._base is not None and x._base.requires_grad:
            raise RuntimeError(f"{opname}: in-place modification of a view of a tensor that "
                               f"requires grad is not supported; use the out-of-place op or "
                               f"modify the base tensor")


def commit_inplace(x, new, opname):
    """Make `new` (computed out of place) the value and history of `x`; bump its version."""
    _inplace_guard(x, opname)
    if new.dtype is not x.dtype:
        if not x.dtype.is_floating_point and new.dtype.is_floating_point:
            raise RuntimeError(f"result type {new.dtype.name} can't be cast to the desired "
                               f"output type {x.dtype.name}")
        new = cast(new, x.dtype)
    if x.requires_grad and not new.requires_grad and _mode.grad_enabled:
        # the new value does not depend on x's old one: its history gets a zero gradient
        keep = tp.constant(True, dt.bool_, tuple(x.shape))
        new = tp.where(keep, new, snapshot(x))
    if tuple(new.shape) != tuple(x.shape):
        raise RuntimeError(f"output with shape {list(x.shape)} doesn't match the broadcast shape "
                           f"{list(new.shape)}")
    if isinstance(x._value, np.ndarray) and not isinstance(new._value, np.ndarray):
        # a real tensor written inside a trace holds the traced value (history, version)
        # until the trace ends; the tracer restores it and writes it back at run time
        current_builder().record_mutation(x, new._value)
    if isinstance(x._value, np.ndarray) and isinstance(new._value, np.ndarray):
        if not x._value.flags.writeable:
            raise RuntimeError(f"{opname}: unsupported operation: more than one element of the "
                               f"written-to tensor refers to a single memory location (it is an "
                               f"expanded view). Please clone() the tensor before performing "
                               f"the operation.")
        np.copyto(x._value, new._value)
        if new.grad_fn is not None:  # the new node saved `new`'s own buffer, not x's
            pass
    else:
        x._value = new._value
    x._version.v += 1
    if new.requires_grad and _mode.grad_enabled:
        x.grad_fn, x._output_nr, x.requires_grad = new.grad_fn, new._output_nr, True
        x._retains_grad = False
    return x


def snapshot(x):
    """x, or (when its old value may be saved for backward by an in-place op) a copy of it
    with the same autograd identity, so the in-place write cannot corrupt what was saved.
    Traced values are immutable SSA values: there the alias needs no copy."""
    if not (_mode.grad_enabled and x.requires_grad and x.grad_fn is not None):
        return x
    if isinstance(x._value, np.ndarray):
        if current_builder() is not None:
            return x  # a real tensor inside a trace: lifted by identity
        value = np.array(x._value, copy=True)
    else:
        value = x._value
    s = Tensor._make(value, True)
    s.grad_fn, s._output_nr = x.grad_fn, x._output_nr
    return s


@op("setitem", "CopySlices")
def setitem(x, index, value):
    value = as_tensor_like(value, x.dtype)
    needs_grad = _mode.grad_enabled and (x.requires_grad or value.requires_grad)
    for i in (index if isinstance(index, tuple) else (index,)):
        if isinstance(i, slice) and i.step is not None and i.step <= 0:
            raise ValueError("step must be greater than zero")
    if not needs_grad and current_builder() is None:
        _inplace_guard(x, "setitem")
        idx = index._value if isinstance(index, Tensor) else index
        if isinstance(idx, tuple):
            idx = tuple(i._value if isinstance(i, Tensor) else i for i in idx)
        try:
            x._value[idx] = value._value
        except ValueError as e:
            raise RuntimeError(f"setitem: {e} (destination shape {list(x.shape)}, value shape "
                               f"{list(value.shape)})") from None
        x._version.v += 1
        return x
    pos = getitem(tp.iota(shape=(x.numel(),), dim=0, dtype=dt.int64).reshape(tuple(x.shape)),
                  index)
    v = expand(cast(value, x.dtype), tuple(pos.shape))
    pos_flat, v_flat = reshape(pos, -1), reshape(v, -1)
    base = snapshot(x)
    xf = reshape(base, -1)
    zeros = tp.zeros((x.numel(),), x.dtype)
    scattered = tp.scatter_add(zeros, pos_flat, v_flat, dim=0)
    hit = tp.scatter_add(tp.zeros((x.numel(),), dt.int64), pos_flat,
                         tp.broadcast_to(tp.constant(1, dt.int64), tuple(pos_flat.shape)), dim=0)
    new = where(tp.gt(hit, tp.zeros((x.numel(),), dt.int64)), scattered, xf)
    return commit_inplace(x, reshape(new, tuple(x.shape)), "setitem")


def index_put_(x, indices, values, accumulate=False):
    if accumulate:
        raise NotImplementedError("index_put_ with accumulate=True is not supported")
    return setitem(x, tuple(indices), values)


# ---- diagonals, windows, splitting by sections, scatter/index variants ----------------------
def _const_index(values):
    return as_tensor_like(np.asarray(values, dtype=np.int64))


@op("diagonal", "DiagonalBackward0")
def diagonal(x, offset=0, dim1=0, dim2=1):
    """The diagonal of the (dim1, dim2) planes, as a new last dim (a copy, not a view)."""
    d1, d2 = _dim(dim1, x.ndim), _dim(dim2, x.ndim)
    if d1 == d2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    y = movedim(x, (d1, d2), (-2, -1))
    r, c = y.shape[-2], y.shape[-1]
    k = builtins.max(0, builtins.min(r, c - offset) if offset >= 0 else
                     builtins.min(r + offset, c))
    rows = np.arange(k) + builtins.max(0, -offset)
    pos = rows * c + rows + offset
    flat = reshape(y, tuple(y.shape[:-2]) + (r * c,))
    return index_select(flat, flat.ndim - 1, _const_index(pos))


@op("diag_embed", "DiagEmbedBackward0")
def diag_embed(x, offset=0, dim1=-2, dim2=-1):
    """Matrices with x's last dim on their `offset` diagonal: `diag_embed(v)[i, i] = v[i]`."""
    n = x.shape[-1] + builtins.abs(offset)
    k = x.shape[-1]
    rows = np.arange(k) + builtins.max(0, -offset)
    pos = rows * n + rows + offset
    lead = tuple(x.shape[:-1])
    out = index_add(tp.zeros(lead + (n * n,), x.dtype), x.ndim - 1, _const_index(pos), x)
    out = reshape(out, lead + (n, n))
    d1, d2 = _dim(dim1, out.ndim), _dim(dim2, out.ndim)
    if (d1, d2) != (out.ndim - 2, out.ndim - 1):
        out = movedim(out, (-2, -1), (d1, d2))
    return out


def diag(x, diagonal=0):
    """A 1-D x becomes a square matrix with x on the `diagonal`; a 2-D x gives its diagonal."""
    if x.ndim == 1:
        return _named(diag_embed(x, diagonal), "DiagEmbedBackward0")
    if x.ndim == 2:
        return globals()["diagonal"](x, diagonal)
    raise RuntimeError(f"diag(): Supports 1D or 2D tensors. Got {x.ndim}D")


@op("unfold", "UnfoldBackward0")
def unfold(x, dimension, size, step):
    """All windows of `size` elements, `step` apart, along `dimension`, as a new last dim."""
    d = _dim(dimension, x.ndim)
    n = x.shape[d] if x.ndim else 1
    if size > n:
        raise RuntimeError(f"maximum size for tensor at dimension {d} is {n} but size is {size}")
    if step <= 0:
        raise RuntimeError(f"step is {step} but must be > 0")
    count = (n - size) // step + 1
    idx = (np.arange(count)[:, None] * step + np.arange(size)).reshape(-1)
    if x.ndim == 0:
        return reshape(x, 1)
    y = index_select(x, d, _const_index(idx))
    y = reshape(y, tuple(x.shape[:d]) + (count, size) + tuple(x.shape[d + 1:]))
    return movedim(y, d + 1, -1)


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


def rot90(x, k=1, dims=(0, 1)):
    """Rotate by 90 degrees k times in the plane `dims` (from the first towards the second)."""
    if len(dims) != 2:
        raise RuntimeError(f"expected total rotation dims == 2, but got dims = {len(dims)}")
    a, b = _dim(dims[0], x.ndim), _dim(dims[1], x.ndim)
    if a == b:
        raise RuntimeError(f"expected rotation dims to be different, but got dim0 = {a} and "
                           f"dim1 = {b}")
    k %= 4
    if k == 1:
        return transpose(flip(x, b), a, b)
    if k == 2:
        return flip(x, (a, b))
    if k == 3:
        return transpose(flip(x, a), a, b)
    return _alias(x)


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
                           f"repeats.size(0) = {r.shape[0]} and input.size({d}) = {n}")
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


def _scatter_winners(index, dim):
    """A 0/1 mask over index entries: the last write to each target position wins (eager;
    PyTorch leaves the winner among duplicates unspecified)."""
    v = index._value
    if not isinstance(v, np.ndarray):
        return None
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
    if not isinstance(src, Tensor):
        src = tp.constant(src, x.dtype, tuple(index.shape))
    src = cast(src, x.dtype)
    for k in range(src.ndim):  # only the part of src that index covers is used
        if k < index.ndim and index.shape[k] < src.shape[k]:
            src = narrow(src, k, 0, index.shape[k])
    idx = _normalize_index(index, x.shape[d], negative_ok=False)
    keep = _scatter_winners(idx, d)
    if keep is not None and not bool(keep._value.all()):
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


def nonzero(x, *, as_tuple=False):
    """Indices of the non-zero elements: an (n, ndim) int64 tensor, or one 1-D tensor per dim."""
    v = x._concrete("nonzero (data-dependent shape)")
    nz = np.nonzero(np.atleast_1d(v))
    if as_tuple:
        return tuple(as_tensor_like(i.astype(np.int64)) for i in nz)
    return as_tensor_like(np.stack(nz, axis=1).astype(np.int64).reshape(-1, builtins.max(
        v.ndim, 1)) if v.ndim else np.zeros((int(bool(v)), 0), dtype=np.int64))


def argwhere(x):
    return nonzero(x)
