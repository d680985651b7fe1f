"""Graph passes: dead code elimination, common subexpression elimination, simplification.
Each takes a Graph and returns a new Graph (inputs and outputs keep their Vars), verified
when checking is on (ir/verifier.py). `run_pipeline` records every stage (ir/stages.py)."""
import math

from aotgrad.ir.core import Eqn, Graph, make_node
from aotgrad.ir.prims import dot_dims, free_dims
from aotgrad.ir.stages import Stage, StageHistory
from aotgrad.ir.tags import Tag
from aotgrad.ir.verifier import enabled, verified, verify


@verified
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


@verified
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
    return Eqn(n.prim, [rename.get(v, v) for v in n.inputs], n.outputs, n.params, n.provenance)


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
        return x.dtype is out.dtype and p.get("via") is None
    if name == "slice":
        return x.shape == out.shape and all(s == 1 for s in (p.get("strides") or ()))
    if name in ("reduce_max", "reduce_min", "reduce_prod"):
        return not p["dims"]
    if name == "reduce_sum":   # a float sum over nothing is x + 0: -0.0 becomes +0.0
        return not p["dims"] and not out.dtype.is_floating_point
    return False


@verified
def simplify(graph):
    """Remove identity reshapes/transposes/casts/broadcasts and fold reshape chains."""
    rename, producer, nodes = {}, {}, []
    for n in graph.nodes:
        n = _renamed(n, rename)
        if _is_identity(n):
            rename[n.outputs[0]] = n.inputs[0]
            continue
        if n.prim.name == "reshape" and producer.get(n.inputs[0]) is not None and \
                producer[n.inputs[0]].prim.name == "reshape":
            n = Eqn(n.prim, producer[n.inputs[0]].inputs, n.outputs, n.params, n.provenance)
            if n.inputs[0].shape == n.outputs[0].shape:
                rename[n.outputs[0]] = n.inputs[0]
                continue
        for v in n.outputs:
            producer[v] = n
        nodes.append(n)
    return Graph(graph.inputs, nodes, [rename.get(v, v) for v in graph.outputs], graph.name)


def _absorb_operand_transpose(n, prod):
    """dot_general(transpose(x, p), y) -> dot_general(x, y) with x's dims renamed, when the
    free dims keep their order (the output is unchanged). The executor hands BLAS a
    transposed view; no kernel has to write the transposed copy."""
    lhs, rhs = n.inputs
    lc, rc, lb, rb, _, _ = dot_dims(lhs.ndim, rhs.ndim, **n.params)
    ins, dims = list(n.inputs), [[lc, lb], [rc, rb]]
    changed = False
    for k in (0, 1):
        t = prod.get(ins[k])
        if t is None or t.prim.name != "transpose":
            continue
        p = t.params["perm"]
        c, b = dims[k]
        free = [p[i] for i in free_dims(len(p), c, b)]
        if free != sorted(free):
            continue
        ins[k] = t.inputs[0]
        dims[k] = [tuple(p[i] for i in c), tuple(p[i] for i in b)]
        changed = True
    if not changed:
        return n
    (lc, lb), (rc, rb) = dims
    params = dict(n.params, contract=(lc, rc), batch=(lb, rb))
    return Eqn(n.prim, ins, n.outputs, params, n.provenance)


def _swapped_dot(dot, perm, out):
    """dot_general(b, a) writing `out`, when transpose(dot_general(a, b), perm) only swaps
    the output's two free-dim groups (the batch dims stay first); else None."""
    a, b = dot.inputs
    lc, rc, lb, rb, af, bf = dot_dims(a.ndim, b.ndim, **dot.params)
    nb, na, nf = len(lb), len(af), len(bf)
    want = tuple(range(nb)) + tuple(range(nb + na, nb + na + nf)) + tuple(range(nb, nb + na))
    if tuple(perm) != want or want == tuple(range(len(want))):
        return None
    params = dict(dot.params, contract=(rc, lc), batch=(rb, lb))
    return Eqn(dot.prim, [b, a], [out], params, dot.provenance)


@verified
def fold_transposes(graph):
    """Transposes around contractions, as BLAS takes them for free:
    - transpose(transpose(x)) -> one transpose (dropped when it is the identity);
    - transpose(dot_general(a, b)) swapping the output's free-dim groups, where the dot has
      no other use -> dot_general(b, a) (e.g. the attention backward's (P^T dO)^T);
    - a transpose feeding dot_general as an operand -> the dot's contracted/batch dims.
    >>> # t1 = transpose(t0, (0, 1, 3, 2)); t2 = transpose(t1, (0, 1, 3, 2))  ->  t2 is t0
    """
    users = graph.users()
    outs = set(graph.outputs)
    rename, prod, nodes = {}, {}, []
    position = {}  # id(node) -> its index in `nodes` (a list.index per swap was quadratic)
    for n in graph.nodes:
        n = _renamed(n, rename)
        name = n.prim.name
        if name == "transpose":
            src = prod.get(n.inputs[0])
            if src is not None and src.prim.name == "transpose":
                p1, p2 = src.params["perm"], n.params["perm"]
                perm = tuple(p1[j] for j in p2)
                if perm == tuple(range(len(perm))):
                    rename[n.outputs[0]] = src.inputs[0]
                    continue
                n = Eqn(n.prim, src.inputs, n.outputs, dict(n.params, perm=perm),
                        n.provenance)
            elif src is not None and src.prim.name == "dot_general" and \
                    len(users.get(n.inputs[0], ())) == 1 and n.inputs[0] not in outs:
                sw = _swapped_dot(src, n.params["perm"], n.outputs[0])
                if sw is not None:
                    i = position.pop(id(src))
                    nodes[i] = sw
                    position[id(sw)] = i
                    prod[n.outputs[0]] = sw
                    continue
        elif name == "dot_general":
            n = _absorb_operand_transpose(n, prod)
        for v in n.outputs:
            prod[v] = n
        position[id(n)] = len(nodes)
        nodes.append(n)
    return Graph(graph.inputs, nodes, [rename.get(v, v) for v in graph.outputs], graph.name)


@verified
def reduce_before_reshape(graph):
    """reduce(reshape(x)) over leading dims the reshape keeps (it only regroups the trailing
    ones) -> reshape(reduce(x)): the same elements reduced, now in x's own shape, so a code
    generator can fuse the reduction into the kernel computing x (the transformer's qkv
    bias gradient, a column sum over the heads' gradients merged back into one matrix).
    >>> # t1 = reshape(t0 [8,128,3,4,64], [8,128,768]); t2 = reduce_sum(t1, dims=(0, 1))
    >>> # ->  t3 = reduce_sum(t0, dims=(0, 1)) [3,4,64]; t2 = reshape(t3, [768])
    """
    prod, nodes = {}, []
    for n in graph.nodes:
        src = prod.get(n.inputs[0]) if n.inputs else None
        if Tag.AXIS_REDUCTION in n.prim.tags and src is not None and src.prim.name == "reshape":
            x, y = src.inputs[0], n.inputs[0]
            k = len(n.params["dims"])
            # the trailing sizes must hold as many elements as well: with a size-0 leading
            # dim equal leading dims say nothing about them ([0, 0] -> [0])
            if k and tuple(sorted(n.params["dims"])) == tuple(range(k)) and \
                    tuple(x.shape[:k]) == tuple(y.shape[:k]) and x.ndim > k and \
                    math.prod(x.shape[k:]) == math.prod(y.shape[k:]):
                reduced = make_node(n.prim, [x], n.params, n.provenance,
                                    [f"{n.outputs[0].name}p"])
                nodes.append(reduced)
                n = Eqn(src.prim, reduced.outputs, n.outputs,
                        {"shape": tuple(n.outputs[0].shape)}, n.provenance)
        for v in n.outputs:
            prod[v] = n
        nodes.append(n)
    return Graph(graph.inputs, nodes, graph.outputs, graph.name)


# The standard pipeline: simplify, fold transposes into contractions, move reductions above
# regrouping reshapes, CSE, DCE.
PIPELINE = (simplify, fold_transposes, reduce_before_reshape, cse, dce)


def run_pipeline(graph, pipeline=PIPELINE):
    """Run the passes in order; the StageHistory holds the traced graph ("trace") and each
    pass's result under the pass's name. With checking on, the traced graph is verified
    too (each pass verifies its own result)."""
    if enabled():
        verify(graph, "trace")
    stages = [Stage("trace", graph)]
    for graph_pass in pipeline:
        graph = graph_pass(graph)
        stages.append(Stage(graph_pass.__name__, graph))
    return StageHistory(tuple(stages))


def optimize(graph):
    """The standard pipeline's result (`run_pipeline(graph).final`)."""
    return run_pipeline(graph).final
