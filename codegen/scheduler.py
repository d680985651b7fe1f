"""Scheduler: groups a Graph's nodes into steps (fused kernels, BLAS calls, reference calls).

Vocabulary
- *virtual* value: output of a pointwise prim (incl. `full`/`iota`), of a view prim
  (broadcast_in_dim, transpose, slice, rev, unit-dim reshape) or of `pad` without interior
  padding (the VJP of slice: a select between the input, read at a clamped index, and the
  fill value). It is never stored unless it must be; a kernel that reads it recomputes it at
  the index it needs (index arithmetic).
- *materialised* value: a graph input, the output of a BLAS/reference step, a reduction
  result needed outside its kernel, a virtual value that a non-kernel step or a graph
  output reads, or one whose recomputation would cost too much (see `recompute_cuts`: a
  value several kernels recompute, or one kernel evaluates at several padded positions, e.g.
  the cell state of an unrolled recurrent network, which every later step would otherwise
  recompute from the first).
- *kernel*: one loop nest over a domain D. `elementwise` kernels write outputs of shape D.
  `rows` kernels reduce the trailing `k` dims of D (softmax, layer norm, cross-entropy):
  per row, one column pass per dependency level of its reductions, then the epilogue
  writes full-domain and per-row outputs. `cols` kernels reduce leading dims (bias grads).

A kernel reads at most MAX_KERNEL_INPUTS arrays and computes at most MAX_KERNEL_NODES
nodes: merges beyond that are refused, and a kernel that starts larger (one stored value
whose expression is as long as the program, e.g. a gradient accumulated over every step of
an unrolled loop) is split into alike pieces (`size_cuts`). No walk here recurses over an
expression's depth.

Every refused fusion is recorded (`Schedule.refused`) with its reason.
"""
import heapq
from enum import Enum

from aotgrad.ir import dtypes as dt
from aotgrad.ir.prims import unit_reshape_map
from aotgrad.ir.tags import Tag, reduced_dims
from aotgrad.codegen import routes
from aotgrad.codegen.emit_base import _EXPENSIVE
from aotgrad.codegen.index import (Dim, gather_index, gather_row_index, identity, pad_index,
                                   row_index, view_index)

class NodeKind(Enum):
    """How the scheduler treats a node."""
    POINTWISE = "pw"           # computed in a kernel's loop (incl. full/iota)
    VIEW = "view"              # index arithmetic (broadcast, transpose, slice, rev, unit reshape)
    PAD = "pad"                # a select between the input at a clamped index and the fill
    COPY = "pwcopy"            # a reduction over no dims: the input itself
    ROW_REDUCTION = "rowred"   # reduces trailing dims: a `rows` kernel
    COL_REDUCTION = "colred"   # reduces leading dims: a `cols` kernel
    ROW_GATHER = "rowgather"   # one element per row, picked by an index (fused)
    ROW_SCATTER = "rowscatter"  # its transpose: pointwise with a per-row index
    RESHAPE = "reshape"        # a general reshape: a view step of a materialised value
    DOT = "dot"                # a product: BLAS
    CHECK = "check"            # a run-time check of values: an alias of its input
    REFERENCE = "ref"          # the prim's numpy implementation


class StepKind(str, Enum):
    """What a Step is (a str, so that a report or a test may name it)."""
    KERNEL = "kernel"
    DOT = "dot"
    REFERENCE = "ref"
    VIEW = "view"
    CHECK = "check"


class KernelType(str, Enum):
    """The loop structure of a kernel: see the module docstring."""
    ELEMENTWISE = "elementwise"
    ROWS = "rows"
    COLS = "cols"


_STEP_OF_NODE = {NodeKind.DOT: StepKind.DOT, NodeKind.REFERENCE: StepKind.REFERENCE,
                 NodeKind.CHECK: StepKind.CHECK}
# values a kernel computes at whatever index it reads them (never stored unless they must be)
EXPANDED = frozenset({NodeKind.POINTWISE, NodeKind.VIEW, NodeKind.COPY, NodeKind.PAD})
VIRTUAL = EXPANDED | {NodeKind.ROW_SCATTER}
# nodes whose values are in memory: products, reference steps, general reshapes, checks
STORED = frozenset({NodeKind.DOT, NodeKind.REFERENCE, NodeKind.RESHAPE, NodeKind.CHECK})
# nodes that a kernel computes
IN_KERNEL = VIRTUAL | {NodeKind.ROW_REDUCTION, NodeKind.COL_REDUCTION, NodeKind.ROW_GATHER}



def node_kind(n):
    name = n.prim.name
    if name == "reshape":
        unit = unit_reshape_map(n.inputs[0].shape, n.params["shape"]) is not None
        return NodeKind.VIEW if unit else NodeKind.RESHAPE
    if Tag.VIEW in n.prim.tags:
        return NodeKind.VIEW
    if name == "pad" and all(it == 0 for _, _, it in n.params["config"]):
        return NodeKind.PAD
    if n.prim.kind in (Tag.POINTWISE, Tag.CREATION):
        return NodeKind.POINTWISE
    dims = reduced_dims(n.prim, n.params)
    if dims is not None:
        arg = Tag.ARG_REDUCTION in n.prim.tags
        nd = n.inputs[0].ndim
        if not dims:
            return NodeKind.COPY if not arg else NodeKind.REFERENCE
        if sorted(dims) == list(range(nd - len(dims), nd)):
            return NodeKind.ROW_REDUCTION
        if sorted(dims) == list(range(len(dims))) and not arg:
            return NodeKind.COL_REDUCTION
        return NodeKind.REFERENCE
    if name == "dot_general":
        return NodeKind.DOT
    if name == "check_values":   # raises or passes its input through: an alias, no copy
        return NodeKind.CHECK
    if Tag.BOUNDS_CHECKED in n.prim.tags and last_dim_row_index(n):
        return NodeKind.ROW_GATHER if name == "gather" else NodeKind.ROW_SCATTER
    return NodeKind.REFERENCE


def last_dim_row_index(n):
    """gather/scatter_add along the last dim with one index per row (index shape
    (*rows, 1), e.g. cross-entropy's label pick and its transpose): fusable as index
    arithmetic. out[r] = x[r, idx[r]] is a per-row value of a row kernel over x;
    scatter_add's out[r, j] = x[r, j] + (src[r] if j == idx[r] else 0) is pointwise."""
    x, idx = n.inputs[0], n.inputs[1]
    nd = x.ndim
    return nd >= 2 and n.params["dim"] == nd - 1 and dt.is_integer(idx.dtype) and \
        tuple(idx.shape) == tuple(x.shape[:-1]) + (1,)


def red_dims(n):
    return reduced_dims(n.prim, n.params)


class Step:
    """One step of a program (`kind`: a StepKind; a CHECK step checks values at run time
    and its output is its input: an alias, like a view).

    nodes: the IR nodes it computes; inputs / outputs: the values it reads and stores.
    out_view: a DOT step that writes its result into a transposed view of its output
    (attention's heads going back to (batch, seq, heads, dim)): (result var, permutation).
    view_expr: a VIEW step that is a strided view of `inputs[0]` (numpy suffix text), read
    in place by BLAS."""

    def __init__(self, kind, nodes=(), outputs=()):
        self.kind, self.nodes, self.outputs = kind, list(nodes), list(outputs)
        self.inputs = []
        self.out_view = None
        self.view_expr = None
        self.route = None       # a reference step run by a library kernel (codegen.routes)


class Kernel(Step):
    """A fused loop nest over `domain` (see KernelType). The scheduler's analysis of its
    expressions (`Scheduler.analyse`) fills leaf_refs (the (value, index) pairs read from
    memory), node_index (value computed here -> the indices it is computed at) and
    internal_red_refs (reads of its own reductions' results); row_outputs are the outputs
    of a rows/cols kernel written once per row."""

    def __init__(self, ktype, domain, k=0):
        super().__init__(StepKind.KERNEL)
        self.ktype = ktype          # a KernelType
        self.domain = tuple(domain)
        self.k = k                  # rows: trailing reduced dims; cols: leading reduced dims
        self.reds = []              # reduction nodes computed here
        self.col_reds = []          # of those, column sums riding along a rows kernel
        self.merged_from = 1
        self.leaf_refs = []
        self.node_index = {}
        self.internal_red_refs = []
        self.row_outputs = []

    @property
    def rowshape(self):
        if self.ktype == KernelType.ROWS:
            return self.domain[:len(self.domain) - self.k]
        if self.ktype == KernelType.COLS:
            return self.domain[self.k:]
        return self.domain

    def key(self):
        return (self.ktype, self.domain, self.k)

    def describe(self):
        ops = sorted({n.prim.name for n in self.nodes})
        what = {KernelType.ELEMENTWISE: "elementwise",
                KernelType.ROWS: f"row-reduction over last {self.k} dim(s)",
                KernelType.COLS: f"column-reduction over first {self.k} dim(s)"}[self.ktype]
        return (f"{what} over {list(self.domain)}: {len(self.nodes)} nodes "
                f"({', '.join(ops)}) -> {', '.join(v.name for v in self.outputs)}")


def _produced(st):
    """The values step st produces: its outputs and (a kernel's) reduction results."""
    if isinstance(st, Kernel):
        return list(st.outputs) + [r.outputs[0] for r in st.reds]
    return list(st.outputs)


def col_reds(kt):
    """Reductions over leading dims in kernel kt (all of them for a `cols` kernel)."""
    if not isinstance(kt, Kernel):
        return []
    return list(kt.reds) if kt.ktype == KernelType.COLS else list(kt.col_reds)


def col_outputs(kt):
    return {r.outputs[0] for r in col_reds(kt)}


class Schedule:
    def __init__(self, graph):
        self.graph = graph
        self.steps = []
        self.refused = []       # (what, reason)
        self.materialised = set()


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
        self.routes = routes.find_routes(graph, self.prod, self.users) if library_kernels \
            else {}
        for n in self.routes:
            self.kind[n] = NodeKind.REFERENCE
        self.sched = Schedule(graph)
        self.forced = set()     # virtual values materialised by the cuts of earlier rounds
        self.split = set()      # of those, the ones that split an oversized kernel
        self.owner = {}         # value -> the step that produces it (this round)
        self._label = {}        # step -> a topological label, while kernels merge
        self.strided = {}       # dot operand read through a strided view -> (base, expr, nodes)

    def _through_offset_view(self, v):
        """Is v computed (inside a kernel) through a slice, rev or pad?"""
        stack, seen = [v], set()
        while stack:
            n = self.prod.get(stack.pop())
            if n is None or n in seen or self.kind.get(n) not in EXPANDED:
                continue
            seen.add(n)
            if n.prim.name in ("slice", "rev", "pad"):
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

    # -- dot operands that numpy can view in place ------------------------------------------
    def _strided_chain(self, v):
        """(base, numpy suffix, nodes) when v is transposes, slices (positive strides) and
        unit reshapes of `base`, a value in memory anyway (a graph input, a BLAS or reference
        step's output, a general reshape of one): BLAS reads such a view as it is (every
        matrix of it has a unit-stride dim), so no kernel has to copy it. Else None."""
        ops, nodes, u = [], [], v
        while True:
            n = self.prod.get(u)
            if n is None or self.kind[n] in STORED:
                break
            if self.kind[n] != NodeKind.VIEW or n.prim.name in ("broadcast_in_dim", "rev"):
                return None
            p = n.params
            if n.prim.name == "transpose":
                ops.append(f".transpose({tuple(p['perm'])!r})")
            elif n.prim.name == "slice":
                st = p.get("strides") or (1,) * len(p["start"])
                ops.append("[" + ", ".join(f"{a}:{b}" + (f":{c}" if c != 1 else "")
                                           for a, b, c in zip(p["start"], p["limit"], st)) + "]")
            else:
                ops.append(f".reshape({tuple(p['shape'])!r})")
            nodes.append(n)
            u = n.inputs[0]
        if not ops:
            return None
        return u, "".join(reversed(ops)), nodes

    def _strided_operands(self):
        """Dot operands read through a strided view step instead of a copying kernel: those
        whose only non-kernel readers are dots (kernels read the chain by index arithmetic)
        and that are not graph outputs."""
        out, outs = {}, set(self.g.outputs)
        for n in self.g.nodes:
            if self.kind[n] != NodeKind.DOT:
                continue
            for v in n.inputs:
                if v in out or v in outs or v in self.graph_inputs:
                    continue
                readers = [u for u in self.users.get(v, ()) if self.kind[u] not in
                           IN_KERNEL]
                if any(self.kind[u] != NodeKind.DOT for u in readers):
                    continue
                chain = self._strided_chain(v)
                if chain is not None:
                    out[v] = chain
        return out

    def run(self):
        """Group the nodes into steps. A schedule that recomputes an expensive value many
        times (recompute_cuts) is redone with those values materialised; each round only
        cuts values the previous one recomputed, so a few rounds reach a fixed point."""
        self.forced, self.split = set(), set()
        for round_ in range(_CUT_ROUNDS):
            sch = self._run_once()
            if round_ == _CUT_ROUNDS - 1:
                break
            cuts = recompute_cuts(self, sch) - self.forced
            if not cuts:
                break
            self.forced |= cuts
        # then a kernel still oversized (a chain as long as the program) is split
        for _ in range(_CUT_ROUNDS):
            cuts = size_cuts(self, sch) - self.forced
            if not cuts:
                break
            self.forced |= cuts
            self.split |= cuts
            sch = self._run_once()
        return sch

    def _run_once(self):
        g = self.g
        sch = self.sched = Schedule(g)
        self.strided = self._strided_operands()
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
        steps = self._merge(steps)
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
        sch.steps = self._products_written_transposed(
            [s for s in steps if not isinstance(s, Kernel) or s.outputs])
        sch.materialised = mat
        return sch

    def _products_written_transposed(self, steps):
        """Drop each kernel that only transposes a product's result (attention's heads going
        back to (batch, seq, heads, dim)): the product writes straight into the transposed
        layout instead (BLAS takes the result's strides). The dot step then produces the
        transposed value and `out_view = (its own result, inverse perm)`."""
        outs = set(self.g.outputs)
        made_by = {v: st for st in steps for v in st.outputs}
        kept = []
        for st in steps:
            n = st.nodes[0] if isinstance(st, Kernel) and len(st.nodes) == 1 else None
            if n is not None and n.prim.name == "transpose" and st.outputs == n.outputs:
                d, dot = n.inputs[0], made_by.get(n.inputs[0])
                if dot is not None and dot.kind == StepKind.DOT and d not in outs and \
                        len(self.users.get(d, ())) == 1 and d.ndim == len(
                            dot.nodes[0].params.get("batch", ((), ()))[0]) + 2:
                    perm = tuple(n.params["perm"])
                    dot.outputs = list(n.outputs)
                    dot.out_view = (d, tuple(perm.index(i) for i in range(len(perm))))
                    continue
            kept.append(st)
        return kept

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

    # -- merging -----------------------------------------------------------------------------
    def _deps(self, steps):
        """Step -> the steps whose values it reads."""
        dep = {s: set() for s in steps}
        own = {v: s for s in steps for v in _produced(s)}
        for s in steps:
            for v in s.inputs:
                if v in own and own[v] is not s:
                    dep[s].add(own[v])
        return dep

    def _reaches_indirectly(self, dep, a, b):
        """Is there a path b -> ... -> a (a depends on b) of length >= 2? A search back from
        a that skips each step labelled no later than b (`_label`: b cannot be before it),
        so it only visits the steps between the two, not the program's whole history."""
        label = self._label
        stack = [d for d in dep[a] if d is not b]
        seen = set()
        while stack:
            s = stack.pop()
            if s is b:
                return True
            if s in seen or label[s] <= label[b]:
                continue
            seen.add(s)
            stack.extend(dep[s])
        return False

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
                    r.prim.name == "reduce_sum" and r.inputs[0].dtype.is_floating_point
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
        if self.split and any(v in self.split for v in b.inputs if self.owner.get(v) is a):
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

    def _merge(self, steps):
        """Merge kernels greedily, in passes over the candidate pairs (_merge_pairs) until
        a pass merges nothing. A pair is rechecked against the current kernels before it
        is tried (an earlier merge of the pass may have changed either), and the step
        dependencies are updated per merge rather than recomputed."""
        steps = list(steps)
        # pairs found incompatible, with both kernels' merge counts then: a refusal holds
        # until one of the two kernels absorbs another (paths between steps only grow)
        refused, recorded = set(), set(self.sched.refused)
        dep = self._deps(steps)
        users = {s: set() for s in steps}
        for s, ds in dep.items():
            for t in ds:
                users[t].add(s)
        step_of = {v: s for s in steps for v in _produced(s)}
        # a topological labelling of the steps (each step's label above its dependencies'),
        # kept valid through the merges: it bounds the searches of _reaches_indirectly
        self._label = {s: i for i, s in enumerate(self._toposort(steps))}
        changed = True
        while changed:
            changed = False
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
                        self.sched.refused.append(rec)
                    continue
                self._absorb(a, b)
                i_a, i_b = steps.index(a), steps.index(b)
                steps.remove(b)
                # the merged kernel runs where the later of the two ran
                if i_b > i_a:
                    steps.remove(a)
                    steps.insert(i_b - 1, a)
                self._merged_deps(dep, users, step_of, a, b)
                changed = True
        return self._toposort(steps)

    def _merged_deps(self, dep, users, step_of, a, b):
        """Update the step dependencies `dep`, their reverse `users` and `step_of` (value ->
        the step producing it) after kernel a absorbed kernel b: only the steps next to a
        or b change."""
        for v in _produced(b):
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
        label = self._label
        label[a] = max(label[a], label.pop(b))
        stack = [(u, label[a]) for u in users[a]]
        while stack:
            u, lo = stack.pop()
            if label[u] <= lo:
                label[u] = lo + 1
                stack.extend((w, lo + 1) for w in users[u])

    def _toposort(self, steps):
        """Stable topological order of steps (merging can move a producer after a reader):
        each time, the earliest step whose dependencies are placed."""
        dep = self._deps(steps)
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
            if self.owner.get(v) is b:
                self.owner[v] = a
        self.analyse(a)


# a merge that would make a kernel of more nodes is refused: Numba's compile time grows
# faster than the function, and an unrolled loop would otherwise fuse all its steps' state
# updates into one kernel that no other program (nor another length) can share
MAX_KERNEL_NODES = 128


# sibling candidates of a kernel: the next readers of each of its inputs, this many
_SIBLING_WINDOW = 8


# -- recomputation cuts ------------------------------------------------------------------
_CUT_ROUNDS = 4
# a value whose expression (weighted like emit_base._EXPENSIVE: a transcendental ~20, an
# add 1) times its redundant evaluations reaches this is stored once instead: a store and
# a load per element cost less than three transcendentals, and the generated source (and
# so Numba's compile time) no longer grows with each kernel that recomputes it
RECOMPUTE_LIMIT = 64
# ... unless it costs less than a few operations per element (a constant, a scaled input):
# loading it would cost about as much as computing it, however many kernels do
_MIN_CUT_COST = 4
_VIRTUAL_WEIGHT = {NodeKind.VIEW: 0, NodeKind.COPY: 0, NodeKind.PAD: 1, NodeKind.ROW_SCATTER: 2}


def _clamped_index(ix):
    """Does index ix read through a pad (a clamped term: positions whose value is
    evaluated and then discarded for the fill)?"""
    return any(isinstance(t, Dim) and t.clamp is not None for t in ix)


def evaluations(scheduler, steps):
    """Virtual value -> (how many times the kernels of `steps` evaluate it beyond the first,
    the kernels that evaluate it). A further evaluation is one per further kernel that
    recomputes it, and one per further index a kernel evaluates it at through a pad (each
    element is computed at every padded position and all but one are thrown away)."""
    extra, where = {}, {}
    for kt in steps:
        if not isinstance(kt, Kernel):
            continue
        for v, ixs in kt.node_index.items():
            if scheduler.kind[scheduler.prod[v]] not in VIRTUAL:
                continue
            here = len(ixs) if len(ixs) > 1 and any(_clamped_index(ix) for ix in ixs) else 1
            extra[v] = extra.get(v, -1) + here
            where.setdefault(v, set()).add(kt)
    return {v: (n, where[v]) for v, n in extra.items() if n > 0}


def recompute_cuts(scheduler, sch):
    """Virtual values worth materialising in schedule `sch`, chosen in graph order:
    - a value whose recomputation cost (its expression down to stored values and the cuts
      already chosen) times its redundant evaluations reaches RECOMPUTE_LIMIT;
    - a link of a recomputation chain: a recomputed value that a recomputed value of fewer
      kernels is made from (an unrolled recurrence c_t = f_t * c_{t-1} + ...: without the
      cut, step t's kernel recomputes c_1 .. c_{t-1}, so the kernels grow with the steps
      and no two steps' kernels are alike; with it every step's kernel is the same)."""
    evals = evaluations(scheduler, sch.steps)
    if not evals:
        return set()
    mat, cost, cuts = sch.materialised, {}, set()
    for n in scheduler.g.nodes:
        k = scheduler.kind[n]
        if k not in VIRTUAL or len(n.outputs) != 1:
            continue
        v = n.outputs[0]
        if v in mat:
            continue
        extra, kernels = evals.get(v, (0, ()))
        if extra:
            for u in n.inputs:
                if u in evals and u not in cuts and cost.get(u, 0) >= 2 and \
                        evals[u][1] != kernels:
                    cuts.add(u)
                    cost[u] = 0
        w = 0 if n.prim.kind is Tag.CREATION else \
            _EXPENSIVE.get(n.prim.name, 1) if k is NodeKind.POINTWISE else _VIRTUAL_WEIGHT[k]
        c = min(w + sum(cost.get(u, 0) for u in n.inputs), 1 << 30)
        if c >= _MIN_CUT_COST and c * extra >= RECOMPUTE_LIMIT:
            cuts.add(v)
            c = 0
        cost[v] = c
    return cuts


# a kernel that would read more arrays than this is not made by merging: Numba's compile
# time grows fast with a function's arguments (a kernel of 100 array arguments took seconds)
MAX_KERNEL_INPUTS = 64
# a kernel over more nodes or inputs than those limits (one materialised value whose
# expression is as long as the program: an unrolled loop's gradient accumulated over every
# step) is split into kernels of at most about this many nodes and reads; the pieces of a
# regular chain are alike, so they share one compiled function
SPLIT_SIZE = 32


def oversized(kt):
    return len(kt.nodes) > MAX_KERNEL_NODES or len(kt.inputs) > MAX_KERNEL_INPUTS


def size_cuts(scheduler, sch):
    """Virtual values to materialise so that no kernel of `sch` is oversized: in graph
    order, a value of an oversized kernel whose expression (its nodes and reads down to
    stored values and the cuts already chosen; shared operands counted each time) reaches
    SPLIT_SIZE is stored."""
    big = set()
    for kt in sch.steps:
        if isinstance(kt, Kernel) and oversized(kt):
            big.update(kt.node_index)
    if not big:
        return set()
    size, cuts = {}, set()
    for n in scheduler.g.nodes:
        if len(n.outputs) != 1 or n.outputs[0] not in big or \
                n.outputs[0] in sch.materialised:
            continue
        v = n.outputs[0]
        s = min(1 + sum(size.get(u, 1) for u in n.inputs), 1 << 30)
        if s >= SPLIT_SIZE:
            cuts.add(v)
            s = 0
        size[v] = s
    return cuts


def schedule(graph):
    """Group graph nodes into steps; returns a Schedule."""
    return Scheduler(graph).run()
