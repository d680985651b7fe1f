"""The autograd side of compiled programs: the nodes whose backward runs a compiled backward
graph (CompiledBackward; _CallBackward, its edges made on demand; _WrittenBackward, for
tensors written in place), and an interpreter that runs a Graph with tensor ops
(differentiable, for create_graph)."""
import functools
import sys

import numpy as np

from aotgrad.ir.core import first_nan_node
from aotgrad.runtime import profiling
from aotgrad.runtime.dispatch import apply
from aotgrad.runtime.engine import FREED_MESSAGE, Node, SavedTensor, _checked_hook_result, \
    _node_of, accumulate_retained, fresh, write_grad  # noqa: F401 (the compiler's call imports it)
from aotgrad.runtime.grad_mode import state as _mode
from aotgrad.runtime.grad_ready import early_leaves
from aotgrad.runtime.storage import exposed
from aotgrad.runtime.tensor import Tensor
from aotgrad.runtime.write_hooks import before_write


def run_graph_with_tensors(graph, tensors):
    """Evaluate `graph` node by node with tensor ops (so autograd records it)."""
    env = dict(zip(graph.inputs, tensors))
    for n in graph.nodes:
        out = apply(n.prim, *[env[v] for v in n.inputs], **n.params)
        env[n.outputs[0]] = out
    return [env[v] for v in graph.outputs]


class CompiledBackward(Node):
    """grad_fn of a compiled function's outputs: runs the compiled backward program once.

    With create_graph=True it instead replays the joint graph with tensor ops from the saved
    inputs, so the gradient is itself differentiable (double backward through compile)."""
    _name = "CompiledFunctionBackward"
    materialize_grads = False  # which outputs got a gradient decides which inputs get one
    _turn = 0  # the number of the program's call that made it (compiler/fused_call.py)

    def __init__(self, program, saved, diff_inputs, in_avals, out_avals, replay_inputs):
        super().__init__([_node_of(t) for t in diff_inputs], in_avals, out_avals)
        self.program = program
        self._saved_arrays = saved
        # the call's inputs (tensors, or seed arrays) and their versions: checked like saved
        # tensors, and replayed with tensor ops under create_graph
        self._replay = replay_inputs
        self._versions = [t._version_counter.v if isinstance(t, Tensor) else None
                          for t in replay_inputs]

    def _check_versions(self):
        for t, v in zip(self._replay, self._versions):
            if v is not None and t._version_counter.v != v:
                s = SavedTensor(t)
                s.version = v
                s.unpack(self)

    def _backward(self, grads):
        p = self.program
        if self._saved_arrays is None:
            raise RuntimeError(FREED_MESSAGE)
        self._check_versions()
        given = [g is not None for g in grads]
        grads = self._materialize(grads)
        if _mode.grad_enabled:  # create_graph: differentiable replay of the joint graph
            inputs = [t if isinstance(t, Tensor) else Tensor._make(t) for t in self._replay]
            outs = run_graph_with_tensors(p.replay_graph(self._saved_arrays),
                                          inputs + list(grads))
            return p.scatter_grads(outs[p.n_fw_outputs:], given)
        args = list(self._saved_arrays) + [g._value for g in grads]
        early = early_leaves(self, p, given, args)   # leaves whose hooks fire mid-program
        if early is not None:
            outs = p.run_backward_reporting(args, early.ready, early.unread)
            early.finish()
        elif profiling._profilers:
            with profiling.record(f"{p.name}.backward", kind="kernel"):
                outs = p.run_profiled("backward", args)
        else:
            outs = p.run_backward(args)
        if _mode.anomaly and _mode.anomaly_check_nan:
            p.check_backward_nan(args, outs, self.name())
        owned = p.owned_outputs("backward")
        if owned is None:  # an array that owns its memory, not an input, not returned twice
            seen = {id(a) for a in args}
            owned = [o.base is None and id(o) not in seen and not seen.add(id(o)) for o in outs]
        grads = [fresh(Tensor._make(o)) if own else Tensor._make(o) for o, own in zip(outs, owned)]
        if early is not None:
            return early.drop_delivered(p.scatter_grads(grads, given))
        return p.scatter_grads(grads, given)

    def _release(self):
        self._saved_arrays = None
        self._replay = self._versions = ()


class _CallBackward(CompiledBackward):
    """The grad_fn the generated call gives a compiled function's outputs when every
    differentiable input is a leaf. It is made without Node.__init__, and its edges (an
    AccumulateGrad per leaf) only when something reads `next_functions` (the general engine,
    a user walking the graph). A plain `loss.backward()` runs the backward program and
    accumulates into the leaves' .grad directly: `_fast_backward`, set per node to its
    program's fast backward (compiler.fast_backward.make_fast_backward)."""

    @functools.cached_property
    def next_functions(self):
        return tuple((t._grad_accumulator(), 0) for t in self._leaves)


class _FusedBackward(_CallBackward):
    """The grad_fn of an output made by a program's fused forward+backward variant
    (compiler/fused_call.py): the call stored the gradients at the implicit seed 1
    (`_grads`, the fused program's outputs), which its `_fast_backward` hands out. Any other
    backward needs the split forward's saved values: the first read of `_saved_arrays`
    checks the call's inputs' versions (PyTorch's error for one modified in place), runs
    the split forward again on them (`program.saved_after_fused`) and drops the stored
    gradients; the split backward then runs as for any _CallBackward."""
    _grads = None
    _needs_forward = False
    _saved = None
    _values = None   # a symbolic program's symbol values of the call

    @property
    def _saved_arrays(self):
        if self._needs_forward:
            self._check_versions()
            self._saved = self.program.saved_after_fused(self._replay, self._values)
            self._needs_forward, self._grads = False, None
        return self._saved

    @_saved_arrays.setter
    def _saved_arrays(self, value):
        self._saved, self._needs_forward = value, False

    def _backward(self, grads):
        # the general path (a profiler, hooks on a leaf, retain_grad on the output) with the
        # gradient the fused program was run for, the scalar 1: its stored gradients
        # (copied into .grad: a retained graph hands them out again), counted toward the
        # program's fused streak as the fast backward counts them (anomaly mode: the split
        # backward, whose outputs it checks for NaN)
        g = grads[0] if len(grads) == 1 else None
        if self._grads is not None and not _mode.grad_enabled and not _mode.anomaly and \
                g is not None and g._value.size == 1 and g._value.reshape(()) == 1:
            self._check_versions()
            p = self.program
            p.count_fused_backward(self)
            return p.scatter_grads([Tensor._make(o) for o in self._grads[p.n_fw_outputs:]],
                                   [True])
        return super()._backward(grads)

    def _release(self):
        super()._release()
        self._grads = None


class _WrittenBackward(CompiledBackward):
    """The grad_fn of a call that wrote tensors in place whose new values have history.
    Eagerly such a tensor's retain_grad() and hooks registered after the write see the
    gradient of its new value: what reaches it from outside and from its uses inside the
    function after the write. The compiled backward returns that gradient; this node gives it
    to them (a hook's replacement flows on to the inputs, as eagerly), in place of the
    engine, which would see only the part from outside."""

    def __init__(self, program, *args):
        super().__init__(program, *args)
        self._written = {nr: j for j, nr in enumerate(program.trace.written_grads)}
        self._written_hooks, self._written_retain = {}, {}

    def _set_retain_grad(self, output_nr, ref):
        if output_nr in self._written:
            self._written_retain[output_nr] = ref
        else:
            super()._set_retain_grad(output_nr, ref)

    def _tensor_hooks(self, output_nr):
        if output_nr in self._written:
            return self._written_hooks.setdefault(output_nr, [])
        return super()._tensor_hooks(output_nr)

    def _backward(self, grads):
        given = [g is not None for g in grads]
        out = super()._backward(grads)
        if not (self._written_hooks or self._written_retain):
            return list(out)
        totals, grads = list(out.written), list(out)
        slots = [nr for nr, reached in zip(self._written, self.program.written_reached(given))
                 if reached]
        for i, nr in enumerate(reversed(slots)):  # later writes first, as a backward goes
            j = self._written[nr]
            g = totals[j]
            for h in list(self._written_hooks.get(nr, ())):
                r = h(g)
                if r is not None:
                    r = _checked_hook_result(h, g, r)
                    if r is not g:  # the replacement flows on (the backward is linear in
                        tangents = [None] * len(self._out_avals)  # its output grads)
                        tangents[nr] = r - g
                        delta = CompiledBackward._backward(self, tangents)
                        grads = [d if a is None else a if d is None else a + d
                                 for a, d in zip(grads, delta)]
                        for nr2 in reversed(slots[:len(slots) - 1 - i]):  # not yet given
                            j2 = self._written[nr2]
                            totals[j2] = totals[j2] + delta.written[j2]
                        g = r
            ref = self._written_retain.get(nr)
            t = ref() if ref is not None else None
            if t is not None and t.grad_fn is self and t._output_nr == nr:
                accumulate_retained(t, g)
        return grads


def check_nan(graph, args, outs, what):
    """Anomaly mode for compiled code: on a NaN output, replay the graph with the reference
    prims to find the node that produced it and report that node's user line."""
    import numpy as np
    if not any(isinstance(o, np.ndarray) and o.dtype.kind == "f" and np.isnan(o).any()
               for o in outs):
        return
    node = first_nan_node(graph, args)
    where = ""
    if node is not None:
        prov = node.provenance
        where = f" The first NaN comes from prims.{node.prim.name}"
        if prov is not None:
            phase = " (in the backward of" if prov.phase == "bw" else " (in"
            where += f"{phase} {prov.op or 'an op'} at {prov.where()}"
            where += f": `{prov.source}`)" if prov.source else ")"
        where += "."
    raise RuntimeError(f"Function '{what}' returned nan values in its output.{where}")


def _holders(t, value):
    """(references to t._value, references to `value`), counted from write_back's frame."""
    return sys.getrefcount(t._value), sys.getrefcount(value)


def _sole_holders():
    """_holders' counts where only t refers to its array and only one list refers to the new
    value, which the caller passes on as the compiled call passes it to write_back (`value`
    bound in one frame between them): measured, not assumed, as interpreters count their
    frames' references differently."""
    def frame(t, value):      # write_back's frame, up to its _holders call
        return _holders(t, value)
    outs = [np.empty(1)]      # the program's output list
    return frame(Tensor._make(np.empty(1)), outs[0])


_SOLE = _sole_holders()


def write_back(t, value):
    """Functionalized in-place update of a real tensor by a compiled program: the new value is
    copied into t's array, so every view and other holder of that memory sees it. Where none
    can (t's array owns its memory, only t refers to it and its memory was never handed out,
    storage.expose; the new value is a fresh array of the same layout that only the program's
    output list refers to), t takes the new array instead of a copy of it: an optimizer
    step's parameters and moments, written back every step."""
    before_write(t)
    if isinstance(t._value, np.ndarray) and t._value.shape == value.shape and \
            t._value.flags.writeable:
        if _holders(t, value) == _SOLE and t._value.base is None and value.base is None and \
                t._value.dtype == value.dtype and t._value.strides == value.strides and \
                value.flags.writeable and not exposed(t._value):
            t._value = value
        else:
            np.copyto(t._value, value)
    else:
        t._value = value
    t._version_counter.v += 1
