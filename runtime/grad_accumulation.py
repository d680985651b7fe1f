"""Where `.grad` changes: the one accumulate path of the backward (`accumulate_grad`) and
the write of a `.grad` a compiled program computed (`write_grad`).

PyTorch's two rules, both here: a leaf's gradient is summed into its existing `.grad` in
place where it can be (the tensor object stays the same), a non-leaf that retains its
gradient gets a new tensor on each accumulation. Outside grad mode the first gradient is
copied unless nobody else holds it (`fresh`).

This module imports no Tensor: it makes a tensor from an array with `t._plain(value)`, which
every tensor provides (see the tensor protocol on `Tensor`).
"""
import sys

import numpy as np

from aotgrad.ir.core import current_builder as _current_builder
from aotgrad.runtime.sizes import size_list
from aotgrad.runtime.grad_mode import state as _mode
from aotgrad.runtime.graph_breaks import graph_break
from aotgrad.runtime.write_hooks import before_write


def accumulate_grad(t, g, create_graph, from_list=False):
    """Add gradient g (a tensor, or None: nothing to add) into `t.grad`. `create_graph`: the
    sum is recorded (the backward runs under grad mode), so g is used as it is.
    `from_list`: the caller passes g straight from the list of gradients a node received,
    so a g nobody else holds may become `.grad` without a copy (see `_unshared`)."""
    if g is None:
        return
    if t.grad_fn is not None:  # a non-leaf that retains its gradient: a new tensor each time
        if t._grad is not None:
            t._grad = t._grad + g
        elif create_graph:
            t._grad = g
        else:  # a copy: g may be a buffer the backward reuses
            t._grad = t._plain(np.array(g._value, copy=True)) \
                if isinstance(g._value, np.ndarray) else g.detach()
        return
    if "_grad_dtype" in t.__dict__:  # Tensor.grad_dtype was set: cast to it (None: keep)
        grad_dtype = t.__dict__["_grad_dtype"]
        if grad_dtype is not None and g.dtype is not grad_dtype:
            g = g.to(grad_dtype)
    note_grad_write(t)
    if create_graph:
        t._grad = g if t._grad is None else t._grad + g
    elif t._grad is None:
        if g._fresh or (from_list and _unshared(g, t)):  # a buffer nobody else holds
            g._fresh = False
            t._grad = g
            return _post_accumulate(t)
        value = g._value
        if isinstance(value, np.ndarray):
            value = np.array(value, copy=True, order="C")
        t._grad = t._plain(value)
    elif isinstance(t._grad._value, np.ndarray) and isinstance(g._value, np.ndarray) and \
            t._grad._value.flags.writeable and t._grad.grad_fn is None:
        before_write(t._grad)
        np.add(t._grad._value, g._value, out=t._grad._value)
        t._grad._version_counter.v += 1
    else:
        t._grad = t._plain((t._grad + g.detach())._value)
    _post_accumulate(t)


class _Holder:
    __slots__ = ("value",)


def _count_in_callee(x):
    return sys.getrefcount(x)


def _count_through_caller(x):
    return _count_in_callee(x)


def _count_array(holder):
    v = holder.value
    return sys.getrefcount(v)


# The reference counts `_unshared` sees when nothing but the engine holds the gradient (one
# list, accumulate_grad's argument, _unshared's) and the gradient alone holds its array,
# measured once in this interpreter with calls of the same shape
_ONE_LIST = [object()]
_SOLE_REFERENCES = _count_through_caller(_ONE_LIST[0])
_HELD = _Holder()
_HELD.value = np.zeros(1)
_ARRAY_REFERENCES = _count_array(_HELD)
del _ONE_LIST, _HELD


def _unshared(g, t):
    """Whether g is referenced only by the node's list of gradients (and the calls that pass
    it here) and owns its array alone: no user-visible tensor sees it, so it may become t's
    `.grad` itself, as PyTorch's AccumulateGrad steals such a gradient (a post-accumulate
    hook that changes .grad in place then changes what the node's post hooks see, as
    there)."""
    v = g._value
    return sys.getrefcount(g) <= _SOLE_REFERENCES and type(v) is np.ndarray and \
        v.base is None and sys.getrefcount(v) <= _ARRAY_REFERENCES and \
        v.flags.c_contiguous and v.flags.writeable and g.grad_fn is None and \
        v.shape == t._value.shape and v.dtype == t._value.dtype


def accumulate_array(t, value, owned):
    """accumulate_grad(t, g, create_graph=False) for a gradient given as a numpy array of
    t's shape and dtype (a compiled backward's output). `owned`: the array is referenced by
    nothing else, so it may become .grad without a copy."""
    g = t._plain(value)
    if owned:
        g._fresh = True
    accumulate_grad(t, g, False)


def accumulate_retained(t, g):
    """accumulate_grad for a non-leaf that retains its gradient, in the current grad mode."""
    accumulate_grad(t, g, _mode.grad_enabled)


def write_grad(t, value):
    """A compiled program's new `.grad` for t (None clears it); keeps the grad tensor's
    identity when it can, so later calls keep reading the same object."""
    if value is None:
        t._grad = None
    elif t._grad is not None and isinstance(t._grad._value, np.ndarray) and \
            t._grad._value.shape == value.shape and t._grad._value.flags.writeable:
        before_write(t._grad)
        np.copyto(t._grad._value, value)
        t._grad._version_counter.v += 1
    else:
        t._grad = t._plain(np.array(value, copy=True))


def plain_leaves(leaves):
    """True when gradients for these leaf tensors may be written into their .grad directly:
    no tensor hooks, no post-accumulate hooks, no hooks on a live AccumulateGrad node, and no
    tensor twice (its gradients are summed first, as the general engine does)."""
    for v in leaves:
        if v._hooks or v._post_acc_hooks or "_grad_dtype" in v.__dict__:
            return False
        ref = v._accumulator
        if ref is not None:
            node = ref()
            if node is not None and (node._pre_hooks or node._hooks):
                return False
    return len(leaves) < 2 or len(set(map(id, leaves))) == len(leaves)


def _post_accumulate(t):
    if t._post_acc_hooks and _current_builder() is not None and \
            not all(getattr(h, "records_into_trace", False) for h in t._post_acc_hooks):
        # a backward traced inside a compiled function: the hook would run once, at trace
        # time, on traced values, and never on a cached call (its effects outside the
        # program, an all-reduce or an optimizer step, lost): the function runs eagerly.
        # A hook with `records_into_trace = True` (DDP's) records its effects as steps of
        # the program instead, and runs here, at trace time
        graph_break(f"a post-accumulate-grad hook on a tensor of shape {size_list(t.shape)} runs "
                    f"in the compiled function's backward (hooks run eagerly only)", t)
    for hook in t._post_acc_hooks:
        if hook(t) is not None:
            raise RuntimeError("Tensor post accumulate grad hooks should return None.")


def fresh(t):
    """Mark a tensor whose array was just allocated for it and is referenced nowhere else (a
    compiled backward's output): accumulate_grad may keep it as `.grad` without a copy."""
    t._fresh = True
    return t


def note_grad_write(t):
    """Tell an active tracer that a real tensor's .grad is about to change."""
    b = _current_builder()
    if b is not None and hasattr(b, "note_grad_write"):
        b.note_grad_write(t)
