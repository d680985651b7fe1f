"""A compiled backward's gradients handed to their leaves as soon as the program computes
them, rather than after the whole program: what gives post-accumulate-grad hooks (those of
DistributedDataParallel, whose all-reduce of a bucket then travels while the rest of the
backward runs) the moments they have eagerly.

`early_leaves(node, program, given, args)` says, for one run of a compiled backward node,
which of its gradients go straight to a leaf: the leaf has post-accumulate-grad hooks
(without any, the program runs exactly as before) and the node's edge is the only one into
the leaf's AccumulateGrad in the running backward pass (so the gradient is the leaf's whole
gradient and its hooks fire once, as eagerly). The program's reporting driver calls
`EarlyLeaves.ready(k, array)` after the step that finishes gradient k and
`EarlyLeaves.unread(i)` after the last step that reads argument i; the gradient is
accumulated into `.grad` once the program no longer reads the leaf's memory (tensor hooks,
then the sum, then the post-accumulate-grad hooks, as the engine's AccumulateGrad does),
and the node then returns None for it, so the engine does not add it again. Not under
create_graph, anomaly mode, a profiler or a trace, nor for autograd.grad or
backward(inputs=...), nor for a program compiled per size: there the program runs as before.
"""
import numpy as np

from aotgrad.ir.core import current_builder
from aotgrad.runtime import profiling
from aotgrad.runtime.autograd_node import AccumulateGrad
from aotgrad.runtime.backward import graph_tasks
from aotgrad.runtime.backward_hooks import run_tensor_pre_hooks
from aotgrad.runtime.grad_accumulation import accumulate_grad
from aotgrad.runtime.grad_mode import state as _mode
from aotgrad.runtime.sizes import size_list
from aotgrad.runtime.tensor import Tensor


class EarlyLeaves:
    """The gradients of one backward run that go to their leaves from inside the program.
    `leaf_of`: backward output index -> (diff input index, its AccumulateGrad node).

    A hook may change its leaf in place (an optimizer step run in the backward, PyTorch's
    pattern): a gradient is therefore handed over only once the program reads no argument
    that shares memory with its leaf (the driver's unread(i)); until then it waits. A hook
    that changes another tensor the program still reads (a call input, through a saved
    argument) is an error, as eagerly a saved tensor modified in place is."""
    __slots__ = ("leaf_of", "owned", "delivered", "_arrays", "_waits_for", "_unread",
                 "_held", "_watched", "_name")

    def __init__(self, leaf_of, owned, args, replay, name):
        self.leaf_of = leaf_of
        self.owned = owned          # per backward output: a new array nothing else holds
        self.delivered = set()      # diff input indices whose gradient went to the leaf
        self._arrays = set()        # ids of the arrays handed over (one may back two outputs)
        self._name = name
        arrays = [(i, a) for i, a in enumerate(args) if isinstance(a, np.ndarray)]

        def read_through(t):   # the program's arguments that may share memory with t
            v = t._value
            return {i for i, a in arrays if np.may_share_memory(a, v)} \
                if isinstance(v, np.ndarray) else set()
        self._waits_for = {k: read_through(acc.variable) for k, (_, acc) in leaf_of.items()}
        self._unread = set()
        self._held = []             # (k, array) handed over once their arguments are unread
        # the call's input tensors the program reads: (tensor, its version, arguments)
        self._watched = [(t, t._version_counter.v, ins) for t in replay
                         if isinstance(t, Tensor) for ins in (read_through(t),) if ins]

    def ready(self, k, value):
        """The reporting driver's callback: backward output k is final."""
        if k not in self.leaf_of:
            return
        if self._waits_for[k] - self._unread or self._held:
            self._held.append((k, value))   # (in order: the hooks see program order)
            return
        self._deliver(k, value)

    def unread(self, i):
        """The driver's callback: the program reads argument i no more."""
        self._unread.add(i)
        while self._held and not self._waits_for[self._held[0][0]] - self._unread:
            self._deliver(*self._held.pop(0))

    def finish(self):
        """After the program: the gradients still held (their leaf is an output's memory)."""
        while self._held:
            self._deliver(*self._held.pop(0))

    def _deliver(self, k, value):
        j, acc = self.leaf_of[k]
        leaf = acc.variable
        g = leaf._plain(value)
        if self.owned is not None and self.owned[k] and id(value) not in self._arrays and \
                value.base is None:
            g._fresh = True
        self._arrays.add(id(value))
        g = run_tensor_pre_hooks(acc, [g])[0]
        self.delivered.add(j)
        accumulate_grad(leaf, g, False)
        for t, version, ins in self._watched:
            if t._version_counter.v != version and ins - self._unread:
                raise RuntimeError(
                    f"one of the variables needed for gradient computation has been modified "
                    f"by an inplace operation: a tensor of shape {size_list(t.shape)} "
                    f"({t.dtype}) changed from version {version} to "
                    f"{t._version_counter.v} in a hook run by the backward of {self._name}, "
                    f"which still reads it (a post-accumulate-grad hook may change its own "
                    f"parameter, not one whose gradient is still being computed)")

    def drop_delivered(self, grads):
        """The node's gradients per diff input, None where the leaf has it already."""
        for j in self.delivered:
            grads[j] = None
        return grads


def early_leaves(node, program, given, args):
    """The EarlyLeaves of this run of compiled backward `node` (`program`: its Program;
    `args`: the backward program's arguments), or None when no gradient goes early (then
    the program runs as it always did)."""
    edges = node.next_functions
    if not any(type(nf) is AccumulateGrad and nf.variable._post_acc_hooks
               for nf, _ in edges):
        return None
    if _mode.grad_enabled or _mode.anomaly or profiling._profilers or \
            not graph_tasks.stack or current_builder() is not None:
        return None
    task = graph_tasks.stack[-1]
    if task.deps is None or task.only_inputs or program.trace.written_grads or \
            not program.reports_backward():
        return None
    reached = program.grads_reached(given) if not all(given) else None
    candidates, k = {}, 0
    for j, present in enumerate(program.trace.grad_present):
        if not present:
            continue
        nf = edges[j][0]
        if type(nf) is AccumulateGrad and nf.variable._post_acc_hooks and nf in task.deps \
                and not (nf._pre_hooks or nf._hooks) and (reached is None or reached[j]):
            candidates.setdefault(nf, []).append((k, j))
        k += 1
    if not candidates:
        return None
    feeds = dict.fromkeys(candidates, 0)   # edges into each candidate in this pass
    for n in task.deps:
        for nf, _ in n.next_functions:
            if nf in feeds:
                feeds[nf] += 1
    leaf_of = {}
    for acc, slots in candidates.items():
        if len(slots) == 1 and feeds[acc] == 1:   # this node's one edge is its only one
            k, j = slots[0]
            leaf_of[k] = (j, acc)
    if not leaf_of:
        return None
    return EarlyLeaves(leaf_of, program.owned_outputs("backward"),
                       program.backward_inputs(args), node._replay, program.name)
