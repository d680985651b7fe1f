"""Scheduler: groups a Graph's nodes into steps (fused kernels, BLAS calls, reference calls).

Each node gets a kind (codegen/node_kinds.py: virtual values a kernel recomputes at the
index it reads them, stored values, reductions). A value is *materialised* (in memory) when
it is a graph input, the output of a BLAS/reference step, a reduction result needed outside
its kernel, a virtual value that a non-kernel step or a graph output reads, or a cut (see
codegen/cuts.py: a value recomputed too often, one that splits an oversized kernel,
or a link of a chain longer than any kernel, stored before the first round).

One round (`_run_once`): one step per stored node, one kernel (codegen/steps.py) per
reduction and per materialised virtual value, each kernel's expressions analysed
(`analyse`: what it reads, at which index), then the kernels merged (codegen/fusion.py)
and the products' operands and results laid out for BLAS (codegen/blas_layout.py). `run`
repeats rounds with the cuts of the previous one until none is new.

No walk here recurses over an expression's depth. Every refused fusion is recorded
(`Schedule.refused`) with its reason.
"""
from aotgrad.codegen import cuts, routes
from aotgrad.codegen.blas_layout import (products_written_into_concatenations,
                                         products_written_transposed, strided_operands)
from aotgrad.codegen.fusion import KernelMerger
from aotgrad.codegen.index import (gather_index, gather_row_index, identity, pad_index,
                                   row_index, view_index)
from aotgrad.codegen.node_kinds import (EXPANDED, OFFSET_VIEWS, STORED, NodeKind, node_kind,
                                        red_dims)
from aotgrad.codegen.steps import Kernel, KernelType, Schedule, Step, StepKind, col_outputs

__all__ = ["Scheduler", "schedule", "Schedule", "Step", "Kernel", "StepKind", "KernelType"]

_STEP_OF_NODE = {NodeKind.DOT: StepKind.DOT, NodeKind.REFERENCE: StepKind.REFERENCE,
                 NodeKind.CHECK: StepKind.CHECK}


class Scheduler:
    """Groups a graph's nodes into steps: `run()` returns the Schedule."""

    def __init__(self, graph, library_kernels=True):
        self.g = graph
        self.prod = graph.producers()
        self.graph_inputs = frozenset(graph.inputs)
        self.position = {n: i for i, n in enumerate(graph.nodes)}
        self.users = graph.users()
        self.kind = {n: node_kind(n) for n in graph.nodes}
        for n in graph.nodes:   # a gathered value reached through slice/rev: not fused
            if self.kind[n] == NodeKind.ROW_GATHER and self._through_offset_view(n.inputs[0]):
                self.kind[n] = NodeKind.REFERENCE
        # nodes run by a library kernel of codegen (a step of their own); none for export
        self.routes = routes.find_routes(graph, self.prod, self.users, self.kind) \
            if library_kernels else {}
        for n in self.routes:
            self.kind[n] = NodeKind.REFERENCE
        self.sched = Schedule(graph)
        self.forced = set()     # virtual values materialised by the cuts of earlier rounds
        self.split = set()      # of those, the ones that split an oversized kernel
        self.owner = {}         # value -> the step that produces it (this round)
        self.strided = {}       # dot operand read through a strided view -> (base, expr, nodes)

    def _through_offset_view(self, v):
        """Is v computed (inside a kernel) through a slice, rev or pad?"""
        stack, seen = [v], set()
        while stack:
            n = self.prod.get(stack.pop())
            if n is None or n in seen or self.kind.get(n) not in EXPANDED:
                continue
            seen.add(n)
            if n.prim in OFFSET_VIEWS:
                return True
            stack.extend(n.inputs)
        return False

    # -- which values must exist in memory -------------------------------------------------
    def _materialised(self):
        g, mat = self.g, set(self.g.inputs)
        outs = set(g.outputs)
        for n in g.nodes:
            k = self.kind[n]
            if k in STORED:
                mat.update(n.outputs)
                for v in (self.routes[n].inputs if n in self.routes else n.inputs):
                    if v in self.strided:
                        continue
                    if v in self.prod and self.kind[self.prod[v]] in EXPANDED:
                        if v not in mat:
                            self.sched.refused.append(
                                (f"{v.name} -> {n.prim.name}",
                                 f"{n.prim.name} is not fusable ({k.value} step): its input "
                                 f"{v.name} is materialised"))
                    mat.add(v)
        for v in outs:
            mat.add(v)
        return mat

    def run(self):
        """Group the nodes into steps. A schedule that recomputes an expensive value many
        times (recompute_cuts) is redone with those values materialised; each round only
        cuts values the previous one recomputed, so a few rounds reach a fixed point."""
        self.forced, self.split = cuts.chain_cuts(self), set()
        for round_ in range(cuts.CUT_ROUNDS):
            sch = self._run_once()
            if round_ == cuts.CUT_ROUNDS - 1:
                break
            cut = cuts.recompute_cuts(self, sch) - self.forced
            if not cut:
                break
            self.forced |= cut
        # then a kernel still oversized (a chain as long as the program) is split
        for _ in range(cuts.CUT_ROUNDS):
            cut = cuts.size_cuts(self, sch) - self.forced
            if not cut:
                break
            self.forced |= cut
            self.split |= cut
            sch = self._run_once()
        return sch

    def _run_once(self):
        g = self.g
        sch = self.sched = Schedule(g)
        self.strided = strided_operands(self)
        mat = self._materialised() | self.forced
        # reduction results are materialised unless fused into their consumer's kernel:
        # decided by merging below. Start: one kernel per reduction, one per materialised
        # virtual value.
        owner = {}        # var -> step producing it
        steps = []
        for n in g.nodes:
            k = self.kind[n]
            if n.outputs[0] in self.strided:
                base, expr, chain = self.strided[n.outputs[0]]
                st = Step(StepKind.VIEW, [n], n.outputs)
                st.inputs, st.view_expr = [base], expr
                steps.append(st)
                continue
            if k in (NodeKind.DOT, NodeKind.REFERENCE, NodeKind.CHECK):
                st = Step(_STEP_OF_NODE[k], [n], n.outputs)
                st.route = self.routes.get(n)
                st.inputs = list(st.route.inputs if st.route else n.inputs)
                steps.append(st)
                for v in n.outputs:
                    owner[v] = st
            elif k == NodeKind.ROW_GATHER:
                # its own (row-shaped) kernel over the gathered value's domain: merges with
                # the row kernel that computes that value, which then reads one element/row
                x = n.inputs[0]
                kt = Kernel(KernelType.ROWS, x.shape, 1)
                kt.outputs.append(n.outputs[0])
                steps.append(kt)
                owner[n.outputs[0]] = kt
            elif k == NodeKind.RESHAPE:
                st = Step(StepKind.VIEW, [n], n.outputs)
                st.inputs = list(n.inputs)
                steps.append(st)
                owner[n.outputs[0]] = st
            elif k in (NodeKind.ROW_REDUCTION, NodeKind.COL_REDUCTION):
                x = n.inputs[0]
                nk = len(red_dims(n))
                kt = Kernel(KernelType.ROWS if k is NodeKind.ROW_REDUCTION else KernelType.COLS,
                            x.shape, nk)
                kt.reds.append(n)
                kt.outputs.append(n.outputs[0])
                steps.append(kt)
                owner[n.outputs[0]] = kt
            elif n.outputs[0] in mat and n.outputs[0] not in owner:
                v = n.outputs[0]
                kt = Kernel(KernelType.ELEMENTWISE, v.shape)
                kt.outputs.append(v)
                steps.append(kt)
                owner[v] = kt
        self.owner = owner
        # leaf references of each kernel
        for st in steps:
            if isinstance(st, Kernel):
                self.analyse(st)
        steps = KernelMerger(self, sch.refused).merge(steps)
        # reduction outputs read outside their kernel are materialised
        for st in steps:
            if isinstance(st, Kernel):
                self.analyse(st)
        for st in steps:
            for v in st.inputs:
                mat.add(v)
        for st in steps:
            if isinstance(st, Kernel):
                st.outputs = [v for v in st.outputs if v in mat]
                st.row_outputs = [v for v in st.outputs if st.ktype != KernelType.ELEMENTWISE
                                  and v.shape != st.domain]
        sch.steps = products_written_into_concatenations(self, products_written_transposed(
            self, [s for s in steps if not isinstance(s, Kernel) or s.outputs]))
        sch.materialised = mat
        return sch

    # -- expression walk --------------------------------------------------------------------
    def walk(self, kernel, var, idx, visit, stop, seen=None):
        """Walk var's definition at index idx; visit(kind, var, idx) for nodes & leaves, in
        depth-first pre-order (operands in order). `seen`: (var, idx) pairs already walked
        (shared by walks of one kernel's roots). An explicit stack: an expression may be as
        deep as the program (an unrolled loop's state)."""
        seen = set() if seen is None else seen
        stack = [(var, idx)]
        while stack:
            v, ix = stack.pop()
            key = (v, ix)
            if key in seen:
                continue
            seen.add(key)
            if stop(v):
                visit("leaf", v, ix)
                continue
            n = self.prod.get(v)
            if n is None:
                visit("leaf", v, ix)
                continue
            visit("node", v, ix)
            stack.extend(reversed(self.operand_indices(n, ix)))

    def operand_indices(self, n, ix):
        """(operand, index) pairs that node n's value at index ix reads, in order."""
        k = self.kind[n]
        if k == NodeKind.VIEW:
            return [(n.inputs[0], view_index(n, ix))]
        if k == NodeKind.PAD:
            inner = pad_index(n, ix)
            return [] if inner is None else [(n.inputs[0], inner[0])]
        if k == NodeKind.COPY:
            return [(n.inputs[0], ix)]
        if k in (NodeKind.ROW_GATHER, NodeKind.ROW_SCATTER):
            rix = gather_row_index(n, ix)
            if k == NodeKind.ROW_GATHER:
                return [(n.inputs[1], rix), (n.inputs[0], gather_index(n, ix))]
            return [(n.inputs[1], rix), (n.inputs[0], ix), (n.inputs[2], rix)]
        return [(u, ix) for u in n.inputs]

    def out_index(self, kt, v):
        """Index at which kernel kt writes its output v (full-domain or per-row)."""
        if v.shape == kt.domain:
            return identity(len(kt.domain))
        if kt.ktype == KernelType.ROWS and v in col_outputs(kt):
            return identity(len(v.shape), start=len(kt.domain) - len(v.shape))
        if kt.ktype == KernelType.ROWS:
            ix = row_index(kt.rowshape, v.shape)
            if ix is not None:
                return ix
        return identity(len(v.shape))

    def roots(self, kt):
        """(var, idx) pairs the kernel evaluates: reduction inputs and outputs."""
        nd = len(kt.domain)
        roots = []
        for r in kt.reds:
            x = r.inputs[0]
            if kt.ktype == KernelType.ROWS:
                # input dims are already (rows..., reduced...) since dims are trailing
                roots.append((x, identity(nd)))
            else:
                roots.append((x, identity(nd)))
        red_outs = {r.outputs[0] for r in kt.reds}
        for v in kt.outputs:
            if v in red_outs:
                continue
            if v.shape == kt.domain:
                roots.append((v, identity(nd)))
            else:  # per-row value of a rows kernel
                roots.append((v, self.out_index(kt, v)))
        return roots

    def analyse(self, kt):
        """Fill kernel kt's nodes, inputs and references from its roots' expressions."""
        own = set(kt.outputs)
        red_outs = {r.outputs[0] for r in kt.reds}
        leaves, nodes = [], []
        nodeset = set()

        def stop(v):
            if v in red_outs:
                return True
            o = self.owner.get(v)
            return v in self.graph_inputs or (o is not None and o is not kt)

        node_index = {}     # value computed here -> the indices it is computed at

        def visit(kind, v, ix):
            if kind == "leaf":
                leaves.append((v, ix))
            else:
                node_index.setdefault(v, set()).add(ix)
                n = self.prod[v]
                if n not in nodeset:
                    nodeset.add(n)
                    nodes.append(n)
        seen = set()
        for v, ix in self.roots(kt):
            if v in own and v not in red_outs:
                n = self.prod.get(v)
                if n is not None and n not in nodeset:
                    nodeset.add(n)
                    nodes.append(n)
                self.walk(kt, v, ix, visit, lambda u, v=v: u is not v and stop(u), seen)
            else:
                self.walk(kt, v, ix, visit, stop, seen)
        kt.leaf_refs = leaves
        kt.node_index = node_index
        kt.nodes = sorted(nodeset.union(kt.reds), key=self.position.__getitem__)
        kt.inputs = []
        for v, _ in leaves:
            if v not in red_outs and v not in kt.inputs:
                kt.inputs.append(v)
        kt.internal_red_refs = [(v, ix) for v, ix in leaves if v in red_outs]


def schedule(graph):
    """Group graph nodes into steps; returns a Schedule."""
    return Scheduler(graph).run()
