"""The nodes of the backward graph: `Node` (a `grad_fn`), `AccumulateGrad` (a leaf's sink),
`GradientEdge` (where a gradient enters the graph) and the handles that hooks return.

The node protocol, which the backward loop (runtime/backward.py) relies on and nothing
more: `next_functions` (one (node, output_nr) edge per forward input), `_in_avals` /
`_out_avals` (shapes and dtypes of the forward inputs / outputs), `_backward(grads)` (one
gradient per forward output in, one per input out), `_materialize(grads)`, `_release()`,
the hook containers and `_seq`. Subclasses live with the ops that make them (dispatch,
composite, executor, autograd.function).

This module imports no Tensor. What it needs of the tensors it meets, it asks of them (the
tensor protocol declared on `Tensor`): `_grad_accumulator()`, `_zeros(shape, dtype)`.
"""
import itertools
import types

from aotgrad.ir.core import Aval
from aotgrad.ir.core import current_builder as _current_builder
from aotgrad.ir.core import make_provenance as _make_provenance
from aotgrad.runtime import grad_mode, profiling
from aotgrad.runtime.grad_accumulation import accumulate_grad
from aotgrad.runtime.grad_mode import state as _mode

_seq = itertools.count()
next_sequence_nr = _seq.__next__  # a node's sequence number (later nodes run first)
_ACCUMULATE_FIRST = 1 << 64         # added to an AccumulateGrad's number (see there)
_EMPTY = types.MappingProxyType({})


class Node:
    """A node of the backward graph (a `grad_fn`). Calling it maps output grads to input grads.

    >>> x = aotgrad.ones(3, requires_grad=True)
    >>> y = (x * 2).sum(); y.grad_fn.name()
    'SumBackward0'
    """
    _name = "Node"
    # hook containers are created on first registration (most nodes never get one)
    _pre_hooks = _hooks = ()
    _tensor_pre_hooks = _retain_grad = _EMPTY  # output_nr -> [hook(grad)] / weakref(tensor)
    _stack = _provenance = None
    _in_composite = False  # one of the prims' nodes a composite node (runtime.composite) runs
    # a built-in node that receives no gradient at all gives none (PyTorch's derivative
    # formulas skip an undefined gradient); custom Functions and compiled backwards run on
    # materialized zeros instead
    _none_in_none_out = True
    # optional: fast_backward(t, retain_graph) -> bool runs `t.backward()` (implicit gradient,
    # no create_graph, no inputs); Tensor.backward calls it only where fast_path_ok(node)
    # holds, and it checks what only it knows (its leaves, its saved values); False: nothing
    # done, the general path runs
    _fast_backward = None
    # a node none of whose outputs got a gradient gives its inputs none (it does not run on
    # zeros), as PyTorch's built-in nodes; custom Functions run on zeros (BackwardCFunction)
    runs_without_grads = False

    def __init__(self, next_functions, in_avals, out_avals):
        self.next_functions = tuple(next_functions)
        self._in_avals = in_avals        # shapes/dtypes of the forward inputs (grad outputs)
        self._out_avals = out_avals      # shapes/dtypes of the forward outputs (grads in)
        self._note_origin()

    def _note_origin(self):
        """Sequence number, and where the node was made: the forward stack in anomaly mode,
        the user's source line while tracing."""
        self._seq = next(_seq)
        if _mode.anomaly:
            self._stack = grad_mode.forward_stack()
        if _current_builder() is not None:
            self._provenance = _make_provenance()

    @property
    def metadata(self):
        """A dict for the user's annotations (like PyTorch's Node.metadata)."""
        d = self.__dict__.get("_metadata")
        if d is None:
            d = self.__dict__["_metadata"] = {}
        return d

    def _tensor_hooks(self, output_nr):
        """The list of Tensor.register_hook hooks for one output (created on demand)."""
        if self._tensor_pre_hooks is _EMPTY:
            self._tensor_pre_hooks = {}
        return self._tensor_pre_hooks.setdefault(output_nr, [])

    def _drop_tensor_hooks(self, output_nr):
        """Forget the Tensor.register_hook hooks of one output."""
        if output_nr in self._tensor_pre_hooks:
            del self._tensor_pre_hooks[output_nr]

    def _set_retain_grad(self, output_nr, ref):
        if self._retain_grad is _EMPTY:
            self._retain_grad = {}
        self._retain_grad[output_nr] = ref

    def name(self):
        return self._name

    @property
    def _input_metadata(self):
        """Shape and dtype of each gradient the node takes (its forward outputs'), as
        PyTorch's `grad_fn._input_metadata`."""
        return [None if a is None else
                types.SimpleNamespace(shape=tuple(a.shape), dtype=a.dtype,
                                      is_nested_tensor=False, is_cpp_nested_tensor=False)
                for a in self._out_avals]

    def _sequence_nr(self):
        """The order the node was made in (later nodes run first), as PyTorch's."""
        return self._seq

    def __repr__(self):
        return f"<{self.name()} object at {hex(id(self))}>"

    def _backward(self, grads):
        raise NotImplementedError

    def _release(self):
        pass

    def __call__(self, *grads):
        """Run the node's backward by hand, as `grad_fn(grad)` in PyTorch: one gradient per
        output of the forward (a gradient broadcastable to the output's shape is expanded;
        when every gradient is None, so is every result)."""
        avals = self._out_avals
        if len(grads) != len(avals):
            raise TypeError(f"expected {len(avals)} arguments, got {len(grads)} instead")
        if all(g is None for g in grads):
            outs = (None,) * len(self.next_functions)
        else:
            grads = [g.expand(a.shape) if g is not None and a is not None and
                     tuple(g.shape) != tuple(a.shape) else g for g, a in zip(grads, avals)]
            outs = tuple(self._backward(self._materialize(grads)))
        return outs[0] if len(outs) == 1 else outs  # (one gradient: the tensor itself)

    def _materialize(self, grads):
        """The gradients with a zero tensor for each missing one. (A node that runs with no
        gradient at all, which built-in nodes never do, makes its own zeros, as
        BackwardCFunction does.)"""
        like, missing = None, False
        for g in grads:  # (not `None in grads`: that would call Tensor.__eq__)
            if g is None:
                missing = True
            elif like is None:
                like = g
        if not missing or like is None:
            return grads
        return [g if g is not None else like._zeros(a.shape, a.dtype)
                for g, a in zip(grads, self._out_avals)]

    def register_hook(self, fn):
        """fn(grad_inputs, grad_outputs) after the node runs; may return new grad_inputs."""
        if self._hooks == ():
            self._hooks = []
        self._hooks.append(fn)
        return RemovableHandle(self._hooks, fn)

    def register_prehook(self, fn):
        """fn(grad_outputs) before the node runs; may return new grad_outputs."""
        if self._pre_hooks == ():
            self._pre_hooks = []
        self._pre_hooks.append(fn)
        return RemovableHandle(self._pre_hooks, fn)


class RemovableHandle:
    """Returned by every register_*hook; `handle.remove()` unregisters."""

    def __init__(self, hooks, fn):
        self._hooks, self._fn = hooks, fn

    def remove(self):
        if self._fn in self._hooks:
            self._hooks.remove(self._fn)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


class AccumulateGrad(Node):
    """The sink node of a leaf tensor: adds the incoming gradient to `variable.grad`."""
    _name = "AccumulateGrad"
    next_functions = ()
    _in_avals = ()

    def __init__(self, variable):  # made every step: no edges, avals derived on demand
        self.variable = variable
        self._note_origin()
        # PyTorch's AccumulateGrad has the largest sequence number: the engine runs it as
        # soon as its gradient is ready (a leaf's .grad and its post-accumulate-grad hooks,
        # DDP's bucket all-reduces, come before the rest of the backward). A node reused
        # across iterations would otherwise keep its first number and run last.
        self._seq += _ACCUMULATE_FIRST

    def _sequence_nr(self):
        return _ACCUMULATE_FIRST - 1   # UINT64_MAX, as PyTorch reports it

    @property
    def _out_avals(self):
        return [Aval(self.variable._value.shape, self.variable.dtype)]

    def _backward(self, grads):
        accumulate_grad(self.variable, grads[0], _mode.grad_enabled, from_list=True)
        return []


class GradientEdge(tuple):
    """(node, output_nr): where a gradient enters the backward graph. `autograd.grad` and
    `backward` accept one wherever they take a tensor (see autograd.graph.get_gradient_edge)."""
    __slots__ = ()

    def __new__(cls, node, output_nr):
        return tuple.__new__(cls, (node, output_nr))

    @property
    def node(self):
        return self[0]

    @property
    def output_nr(self):
        return self[1]

    def __repr__(self):
        return f"GradientEdge(node={self[0]!r}, output_nr={self[1]})"


def _node_of(t):
    """(node, output_nr) a gradient for tensor t (or GradientEdge t) flows into."""
    if type(t) is GradientEdge:
        return t
    if t.grad_fn is not None:
        return t.grad_fn, t._output_nr
    if t.requires_grad:
        return t._grad_accumulator(), 0
    return None, 0


def fast_path_ok(node):
    """True when a `loss.backward()` through `node` needs none of the general loop's work:
    no hooks or retain_grad on the node, no profiler, anomaly mode off, not tracing (the
    node was not made by a trace, and none runs). Its leaves are checked apart
    (`plain_leaves`). The node's own short backward (`node._fast_backward`, a compiled
    program's) and the engine's one-node path both run only where this holds."""
    return not (node._pre_hooks or node._hooks or node._tensor_pre_hooks or
                node._retain_grad or node._provenance is not None or profiling._profilers or
                _mode.anomaly or _current_builder() is not None)
