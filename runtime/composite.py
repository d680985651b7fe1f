"""One autograd node for a user-level op that aotgrad computes with several prims, as
PyTorch records it: `torch.var_mean(x)` gives two outputs sharing one `VarMeanBackward0`, whose
prehooks see both outputs' gradients, `x.split(2)` gives outputs sharing one
`SplitBackward0`, and `F.mse_loss(x, y)` gives one `MseLossBackward0` whose edges are x and y.

The op runs as usual (each prim records its own node); `share_node` then gives its outputs
one `CompositeBackward` node whose edges are the op's inputs. Its backward runs the prims'
nodes, from the outputs down to the inputs, with the engine's `run_subgraph`: the derivative
rules stay those of the prims, and a backward under create_graph records them as usual.
`composite(name, edges)` does this for a one-output op: the decorated function's arguments
named in `edges` become the node's edges, in PyTorch's order (an absent one is a None edge).
An op whose derivative is not the one its prims give registers its own rule instead
(runtime/composite_rules.py: the JAX custom_vjp idea).

>>> import aotgrad
>>> x = aotgrad.randn(4, 3, requires_grad=True)
>>> v, m = aotgrad.var_mean(x, 0)
>>> v.grad_fn is m.grad_fn, v.grad_fn.name()
(True, 'VarMeanBackward0')
"""
import functools
import inspect

import numpy as np

from aotgrad.ir.core import Aval, current_builder
from aotgrad.runtime import forward_mode, tprims
from aotgrad.runtime.autograd_node import GradientEdge, Node, _node_of
from aotgrad.runtime.backward import release_after_pass, run_backward, run_subgraph
from aotgrad.runtime.forward_mode import state as _forward
from aotgrad.runtime.graph_breaks import GraphBreak
from aotgrad.runtime.saved_tensors import UNDEFINED_SAVED, SavedTensor
from aotgrad.runtime.grad_mode import state as _mode
from aotgrad.runtime.tensor import Tensor


class CompositeBackward(Node):
    """The node of several outputs of one op; `_inner` holds where each output's gradient
    enters the prims' nodes."""
    # outputs that got no gradient stay None (the prims' nodes of unused outputs do not run)
    materialize_grads = False

    def __init__(self, name, inputs, outputs):
        super().__init__(_edges(inputs),
                         [None if t is None else Aval(t._value.shape, t.dtype) for t in inputs],
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


def _edges(inputs):
    """The edges of a node over `inputs` (tensors, or None for an absent argument)."""
    return [_node_of(t) if t is not None and t.requires_grad else (None, 0) for t in inputs]


def edge_positions(fn, edges):
    """(position, name) of each parameter of `fn` named in `edges`, in that order."""
    params = list(inspect.signature(fn).parameters)
    return tuple((params.index(e), e) for e in edges)


def edge_arguments(positions, args, kwargs):
    """The tensors given for the parameters at `positions` (None where absent or not a
    tensor)."""
    out = []
    for i, name in positions:
        a = args[i] if i < len(args) else kwargs.get(name)
        out.append(a if isinstance(a, Tensor) else None)
    return out


def untracked_input(inputs, args, kwargs):
    """Whether a tensor argument that requires grad is not one of the node's `inputs` (its
    gradient would be lost behind the node: the op keeps its prims' nodes then)."""
    for a in (*args, *kwargs.values()):
        if isinstance(a, Tensor) and a.requires_grad and not any(a is t for t in inputs):
            return True
    return False


def composite(grad_name, edges):
    """Decorate a one-output op: its result gets one node named `grad_name` (a string, or a
    function of the op's arguments giving one) whose edges are the arguments named in `edges`;
    its backward runs the prims' nodes of the decomposition."""
    def deco(fn):
        positions = edge_positions(fn, edges)

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            out = fn(*args, **kwargs)
            if type(out) is Tensor and out.grad_fn is not None:
                name = grad_name if isinstance(grad_name, str) else grad_name(*args, **kwargs)
                one_node(name, edge_arguments(positions, args, kwargs), out, args, kwargs)
            return out
        return wrapper
    return deco


def one_node(name, inputs, out, args=(), kwargs=None):
    """Give `out`, computed by prims from `inputs`, one node named `name` over those inputs
    (the node the prims made is renamed when it already has exactly those edges; a node of
    that name a nested call of the same op made, over a cast of the input, is kept)."""
    if (type(out.grad_fn) is CompositeBackward or getattr(out.grad_fn, "whole_op", False)) \
            and out.grad_fn._name == name:
        return out
    if any(out is t for t in inputs if t is not None) or \
            untracked_input(inputs, args, kwargs or {}):
        out.grad_fn._name = name
        return out
    nexts = _edges(inputs)
    fn = out.grad_fn
    if len(fn.next_functions) == len(nexts) and \
            all(a[0] is b[0] and a[1] == b[1] for a, b in zip(fn.next_functions, nexts)):
        fn._name = name
        return out
    node = CompositeBackward(name, inputs, [out])
    out.grad_fn, out._output_nr = node, 0
    return out


# ---- composite ops with a rule of their own ------------------------------------------------
RULES = {}  # grad_fn name -> the rule of the composite op that records it (see with_rule)


class RuleBackward(Node):
    """The node of a composite op with its own derivative rule: `rule(ctx, g)` gives one
    gradient per edge, written with tensor ops (so it is itself differentiable, and traced
    into the ahead-of-time backward like a prim's rule). `ctx.args` holds the op's arguments
    by name, its tensors as saved (checked against in-place changes); `ctx.result` the
    output."""

    def __init__(self, name, rule, inputs, out, args, save=None, saved_names=None):
        super().__init__(_edges(inputs),
                         [None if t is None else Aval(t._value.shape, t.dtype) for t in inputs],
                         [Aval(out._value.shape, out.dtype)])
        self._name, self.rule = name, rule
        self.needs_input_grad = tuple(t is not None and t.requires_grad for t in inputs)
        self._args = {k: (SavedTensor(v) if save is None or k in save else None)
                      if isinstance(v, Tensor) else v for k, v in args.items()}
        self._result = SavedTensor(out, is_output=True) \
            if save is None or "result" in save else None
        self._saved_names = saved_names

    def __getattr__(self, name):
        """PyTorch's saved-attribute accessors: `_saved_<arg>` is the op's argument of that
        name (a saved tensor read back, or the number it was given), `_saved_self` the first
        one, `_saved_result` the output; `saved_names` maps PyTorch's names that differ
        (pow's `exponent`). `_raw_saved_<arg>` is the SavedTensor object itself."""
        raw = name.startswith("_raw_saved_")
        key = name[len("_raw_saved_" if raw else "_saved_"):] \
            if raw or name.startswith("_saved_") else None
        args = self.__dict__.get("_args")
        if key is None or args is None:
            raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")
        if key == "result":
            value, found = self._result, True
        else:
            key = (self._saved_names or {}).get(key, key)
            if key == "self" and "self" not in args:
                key = next(iter(args))
            value, found = args.get(key), key in args
        if not found or (raw and value is not None and not isinstance(value, SavedTensor)):
            raise AttributeError(f"'{type(self).__name__}' object ({self.name()}) has no "
                                 f"attribute '{name}'")
        if raw:
            return UNDEFINED_SAVED if value is None else value
        return value.unpack(self) if isinstance(value, SavedTensor) else value

    @property
    def args(self):
        return {k: v.unpack(self) if isinstance(v, SavedTensor) else v
                for k, v in self._args.items()}

    @property
    def result(self):
        return None if self._result is None else self._result.unpack(self)

    def _backward(self, grads):
        return [g if g is None or a is None else g._sum_to_shape(a.shape)
                for g, a in zip(self.rule(self, grads[0]), self._in_avals)]

    def _release(self):
        for v in self._args.values():
            if isinstance(v, SavedTensor):
                v.release()
        if self._result is not None:
            self._result.release()


def with_rule(grad_name, edges, rule, save=None, nan_result_tangent=False, saved_names=None):
    """Decorate a one-output composite op whose derivative is `rule` (registered under
    `grad_name`), not the one its prims would give: the forward runs without recording its
    prims, its result gets one RuleBackward node over the arguments named in `edges`, and
    forward-mode AD takes its tangent from the same rule. `save` names the tensor arguments
    (and "result") the rule reads, which are what the node saves (saved-tensor hooks see
    them); by default every tensor argument and the result. `nan_result_tangent`: where the
    result is NaN its tangent is NaN (PyTorch's forward formula of a reduction that picks
    one value reads the tangents of the elements equal to the result, and a NaN equals
    none, while its backward sends the gradient to the NaN elements). `saved_names` maps
    PyTorch's names of the node's saved attributes to the arguments' names where they
    differ."""
    RULES[grad_name] = rule

    def deco(fn):
        sig = inspect.signature(fn)
        positions = edge_positions(fn, edges)

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            inputs = edge_arguments(positions, args, kwargs)
            track = _mode.grad_enabled and any(t is not None and t.requires_grad
                                               for t in inputs)
            tangents = [None if t is None else forward_mode.tangent_of(t) for t in inputs] \
                if _forward.level is not None and not _forward.suspended else []
            dual = any(t is not None for t in tangents)
            if not (track or dual) or untracked_input(inputs, args, kwargs):
                return fn(*args, **kwargs)
            prev = _mode.grad_enabled, _forward.suspended
            _mode.grad_enabled, _forward.suspended = False, True
            try:
                out = fn(*args, **kwargs)
            finally:
                _mode.grad_enabled, _forward.suspended = prev
            if not out.dtype.is_floating_point:
                return out
            bound = sig.bind(*args, **kwargs)
            bound.apply_defaults()
            out.requires_grad = track  # (before the node saves it: its saved result is
            node = RuleBackward(grad_name, rule, inputs, out, bound.arguments, save,
                                saved_names)
            if track:                  # then differentiable, for a double backward)
                out.grad_fn = node
            if dual:
                tangent = _rule_tangent(node, out, inputs, tangents)
                if nan_result_tangent and tangent is not None:
                    tangent = tprims.where(tprims.ne(out, out),
                                           tprims.constant(float("nan"), tangent.dtype,
                                                           tuple(tangent.shape)), tangent)
                forward_mode.set_tangent(out, tangent)
            return out
        return wrapper
    return deco


def _rule_tangent(node, out, inputs, tangents):
    """J.t from the rule (linear in its cotangent u): d/du sum_i <rule(u)_i, t_i>, as
    forward_mode.prim_tangent does for a prim."""
    if current_builder() is not None:
        raise GraphBreak("forward-mode AD (a dual tensor) inside a compiled function")
    differentiable = _mode.grad_enabled and any(t is not None and t.requires_grad
                                                for t in (*inputs, *tangents))
    prev = _mode.grad_enabled, _forward.suspended
    _mode.grad_enabled, _forward.suspended = True, True
    need = node.needs_input_grad  # the rule gives the cotangents the tangents pair with
    node.needs_input_grad = tuple(t is not None for t in tangents)
    try:
        u = tprims.zeros(tuple(out.shape), out.dtype)
        u.requires_grad = True
        total = None
        for c, tan in zip(node.rule(node, u), tangents):
            if c is None or tan is None:
                continue
            term = tprims.reduce_sum(tprims.mul(c, tan.to(c.dtype)),
                                     dims=tuple(range(c.ndim)))
            total = term if total is None else tprims.add(total, term)
        if total is None or not total.requires_grad:
            return None
        jt, = run_backward([total], [Tensor._make(np.ones((), total.dtype.np))],
                           retain_graph=differentiable, create_graph=differentiable,
                           inputs=[u], allow_unused=True, accumulate=False)
        return None if jt is None else (jt if differentiable and jt.requires_grad
                                        else jt.detach())
    finally:
        _mode.grad_enabled, _forward.suspended = prev
        node.needs_input_grad = need
