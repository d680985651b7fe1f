"""Hooks the backward runs around a node: the tensor hooks of its outputs
(`Tensor.register_hook`, then `retain_grad`), its pre-hooks and its hooks
(`Node.register_prehook` / `register_hook`), and the checks on what a hook returns."""
from aotgrad.runtime.autograd_node import AccumulateGrad
from aotgrad.runtime.sizes import size_list
from aotgrad.runtime.grad_accumulation import accumulate_retained
from aotgrad.runtime.saved_tensors import _LEGACY_TYPE
from aotgrad.runtime.tensor import Tensor


def run_tensor_pre_hooks(node, grads, accumulate=True):
    """Hooks registered with Tensor.register_hook, then retain_grad, per output slot."""
    if isinstance(node, AccumulateGrad):
        v = node.variable
        # a real leaf reached while deriving a compiled backward (autograd.grad on traced
        # tensors): its hooks fire when the compiled backward runs, not now
        if v._hooks and grads[0] is not None and \
                (accumulate or type(grads[0]._value) is type(v._value)):
            for h in list(v._hooks):
                r = h(grads[0])
                if r is not None:
                    grads[0] = _checked_hook_result(h, grads[0], r)
        return grads
    for nr, hooks in node._tensor_pre_hooks.items():
        # (an output that got no gradient: its hooks see None, as PyTorch's do)
        for h in list(hooks):
            g = grads[nr]
            r = h(g)
            if r is not None:
                grads[nr] = r if g is None else _checked_hook_result(h, g, r)
    for nr, ref in node._retain_grad.items():
        t = ref()
        # (a tensor modified in place since retain_grad() now has another grad_fn: the
        # gradient of its old value is not its .grad)
        if t is not None and grads[nr] is not None and t.grad_fn is node:
            accumulate_retained(t, grads[nr])
    return grads


def run_pre_hooks(node, grads):
    """The node's pre-hooks, in order: each may replace the gradients of its outputs. (The
    hooks registered when the node starts run: one a hook removes or adds meanwhile does not
    change that, as in PyTorch.)"""
    for hook in tuple(node._pre_hooks):
        r = hook(tuple(grads))
        if r is not None:
            grads = _checked_node_hook_result(hook, grads, r)
    return grads


def run_post_hooks(node, outs, grads):
    """The node's hooks, in order: each may replace the gradients of its inputs."""
    for hook in tuple(node._hooks):
        r = hook(tuple(outs), tuple(grads))
        if r is not None:
            outs = _checked_node_hook_result(hook, outs, r)
    return outs


def _checked_node_hook_result(hook, grads, r):
    """A Node hook's replacement grads: as many as before, and no value where there was None."""
    r = list(r)
    if len(r) != len(grads):
        raise RuntimeError(f"hook '{_hook_name(hook)}' has returned an incorrect number of "
                           f"values (got {len(r)}, but expected {len(grads)})")
    for old, new in zip(grads, r):
        if old is None and new is not None:
            raise RuntimeError("can't replace a None gradient with a non-None value")
    return r


def _checked_hook_result(hook, g, r):
    """A tensor hook's replacement gradient must keep the gradient's shape and dtype."""
    if not isinstance(r, Tensor):
        raise TypeError(f"hook '{_hook_name(hook)}' returned {type(r).__name__}; a tensor hook "
                        f"must return a Tensor or None")
    if r._value.shape != g._value.shape:
        raise RuntimeError(f"hook '{_hook_name(hook)}' has changed the size of value "
                           f"(was {size_list(g._value.shape)} got {size_list(r._value.shape)})")
    if r.dtype is not g.dtype:
        old, new = g.dtype.name, r.dtype.name
        raise RuntimeError(f"hook '{_hook_name(hook)}' has changed the type of value (was "
                           f"aotgrad.{_LEGACY_TYPE.get(old, old)} got "
                           f"aotgrad.{_LEGACY_TYPE.get(new, new)})")
    return r


def _hook_name(hook):
    return getattr(hook, "__name__", type(hook).__name__)
