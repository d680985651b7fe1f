"""A pack / unpack hook pair for tensors saved for backward: what
`autograd.graph.saved_tensors_hooks` installs for a block of code and what
`grad_fn._raw_saved_<name>.register_hooks` sets for one saved tensor. The engine's
SavedTensor calls `_pack_saved` when a tensor is saved and `_unpack_saved` when the
backward reads it back."""
from aotgrad.ir.core import Var
from aotgrad.runtime.grad_mode import state as _mode
from aotgrad.runtime.graph_breaks import graph_break
from aotgrad.runtime.tensor import Tensor

PACK_INPLACE_MESSAGE = (
    "A saved tensor pack hook is modifying its input in place. Tensors provided as input to "
    "pack hook cannot be modified by in-place operations as this can lead to unexpected "
    "side-effects. Please open an issue if you need to perform in-place operations on the "
    "input to a pack hook.")
_PACKED = object()  # a SavedTensor's value once a pack hook holds the tensor instead


def mark_number_operand(t):
    """Mark `t` as the tensor an op made of a Python number operand (the 3 of `a * 3`): PyTorch
    never packs a plain number, so the pack hooks do not see it. Returns t."""
    t.__dict__["_number_operand"] = True
    return t


def is_number_operand(t):
    return t.__dict__.get("_number_operand", False)


class SavedTensorHooks:
    """pack_hook(tensor) -> Any runs when an op saves a tensor; unpack_hook(packed) ->
    Tensor runs when the backward reads it."""
    what = "autograd.graph.saved_tensors_hooks"  # the user-level context, for messages

    def __init__(self, pack_hook, unpack_hook):
        self.pack_hook = pack_hook
        self.unpack_hook = unpack_hook

    def _pack_saved(self, saved, t):
        """Run pack_hook on tensor t being saved: `saved` (a SavedTensor) keeps what it
        returns instead of t's value (and no reference to an output of the saving op)."""
        if isinstance(t._value, Var):
            graph_break(
                "a tensor saved for backward under autograd.graph.saved_tensors_hooks (the "
                "hooks run Python on every save and backward; the compiled program keeps its "
                "saved values itself)", t)
        version = t._version_counter.v
        prev, _mode.grad_enabled = _mode.grad_enabled, False
        try:
            packed = self.pack_hook(t)
        finally:
            _mode.grad_enabled = prev
        if t._version_counter.v != version:
            raise RuntimeError(PACK_INPLACE_MESSAGE)
        saved.hooks, saved.value, saved.original = (self, packed, t.dtype), _PACKED, None
        if saved.is_output:
            saved.leaf = None

    def _unpack_saved(self, saved, node):
        """Run unpack_hook -> a tensor with the saved tensor's place in the graph: the saving
        node's output, the same grad_fn as the saved tensor, or a leaf that accumulates into
        the saved leaf's `.grad`."""
        data = self.unpack_hook(saved.hooks[1])
        if not isinstance(data, Tensor):
            raise TypeError(f"Output of saved tensor unpack_hook expected to be a Tensor but "
                            f"got result of type {type(data).__name__}")
        if data.dtype is not saved.hooks[2] and data.dtype.is_floating_point and \
                saved.hooks[2].is_floating_point:
            data = data.to(saved.hooks[2])  # the derivative rules do not promote dtypes
        if saved.leaf is None and saved.grad_fn is None and not saved.requires_grad and \
                not saved.is_output and not data.requires_grad:
            return data  # no place in the graph to give it: the unpacked tensor itself
        t = Tensor._make(data._value, False)
        t._version_counter = data._version_counter
        leaf = saved.leaf
        if leaf is not None:
            t.requires_grad = True
            acc = leaf._grad_accumulator()
            t._accumulator = lambda: acc  # gradients reach the saved leaf's AccumulateGrad
            return t
        t.requires_grad = saved.requires_grad
        t.grad_fn = node if saved.is_output else saved.grad_fn
        t._output_nr = saved.output_nr
        if t.grad_fn is not None:
            t.requires_grad = True
        return t
