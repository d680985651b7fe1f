"""The autograd side of compiled programs: the node whose backward runs a compiled backward graph,
and an interpreter that runs a Graph with tensor ops (differentiable, for create_graph)."""
import numpy as np

from aotgrad.ir.core import first_nan_node
from aotgrad.runtime import profiling
from aotgrad.runtime.dispatch import apply
from aotgrad.runtime.engine import FREED_MESSAGE, Node, SavedTensor, _node_of, fresh, \
    write_grad  # noqa: F401 (compiler.py imports it from here)
from aotgrad.runtime.grad_mode import state as _mode
from aotgrad.runtime.grad_ready import early_leaves
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


def write_back(t, value):
    """Functionalized in-place update of a real tensor by a compiled program."""
    before_write(t)
    if isinstance(t._value, np.ndarray) and t._value.shape == value.shape and \
            t._value.flags.writeable:
        np.copyto(t._value, value)
    else:
        t._value = value
    t._version_counter.v += 1
