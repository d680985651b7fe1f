"""Values to store although a kernel could recompute them: the cuts of a schedule.

After a scheduling round, `recompute_cuts` picks the virtual values that the kernels
recompute too often (a value several kernels recompute, or one kernel evaluates at several
padded positions, e.g. the cell state of an unrolled recurrent network, which every later
step would otherwise recompute from the first), and `size_cuts` the values that split a
kernel too large for Numba (one stored value whose expression is as long as the program,
e.g. a gradient accumulated over every step of an unrolled loop) into alike pieces. The
scheduler materialises them and schedules again (`Scheduler.run`), at most CUT_ROUNDS
times each. Before the first round, `chain_cuts` stores the links of chains too long for
any kernel (an unrolled recurrence's state), so that no round walks them whole.
"""
from aotgrad.codegen.emit_base import _EXPENSIVE
from aotgrad.codegen.fusion import MAX_KERNEL_INPUTS, MAX_KERNEL_NODES
from aotgrad.codegen.index import Dim
from aotgrad.codegen.node_kinds import VIRTUAL, NodeKind
from aotgrad.codegen.steps import Kernel
from aotgrad.ir.tags import Tag

CUT_ROUNDS = 4
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


# a value read through a pad whose kernel evaluates it at this many positions or more for
# each one it uses counts the others as further evaluations (see evaluations)
_PADDED_WASTE = 2


def _padded_waste(kt, ix):
    """How many positions of kernel kt's loop evaluate a value read at index ix for each
    one whose value is used: along each dim a pad clamps, the loop's extent over the
    clamped range (1 where nothing is clamped, or a size is symbolic)."""
    waste = 1.0
    for t in ix:
        if isinstance(t, Dim) and t.clamp is not None and t.scale == 1 and \
                t.dim < len(kt.domain):
            lo, hi = t.clamp
            n = kt.domain[t.dim]
            if all(isinstance(x, int) for x in (n, lo, hi)) and hi >= lo:
                waste *= n / (hi - lo + 1)
    return waste


def evaluations(scheduler, steps):
    """Virtual value -> (how many times the kernels of `steps` evaluate it beyond the first,
    the kernels that evaluate it). A further evaluation is one per further kernel that
    recomputes it, and one per further index a kernel evaluates it at through a pad (each
    element is computed at every padded position and all but one are thrown away). A value
    read at one index through a pad that covers most of the loop with its fill (an LSTM's
    gate gradients, each a quarter of the columns of their concatenation) is evaluated at
    every position of the loop, and used at few: those evaluations count too, as many as
    the loop has positions per used one, less one."""
    extra, where = {}, {}
    for kt in steps:
        if not isinstance(kt, Kernel):
            continue
        for v, ixs in kt.node_index.items():
            if scheduler.kind[scheduler.prod[v]] not in VIRTUAL:
                continue
            if len(ixs) > 1:
                here = len(ixs) if any(_clamped_index(ix) for ix in ixs) else 1
            else:
                here = _padded_waste(kt, next(iter(ixs)))
                here = here if here >= _PADDED_WASTE else 1
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
            _EXPENSIVE.get(n.prim, 1) if k is NodeKind.POINTWISE else _VIRTUAL_WEIGHT[k]
        c = min(w + sum(cost.get(u, 0) for u in n.inputs), 1 << 30)
        if c >= _MIN_CUT_COST and c * extra >= RECOMPUTE_LIMIT:
            cuts.add(v)
            c = 0
        cost[v] = c
    return cuts


# a virtual value read by several nodes whose expression is a longer chain of nodes than
# this is stored before the first round: the cell state of an unrolled recurrence
# (c_t = f_t * c_{t-1} + ...) is such a chain, as long as the loop, and without a cut every
# step's kernel walks it back to the first step, so the first round alone took time
# quadratic in the steps (a 999-step LSTM did not finish scheduling). A model's layers
# stay below it, so none of their kernels is cut here (a transformer block's shared chains
# are about 20 nodes long; a layer norm's backward fused with a GELU's is longer than 32)
CHAIN_DEPTH = 64


def chain_cuts(scheduler):
    """Virtual values to materialise before the first round: each one read by two or more
    nodes at the end of a chain of more than CHAIN_DEPTH virtual nodes (down to stored
    values). One pass over the graph, linear in its nodes. Every such value, not one every
    CHAIN_DEPTH nodes: the steps of a recurrence then all cut alike (and share their
    kernels), where cuts at a period of their own would fall at another place of each
    step."""
    depth, cuts = {}, set()
    for n in scheduler.g.nodes:
        if scheduler.kind[n] not in VIRTUAL or len(n.outputs) != 1:
            continue
        v = n.outputs[0]
        depth[v] = d = 1 + max((depth.get(u, 0) for u in n.inputs), default=0)
        if d > CHAIN_DEPTH and len(set(scheduler.users.get(v, ()))) >= 2:
            cuts.add(v)
    return cuts


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
