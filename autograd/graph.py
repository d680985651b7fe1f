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
import threading
import weakref

from aotgrad.runtime.engine import GradientEdge, _node_of, graph_tasks, \
    saved_hooks
from aotgrad.autograd.graph_node import Node
from aotgrad.runtime.saved_hooks import SavedTensorHooks
from aotgrad.runtime.tensor import Tensor
from aotgrad.autograd.graph_mutation import allow_mutation_on_saved_tensors

__all__ = ["saved_tensors_hooks", "save_on_cpu", "disable_saved_tensors_hooks",
           "register_multi_grad_hook", "allow_mutation_on_saved_tensors", "Node",
           "GradientEdge", "get_gradient_edge", "increment_version"]


def get_gradient_edge(tensor):
    """The GradientEdge (node, output_nr) through which `tensor`'s gradient enters the graph:
    its grad_fn and output number, or a leaf's AccumulateGrad. `autograd.grad` and `backward`
    accept it in place of the tensor (the gradient of an edge outlives a tensor modified in
    place, or one not kept alive)."""
    if not tensor.requires_grad:
        raise RuntimeError("It is not possible to get the gradient edge for a Tensor that does "
                           "not require gradients")
    return GradientEdge(*_node_of(tensor))


def increment_version(tensor):
    """Bump the version counter of `tensor` (or of each tensor of an iterable), as an in-place
    change made outside aotgrad's ops (e.g. through `.numpy()`) would have to."""
    for t in (tensor,) if isinstance(tensor, Tensor) else tensor:
        t._version_counter.v += 1


class _MultiHandle:
    """The handle of a multi-grad hook: removes the hook from every tensor."""

    def __init__(self, handles):
        self.handles = handles

    def remove(self):
        for h in self.handles:
            h.remove()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


def _will_receive(tensor, task):
    """Whether the running backward pass reaches the node `tensor`'s gradient flows into."""
    node, _ = _node_of(tensor)
    return node is not None and node in task.deps


def register_multi_grad_hook(tensors, fn, *, mode="all"):
    """Call `fn` once per backward pass from the gradients of several tensors.

    mode="all": `fn(grads)` after every tensor of `tensors` that this backward pass reaches
    got its gradient; `grads` has one entry per tensor, None for those it does not reach.
    mode="any": `fn(grad)` with the first gradient computed for any of the tensors.
    Returns a handle whose `remove()` unregisters it.

    >>> a, b = aotgrad.ones(2, requires_grad=True), aotgrad.ones(2, requires_grad=True)
    >>> handle = register_multi_grad_hook((a, b), lambda grads: print([g is None for g in grads]))
    >>> (a * 2).sum().backward()
    [False, True]
    """
    if mode not in ("all", "any"):
        raise ValueError(f"Expects mode to be one of ('all', 'any') but got {mode}")
    tensors = tuple(tensors)
    lock = threading.Lock()
    if mode == "all":
        pending = weakref.WeakKeyDictionary()  # backward pass -> [left to come, grads]

        def hook_for(i):
            def hook(grad):
                task = graph_tasks.stack[-1] if graph_tasks.stack else None
                if task is None:  # reached outside the engine's loop: nothing else to wait for
                    return fn(tuple(grad if j == i else None for j in range(len(tensors))))
                with lock:
                    entry = pending.get(task)
                    if entry is None:
                        left = sum(_will_receive(t, task) for t in tensors)
                        entry = pending[task] = [left, [None] * len(tensors)]
                    entry[1][i] = grad
                    entry[0] -= 1
                    done = entry[0] <= 0
                    if done:
                        del pending[task]
                if done:
                    fn(tuple(entry[1]))
            return hook
        handles = [t.register_hook(hook_for(i)) for i, t in enumerate(tensors)
                   if t.requires_grad]
    else:
        fired = weakref.WeakSet()  # backward passes in which fn already ran

        def hook(grad):
            task = graph_tasks.stack[-1] if graph_tasks.stack else None
            if task is None:
                return fn(grad)
            with lock:
                if task in fired:
                    return
                fired.add(task)
            fn(grad)
        handles = [t.register_hook(hook) for t in tensors if t.requires_grad]
    return _MultiHandle(handles)


class saved_tensors_hooks(SavedTensorHooks):
    """Context manager that sets a pair of pack / unpack hooks for saved tensors.

    `pack_hook(tensor) -> Any` runs every time an operation saves a tensor for backward;
    `unpack_hook(packed) -> Tensor` runs every time it is read back and should return a
    tensor with the original's value, shape and dtype. Only the innermost pair applies.

    >>> x = aotgrad.ones(3, requires_grad=True)
    >>> with saved_tensors_hooks(lambda t: t.detach().clone(), lambda c: c):
    ...     y = x.exp()          # exp saves its result: pack sees it
    """

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
