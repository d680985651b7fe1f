"""Common-subexpression elimination on a Graph before scheduling.

Backward graphs recompute the same pointwise chain once per use (a VJP rule re-derives
what another rule already built): identical nodes get one Var, so the scheduler and the
emitter see one value (kernels compute it once; a row kernel can keep it for later passes).

    g2 = cse(graph)     # same inputs and outputs (the same Var objects), fewer nodes

Random prims and multi-result prims are kept as they are; nodes producing a graph output
keep their own Var (outputs stay distinct arrays).
"""
from aotgrad.ir.core import Graph, Node


_SIMPLE = (int, float, bool, str, type(None))


def _simple(v):
    if isinstance(v, (tuple, list)):
        return all(_simple(u) for u in v)
    return isinstance(v, _SIMPLE) or type(v).__name__ == "DType"


def _key(node, inputs):
    """Structural key of a node, or None when its params are not plain values."""
    if not all(_simple(v) for v in node.params.values()):
        return None
    params = repr(sorted(node.params.items()))
    return (node.prim.name, tuple(id(u) for u in inputs), params)


def cse(graph):
    """A copy of `graph` with structurally identical nodes merged (the original is kept)."""
    outs = set(graph.outputs)
    rep, seen, nodes = {}, {}, []
    changed = False
    for n in graph.nodes:
        inputs = [rep.get(u, u) for u in n.inputs]
        pure = "random" not in n.prim.tags and not n.prim.multiple_results
        key = _key(n, inputs) if pure else None
        if key is not None and key in seen and n.outputs[0] not in outs:
            rep[n.outputs[0]] = seen[key].outputs[0]
            changed = True
            continue
        if inputs != n.inputs:
            n = Node(n.prim, inputs, n.outputs, n.params, n.provenance)
            changed = True
        if key is not None and key not in seen:
            seen[key] = n
        nodes.append(n)
    if not changed:
        return graph
    return Graph(graph.inputs, nodes, graph.outputs, name=graph.name)
