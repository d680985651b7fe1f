"""How a view was made (PyTorch's CreationMeta), and the check that refuses an in-place op on
a view whose history autograd cannot rewrite.

An in-place op on a view rebases the history of the view's base (runtime/inplace_ops.py). That
is only sound for a view made by a single-output view op under grad mode: a view made under
no_grad or inference_mode has no history to rewrite (whether the write should be tracked is
ambiguous), an output of a multi-output view op (unbind, split, chunk) shares one node with
its siblings, and a view returned by a custom Function has the Function's backward, which the
rebase would bypass. PyTorch forbids an in-place op on such views when autograd is involved;
so does aotgrad, with PyTorch's messages.

A view of a view inherits the stricter kind of its input (`propagate`).
"""
import enum
import re

from aotgrad.ir.core import Aval
from aotgrad.runtime.autograd_node import Node
from aotgrad.runtime.grad_mode import state as _mode


class CreationMeta(enum.Enum):
    """How a view was made (stored on the view as `_creation_meta`)."""
    DEFAULT = "default"
    IN_CUSTOM_FUNCTION = "in_custom_function"
    MULTI_OUTPUT_NODE = "multi_output_node"
    NO_GRAD_MODE = "no_grad_mode"
    INFERENCE_MODE = "inference_mode"


def propagate(prev, new):
    """The kind of a view (made as `new`) of a view of kind `prev`: a non-default kind sticks
    to the views made from it; inference mode wins over every other."""
    if new is CreationMeta.DEFAULT:
        return prev
    return prev if prev is CreationMeta.INFERENCE_MODE else new


def for_new_view(base, kind=CreationMeta.DEFAULT):
    """The kind of a view of `base` made now by an op of kind `kind` (DEFAULT, or
    MULTI_OUTPUT_NODE for unbind/split): the grad mode decides first."""
    if _mode.inference:
        kind = CreationMeta.INFERENCE_MODE
    elif not _mode.grad_enabled:
        kind = CreationMeta.NO_GRAD_MODE
    prev = base._creation_meta if base._base is not None else CreationMeta.DEFAULT
    return propagate(prev, kind)


def mark(view, kind):
    """Give `view` (a view of another tensor) the kind `kind` on top of what it has."""
    if view._base is not None:
        view.__dict__["_creation_meta"] = propagate(view._creation_meta, kind)


def mark_multi_output(base, views):
    """The outputs of a multi-output view op of `base` (unbind, split) are views that may not
    be modified in place where autograd is involved (they share one node)."""
    kind = for_new_view(base, CreationMeta.MULTI_OUTPUT_NODE)
    for v in views:
        if v._base is not None:
            v.__dict__["_creation_meta"] = kind


def set_kind(view, kind):
    """Replace the kind of `view` (a custom Function's output view: PyTorch overwrites it)."""
    if view._base is not None:
        view.__dict__["_creation_meta"] = kind


_SUFFIX = {
    CreationMeta.MULTI_OUTPUT_NODE:
        " This view is the output of a function that returns multiple views. Such functions do "
        "not allow the output views to be modified inplace. You should replace the inplace "
        "operation by an out-of-place one.",
    CreationMeta.NO_GRAD_MODE:
        " Given that this use case is ambiguous and error-prone, it is forbidden. You can "
        "clarify your code by moving both the view and the inplace either both inside the "
        "no_grad block (if you don't want the inplace to be tracked) or both outside (if you "
        "want the inplace to be tracked).",
    CreationMeta.INFERENCE_MODE:
        " Given that this use case is ambiguous and error-prone, it is forbidden. You can "
        "clarify your code by moving both the view and the inplace either both inside the "
        "inference_mode block (if you don't want the inplace to be tracked) or both outside "
        "(if you want the inplace to be tracked).",
    CreationMeta.IN_CUSTOM_FUNCTION:
        " This view was created inside a custom Function (or because an input was returned "
        "as-is) and the autograd logic to handle view+inplace would override the custom "
        "backward associated with the custom Function, leading to incorrect gradients. This "
        "behavior is forbidden. You can fix this by cloning the output of the custom Function.",
}


def _node_label(node):
    """The node's name as PyTorch's view+inplace messages print it (`UnbindBackward0` ->
    `Unbind`)."""
    return re.sub(r"Backward\d*$", "", node.name())


def rebase_error(view, indirect=False):
    """PyTorch's message refusing an in-place op on `view` (or, `indirect`, on its base or a
    sibling view), or None where the view's history may be rebased."""
    kind = view._creation_meta
    if view._base is None or kind is CreationMeta.DEFAULT:
        return None
    modified = "its base or another view of its base has been" if indirect else "is being"
    node = view.grad_fn
    if kind in (CreationMeta.INFERENCE_MODE, CreationMeta.NO_GRAD_MODE) or node is None:
        prefix = (f"Output {view._output_nr} of {_node_label(node)} is a view of a view which "
                  f"was created in" if node is not None else "A view was created in")
        if kind is CreationMeta.INFERENCE_MODE:
            msg = f"{prefix} inference mode and {modified} modified inplace in normal mode."
        else:
            msg = f"{prefix} no_grad mode and {modified} modified inplace with grad mode enabled."
    else:
        msg = f"Output {view._output_nr} of {_node_label(node)} is a view and {modified} " \
              f"modified inplace."
    return msg + _SUFFIX[kind]


def check_inplace(view, requires_grad):
    """Raise PyTorch's error when an in-place op that autograd records (`requires_grad`: an
    argument requires grad, grad mode on) writes a view whose history cannot be rebased."""
    if requires_grad and _mode.grad_enabled:
        msg = rebase_error(view)
        if msg is not None:
            raise RuntimeError(msg)


class RefusedViewBackward(Node):
    """The history of a view that may not be rebased, after its base (or a sibling view) was
    modified in place: a backward that reaches it raises PyTorch's error (PyTorch raises when
    the view's grad_fn is read)."""
    _name = "RefusedViewBackward"

    def __init__(self, msg, src):
        super().__init__([(src.grad_fn, src._output_nr)], [Aval(src.shape, src.dtype)],
                         [Aval(src.shape, src.dtype)])
        self.msg = msg

    def _backward(self, grads):
        raise RuntimeError(self.msg)



# ---- ops that are views in PyTorch and copies here ------------------------------------------
# diagonal(), unfold() and as_strided() gather their elements into a new tensor: the values
# are PyTorch's, but a write into the result (or a view of it) would not reach the input as
# it does in PyTorch. Such a write raises instead of giving a different answer.
_COPY_OF_VIEW = "_copy_of_view_op"


def mark_copy_of_view(t, opname):
    """`t` is the result of `opname`, a view in PyTorch and a copy here; returns t."""
    t.__dict__[_COPY_OF_VIEW] = opname
    return t


def unmark_copy_of_view(t):
    """`t` is a copy in PyTorch too (diag() of a matrix); returns t."""
    t.__dict__.pop(_COPY_OF_VIEW, None)
    return t


def refuse_write_to_copy_of_view(x, opname):
    """Raise where x (or the tensor x views) is such a copy."""
    for t in (x, x._base):
        made_by = None if t is None else t.__dict__.get(_COPY_OF_VIEW)
        if made_by is not None:
            raise RuntimeError(
                f"{opname}: an in-place write into the result of {made_by}() (or a view of it) "
                f"is not supported: in PyTorch {made_by}() returns a view, so the write would "
                f"change its input, while aotgrad's {made_by}() returns a copy. Write into the "
                f"input instead (for example with diagonal_scatter, or through index_put_)")
