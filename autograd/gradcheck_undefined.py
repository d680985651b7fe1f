"""gradcheck's undefined-gradient check (PyTorch's `check_undefined_grad`): a backward must
cope with outputs that get no gradient at all (None, PyTorch's undefined tensor), as when an
output is not used. Each output passes through a node that hands its backward None instead
of the gradient it is given: first every output at once, then (several outputs) one at a
time. The backward must not raise, and must give None or zeros to every input."""
import warnings

import numpy as np

from aotgrad.ir.core import Aval
from aotgrad.runtime.autograd_api import grad as _grad
from aotgrad.runtime.engine import Node, _node_of
from aotgrad.runtime.factories import zeros_like
from aotgrad.runtime.grad_mode import enable_grad
from aotgrad.runtime.tensor import Tensor

BC_WARNING = (
    "Backwards compatibility: New undefined gradient support checking feature is enabled by "
    "default, but it may break existing callers of this function. If this is true for you, "
    "you can call this function with \"check_undefined_grad=False\" to disable the feature")
RAISED = ("Expected backward function to handle undefined output grads: the backward raised "
          "when an output's gradient was None (an output that gets no gradient).")
NONZERO = ("Expected all input grads to be undefined or zero when all output grads are "
           "undefined or zero.")


class UndefinedGradBackward(Node):
    """Passes None on, whatever gradient it is given."""
    _name = "UndefinedGradBackward"

    def __init__(self, t):
        aval = Aval(tuple(t.shape), t.dtype)
        super().__init__([_node_of(t)], [aval], [aval])

    def _backward(self, grads):
        return [None]


def _undefined_grad(t):
    """t's value, with a node that gives t's history no gradient."""
    out = Tensor._make(t._value, False)
    out._version_counter = t._version_counter
    out.grad_fn, out.requires_grad = UndefinedGradBackward(t), True
    return out


def undefined_grad_problem(func, inputs, diff_idx):
    """None if func's backward handles undefined output gradients, else what went wrong
    (RAISED or NONZERO; the exception it raised is the cause of a RAISED)."""
    diff_inputs = [inputs[i] for i in diff_idx]

    def outputs():
        with enable_grad():
            outs = func(*inputs)
        outs = outs if isinstance(outs, (tuple, list)) else (outs,)
        return [o for o in outs if isinstance(o, Tensor) and o.requires_grad and
                o.dtype.is_floating_point]
    first = outputs()
    cases = [[_undefined_grad(o) for o in first]]
    if len(first) > 1:
        for k in range(len(first)):
            cases.append([_undefined_grad(o) if i == k else o for i, o in enumerate(outputs())])
    for outs in cases:
        if not outs:
            continue
        try:
            gs = _grad(outs, diff_inputs, [zeros_like(o) for o in outs], allow_unused=True)
        except RuntimeError as e:
            warnings.warn(BC_WARNING, stacklevel=4)
            return RAISED, e
        if any(g is not None and np.any(np.asarray(g._value) != 0) for g in gs):
            warnings.warn(BC_WARNING, stacklevel=4)
            return NONZERO, None
    return None
