"""Graph passes: dead code elimination, common subexpression elimination, simplification.
Each takes a Graph and returns a new Graph (inputs and outputs keep their Vars)."""
from aotgrad.ir.core import Graph


def dce(graph):
    """Drop nodes whose outputs reach no graph output (prims are pure; random ones take
    their seed as an input, so dropping them is safe too)."""
    live = set(graph.outputs)
    kept = []
    for n in reversed(graph.nodes):
        if any(v in live for v in n.outputs):
            kept.append(n)
            live.update(n.inputs)
    return Graph(graph.inputs, reversed(kept), graph.outputs, graph.name)


def _key(node, rename):
    params = tuple(sorted((k, repr(v)) for k, v in node.params.items()))
    return (node.prim.name, tuple(rename.get(v, v) for v in node.inputs), params)


def cse(graph, keep_outputs=False):
    """Merge nodes that apply the same prim with the same params to the same inputs.
    With keep_outputs, a node producing a graph output keeps its own Var (so a code generator
    returns distinct arrays for distinct outputs)."""
    seen, rename, nodes = {}, {}, []
    outs = set(graph.outputs) if keep_outputs else ()
    for n in graph.nodes:
        k = _key(n, rename)
        hit = seen.get(k)
        if hit is not None and not any(v in outs for v in n.outputs):
            for a, b in zip(n.outputs, hit.outputs):
                rename[a] = b
            continue
        n2 = _renamed(n, rename)
        seen.setdefault(k, n2)
        nodes.append(n2)
    return Graph(graph.inputs, nodes, [rename.get(v, v) for v in graph.outputs], graph.name)


def _renamed(n, rename):
    if not any(v in rename for v in n.inputs):
        return n
    from aotgrad.ir.core import Node
    return Node(n.prim, [rename.get(v, v) for v in n.inputs], n.outputs, n.params, n.provenance)


def _is_identity(n):
    x, p = n.inputs[0] if n.inputs else None, n.params
    name = n.prim.name
    if x is None or len(n.outputs) != 1:
        return False
    out = n.outputs[0]
    if name in ("reshape", "broadcast_in_dim") and x.shape == out.shape:
        return name == "reshape" or tuple(p["dims"]) == tuple(range(len(out.shape)))
    if name == "transpose":
        return tuple(p["perm"]) == tuple(range(len(out.shape)))
    if name == "convert_element_type":
        return x.dtype is out.dtype
    if name == "slice":
        return x.shape == out.shape and all(s == 1 for s in (p.get("strides") or ()))
    if name in ("reduce_sum", "reduce_max", "reduce_min", "reduce_prod"):
        return not p["dims"]
    return False


def simplify(graph):
    """Remove identity reshapes/transposes/casts/broadcasts and fold reshape chains."""
    from aotgrad.ir.core import Node
    rename, producer, nodes = {}, {}, []
    for n in graph.nodes:
        n = _renamed(n, rename)
        if _is_identity(n):
            rename[n.outputs[0]] = n.inputs[0]
            continue
        if n.prim.name == "reshape" and producer.get(n.inputs[0]) is not None and \
                producer[n.inputs[0]].prim.name == "reshape":
            n = Node(n.prim, producer[n.inputs[0]].inputs, n.outputs, n.params, n.provenance)
            if n.inputs[0].shape == n.outputs[0].shape:
                rename[n.outputs[0]] = n.inputs[0]
                continue
        for v in n.outputs:
            producer[v] = n
        nodes.append(n)
    return Graph(graph.inputs, nodes, [rename.get(v, v) for v in graph.outputs], graph.name)


def optimize(graph):
    """The standard pipeline: simplify, CSE, DCE."""
    return dce(cse(simplify(graph)))
