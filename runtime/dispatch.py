"""The one path from a tensor op to a prim: bind the values, record the autograd node.

`apply(prim, *tensors, **params)` is used by every op in runtime/*_ops.py. Eager values are
numpy arrays; while a GraphBuilder is active they are IR Vars and the bind records a Node.
"""
import numpy as _np

from aotgrad.ir.core import WATCHED_PRIMS, Aval, aval_of, current_builder, Var
from aotgrad.ir.dtypes import DType
from aotgrad.ir.tags import Tag
from aotgrad.runtime import forward_mode, layout, profiling
from aotgrad.runtime.autograd_node import Node
from aotgrad.runtime.forward_mode import state as _forward
from aotgrad.runtime.grad_mode import state as _mode
from aotgrad.runtime.graph_breaks import GraphBreak, describe_break, graph_break, \
    on_graph_break  # noqa: F401 (the op layer and the tracer reach them through dispatch)
from aotgrad.runtime.saved_tensors import UNDEFINED_SAVED, SavedTensor
from aotgrad.runtime.tensor import Tensor

VJP = {}  # Prim -> Rule; filled by runtime/derivatives.py


break_recorder = None  # a list while aotgrad.explain runs the function eagerly


def note_concrete(what):
    """Called on every conversion to a concrete value; explain() records where it happens."""
    if break_recorder is not None:
        break_recorder.append(describe_break(what))


class PrimBackward(Node):
    """The autograd node of one prim application; its backward is the prim's one rule."""

    def __init__(self, prim, rule, params, inputs, out, in_avals=None):
        # (Node.__init__'s work written out: this runs for every recorded prim)
        nexts, need = [], []
        for t in inputs:
            if t.requires_grad:
                fn = t.grad_fn
                nexts.append((fn, t._output_nr) if fn is not None else
                             (t._grad_accumulator(), 0))
                need.append(True)
            else:
                nexts.append(_NO_EDGE)
                need.append(False)
        self.next_functions = tuple(nexts)
        self._in_avals = in_avals if in_avals is not None else \
            [Aval(t._value.shape, t.dtype) for t in inputs]
        v = out._value
        self._out_avals = [_array_aval(v) if type(v) is _np.ndarray else aval_of(v)]
        self._note_origin()
        self._name, self.prim, self.rule, self.params = rule.node_name, prim, rule, params
        self.needs_input_grad = need = tuple(need)
        plan = _save_plans.get((rule, need))
        if plan is None:
            plan = _save_plans[(rule, need)] = _save_plan(rule, need)
        inputs_wanted, out_wanted = plan
        self._saved = [SavedTensor(inputs[i]) if i is not None else None
                       for i in inputs_wanted]
        if out_wanted is not None:
            self._saved.append(SavedTensor(out, is_output=True) if out_wanted else None)

    @property
    def saved_tensors(self):
        return tuple(None if s is None else s.unpack(self) for s in self._saved)

    def _backward(self, grads):
        return self.rule.fn(self, grads[0])

    def _release(self):
        for s in self._saved:
            if s is not None:
                s.release()

    _SAVED_NAMES = {"_saved_self": 0, "_saved_other": 1}

    def __getattr__(self, name):
        """`grad_fn._saved_self` / `_saved_other` / `_saved_result` (PyTorch's saved-tensor
        accessors) for what this prim saved: its first / second input, its output. Raises the
        "backward through the graph a second time" error once they were freed.
        `_raw_saved_self` (and so on) is the SavedTensor itself, whose `register_hooks(pack,
        unpack)` sets hooks for that one saved tensor."""
        raw = name.startswith("_raw_saved_")
        if raw:
            name = "_saved_" + name[len("_raw_saved_"):]
        s = None
        if name == "_saved_result" and self.rule.save_output:
            s = self._saved[-1]
        else:
            i = self._SAVED_NAMES.get(name)
            if i is None or i not in self.rule.save_inputs:
                s = _MISSING
            else:
                s = self._saved[list(self.rule.save_inputs).index(i)]
        if s is not _MISSING:
            if raw:
                return UNDEFINED_SAVED if s is None else s
            return None if s is None else s.unpack(self)
        raise AttributeError(f"'{type(self).__name__}' object ({self.name()}) has no attribute "
                             f"'{name}'")


_MISSING = object()  # PrimBackward.__getattr__: no saved tensor of that name
_NO_EDGE = (None, 0)  # the edge of an input that does not require grad
_save_plans = {}  # (rule, needs_input_grad) -> _save_plan(rule, needs_input_grad)


def _save_plan(rule, need):
    """What a node of `rule` saves when the inputs' gradients `need` are wanted: (the input
    position of each saved slot, None where that input is not needed; whether the output is
    saved, None where the rule saves no output). An input (or the output) only some
    gradients need is saved only when one of them is wanted; an unsaved output leaves
    modifying it in place no error."""
    save_if = rule.save_if
    if save_if is None:
        inputs_wanted = tuple(rule.save_inputs)
    else:
        inputs_wanted = tuple(i if i not in save_if or any(need[j] for j in save_if[i])
                              else None for i in rule.save_inputs)
    out_wanted = None
    if rule.save_output:
        out_wanted = save_if is None or "out" not in save_if or \
            any(need[j] for j in save_if["out"])
    return inputs_wanted, out_wanted


class ScalarOperandBackward(Node):
    """A prim's node with the edges of its Python-number operands left out, as PyTorch's
    `*Backward1` nodes of `number op tensor` have (`(1 - x).grad_fn.next_functions` has one
    edge). `keep` lists the input positions whose edges stay; the prim's rule still runs."""

    def __init__(self, inner, keep, name):
        super().__init__([inner.next_functions[i] for i in keep],
                         [inner._in_avals[i] for i in keep], inner._out_avals)
        self._inner, self._keep, self._name = inner, tuple(keep), name

    def _backward(self, grads):
        outs = self._inner._backward(grads)
        return [outs[i] for i in self._keep]

    def _release(self):
        self._inner._release()


def drop_scalar_edges(out, keep, name):
    """Give `out` (made by one prim) a ScalarOperandBackward node keeping inputs `keep`."""
    if isinstance(out.grad_fn, PrimBackward):
        out.grad_fn = ScalarOperandBackward(out.grad_fn, keep, name)
    return out


def _lift(builder, t):
    return t._value if isinstance(t._value, Var) else builder.lift_object(t)


# Eager binds the shape rule accepted: (prim, input shapes, input dtypes, params) -> the
# input avals. A shape rule is a function of its avals and params alone, so a bind of the
# same key needs no second check; a key the rule rejects is never stored (it raises again,
# with its message). Params are part of the key (their values and types) only when every
# value is of a plain type; a bind with any other value, or a tuple holding an unhashable
# one, is checked every time.
_checked = {}
_CHECKED_MAX = 4096  # distinct keys kept (a program of many shapes starts afresh past it)
_PLAIN_PARAMS = frozenset((int, float, bool, str, tuple, type(None), DType))
_avals = {}  # (shape, numpy dtype) -> the Aval of such an array (avals are never modified)


def _array_aval(v):
    """The Aval of numpy array v (one shared object per shape and dtype)."""
    a = _avals.get((v.shape, v.dtype))
    if a is None:
        a = aval_of(v)
        if len(_avals) >= _CHECKED_MAX:
            _avals.clear()
        _avals[(v.shape, v.dtype)] = a
    return a


def checked_avals(prim, vals, params):
    """The input avals of `prim` bound on numpy arrays `vals`, after its shape rule accepted
    them (raising its error when it does not)."""
    # (keys with params have an even length, those without an odd one: they never meet)
    if params:
        types = tuple(map(type, params.values()))   # (1 and 1.0 and True are equal keys)
        if not _PLAIN_PARAMS.issuperset(types):
            in_avals = [aval_of(v) for v in vals]
            prim.abstract_eval(*in_avals, **params)
            return in_avals
        p = (tuple(params.items()), types)
        if len(vals) == 1:
            a, = vals
            key = (prim, a.shape, a.dtype, p)
        else:
            key = (prim, *[v.shape for v in vals], *[v.dtype for v in vals], p)
    elif len(vals) == 2:
        a, b = vals
        key = (prim, a.shape, b.shape, a.dtype, b.dtype)
    elif len(vals) == 1:
        a, = vals
        key = (prim, a.shape, a.dtype)
    else:
        key = (prim, *[v.shape for v in vals], *[v.dtype for v in vals])
    try:
        in_avals = _checked.get(key)
    except TypeError:  # a tuple param holding an unhashable value: checked every time
        in_avals = [aval_of(v) for v in vals]
        prim.abstract_eval(*in_avals, **params)
        return in_avals
    if in_avals is None:
        in_avals = [_array_aval(v) for v in vals]
        prim.abstract_eval(*in_avals, **params)
        if len(_checked) >= _CHECKED_MAX:
            _checked.clear()
        _checked[key] = in_avals
    return in_avals


def apply(prim, *inputs, **params):
    """Bind `prim` on the tensors' values and record its autograd node when needed."""
    builder = current_builder()
    in_avals = None
    if builder is None and not profiling._profilers and prim not in WATCHED_PRIMS:
        for t in inputs:
            if type(t._value) is not _np.ndarray:
                break
        else:
            vals = [t._value for t in inputs]
            # the eager hot path: Prim.bind's work without its dispatch (numpy arrays, which
            # no transform interprets; no profiler records), keeping the input avals for the
            # autograd node
            in_avals = checked_avals(prim, vals, params)
            out_val = prim.impl(*vals, **params)
    if in_avals is None:
        if builder is None:
            vals = [t._value for t in inputs]
        else:
            vals = [_lift(builder, t) for t in inputs]
        if profiling._profilers:
            with profiling.record(f"prims.{prim.name}", kind="prim"):
                out_val = prim.bind(*vals, **params)
        else:
            out_val = prim.bind(*vals, **params)
    if not isinstance(out_val, (_np.ndarray, Var)):  # numpy returns scalars for 0-d results
        out_val = _np.asarray(out_val)
    out = Tensor._make(out_val, False)
    if builder is not None:
        builder.track(out)
        if Tag.VIEW in prim.tags:
            layout.propagate(prim, params, inputs[0], out)
        else:
            layout.note_result(prim, inputs, out)
        if Tag.SHARES_MEMORY in prim.tags and inputs[0]._traced_saved:
            # eagerly a view of a tensor saved for the backward: writing to it in place
            # makes that backward raise, so the trace breaks there (see commit_inplace)
            out._views_saved = True
    elif out_val.base is not None:
        # a numpy view of an input (a reshape or transpose inside an op's decomposition)
        # shares the input's version counter, as views do, so that writing to one in place
        # is seen by a backward that saved the other (it used the modified values)
        for t, v in zip(inputs, vals):
            if isinstance(v, _np.ndarray) and _np.may_share_memory(out_val, v):
                out._version_counter = t._version_counter
                break
    if _forward.level is not None and not _forward.suspended and inputs and \
            not _mode.inference:  # (inference mode records no tangents, as in PyTorch)
        _forward_tangent(prim, params, inputs, out)
    if inputs and _mode.grad_enabled:
        for t in inputs:
            if t.requires_grad:
                rule = VJP.get(prim)
                if rule is not None and out.dtype.is_floating_point:
                    out._requires_grad = True  # (the slot itself: floating point checked)
                    out.grad_fn = PrimBackward(prim, rule, params, inputs, out, in_avals)
                break
    return out


def _forward_tangent(prim, params, inputs, out):
    """Forward-mode AD: out's tangent from the inputs' tangents (runtime/forward_mode.py)."""
    tangents = [forward_mode.tangent_of(t) for t in inputs]
    rule = VJP.get(prim)
    if rule is None or not out.dtype.is_floating_point or all(t is None for t in tangents):
        return
    if current_builder() is not None:
        graph_break("forward-mode AD (a dual tensor) inside a compiled function", out)
    forward_mode.set_tangent(out, forward_mode.prim_tangent(rule, PrimBackward, prim, params,
                                                            inputs, out, tangents))


def concrete(self, what):
    """Tensor._concrete: the eager value of `self`, which `what` needs (a graph break while
    tracing)."""
    if break_recorder is not None:
        note_concrete(what)
    if isinstance(self._value, Var):
        graph_break(what, self)
    return self._value
