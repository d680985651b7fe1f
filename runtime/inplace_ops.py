"""In-place writes: the guards of in-place ops, `commit_inplace` (write an out-of-place result
back into a tensor, bumping its version counter), `snapshot`, and `x[index] = value`.

In-place ops are computed out of place and written back (`commit_inplace`), which bumps the
version counter. An in-place op on a *view* (`y[1:].mul_(2)`) rebases the history of the
view's base, as in PyTorch: the base's grad_fn becomes a CopySlices node (the old base with
the view's elements replaced by the op's result), and the live views of the base read their
values out of it (AsStridedBackward0). Inside a compiled function this is refused.
Writing into a tensor whose elements share memory (a stride 0 of an expanded tensor)
raises PyTorch's error; a view of an expanded tensor without such a dimension (a row of
`zeros(3).expand(2, 3)`) is written through to its base. `fill_`/`zero_` may write an
expanded tensor (one value everywhere), as in PyTorch.

>>> import aotgrad
>>> from aotgrad.runtime import inplace_ops
>>> inplace_ops.setitem(aotgrad.zeros(3), 1, 5.).tolist()
[0.0, 5.0, 0.0]
"""
import warnings
import weakref

import numpy as np

from aotgrad.ir import dtypes as dt
from aotgrad.ir.core import current_builder, current_op, format_location
from aotgrad.runtime.sizes import size_list, type_str
from aotgrad.runtime import forward_mode, layout
from aotgrad.runtime.inference_views import InferenceModeView
from aotgrad.runtime.forward_mode import state as _forward
from aotgrad.runtime import tprims as tp
from aotgrad.runtime.elementwise_ops import where
from aotgrad.runtime.grad_mode import state as _mode
from aotgrad.runtime.index_ops import _scatter_winners, getitem
from aotgrad.runtime.grad_fn_names import named
from aotgrad.runtime.op_base import as_tensor_like, cast, op
from aotgrad.runtime.tensor import Tensor
from aotgrad.runtime.view_ops import expand, expanded_shape, reshape, traced_aliases
from aotgrad.runtime import dispatch, view_meta
from aotgrad.runtime.write_hooks import before_write


def _inplace_guard(x, opname, requires_grad=False):
    """Refuse an in-place write to x that autograd cannot record. `requires_grad`: another
    argument of the op requires grad (the write is recorded even where x does not)."""
    view_meta.refuse_write_to_copy_of_view(x, opname)
    if x._inference and not _mode.inference:
        where = "" if current_op.get() is not None else f"{opname}: "  # an op names itself
        raise RuntimeError(f"{where}Inplace update to inference tensor outside InferenceMode "
                           f"is not allowed. You can make a clone to get a normal tensor before "
                           f"doing inplace update.")
    if _mode.grad_enabled:
        base = x._base
        # (a view requires grad where its base does, as PyTorch's views, even one made under
        # no_grad)
        recorded = requires_grad or x.requires_grad or base is not None and base.requires_grad
        if base is not None and recorded:
            msg = view_meta.rebase_error(x)
            if msg is not None:
                raise RuntimeError(msg)
            if base.requires_grad and base.grad_fn is None:
                where = "" if current_op.get() is not None else f"{opname}: "
                raise RuntimeError(f"{where}a view of a leaf Variable that requires grad is "
                                   f"being used in an in-place operation.")
        if x.grad_fn is None and x.requires_grad:
            raise RuntimeError(f"{opname}: a leaf Variable that requires grad is being used in "
                               f"an in-place operation (tensor {type_str(x)}).{format_location()}")
        if base is not None and recorded and not _rebases(x):
            raise RuntimeError(f"{opname}: in-place modification of a view of a tensor that "
                               f"requires grad is not supported here (inside a compiled "
                               f"function, or on an alias that is not a view op's result); use "
                               f"the out-of-place op or modify the base tensor")


_OVERLAP_MESSAGE = (
    "unsupported operation: more than one element of the written-to tensor refers to a single "
    "memory location. Please clone() the tensor before performing the operation.")

_OVERLAP_ALLOWED = ("fill_", "zero_")  # PyTorch writes one value into overlapping elements


def _overlaps(a):
    """Whether elements of numpy array `a` share memory (a dimension of size > 1 with
    stride 0, as an expanded tensor's): PyTorch's internal-overlap test."""
    return a.size > 1 and any(n > 1 and st == 0 for n, st in zip(a.shape, a.strides))


def _check_overlap(x, opname):
    v = layout.probe(x)   # traced: the layout eager mode would give x
    if opname not in _OVERLAP_ALLOWED and v is not None and _overlaps(v):
        where = "" if current_op.get() is not None else f"{opname}: "
        raise RuntimeError(f"{where}{_OVERLAP_MESSAGE} (tensor {type_str(x)}, strides "
                           f"{tuple(st // v.itemsize for st in v.strides)})"
                           f"{format_location() if where else ''}")


def _store(x, value, opname, index=None):
    """Write numpy `value` into x's buffer (at `index` if given). A read-only buffer (a view of
    an expanded tensor) is written through the elements of its root it refers to."""
    dst = x._value
    if dst.size == 0:   # nothing to write (numpy marks some empty views read-only)
        return
    if dst.flags.writeable:
        if index is None:
            np.copyto(dst, value)
        else:
            dst[index] = value
        return
    root = x._base
    if root is None or not isinstance(root._value, np.ndarray) or \
            not root._value.flags.writeable:
        where = "" if current_op.get() is not None else f"{opname}: "
        raise RuntimeError(f"{where}the written-to tensor's memory is read-only (shape "
                           f"{size_list(x.shape)})")
    pos = _positions(root._value, dst)
    if index is not None:
        pos = pos[index]
    rv, value = root._value, np.broadcast_to(value, pos.shape)
    if rv.flags.c_contiguous:
        rv.reshape(-1)[pos] = value
    else:
        rv[np.unravel_index(pos, rv.shape)] = value


def _rebases(x):
    """Whether an in-place op on view x rebases its root's history (eager views only)."""
    return x._base is not None and x.__dict__.get("_view_made", False) and \
        isinstance(x._value, np.ndarray) and current_builder() is None


def _offsets(a, start=0):
    """Byte offset of each element of numpy array `a` from `start` (its strides applied)."""
    off = np.full(a.shape, start, np.int64)
    for d, (n, st) in enumerate(zip(a.shape, a.strides)):
        off += (np.arange(n, dtype=np.int64) * st).reshape((n,) + (1,) * (a.ndim - d - 1))
    return off


def _positions(base, view):
    """Flat (C-order) indices into numpy array `base` of each element of its view `view`."""
    voff = _offsets(view, view.__array_interface__["data"][0] -
                    base.__array_interface__["data"][0])
    if base.flags.c_contiguous:
        return voff // base.itemsize
    boff = _offsets(base).reshape(-1)
    order = np.argsort(boff, kind="stable")
    pos = order[np.clip(np.searchsorted(boff[order], voff), 0, max(boff.size - 1, 0))]
    if boff.size and not np.array_equal(boff[pos], voff):
        raise RuntimeError("in-place op on a view: the view's elements are not elements of "
                           "its base")
    return pos


def _read_view(flat_base, pos, shape):
    """The view at flat positions `pos` of the (flattened) base, with history (the grad_fn of
    a view whose base was modified in place, as PyTorch's AsStridedBackward0)."""
    out = reshape(tp.gather(flat_base, Tensor._make(pos.reshape(-1)), dim=0), shape)
    return named(out, "AsStridedBackward0")


def _set_history(t, src):
    t.grad_fn, t._output_nr, t.requires_grad = src.grad_fn, src._output_nr, True
    if t._retains_grad:  # keeps retaining: .grad is the gradient of the new value
        t.grad_fn._set_retain_grad(t._output_nr, weakref.ref(t))


def _rebase(x, new):
    """x (a view) takes the value `new` (with history): its root's history becomes a
    CopySlices node (the root with x's elements replaced by `new`), and x reads its value
    out of the new root. Returns (root's new value, x's new value) with their histories."""
    root = x._base
    old = Tensor._make(root._value, root.requires_grad)  # the root's old history (where
    old.grad_fn, old._output_nr = root.grad_fn, root._output_nr  # saves only its mask)
    n = root.numel()
    pos = _positions(root._value, x._value)
    mask = np.zeros(n, bool)
    mask[pos.reshape(-1)] = True
    src, flat_pos = reshape(new, -1), pos.reshape(-1)
    if _overlaps(x._value):  # fill_ of an expanded view: each root element written once
        flat_pos, first = np.unique(flat_pos, return_index=True)
        src = tp.gather(src, Tensor._make(first), dim=0)
    scattered = tp.scatter_add(tp.zeros((n,), x.dtype), Tensor._make(flat_pos), src, dim=0)
    flat = tp.where(Tensor._make(mask), scattered, reshape(old, -1))
    new_root = reshape(flat, tuple(root.shape))
    named(new_root, "CopySlices")
    return new_root, _read_view(flat, pos, tuple(x.shape))


def _regenerate_views(root, new_root, skip):
    """Live views of `root` read their value out of its new history. A view whose history
    may not be rebased (view_meta) gets a node that raises PyTorch's error when a backward
    reaches it."""
    views = root.__dict__.get("_views")
    if not views:
        return
    flat = reshape(new_root, -1)
    for v in [r() for r in list(views.values())]:
        if v is None or v is skip or not isinstance(v._value, np.ndarray) or \
                not np.may_share_memory(v._value, root._value):  # (its .data was replaced)
            continue
        if type(v) is InferenceModeView:
            continue  # refuses at its grad_fn's read, as PyTorch's (inference_views)
        new = _read_view(flat, _positions(root._value, v._value), tuple(v.shape))
        msg = view_meta.rebase_error(v, indirect=True)
        if msg is not None:
            refused = Tensor._make(new._value, True)
            refused.grad_fn = view_meta.RefusedViewBackward(msg, new)
            new = refused
        _set_history(v, new)


def commit_inplace(x, new, opname, replaces=False):
    """Make `new` (computed out of place) the value and history of `x`; bump its version.
    `replaces`: new never depends on x's old value (copy_, fill_), whose history then gets a
    zero gradient, as in PyTorch, even where new requires grad itself."""
    if current_builder() is not None and traced_aliases(x):
        raise dispatch.GraphBreak(dispatch.describe_break(
            f"{opname} on a tensor that aliases another (a view, or viewed) inside the "
            f"compiled function"))
    if current_builder() is not None and x.__dict__.get("_views_saved"):
        raise dispatch.GraphBreak(dispatch.describe_break(
            f"{opname} on a view of a tensor saved for the backward (eagerly the backward "
            f"raises)"))
    refuse = getattr(new._value, "refuse_inplace", None)
    if refuse is not None:  # vmap: a batched value written into a tensor that is not batched
        refuse(x._value, opname)
    _inplace_guard(x, opname, new.requires_grad)
    _check_overlap(x, opname)
    if new.dtype is not x.dtype:
        if not x.dtype.is_floating_point and new.dtype.is_floating_point:
            raise RuntimeError(f"{opname}: result type {new.dtype.name} can't be cast to the "
                               f"desired output type {x.dtype.name} (tensor {type_str(x)})"
                               f"{format_location()}")
        new = cast(new, x.dtype)
    if x.requires_grad and (replaces or not new.requires_grad) and _mode.grad_enabled:
        # the new value does not depend on x's old one: its history gets a zero gradient
        keep = tp.constant(True, dt.bool_, tuple(x.shape))
        new = tp.where(keep, new, snapshot(x))
    if tuple(new.shape) != tuple(x.shape):
        raise RuntimeError(f"{opname}: output with shape {size_list(x.shape)} doesn't match the "
                           f"broadcast shape {size_list(new.shape)}{format_location()}")
    tracked = new.requires_grad and _mode.grad_enabled
    if tracked and new.grad_fn is None:  # a leaf's value (copy_(leaf)): x gets a node of its
        new = reshape(new, tuple(new.shape))  # own, not the leaf's identity
    if tracked and _rebases(x):
        if x.grad_fn is not None:  # (PyTorch's CopySlices skips the view's old node: the
            x.grad_fn._drop_tensor_hooks(x._output_nr)  # hooks registered on it never fire)
        new_root, new = _rebase(x, new)
    before_write(x)
    if isinstance(x._value, np.ndarray) and not isinstance(new._value, np.ndarray):
        # a real tensor written inside a trace holds the traced value (history, version)
        # until the trace ends; the tracer restores it and writes it back at run time
        current_builder().record_mutation(x, new._value)
    if isinstance(x._value, np.ndarray) and isinstance(new._value, np.ndarray):
        _store(x, new._value, opname)
    else:
        x._value = new._value
    x._version_counter.v += 1
    if _forward.level is not None and not _forward.suspended:
        _update_tangents(x, forward_mode.tangent_of(new))
    if tracked:
        _set_history(x, new)
        if _rebases(x):
            _set_history(x._base, new_root)
            _regenerate_views(x._base, new_root, x)
        elif x._base is None and isinstance(x._value, np.ndarray) and \
                current_builder() is None:
            _regenerate_views(x, x, None)
    return x


def _update_tangents(x, tangent):
    """Forward-mode AD after an in-place op: x's tangent is the new value's; when x is a view,
    its root's tangent takes it at x's elements (eager). Other views of the root keep the
    tangent they had. A tensor that had a tangent keeps a zero one where the new value has
    none (`d.zero_()`, `d.copy_(plain)`), as in PyTorch."""
    old_x = forward_mode.tangent_of(x)
    if tangent is None and old_x is not None and isinstance(x._value, np.ndarray):
        tangent = Tensor._make(np.zeros(x._value.shape, x._value.dtype))
    if _writable_like(old_x, x) and tangent is not None:
        # x's tangent is updated in place, as PyTorch's: the tangent tensors that share its
        # memory (the tangent given to make_dual, the tangent of the tensor x is a view of)
        # see the change
        np.copyto(old_x._value, np.asarray(tangent._value), casting="unsafe")
        old_x._version_counter.v += 1
        root_t = forward_mode.tangent_of(x._base) if x._base is not None else None
        if root_t is None or np.may_share_memory(root_t._value, old_x._value):
            return
    else:
        forward_mode.set_tangent(x, tangent)
    root = x._base
    if root is None or not isinstance(root._value, np.ndarray) or \
            not isinstance(x._value, np.ndarray):
        return
    old = forward_mode.tangent_of(root)
    if old is None and tangent is None:
        return
    flat = np.zeros(root._value.size, root._value.dtype) if old is None else \
        np.array(old._value, dtype=root._value.dtype, copy=True).reshape(-1)
    pos = _positions(root._value, x._value).reshape(-1)
    flat[pos] = 0 if tangent is None else np.asarray(tangent._value).reshape(-1)
    forward_mode.set_tangent(root, Tensor._make(flat.reshape(root._value.shape)))


def _writable_like(t, x):
    """Whether tangent `t` is an eager, writable array of x's shape."""
    return t is not None and isinstance(t._value, np.ndarray) and \
        t._value.flags.writeable and tuple(t.shape) == tuple(x.shape)


def snapshot(x, *others):
    """_snapshot, keeping x's forward-mode tangent on the copy."""
    s = _snapshot(x, *others)
    if s is not x and _forward.level is not None:
        forward_mode.set_tangent(s, forward_mode.tangent_of(x))
    return s


def _snapshot(x, *others):
    """x, or (when its old value may be saved for backward by an in-place op) a copy of it
    with the same autograd identity, so the in-place write cannot corrupt what was saved.
    `others` are the op's other arguments: when x does not require grad but one of them does,
    the op may still save x's old value (`x.mul_(w)` saves it for w's gradient), so x is
    copied too. Traced values are immutable SSA values: there the alias needs no copy."""
    if not _mode.grad_enabled:
        return x
    if not x.requires_grad:
        if isinstance(x._value, np.ndarray) and current_builder() is None and \
                any(isinstance(o, Tensor) and o.requires_grad for o in others):
            return Tensor._make(np.array(x._value, copy=True))
        return x
    if x.grad_fn is None:
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


def _basic_index(index):
    """Whether `index` selects a view (ints, slices, None, Ellipsis; no tensors or lists)."""
    return all(i is None or i is Ellipsis or isinstance(i, slice) or
               (isinstance(i, (int, np.integer)) and not isinstance(i, (bool, np.bool_)))
               for i in (index if isinstance(index, tuple) else (index,)))


def _numpy_values(*objs):
    """Are the tensors among objs (and in a tuple index) all eager numpy values (not the
    batched values of vmap)?"""
    for o in objs:
        if isinstance(o, tuple):
            if not _numpy_values(*o):
                return False
        elif isinstance(o, Tensor) and type(o._value) is not np.ndarray:
            return False
    return True


@op("setitem", "CopySlices")
def setitem(x, index, value):
    value = as_tensor_like(value, x.dtype)
    needs_grad = _mode.grad_enabled and (x.requires_grad or value.requires_grad) or \
        _forward.level is not None and (forward_mode.tangent_of(x) is not None or
                                        forward_mode.tangent_of(value) is not None)
    for i in (index if isinstance(index, tuple) else (index,)):
        if isinstance(i, slice) and i.step is not None and i.step <= 0:
            raise ValueError("step must be greater than zero")
    readonly = isinstance(x._value, np.ndarray) and not x._value.flags.writeable
    if current_builder() is not None and _basic_index(index):
        probed = layout.probe(x)
        if probed is not None and _overlaps(probed):
            # eagerly (below) the indexed view of an expanded tensor is written: PyTorch's
            # error where that view overlaps itself; else the write reaches every element
            # sharing its memory, which the traced whole-tensor update does not express
            _check_overlap(getitem(x, index), "setitem")
            raise dispatch.GraphBreak(dispatch.describe_break(
                "setitem into an expanded tensor (elements share memory)"))
    if readonly and current_builder() is None and _basic_index(index):
        # an expanded tensor: the indexed view is written (an error if it overlaps itself)
        v = getitem(x, index)
        commit_inplace(v, expand(cast(value, x.dtype), tuple(v.shape)), "setitem")
        return x
    if not needs_grad and current_builder() is None and _numpy_values(x, value, index):
        _inplace_guard(x, "setitem")
        idx = index._value if isinstance(index, Tensor) else index
        if isinstance(idx, tuple):
            idx = tuple(i._value if isinstance(i, Tensor) else i for i in idx)
        before_write(x)
        if readonly:
            warnings.warn("Use of index_put_ on expanded tensors is deprecated. Please clone() "
                          "the tensor before performing this operation. This also applies to "
                          "advanced indexing e.g. tensor[indices] = tensor", UserWarning,
                          stacklevel=3)
        try:
            _store(x, value._value, "setitem", idx)
        except ValueError as e:
            _fit_value(value, x._value[idx].shape, index)  # PyTorch's message for a shape
            raise RuntimeError(f"{e} (destination shape {size_list(x.shape)}, value shape "
                               f"{size_list(value.shape)})") from None
        x._version_counter.v += 1
        return x
    pos = getitem(tp.iota(shape=(x.numel(),), dim=0, dtype=dt.int64).reshape(tuple(x.shape)),
                  index)
    v = expand(_fit_value(cast(value, x.dtype), tuple(pos.shape), index), tuple(pos.shape))
    pos_flat, v_flat = reshape(pos, -1), reshape(v, -1)
    # an advanced index may repeat a position: the last write wins
    keep = None if _basic_index(index) else _scatter_winners(pos_flat, 0, x.numel())
    if keep is not None and (keep._is_traced or not bool(keep._value.all())):
        v_flat = where(keep, v_flat, tp.zeros(tuple(v_flat.shape), x.dtype))
    base = snapshot(x)
    xf = reshape(base, -1)
    zeros = tp.zeros((x.numel(),), x.dtype)
    scattered = tp.scatter_add(zeros, pos_flat, v_flat, dim=0)
    hit = tp.scatter_add(tp.zeros((x.numel(),), dt.int64), pos_flat,
                         tp.broadcast_to(tp.constant(1, dt.int64), tuple(pos_flat.shape)), dim=0)
    new = where(tp.gt(hit, tp.zeros((x.numel(),), dt.int64)), scattered, xf)
    return commit_inplace(x, reshape(new, tuple(x.shape)), "setitem")


def _fit_value(value, shape, index):
    """The value of `x[index] = value` for a region of `shape`: without the leading size-1
    dims it has beyond the region's (PyTorch drops them), or PyTorch's error where it does not
    expand to the region (expand's message for a view, index_put's for an advanced index)."""
    extra = value.ndim - len(shape)
    if extra > 0 and all(n == 1 for n in value.shape[:extra]):
        value = reshape(value, tuple(value.shape[extra:]))
    if _basic_index(index):
        expanded_shape(value, shape)
    elif value.ndim > len(shape) or not all(
            v == 1 or v == n for v, n in zip(reversed(value.shape), reversed(shape))):
        raise RuntimeError(f"shape mismatch: value tensor of shape {size_list(value.shape)} "
                           f"cannot be broadcast to indexing result of shape {size_list(shape)}")
    return value


def index_put_(x, indices, values, accumulate=False):
    if accumulate:
        raise NotImplementedError("index_put_ with accumulate=True is not supported")
    return setitem(x, tuple(indices), values)
