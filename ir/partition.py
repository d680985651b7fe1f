"""Split a joint graph into a forward and a backward graph with a min cut.

The forward returns its outputs plus *saved* values; the backward takes the saved values
plus output gradients. Which values to save is a minimum s-t cut (networkx) over the
forward-region values, each weighted by its size in bytes: cheap pointwise and shape ops are
recomputed in the backward when that saves memory; contractions, reductions, random and
index ops are never recomputed (AOTAutograd's min-cut rematerialisation, simplified), nor
is a pointwise value whose recomputation would read more bytes than saving it costs (a
residual stream rebuilt from every earlier branch output).
"""
import math

from aotgrad.ir.core import Graph
from aotgrad.ir.prims import unit_reshape_map
from aotgrad.ir.symbolic import hints
from aotgrad.ir.tags import Tag
from aotgrad.ir.verifier import verified

RECOMPUTABLE_KINDS = frozenset({Tag.POINTWISE, Tag.SHAPE, Tag.CREATION})


def nbytes(v):
    return math.prod(hints(v.shape)) * v.dtype.itemsize  # (a symbolic size: its hint)


class Partition:
    """forward, backward: Graphs; saved: Vars; report(): why each value is saved/recomputed."""

    def __init__(self, forward, backward, saved, recomputed, reasons):
        self.forward, self.backward, self.saved = forward, backward, saved
        self.recomputed, self.reasons = recomputed, reasons
        self.budget_note = None

    @property
    def saved_bytes(self):
        return sum(nbytes(v) for v in self.saved)

    def report(self):
        lines = [f"saved {len(self.saved)} values, {_fmt_bytes(self.saved_bytes)}; "
                 f"recomputed {len(self.recomputed)} ops in the backward"]
        if self.budget_note:
            lines.append(self.budget_note)
        for v in self.saved:
            lines.append(f"  saved {v.name}: {v.dtype.short}[{','.join(map(str, v.shape))}] "
                         f"{_fmt_bytes(nbytes(v))} - {self.reasons.get(v, '')}")
        groups = {}  # recomputed ops grouped by the user line they came from
        for n in self.recomputed:
            where = n.provenance.where() if n.provenance is not None else "<unknown>"
            kind = n.prim.kind.value
            groups.setdefault(where, {}).setdefault(kind, 0)
            groups[where][kind] += 1
        for where, kinds in groups.items():
            total = sum(kinds.values())
            detail = ", ".join(f"{k} {c}" for k, c in sorted(kinds.items()))
            lines.append(f"  recomputed at {where}: {total} ops ({detail})")
        return "\n".join(lines)


def _fmt_bytes(b):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if b < 1024 or unit == "GiB":
            return f"{b:.0f} {unit}" if unit == "B" else f"{b:.1f} {unit}"
        b /= 1024


@verified
def partition(joint, n_primals, n_fw_outputs, memory_budget=None):
    """joint: inputs = primals + tangents; outputs = forward outputs + grads.

    memory_budget: None (min cut over pointwise/shape recompute), a fraction in [0, 1] of
    that partition's saved bytes, or a number of bytes. Over budget, reductions become
    recomputable too; contractions and random ops never are (the report says if the budget
    could not be met)."""
    p = _partition(joint, n_primals, n_fw_outputs, allow_reductions=False)
    if memory_budget is None:
        return p
    budget = memory_budget * p.saved_bytes if 0 <= memory_budget <= 1 else memory_budget
    if p.saved_bytes > budget:
        p = _partition(joint, n_primals, n_fw_outputs, allow_reductions=True)
    p.budget_note = (f"memory_budget {_fmt_bytes(budget)}: "
                     + ("met" if p.saved_bytes <= budget else
                        f"not met ({_fmt_bytes(p.saved_bytes)} must be saved: contractions, "
                        f"random ops and inputs are never recomputed)"))
    return p


def _partition(joint, n_primals, n_fw_outputs, allow_reductions):
    import networkx as nx   # here, not at import: only a compile with a backward needs it
    primals, tangents = joint.inputs[:n_primals], joint.inputs[n_primals:]
    fw_outs, grads = joint.outputs[:n_fw_outputs], joint.outputs[n_fw_outputs:]
    producer = joint.producers()
    # tangent-dependent nodes are backward nodes; the rest is the forward region
    bw_vals, bw_nodes = set(tangents), set()
    for n in joint.nodes:
        if any(v in bw_vals for v in n.inputs):
            bw_nodes.add(n)
            bw_vals.update(n.outputs)
    needed_by_bw = _ancestors_nodes(joint, grads, producer)
    fw_needed = _ancestors_nodes(joint, fw_outs, producer)

    # under a memory budget, saving less comes first: no value is held back for read cost
    fw_nodes = [n for n in joint.nodes if n not in bw_nodes]
    in_memory = _contraction_operands(fw_nodes, producer) | _read_past_a_contraction(fw_nodes)
    too_costly = {} if allow_reductions else \
        _costly_recomputes(fw_nodes, primals, in_memory)
    g = nx.DiGraph()
    S, T = "__source__", "__sink__"
    g.add_node(S)
    g.add_node(T)
    for v in primals:
        g.add_edge(S, ("in", v))
    for n in joint.nodes:
        if n in bw_nodes:
            continue
        recomputable = (n.prim.kind in RECOMPUTABLE_KINDS and n not in too_costly) or \
            (allow_reductions and n.prim.kind is Tag.REDUCTION)
        for v in n.outputs:
            if not recomputable:
                g.add_edge(S, ("in", v))
            for u in n.inputs:
                g.add_edge(("out", u), ("in", v))
    fw_values = list(primals) + [v for n in joint.nodes if n not in bw_nodes for v in n.outputs]
    for v in fw_values:
        g.add_edge(("in", v), ("out", v),
                   capacity=_save_cost(v, producer.get(v), v in in_memory))
    for n in bw_nodes:
        for u in n.inputs:
            if u not in bw_vals:
                g.add_edge(("out", u), T)
    # a value a backward matmul reads must be in memory there: recomputing it costs the
    # backward a write of its size (paid when its "in" node falls on the sink side)
    for v in _contraction_operands(bw_nodes, producer):
        if v not in bw_vals and producer.get(v) is not None and \
                producer[v].prim.kind in RECOMPUTABLE_KINDS:
            g.add_edge(S, ("in", v), capacity=nbytes(v))
    for v in grads:
        if v not in bw_vals:  # a grad that does not depend on tangents (rare): save it
            g.add_edge(("out", v), T)
    saved = []
    if g.has_node(T) and nx.has_path(g, S, T):
        reach = _source_side(g, S, T)
        saved = [v for v in fw_values if ("in", v) in reach and ("out", v) not in reach]
    saved_set = set(saved)

    # forward graph: outputs + saved values
    fwd = _subgraph(joint, primals, fw_outs + saved, producer, "forward", stop=set())
    # backward graph: saved + tangents -> grads, recomputing what was not saved
    bwd = _subgraph(joint, saved + list(tangents), grads, producer, "backward", stop=saved_set)
    recomputed = [n for n in bwd.nodes if n not in bw_nodes]
    reasons = {}
    for v in saved:
        p = producer.get(v)
        if p is None:
            reasons[v] = "graph input"
        else:
            kind = p.prim.kind.value if p.prim.kind in (
                Tag.CONTRACTION, Tag.RANDOM, Tag.REDUCTION) else None
            where = f" at {p.provenance.where()}" if p.provenance is not None else ""
            if p in too_costly:
                why = (f" (recomputing it would read {_fmt_bytes(too_costly[p])} of saved "
                       f"values, more than saving it costs)")
            elif kind:
                why = f" (never recomputed: {kind})"
            else:
                why = " (recomputing it would need more bytes saved)"
            reasons[v] = f"output of {p.prim.name}{where}{why}"
    del needed_by_bw, fw_needed
    return Partition(fwd, bwd, saved, recomputed, reasons)


def _costly_recomputes(fw_nodes, primals, in_memory):
    """{node: bytes}: the forward pointwise nodes whose recomputation in the backward would
    read more bytes from memory than saving their output costs (a read in the backward,
    and a write in the forward unless the forward holds the value anyway, `in_memory`: once
    or twice its size, counted at the widest dtype the node touches), with the bytes it
    would read. The min cut
    treats them like contractions (never recomputed: their output or a value computed from
    it is saved), which keeps its guarantees.

    A recomputation reads the values it starts from: inputs, values never recomputed, and
    the values held back here (taken in graph order, so each one ends the chains through
    it). A transformer's residual stream, x + a1 + m1 + a2 + ..., is where this matters:
    recomputed, the stream after block k reads every earlier branch output (2k+1 tensors)
    in each layer norm's backward; held back, it reads one saved value. A pointwise chain
    from one input (an activation from x) reads x once and stays recomputed."""
    reads = {v: {v: nbytes(v)} for v in primals}   # value -> {value read: bytes of it read}
    costly = {}
    for n in fw_nodes:
        if n.prim.kind not in RECOMPUTABLE_KINDS:
            for v in n.outputs:
                reads[v] = {v: nbytes(v)}
            continue
        merged = {}
        for u in n.inputs:
            for w, b in reads.get(u, {u: nbytes(u)}).items():
                merged[w] = max(merged.get(w, 0), b)
        if n.prim.kind is Tag.SHAPE:   # a slice reads only the part of its source it keeps
            cap = max(nbytes(v) for v in n.outputs)
            merged = {w: min(b, cap) for w, b in merged.items()}
        total = sum(merged.values())
        # sized at the widest dtype it touches: a 1-byte mask from a float compare is no
        # costlier to rebuild than the float value the backward reads beside it
        width = max(v.dtype.itemsize for v in (*n.inputs, *n.outputs))
        if n.prim.kind is Tag.POINTWISE and all(
                total > (1 if v in in_memory else 2) * width * math.prod(hints(v.shape))
                for v in n.outputs):
            costly[n] = total
            for v in n.outputs:
                reads[v] = {v: nbytes(v)}
        else:
            for v in n.outputs:
                reads[v] = merged
    return costly


def _closure(g, start, forward):
    """The nodes joined to `start` by a path of infinite-capacity edges (no capacity
    attribute), following edges forward (out of start) or backward (into it)."""
    seen, stack = {start}, [start]
    edges = g.out_edges if forward else g.in_edges
    while stack:
        x = stack.pop()
        for a, b, d in edges(x, data=True):
            y = b if forward else a
            if "capacity" not in d and y not in seen:
                seen.add(y)
                stack.append(y)
    return seen


def _source_side(g, S, T):
    """The source side of the minimum S-T cut of flow graph `g` that networkx's
    minimum_cut(g, S, T) returns (the nodes that cannot reach T in the residual network of
    a maximum flow: a set every maximum flow gives alike), computed one region at a time.

    Nodes joined to S by infinite edges (the values never recomputed) always lie on the
    source side, and nodes joined to T by infinite edges on the sink side; with those
    merged into S and T, the rest falls apart into regions (for an unrolled loop: one per
    step, between two matrix products) whose flows are independent. Each region is cut on
    its own, so the time grows with the program, not faster (a cut of the whole graph
    grows superlinearly with it)."""
    import networkx as nx
    src, snk = _closure(g, S, True), _closure(g, T, False)
    rest = g.subgraph(x for x in g if x not in src and x not in snk)
    reach = set(src)
    for region in nx.weakly_connected_components(rest):
        sub = nx.DiGraph(rest.subgraph(region))
        s2, t2 = ("source", None), ("sink", None)
        sub.add_node(s2)
        sub.add_node(t2)
        for x in region:   # edges from the merged source / into the merged sink, summed
            for a, _, d in g.in_edges(x, data=True):
                if a in src:
                    _join(sub, s2, x, d)
            for _, b, d in g.out_edges(x, data=True):
                if b in snk:
                    _join(sub, x, t2, d)
        if not sub.in_degree(t2):
            reach |= region               # nothing reaches the sink: all source side
            continue
        _, (side, _) = nx.minimum_cut(sub, s2, t2)
        reach |= side - {s2}
    return reach


def _join(g, a, b, d):
    """Add an edge a -> b with d's capacity to g, summed with an edge already there (an
    edge without capacity is infinite)."""
    if not g.has_edge(a, b):
        g.add_edge(a, b, **({"capacity": d["capacity"]} if "capacity" in d else {}))
        return
    e = g[a][b]
    if "capacity" in e and "capacity" in d:
        e["capacity"] += d["capacity"]
    else:
        e.pop("capacity", None)


def _save_cost(v, producer, in_memory=False):
    """Bytes that saving v costs. An input or the result of a contraction/reduction is in
    memory anyway: its size. A pointwise or shape value would otherwise live only inside a
    fused kernel: saving it adds a write in the forward and a read in the backward, so it
    costs twice its size (with fast vectorised math, recomputing it is cheaper) -- unless
    the forward holds it in memory anyway, as a matmul operand or a value read after a
    contraction computed from it (`in_memory`): then it costs
    its size, a hair less than the value it was computed from, so that of two equal-sized
    candidates the later one is saved and the backward does not run a kernel to rebuild it
    (the transformer block's qkv bias add, 0.35 ms)."""
    if producer is None or producer.prim.kind not in RECOMPUTABLE_KINDS:
        return nbytes(v)
    if in_memory:
        return nbytes(v) - 1e-3
    return 2 * nbytes(v) + 1e-3  # the bias breaks ties toward values in memory anyway


def _contraction_operands(nodes, producer):
    """Values the contractions among `nodes` read, followed up through shape ops to the
    value they view or copy: the one held in memory (the shape ops' own outputs are not
    included: saving a view of it would make the forward copy the view out). A reshape that
    moves data (not only unit dims) of a shape op's output, such as attention's heads
    transposed back and merged, reads that output from memory: the codegen writes it out
    contiguously (saving it spares the backward a transpose kernel)."""
    out, seen = set(), set()
    stack = [u for n in nodes if n.prim.kind is Tag.CONTRACTION for u in n.inputs]
    while stack:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        p = producer.get(v)
        if p is None or p.prim.kind is not Tag.SHAPE:
            out.add(v)
            continue
        u = p.inputs[0]
        if p.prim.name == "reshape" and unit_reshape_map(u.shape, p.params["shape"]) is None \
                and producer.get(u) is not None and producer[u].prim.kind is Tag.SHAPE:
            out.add(u)
        else:
            stack.extend(p.inputs)
    return out


def _read_past_a_contraction(nodes):
    """Values that a node reads after a contraction computed from them: the forward must
    hold them in memory until then (a residual stream x, read by x + attention(x) after
    attention's matrix products), so saving them adds no write. As bit sets of the
    contractions: those each value is computed from, and those computed from each value;
    a value is held when a node that reads it reads another value computed from a
    contraction computed from it (bit sets grow with the contractions, not the values)."""
    bit, after = {}, {}          # contraction -> its bit; value -> contractions it is made from
    for n in nodes:
        dep = 0
        for u in n.inputs:
            dep |= after.get(u, 0)
        if n.prim.kind is Tag.CONTRACTION:
            bit[n] = 1 << len(bit)
            dep |= bit[n]
        for v in n.outputs:
            after[v] = dep
    if not bit:
        return set()
    before = {}                  # value -> contractions computed from it
    for n in reversed(nodes):
        down = bit.get(n, 0)
        for v in n.outputs:
            down |= before.get(v, 0)
        for u in n.inputs:
            before[u] = before.get(u, 0) | down
    out = set()
    for n in nodes:
        for u in n.inputs:
            if u in out or not before.get(u):
                continue
            if any(w is not u and after.get(w, 0) & before[u] for w in n.inputs):
                out.add(u)
    return out


def _ancestors_nodes(graph, outputs, producer):
    seen, stack = set(), [producer[v] for v in outputs if v in producer]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        stack.extend(producer[v] for v in n.inputs if v in producer and producer[v] not in seen)
    return seen


def _subgraph(joint, inputs, outputs, producer, name, stop):
    """The nodes of `joint` needed to compute `outputs` from `inputs` (in joint order)."""
    avail = set(inputs)
    need, stack = set(), [v for v in outputs if v not in avail]
    while stack:
        v = stack.pop()
        p = producer.get(v)
        if p is None:
            raise ValueError(f"partition: {v.name} is neither computed nor an input of {name}")
        if p in need:
            continue
        need.add(p)
        stack.extend(u for u in p.inputs if u not in avail)
    nodes = [n for n in joint.nodes if n in need]
    return Graph(list(inputs), nodes, list(outputs), name)
