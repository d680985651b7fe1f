"""`aotgrad.autograd.graph`, as `torch.autograd.graph`: hooks on the tensors that operations
save for backward, and the `Node` class of the backward graph.

>>> def pack(t):
...     return t.detach().clone()          # keep a private copy of every saved tensor
>>> def unpack(copy):
...     return copy
>>> x = aotgrad.ones(3, requires_grad=True)
>>> with aotgrad.autograd.graph.saved_tensors_hooks(pack, unpack):
...     y = (x * x).sum()                  # pack runs for each tensor mul saves
>>> y.backward()                           # unpack runs when the backward reads them

`pack_hook(tensor)` runs (under no_grad) whenever an operation saves a tensor for backward:
the ops' own saves and `ctx.save_for_backward` of an `autograd.Function`; what it returns
is stored instead of the tensor. `unpack_hook(packed)` runs whenever the saved tensor is read:
by the backward, `grad_fn._saved_self`-style accessors and `ctx.saved_tensors`. As in
PyTorch, a tensor saved through hooks is not checked against in-place modification (the
hooks decide what is kept), nested contexts apply only the innermost pair, and nothing is
packed where nothing is saved (under `no_grad`, or when no input requires grad). An unpacked
tensor of another floating dtype is cast to the saved tensor's dtype (aotgrad's derivative
rules do not promote; the gradients come out in the same dtype as PyTorch's).

Compiled functions (`aotgrad.compile`) keep their saved values inside the compiled
program: tracing under saved-tensor hooks is a graph break, so such a call runs eagerly.
"""
import contextlib

from aotgrad.ir.core import Var
from aotgrad.runtime.engine import Node, saved_hooks
from aotgrad.runtime.grad_mode import state as _mode
from aotgrad.runtime.tensor import Tensor

__all__ = ["saved_tensors_hooks", "save_on_cpu", "disable_saved_tensors_hooks", "Node"]

PACK_INPLACE_MESSAGE = (
    "A saved tensor pack hook is modifying its input in place. Tensors provided as input to "
    "pack hook cannot be modified by in-place operations as this can lead to unexpected "
    "side-effects. Please open an issue if you need to perform in-place operations on the "
    "input to a pack hook.")


_PACKED = object()  # a SavedTensor's value once a pack hook holds the tensor instead


class saved_tensors_hooks:
    """Context manager that sets a pair of pack / unpack hooks for saved tensors.

    `pack_hook(tensor) -> Any` runs every time an operation saves a tensor for backward;
    `unpack_hook(packed) -> Tensor` runs every time it is read back and should return a
    tensor with the original's value, shape and dtype. Only the innermost pair applies.

    >>> x = aotgrad.ones(3, requires_grad=True)
    >>> with saved_tensors_hooks(lambda t: t.detach().clone(), lambda c: c):
    ...     y = x.exp()          # exp saves its result: pack sees it
    """

    def __init__(self, pack_hook, unpack_hook):
        self.pack_hook = pack_hook
        self.unpack_hook = unpack_hook

    def __enter__(self):
        if saved_hooks.disabled_message is not None:
            raise RuntimeError(saved_hooks.disabled_message)
        saved_hooks.stack.append(self)

    def __exit__(self, *exc):
        stack = saved_hooks.stack
        if stack and stack[-1] is self:
            stack.pop()
        elif self in stack:  # exited out of order: drop this pair only
            stack.remove(self)

    # ---- called by runtime.engine.SavedTensor ----------------------------------------------
    def _pack_saved(self, saved, t):
        """Run pack_hook on tensor t being saved: `saved` (a SavedTensor) keeps what it
        returns instead of t's value (and no reference to an output of the saving op)."""
        if isinstance(t._value, Var):
            from aotgrad.runtime import dispatch
            dispatch.graph_break(
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
        saved.hooks, saved.value = (self, packed, t.dtype), _PACKED
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


class save_on_cpu(saved_tensors_hooks):
    """Saved tensors are kept on the CPU and moved back to their device for backward.

    aotgrad runs on the CPU only, so this behaves as PyTorch's does for CPU tensors: with
    `pin_memory=False` the saved tensor is kept as is (`tensor.cpu()` is the tensor itself);
    with `pin_memory=True` a copy is made when it is saved (in-place changes made afterwards
    do not reach the backward). `device_type` is accepted for signature compatibility.

    >>> x, w = aotgrad.ones(3, requires_grad=True), aotgrad.ones(3)
    >>> with save_on_cpu(pin_memory=True):
    ...     y = (x * w).sum()
    """

    def __init__(self, pin_memory=False, device_type="cuda"):
        def pack_to_cpu(tensor):
            if not pin_memory:
                return (tensor.device, tensor.cpu())
            return (tensor.device, tensor.detach().clone())

        def unpack_from_cpu(packed):
            device, tensor = packed
            return tensor.to(device, non_blocking=pin_memory)

        super().__init__(pack_to_cpu, unpack_from_cpu)
        self.pin_memory = pin_memory
        self.device_type = device_type


@contextlib.contextmanager
def disable_saved_tensors_hooks(error_message):
    """Context manager under which saved-tensor hooks may not be used: entering
    `saved_tensors_hooks` (or `save_on_cpu`) raises RuntimeError(error_message). Entering it
    while such hooks are active raises the same error.

    >>> with disable_saved_tensors_hooks("no hooks here"):
    ...     with save_on_cpu():
    ...         pass
    Traceback (most recent call last):
    RuntimeError: no hooks here
    """
    prev = saved_hooks.disabled_message
    try:
        saved_hooks.disabled_message = error_message
        if saved_hooks.stack:
            raise RuntimeError(error_message)
        yield
    finally:
        saved_hooks.disabled_message = prev
