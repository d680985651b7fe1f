"""A compiled backward's gradients handed to their leaves as soon as the program computes
them, rather than after the whole program: what gives post-accumulate-grad hooks (those of
DistributedDataParallel, whose all-reduce of a bucket then travels while the rest of the
backward runs) the moments they have eagerly.

`early_leaves(node, given)` says, for one run of a compiled backward node, which of its
gradients go straight to a leaf: the leaf has post-accumulate-grad hooks (without any, the
program runs exactly as before) and the node's edge is the only one into the leaf's
AccumulateGrad in the running backward pass (so the gradient is the leaf's whole gradient
and its hooks fire once, as eagerly). The program's reporting driver calls
`EarlyLeaves.ready(k, array)` after the step that finishes gradient k; the gradient is
accumulated into `.grad` there (tensor hooks, then the sum, then the post-accumulate-grad
hooks, as the engine's AccumulateGrad does) and the node then returns None for it, so the
engine does not add it again.
"""
from aotgrad.runtime import profiling
from aotgrad.runtime.autograd_node import AccumulateGrad
from aotgrad.runtime.backward import graph_tasks
from aotgrad.runtime.backward_hooks import run_tensor_pre_hooks
from aotgrad.runtime.grad_accumulation import accumulate_grad
from aotgrad.runtime.grad_mode import state as _mode


class EarlyLeaves:
    """The gradients of one backward run that go to their leaves from inside the program.
    `leaf_of`: backward output index -> (diff input index, its AccumulateGrad node)."""
    __slots__ = ("leaf_of", "owned", "delivered", "_arrays")

    def __init__(self, leaf_of, owned):
        self.leaf_of = leaf_of
        self.owned = owned          # per backward output: a new array nothing else holds
        self.delivered = set()      # diff input indices whose gradient went to the leaf
        self._arrays = set()        # ids of the arrays handed over (one may back two outputs)

    def ready(self, k, value):
        """The reporting driver's callback: backward output k is final."""
        where = self.leaf_of.get(k)
        if where is None:
            return
        j, acc = where
        leaf = acc.variable
        g = leaf._plain(value)
        if self.owned is not None and self.owned[k] and id(value) not in self._arrays and \
                value.base is None:
            g._fresh = True
        self._arrays.add(id(value))
        g = run_tensor_pre_hooks(acc, [g])[0]
        self.delivered.add(j)
        accumulate_grad(leaf, g, False)

    def drop_delivered(self, grads):
        """The node's gradients per diff input, None where the leaf has it already."""
        for j in self.delivered:
            grads[j] = None
        return grads


def early_leaves(node, program, given):
    """The EarlyLeaves of this run of compiled backward `node` (`program`: its Program), or
    None when no gradient goes early (then the program runs as it always did)."""
    edges = node.next_functions
    if not any(type(nf) is AccumulateGrad and nf.variable._post_acc_hooks
               for nf, _ in edges):
        return None
    if _mode.grad_enabled or _mode.anomaly or profiling._profilers or not graph_tasks.stack:
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
    return EarlyLeaves(leaf_of, program.owned_outputs("backward"))
