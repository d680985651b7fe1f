"""Fusion decisions: which kernels merge into one loop nest, and why a merge is refused.

`KernelMerger(scheduler, refused).merge(steps)` merges the kernels of one scheduling round
greedily (a producer into its consumer, siblings that read the same inputs) while the
merged kernel stays one loop nest whose reads are at matching indices and whose size stays
within MAX_KERNEL_NODES / MAX_KERNEL_INPUTS; every refusal is appended to `refused` with
its reason. It asks the scheduler for the values' owners, the pieces of a split kernel and
the analysis of a merged kernel's expressions (`Scheduler.analyse`).
"""
import heapq

from aotgrad.codegen.index import identity, row_index
from aotgrad.codegen.steps import Kernel, KernelType, col_outputs, col_reds, produced
from aotgrad.ir import prims as P


# a merge that would make a kernel of more nodes is refused: Numba's compile time grows
# faster than the function, and an unrolled loop would otherwise fuse all its steps' state
# updates into one kernel that no other program (nor another length) can share
MAX_KERNEL_NODES = 128


# sibling candidates of a kernel: the next readers of each of its inputs, this many
_SIBLING_WINDOW = 8


# a kernel that would read more arrays than this is not made by merging: Numba's compile
# time grows fast with a function's arguments (a kernel of 100 array arguments took seconds)
MAX_KERNEL_INPUTS = 64


def step_deps(steps):
    """Step -> the steps whose values it reads."""
    dep = {s: set() for s in steps}
    own = {v: s for s in steps for v in produced(s)}
    for s in steps:
        for v in s.inputs:
            if v in own and own[v] is not s:
                dep[s].add(own[v])
    return dep


def toposort(steps):
    """Stable topological order of steps (merging can move a producer after a reader):
    each time, the earliest step whose dependencies are placed."""
    dep = step_deps(steps)
    pos = {s: i for i, s in enumerate(steps)}
    users = {s: [] for s in steps}
    waiting = {s: len(dep[s]) for s in steps}
    for s in steps:
        for d in dep[s]:
            users[d].append(s)
    ready = [pos[s] for s in steps if not waiting[s]]
    heapq.heapify(ready)
    out = []
    while ready:
        s = steps[heapq.heappop(ready)]
        out.append(s)
        for u in users[s]:
            waiting[u] -= 1
            if not waiting[u]:
                heapq.heappush(ready, pos[u])
    if len(out) != len(steps):
        raise AssertionError("cycle between steps after fusion")
    return out


def _search(start, edges, target, outside):
    """Whether `target` is reached from the steps `start` along `edges` (step -> steps),
    not through steps `outside` holds for; a generator that yields after each step it
    visits and returns the answer (so that two searches can take turns)."""
    stack, seen = list(start), set()
    while stack:
        s = stack.pop()
        if s is target:
            return True
        if s in seen or outside(s):
            continue
        seen.add(s)
        stack.extend(edges[s])
        yield
    return False


class KernelMerger:
    """Merges the kernels of one scheduling round (see the module docstring)."""

    def __init__(self, scheduler, refused):
        self.S = scheduler
        self.refused = refused  # the schedule's (what, reason) list, appended to
        self.label = {}         # step -> a topological label, while kernels merge
        self.users = {}         # step -> the steps that read its values, while they merge

    def _reaches_indirectly(self, dep, a, b):
        """Is there a path b -> ... -> a (a depends on b) of length >= 2? Two searches, a
        step of each in turn, and the first to end answers: back from a through the steps
        it reads, skipping each labelled no later than b (`label`: b cannot be before it),
        and forward from b through its readers, skipping each labelled no earlier than a.
        Both visit only steps between the two, and one side is often narrow where the
        other is not: in an unrolled loop's backward, a forward value recomputed before
        the loop and read by one step of it has one reader, while the search back from
        that reader would cross every later step of the loop."""
        label = self.label
        back = _search([d for d in dep[a] if d is not b], dep, b,
                       lambda s: label[s] <= label[b])
        forward = _search([u for u in self.users[b] if u is not a], self.users, a,
                          lambda s: label[s] >= label[a])
        while True:
            for search in (back, forward):
                try:
                    next(search)
                except StopIteration as end:
                    return end.value

    def _compatible(self, a, b, dep):
        """Can kernel b (consumer) be merged into kernel a (producer)?"""
        # a per-row consumer of a rows kernel, or a per-row producer for one
        row_output = (a.ktype == KernelType.ROWS and b.ktype == KernelType.ELEMENTWISE and
                      row_index(a.rowshape, b.domain) is not None) or \
            (b.ktype == KernelType.ROWS and a.ktype == KernelType.ELEMENTWISE and
             row_index(b.rowshape, a.domain) is not None and a.domain != b.domain)
        if a.domain != b.domain and not row_output:
            return False, "different loop domains"
        kinds = {a.ktype, b.ktype}
        mixed = kinds == {KernelType.ROWS, KernelType.COLS}
        # column sums ride along a row kernel that reduces the last dim when they reduce
        # all the others (the row loop covers exactly the summed dims)
        if mixed:
            rk, ck = (a, b) if a.ktype == KernelType.ROWS else (b, a)
            if not (rk.k == 1 and ck.k == len(a.domain) - 1 and all(
                    r.prim is P.reduce_sum and r.inputs[0].dtype.is_floating_point
                    for r in col_reds(ck))):
                return False, "row and column reductions iterate differently"
        if (a.ktype == b.ktype == KernelType.COLS) and a.k != b.k:
            return False, "row and column reductions iterate differently"
        col_a, col_b = col_outputs(a), col_outputs(b)
        if any(v in col_a for v, _ in b.leaf_refs) or any(v in col_b for v, _ in a.leaf_refs):
            return False, "column reduction result used inside the loop"
        if KernelType.ROWS in kinds and a.ktype == b.ktype == KernelType.ROWS and a.k != b.k:
            return False, "reduce different numbers of trailing dims"
        if len(a.nodes) + len(b.nodes) > MAX_KERNEL_NODES and \
                len(set(a.nodes).union(b.nodes)) > MAX_KERNEL_NODES:
            return False, f"the kernel would exceed {MAX_KERNEL_NODES} nodes"
        if len(set(a.inputs).union(b.inputs)) > MAX_KERNEL_INPUTS:
            return False, f"the kernel would read more than {MAX_KERNEL_INPUTS} arrays"
        if self.S.split and any(v in self.S.split for v in b.inputs if self.S.owner.get(v) is a):
            return False, "the pieces of a split kernel stay apart"
        if self._reaches_indirectly(dep, b, a) or self._reaches_indirectly(dep, a, b):
            return False, "a step between them depends on one and feeds the other"
        # b's references to a's values must be at the matching index
        a_vals = set(a.outputs) | {r.outputs[0] for r in a.reds}
        nd = len(a.domain)
        kt = a if a.ktype != KernelType.ELEMENTWISE else b
        if mixed:
            kt = a if a.ktype == KernelType.ROWS else b
        if kt.ktype == KernelType.ROWS and a.ktype == KernelType.ELEMENTWISE and \
                a.domain != b.domain:
            # a (per-row values) joins rows kernel b: b must read them per row
            for v, ix in b.leaf_refs:
                if v in a_vals and ix != row_index(b.rowshape, v.shape):
                    return False, f"{v.name} is read at a different index (transposed/broadcast)"
            return True, ""
        for v, ix in b.leaf_refs:
            if v not in a_vals:
                continue
            if v.shape == a.domain and ix == identity(nd) and a.domain == b.domain:
                if a.ktype == KernelType.COLS and any(v is r.outputs[0] for r in a.reds):
                    return False, "column reduction result used inside the loop"
                continue
            if kt.ktype == KernelType.ROWS and ix == row_index(kt.rowshape, v.shape):
                continue
            return False, f"{v.name} is read at a different index (transposed/broadcast)"
        return True, ""

    def _merge_pairs(self, steps, dep):
        """Candidate merges in step order: (producer, consumer, False) for each kernel and
        the kernels it reads, then (a, b, True) for siblings with the same domain reading
        the same inputs (one pass reads them); sibling candidates come from the readers of
        each input, not from all pairs."""
        kernels = [s for s in steps if isinstance(s, Kernel)]
        pairs = []
        order = {s: i for i, s in enumerate(steps)}
        for b in kernels:
            # dep[b] is a set: visit it in step order, so merges (and so the generated
            # source, the cache key) are the same in every process
            for a in sorted(dep[b], key=order.__getitem__):
                if isinstance(a, Kernel):
                    pairs.append((a, b, False))
        readers, rank = {}, {}
        for a in kernels:
            for v in set(a.inputs):
                rank[a, v] = len(readers.setdefault(v, []))
                readers[v].append(a)
        for a in kernels:
            # the next few readers of each input: a weight or bias read by every step of an
            # unrolled loop would otherwise make every pair of steps a candidate
            later = {b for v in set(a.inputs)
                     for b in readers[v][rank[a, v] + 1:rank[a, v] + 1 + _SIBLING_WINDOW]}
            for b in sorted(later, key=order.__getitem__):
                if self._siblings(a, b, dep):
                    pairs.append((a, b, True))
        return pairs

    @staticmethod
    def _siblings(a, b, dep):
        same = a.key() == b.key() or a.domain == b.domain and (
            {a.ktype, b.ktype} == {KernelType.ROWS, KernelType.COLS} or
            KernelType.ELEMENTWISE in (a.ktype, b.ktype))
        return same and b not in dep[a] and a not in dep[b]

    def merge(self, steps):
        """Merge kernels greedily, in passes over the candidate pairs (_merge_pairs) until
        a pass merges nothing. A pair is rechecked against the current kernels before it
        is tried (an earlier merge of the pass may have changed either), and the step
        dependencies are updated per merge rather than recomputed."""
        steps = list(steps)
        # pairs found incompatible, with both kernels' merge counts then: a refusal holds
        # until one of the two kernels absorbs another (paths between steps only grow)
        refused, recorded = set(), set(self.refused)
        dep = step_deps(steps)
        users = {s: set() for s in steps}
        for s, ds in dep.items():
            for t in ds:
                users[t].add(s)
        step_of = {v: s for s in steps for v in produced(s)}
        # a topological labelling of the steps (each step's label above its dependencies'),
        # kept valid through the merges: it bounds the searches of _reaches_indirectly
        self.label = {s: i for i, s in enumerate(toposort(steps))}
        self.users = users
        # each step's place in the order (a dict: a list's index and remove made the merges
        # of an unrolled loop quadratic); a merged kernel takes the later of the two places
        place = {s: i for i, s in enumerate(steps)}
        changed = True
        while changed:
            changed = False
            steps = sorted(place, key=place.__getitem__)
            for a, b, sibling in self._merge_pairs(steps, dep):
                if a not in dep or b not in dep:        # absorbed earlier in this pass
                    continue
                if (not self._siblings(a, b, dep)) if sibling else \
                        (a not in dep[b] or b in dep[a]):
                    continue
                state = (a, a.merged_from, b, b.merged_from)
                if state in refused:
                    continue
                ok, why = self._compatible(a, b, dep)
                if not ok:
                    refused.add(state)
                    rec = (f"kernel[{', '.join(v.name for v in a.outputs)}] + "
                           f"kernel[{', '.join(v.name for v in b.outputs)}]", why)
                    if rec not in recorded:
                        recorded.add(rec)
                        self.refused.append(rec)
                    continue
                self._absorb(a, b)
                place[a] = max(place[a], place.pop(b))
                self._merged_deps(dep, users, step_of, a, b)
                changed = True
        return toposort(sorted(place, key=place.__getitem__))

    def _merged_deps(self, dep, users, step_of, a, b):
        """Update the step dependencies `dep`, their reverse `users` and `step_of` (value ->
        the step producing it) after kernel a absorbed kernel b: only the steps next to a
        or b change."""
        for v in produced(b):
            step_of[v] = a
        for t in dep.pop(b):
            users[t].discard(b)
        for s in users.pop(b):
            dep[s].discard(b)
            if s is not a:
                dep[s].add(a)
                users[a].add(s)
        for t in dep[a]:
            users[t].discard(a)
        dep[a] = set()
        for v in a.inputs:
            t = step_of.get(v)
            if t is not None and t is not a:
                dep[a].add(t)
                users[t].add(a)
        # the merged kernel is labelled as the later of the two; steps after it that were
        # labelled below it (readers of the earlier one) move up, and their readers with them
        label = self.label
        label[a] = max(label[a], label.pop(b))
        stack = [(u, label[a]) for u in users[a]]
        while stack:
            u, lo = stack.pop()
            if label[u] <= lo:
                label[u] = lo + 1
                stack.extend((w, lo + 1) for w in users[u])

    def _absorb(self, a, b):
        if {a.ktype, b.ktype} == {KernelType.ROWS, KernelType.COLS}:
            # column sums ride along a row kernel over the same 2-d domain: per-thread
            # partial sums of each column, combined after the row loop
            a.col_reds = col_reds(a) + col_reds(b)
            a.ktype, a.k = KernelType.ROWS, 1
        elif b.ktype == KernelType.ELEMENTWISE and a.ktype == KernelType.ROWS and \
                b.domain != a.domain:
            pass
        elif b.ktype != KernelType.ELEMENTWISE and a.ktype == KernelType.ELEMENTWISE:
            a.ktype, a.k, a.domain = b.ktype, b.k, b.domain
        if b.col_reds and a.ktype == KernelType.ROWS:
            a.col_reds = col_reds(a) + [r for r in b.col_reds if r not in a.col_reds]
        a.reds += [r for r in b.reds if r not in a.reds]
        a.outputs += [v for v in b.outputs if v not in a.outputs]
        a.merged_from += b.merged_from
        for v in b.outputs:        # every value b owned is one of its outputs
            if self.S.owner.get(v) is b:
                self.S.owner[v] = a
        self.S.analyse(a)
