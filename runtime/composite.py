"""One autograd node for a user-level op that aotgrad computes with several prims, as
PyTorch records it: `torch.var_mean(x)` gives two outputs sharing one `VarMeanBackward0`, whose
prehooks see both outputs' gradients, and `x.split(2)` gives outputs sharing one
`SplitBackward0`.

The op runs as usual (each prim records its own node); `share_node` then gives its outputs
one `CompositeBackward` node whose edges are the op's inputs. Its backward runs the prims'
nodes, from the outputs down to the inputs, with the engine's `run_subgraph`: the derivative
rules stay those of the prims, and a backward under create_graph records them as usual.

>>> import aotgrad
>>> x = aotgrad.randn(4, 3, requires_grad=True)
>>> v, m = aotgrad.var_mean(x, 0)
>>> v.grad_fn is m.grad_fn, v.grad_fn.name()
(True, 'VarMeanBackward0')
"""
from aotgrad.ir.core import Aval
from aotgrad.runtime.autograd_node import GradientEdge, Node, _node_of
from aotgrad.runtime.backward import release_after_pass, run_subgraph
from aotgrad.runtime.grad_mode import state as _mode
from aotgrad.runtime.tensor import Tensor


class CompositeBackward(Node):
    """The node of several outputs of one op; `_inner` holds where each output's gradient
    enters the prims' nodes."""
    # outputs that got no gradient stay None (the prims' nodes of unused outputs do not run)
    materialize_grads = False

    def __init__(self, name, inputs, outputs):
        super().__init__([_node_of(t) if t.requires_grad else (None, 0) for t in inputs],
                         [Aval(t._value.shape, t.dtype) for t in inputs],
                         [Aval(o._value.shape, o.dtype) for o in outputs])
        self._name = name
        self._inner = [GradientEdge(o.grad_fn, o._output_nr) for o in outputs]
        self._inner_nodes = self._find_inner_nodes()
        for n in self._inner_nodes:
            n._in_composite = True

    def _backward(self, grads):
        return run_subgraph(self._inner, grads, self.next_functions, _mode.grad_enabled)

    def _find_inner_nodes(self):
        """The prims' nodes between the outputs and the inputs."""
        stops = {n for n, _ in self.next_functions if n is not None}
        seen, stack = [], [n for n, _ in self._inner]
        while stack:
            n = stack.pop()
            if n is None or n in seen or n in stops:
                continue
            seen.append(n)
            stack.extend(nf for nf, _ in n.next_functions)
        return seen

    def _release(self):
        # (a backward under create_graph may reach these nodes again, through saved tensors,
        # in the same pass: they are freed when it ends)
        release_after_pass(self._inner_nodes)


def share_node(name, inputs, outputs):
    """Give the differentiable `outputs` of one op (tensors made from `inputs`) a single node
    named `name`; returns `outputs`."""
    inputs = [t for t in inputs if isinstance(t, Tensor)]
    tracked = [o for o in outputs if isinstance(o, Tensor) and o.grad_fn is not None and
               not any(o is t for t in inputs)]
    if not tracked:
        return outputs
    node = CompositeBackward(name, inputs, tracked)
    for i, o in enumerate(tracked):
        o.grad_fn, o._output_nr = node, i
    return outputs
