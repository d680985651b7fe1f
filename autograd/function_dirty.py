"""The inputs a custom Function modifies in place (`ctx.mark_dirty`), as PyTorch handles them.

A dirty input takes the Function's node as its history. When it is a view, the history of its
base is rebased as for a built-in in-place op on a view (runtime/inplace_ops.py): the base's
node becomes a CopySlices (the old base with the view's elements taken from the Function's
output) and the view reads its value out of it. The checks are PyTorch's: only inputs should
be marked dirty (a warning, an error for a view), every dirty tensor must be returned, a leaf
that requires grad may not be modified, a view that may not be modified in place (made under
no_grad, by a multi-output op, ...) is refused, and a Function that modifies a view may
return one tensor only.
"""
import warnings

from aotgrad.runtime import view_meta
from aotgrad.runtime.inplace_ops import _rebase, _rebases, _regenerate_views, _set_history
from aotgrad.runtime.tensor import Tensor

_NOT_AN_INPUT = ("ctx.mark_dirty() received a tensor that was not an input. Only input Tensors "
                 "that have been mutated should be passed to ctx.mark_dirty().")

_VIEW_WITH_OTHER_OUTPUTS = (
    "If your Function modifies inplace an input that is a view of another Tensor, your "
    "Function cannot return more than one Tensor. This is not supported by the current "
    "autograd engine. You should either make sure the input is not a view (using .clone() for "
    "example) or make your Function only return one Tensor (potentially splitting it into two "
    "Functions: one doing the inplace that returns a single Tensor and a second one that does "
    "the other operations).")


def check_dirty(dirty, input_ids, outputs):
    """Check the tensors given to mark_dirty once forward returned, and bump their version
    (the Function modified them, as PyTorch counts it)."""
    for t in dirty:
        if id(t) not in input_ids:
            if t._base is not None:
                raise RuntimeError(_NOT_AN_INPUT)
            warnings.warn(_NOT_AN_INPUT, UserWarning, stacklevel=4)
    if dirty and not all(any(o is t for o in outputs) for t in dirty):
        raise RuntimeError("Some elements marked as dirty during the forward method were not "
                           "returned as output. The inputs that are modified inplace must all "
                           "be outputs of the Function.")
    for t in dirty:
        t._version_counter.v += 1


def check_recordable(t, n_outputs):
    """Refuse to record the Function's node as the history of dirty tensor t where PyTorch
    does."""
    base = t._base
    # (a view requires grad where its base does, as in PyTorch)
    requires_grad = t.requires_grad or base is not None and base.requires_grad
    if t.grad_fn is None and requires_grad:
        raise RuntimeError("a leaf Variable that requires grad has been used in an in-place "
                           "operation.")
    if base is None:
        return
    if n_outputs > 1:
        raise RuntimeError(_VIEW_WITH_OTHER_OUTPUTS)
    msg = view_meta.rebase_error(t)
    if msg is not None:
        raise RuntimeError(msg)
    if base.requires_grad and base.grad_fn is None:
        raise RuntimeError("a view of a leaf Variable that requires grad is being used in an "
                           "in-place operation.")


def rebases(t):
    """Whether dirty tensor t is a view whose base's history is rewritten."""
    return _rebases(t)


def rebase(view, node, output_nr):
    """Dirty view `view` takes output `output_nr` of the Function's `node` as its value; its
    base's history becomes the CopySlices of it, and the base's other live views read their
    values out of that."""
    if view.grad_fn is not None:  # (its hooks never fire, as after a built-in in-place op)
        view.grad_fn._drop_tensor_hooks(view._output_nr)
    out = Tensor._make(view._value, True)
    out.grad_fn, out._output_nr = node, output_nr
    new_root, new_view = _rebase(view, out)
    _set_history(view, new_view)
    root = view._base
    _set_history(root, new_root)
    _regenerate_views(root, new_root, view)
