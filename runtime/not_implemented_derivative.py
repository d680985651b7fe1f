"""Outputs of ops PyTorch has no derivative for: they still require grad and carry a node
(so the graph looks as PyTorch's), and differentiating through that node raises
"the derivative for '<op>' is not implemented." (NotImplementedError, as PyTorch)."""
from aotgrad.ir.core import Aval
from aotgrad.runtime.autograd_node import Node, _node_of
from aotgrad.runtime.grad_mode import state as _mode


class NotImplementedBackward(Node):
    """The node of an output that has no derivative: its backward raises."""

    def __init__(self, name, op_name, inputs, out):
        super().__init__([_node_of(t) if t.requires_grad else (None, 0) for t in inputs],
                         [Aval(t._value.shape, t.dtype) for t in inputs],
                         [Aval(out._value.shape, out.dtype)])
        self._name, self.op_name = name, op_name

    def _backward(self, grads):
        raise NotImplementedError(f"the derivative for '{self.op_name}' is not implemented.")


def without_derivative(out, name, op_name, inputs):
    """Give floating-point `out` (computed from `inputs` outside autograd) a node `name` that
    refuses to differentiate, when grad mode is on and an input requires grad."""
    if _mode.grad_enabled and out.dtype.is_floating_point and \
            any(t.requires_grad for t in inputs):
        out.grad_fn = NotImplementedBackward(name, op_name, inputs, out)
        out.requires_grad = True
    return out
