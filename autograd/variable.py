"""`autograd.Variable`: the old name of Tensor, kept for code written before they merged.

`isinstance(t, Variable)` holds for every tensor, and `Variable(t, requires_grad=...)` is a new
leaf sharing t's data (t detached), as in PyTorch.
"""
from aotgrad.runtime.engine import ExecutionEngine
from aotgrad.runtime.tensor import Tensor

__all__ = ["Variable"]


class _VariableMeta(type):
    def __instancecheck__(cls, other):
        return isinstance(other, Tensor)

    def __call__(cls, data=None, requires_grad=False, volatile=False):
        if data is None:
            from aotgrad.runtime.factories import tensor
            return tensor([])
        if not isinstance(data, Tensor):
            raise TypeError(f"Variable data has to be a tensor, but got {type(data).__name__}")
        out = data.detach()
        out.requires_grad_(requires_grad)
        return out


class Variable(metaclass=_VariableMeta):
    """Tensor, under its pre-merge name: `Variable(t)` is `t.detach()` (with requires_grad
    as given). `Variable._execution_engine` is the engine's handle (`queue_callback`)."""
    _execution_engine = ExecutionEngine()
