"""Views, reshapes and transposes: reshape/view/flatten, permute/transpose/movedim,
squeeze/unsqueeze, expand/broadcast_to, repeat/tile, clone/contiguous, flip, rot90.

In eager mode, ops that numpy computes as views (reshape, transpose, slicing, expand)
share storage and the version counter with their input, as PyTorch views do.
`view(dtype)` is not supported.

>>> import aotgrad
>>> from aotgrad.runtime import view_ops
>>> tuple(view_ops.transpose(aotgrad.ones(2, 3), 0, 1).shape)
(3, 2)
"""
import math
import weakref

import numpy as np

from aotgrad.ir import dtypes as dt
from aotgrad.ir.core import Var, current_builder, current_op
from aotgrad.runtime.sizes import size_list, type_str
from aotgrad.ir.symbolic import SymInt, hint
from aotgrad.runtime import layout
from aotgrad.runtime import memory_format as _layout
from aotgrad.runtime import tprims as tp
from aotgrad.runtime.inference_views import note_view
from aotgrad.runtime.version_counter import VersionCounter
from aotgrad.runtime import view_meta
from aotgrad.runtime.dual_state import set_tangent, tangent_of
from aotgrad.runtime.view_meta import CreationMeta
from aotgrad.runtime.grad_mode import state as _mode
from aotgrad.runtime.op_base import _named, broadcast_shapes, norm_dims, op
from aotgrad.runtime.tensor import Tensor


def _view_of(out, base):
    """Share the version counter with `base` when numpy made a view (eager only)."""
    v = out._value
    if isinstance(v, np.ndarray) and isinstance(base._value, np.ndarray) and (
            np.may_share_memory(v, base._value) or
            # an empty array shares no memory, yet a view of an empty tensor is a view
            (v.size == 0 and v.base is not None and _buffer(v) is _buffer(base._value))):
        out._version_counter = base._version_counter
        kind = view_meta.for_new_view(base)
        root = out._base = base if base._base is None else base._base
        # a view is an inference tensor exactly when its base is (as in PyTorch): a view of a
        # normal tensor taken inside inference_mode stays a normal tensor
        out._inference = base._inference
        if note_view(out, base, root):  # a view of an inference tensor records nothing
            return out
        d = out.__dict__
        d["_view_made"] = True  # an in-place op on it may rebase the root's history
        if kind is not CreationMeta.DEFAULT:
            d["_creation_meta"] = kind
        if _mode.grad_enabled or kind is not CreationMeta.DEFAULT:
            # regenerated when the root is modified in place (with history from then on), or
            # refused (a view made under no_grad, ...)
            track_view(out, root)
    elif current_builder() is not None and not _inplace_op_running():
        note_traced_alias(out, base)
    return out


def track_view(out, root):
    """Remember view `out` on `root`, whose in-place modification regenerates its history."""
    views = root.__dict__.get("_views")  # id -> weakref (tensors compare by value)
    if views is None:
        views = root.__dict__["_views"] = {}
    k = id(out)
    views[k] = weakref.ref(out, lambda r, d=views, k=k: d.pop(k, None) if d.get(k) is r
                           else None)


def note_traced_alias(out, base):
    """Inside a trace a view (or a detached tensor) is a value of its own: remember whom it
    aliases, so that an in-place write that other aliases would have to see breaks the graph
    (runs eagerly) instead of giving them stale values. (Views an in-place op makes for
    itself are its own business.)"""
    root = base.__dict__.get("_traced_root")
    root = base if root is None or root() is None else root()
    out.__dict__["_traced_root"] = weakref.ref(root)
    views = root.__dict__.setdefault("_traced_views", weakref.WeakValueDictionary())
    views[id(out)] = out


def _buffer(a):
    """The numpy array owning `a`'s memory."""
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


def _inplace_op_running():
    name = current_op.get()
    return name is not None and (name.endswith("_") or name == "setitem")


def traced_aliases(x):
    """Inside a trace: whether `x` is a view of a value that is still referenced, or has
    views that are (an in-place write to x would have to reach them)."""
    root = x.__dict__.get("_traced_root")
    if root is not None and root() is not None:
        return True
    views = x.__dict__.get("_traced_views")
    return bool(views) and any(v is not x for v in views.values())


def _dim(d, ndim):
    if type(d) is int and -ndim <= d < ndim:  # (norm_dims' answer for a dim in range)
        return d % ndim
    return norm_dims(d, ndim)[0] if ndim else 0


def _shape_arg(shape):
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    return tuple(s if isinstance(s, SymInt) else int(s) for s in shape)  # (a size stays symbolic)


def infer_shape(shape, numel):
    shape = list(shape)
    if shape.count(-1) > 1:
        raise RuntimeError("only one dimension can be inferred")
    if -1 in shape:
        known = math.prod(s for s in shape if s != -1)
        if known == 0 or numel % known:
            raise RuntimeError(f"shape '{size_list(shape)}' is invalid for input of size "
                               f"{hint(numel)}")
        shape[shape.index(-1)] = numel // known
    if math.prod(shape) != numel:
        raise RuntimeError(f"shape '{size_list(shape)}' is invalid for input of size "
                               f"{hint(numel)}")
    return tuple(shape)


@op("reshape", "ViewBackward0")
def reshape(x, *shape):
    shape = infer_shape(_shape_arg(shape), x.numel())
    return _view_of(tp.reshape(x, shape=shape), x)


def _alias(x):
    """A same-shape view: reshape to the same shape (keeps autograd history, like view)."""
    return _view_of(tp.reshape(x, shape=tuple(x.shape)), x)


@op("view", "ViewBackward0")
def view(x, *shape):
    """reshape that must not copy: an incompatible non-contiguous layout raises (as in
    PyTorch); `view(dtype)` is not supported."""
    if len(shape) == 1 and isinstance(shape[0], dt.DType):
        raise NotImplementedError(f"view: reinterpreting {x.dtype.name} as {shape[0].name} "
                                  f"(view(dtype)) is not supported")
    if not isinstance(x._value, np.ndarray):
        layout.certain_probe(x, "view()")   # (eagerly, a view of some layouts raises)
    out = reshape(x, *shape)
    if out.numel() > 1 and not layout.is_view_of(out, x):   # traced: the eager layout's rule
        raise RuntimeError(f"view size is not compatible with input tensor's size and stride (at "
                           f"least one dimension spans across two contiguous subspaces). Use "
                           f".reshape(...) instead. (input {type_str(x)} with strides "
                           f"{_elem_strides(x)}, view shape {size_list(out.shape)})")
    return out


def _elem_strides(x):
    p = layout.probe(x)
    if p is None:   # C-contiguous
        return tuple(math.prod(x.shape[i + 1:]) for i in range(x.ndim))
    return tuple(s // p.itemsize for s in p.strides)


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
    if len(set(perm)) != len(perm):
        raise RuntimeError(f"permute(): duplicate dims are not allowed (dims {dims} for input "
                           f"{type_str(x)})")
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
    out = _alias(x) if x.ndim < 2 else transpose(x, 0, 1)
    return _named(out, "TBackward0")


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


def expanded_shape(x, sizes):
    """The shape `x.expand(*sizes)` has (-1 keeps a size), or PyTorch's error where x does
    not expand to it. Ops that expand an operand to a result's shape (addmm's input, a
    linear's bias, the value of `x[i] = v`) check with it, so their message is expand's."""
    if len(sizes) < x.ndim:
        raise RuntimeError(f"expand({x.type()}{{{size_list(x.shape)}}}, "
                           f"size={size_list(sizes)}): the number of sizes provided "
                           f"({len(sizes)}) must be greater or equal to the number of "
                           f"dimensions in the tensor ({x.ndim})")
    lead = len(sizes) - x.ndim
    for i in range(lead):
        if sizes[i] < 0:
            raise RuntimeError(f"The expanded size of the tensor ({sizes[i]}) isn't allowed in a "
                               f"leading, non-existing dimension {i}")
    shape = tuple(x.shape[i - lead] if s == -1 else s for i, s in enumerate(sizes))
    for i, n in enumerate(x.shape):
        if n != 1 and n != shape[lead + i]:
            raise RuntimeError(f"The expanded size of the tensor ({hint(shape[lead + i])}) must "
                               f"match the existing size ({hint(n)}) at non-singleton dimension "
                               f"{lead + i}.  Target sizes: {size_list(sizes)}.  Tensor sizes: "
                               f"{size_list(x.shape)}")
    return shape


@op("expand", "ExpandBackward0")
def expand(x, *sizes):
    shape = expanded_shape(x, _shape_arg(sizes))
    if shape == tuple(x.shape):
        return _alias(x)  # still a new view (tp.broadcast_to would return x itself)
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
    _layout.check(x, memory_format, "clone")
    # preserve_format (the default) keeps x's layout as PyTorch's empty_like does; the other
    # formats give C order (channels-last ones too, runtime/memory_format.py)
    preserve = memory_format is None or memory_format is _layout.preserve_format
    if isinstance(x._value, np.ndarray):
        out = tp.reshape(x, shape=tuple(x.shape))
        out._value = np.array(out._value, order="C", copy=True)
        if preserve:
            layout.like_layout(x, out)
        out._version_counter = VersionCounter()  # its own memory now: not a view's counter
        tangent = tangent_of(out)
        if tangent is not None:  # the reshape's tangent views x's: the copy gets its own
            set_tangent(out, clone(tangent))
        return out
    out = tp.reshape(x, shape=tuple(x.shape))
    layout.mark_fresh(out)   # a copy eagerly: a fresh layout, x's under preserve_format
    return layout.like_layout(x, out) if preserve else out


def contiguous(x, memory_format=None):
    """x itself when its memory is already C-contiguous, else a contiguous copy (a
    channels-last request is validated and keeps C order, see runtime/memory_format.py)."""
    _layout.check(x, memory_format, "contiguous")
    if is_contiguous(x):
        return x
    return clone(x, memory_format=_layout.contiguous_format)


def is_contiguous(x, memory_format=None):
    """Whether the eager buffer is C-contiguous (traced: the layout eager mode would give), or
    channels-last contiguous when `memory_format` asks (rank 4, or 5 for channels_last_3d;
    False at other ranks, as PyTorch)."""
    v = layout.certain_probe(x, "is_contiguous()")
    if memory_format is _layout.channels_last or memory_format is _layout.channels_last_3d:
        if x.ndim != memory_format.rank:
            return False
        shape = tuple(x.shape)
        strides = tuple(s // v.itemsize for s in v.strides) if v is not None else \
            tuple(math.prod(shape[d + 1:]) for d in range(len(shape)))
        need = 1   # channels innermost, then the spatial dims from the last, batch outermost
        for d in [1] + list(range(x.ndim - 1, 1, -1)) + [0]:
            if shape[d] != 1:
                if strides[d] != need:
                    return False
                need *= shape[d]
        return True
    return v is None or layout.is_c_contiguous(v)


@op("flip", "FlipBackward0")
def flip(x, *dims):
    return tp.rev(x, dims=norm_dims(_shape_arg(dims) if dims else (), x.ndim))


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


def detach(self):
    """Tensor.detach: a new tensor sharing storage and version counter, outside the autograd
    graph."""
    t = Tensor._make(self._value, False)
    t._version_counter = self._version_counter
    t._inference = self._inference  # an alias: an inference tensor exactly when self is
    if isinstance(self._value, Var):
        b = current_builder()
        if b is not None:
            b.track(t)
            note_traced_alias(t, self)  # it shares self's storage: writes reach self
    return t
