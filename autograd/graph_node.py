"""`autograd.graph.Node`: the abstract type of the backward graph's nodes, as in PyTorch.

The engine's nodes (runtime.autograd_node.Node and its subclasses: built-in nodes,
AccumulateGrad, custom Functions' `<Name>Backward`, which is also their `ctx`) do not derive
from it, yet count as its instances and subclasses: `isinstance(t.grad_fn, Node)` holds while
`Node not in type(t.grad_fn).mro()`, as PyTorch's C++ nodes relate to its Python class.
"""
import abc

from aotgrad.runtime.engine import Node as _EngineNode


class Node(abc.ABC):
    """A node of the backward graph: `name()`, `next_functions`, `metadata`,
    `register_hook(fn)`, `register_prehook(fn)`."""

    @abc.abstractmethod
    def name(self):
        """The node's name (`MulBackward0`)."""

    @property
    @abc.abstractmethod
    def next_functions(self):
        """One (node, output_nr) edge per input of the forward op."""

    @property
    @abc.abstractmethod
    def metadata(self):
        """A dict for the user's annotations."""

    @abc.abstractmethod
    def register_hook(self, fn):
        """fn(grad_inputs, grad_outputs) after the node runs."""

    @abc.abstractmethod
    def register_prehook(self, fn):
        """fn(grad_outputs) before the node runs."""

    @classmethod
    def __subclasshook__(cls, subclass):
        if cls is Node and issubclass(subclass, _EngineNode):
            return True
        return NotImplemented
