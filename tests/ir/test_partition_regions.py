"""The partitioner cuts its flow graph one region at a time (ir.partition._source_side):
the source side must be the one networkx's minimum_cut gives for the whole graph, and the
partition of unrolled programs the same as a whole-graph cut would make."""
import numpy as np
import pytest

import aotgrad as ag
from aotgrad.ir import partition as part
from aotgrad.ir import passes
from aotgrad.tracer.trace import trace

nx = pytest.importorskip("networkx")


def _flow_graph(rng, n_values):
    """A flow graph shaped like the partitioner's: per value an in -> out edge (its cost),
    infinite edges from S to the ins of values never recomputed, from outs to the ins of
    their users and from outs the backward reads to T; a few finite S -> in edges."""
    g = nx.DiGraph()
    S, T = "S", "T"
    g.add_node(S)
    g.add_node(T)
    for v in range(n_values):
        g.add_edge(("in", v), ("out", v), capacity=int(rng.integers(0, 5)))
        if rng.random() < 0.25:
            g.add_edge(S, ("in", v))
        elif rng.random() < 0.1:
            g.add_edge(S, ("in", v), capacity=int(rng.integers(1, 4)))
        for u in rng.choice(v, size=min(v, int(rng.integers(0, 3))), replace=False) \
                if v else ():
            g.add_edge(("out", int(u)), ("in", v))
        if rng.random() < 0.3:
            g.add_edge(("out", v), T)
    return g, S, T


@pytest.mark.parametrize("seed", range(40))
def test_region_cut_is_the_whole_graph_cut(seed):
    rng = np.random.default_rng(seed)
    g, S, T = _flow_graph(rng, int(rng.integers(1, 60)))
    if not nx.has_path(g, S, T):
        return
    try:
        _, (whole, _) = nx.minimum_cut(g, S, T)
    except nx.NetworkXUnbounded:   # an infinite path: the partitioner never builds one
        return
    assert part._source_side(g, S, T) == whole


def _rnn(T):
    def fn(x, U, W):
        h = ag.zeros(4, 8)
        for t in range(T):
            h = ag.tanh(x[t] @ U + h @ W * 0.1)
        return h.sum()
    rng = np.random.default_rng(0)
    return fn, [rng.standard_normal(s).astype(np.float32) for s in ((T, 4, 8), (8, 8), (8, 8))]


def test_unrolled_program_partition_unchanged(monkeypatch):
    fn, arrays = _rnn(30)
    tr = trace(fn, tuple(ag.tensor(a, requires_grad=True) for a in arrays), {},
               want_grad=True)
    joint = passes.optimize(tr.graph)
    by_region = part.partition(joint, tr.n_primals, tr.layout.n_forward)

    def whole_graph(g, S, T):
        return nx.minimum_cut(g, S, T)[1][0]
    monkeypatch.setattr(part, "_source_side", whole_graph)
    whole = part.partition(joint, tr.n_primals, tr.layout.n_forward)
    assert [v.name for v in by_region.saved] == [v.name for v in whole.saved]
    assert by_region.recomputed == whole.recomputed
    assert len(by_region.saved) >= 30        # one value per step at least
