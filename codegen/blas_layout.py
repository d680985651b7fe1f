"""How products meet memory without a copying kernel: dot operands that BLAS reads in place
through a strided view (`strided_operands`), products that write their result straight
into a transposed layout (`products_written_transposed`), and products that write their
result straight into their slice of a concatenation (`products_written_into_concatenations`).
All ask the scheduler for the graph's producers, users and node kinds."""
import math

import numpy as np

from aotgrad.codegen.blas import layout_probe
from aotgrad.codegen.node_kinds import IN_KERNEL, STORED, NodeKind
from aotgrad.codegen.routes import RouteKind
from aotgrad.codegen.steps import Into, Kernel, StepKind
from aotgrad.ir import prims as P


def strided_chain(S, v):
    """(base, numpy suffix, nodes) when v is transposes, slices (positive strides) and
    unit reshapes of `base`, a value in memory anyway (a graph input, a BLAS or reference
    step's output, a general reshape of one): BLAS reads such a view as it is (every
    matrix of it has a unit-stride dim), so no kernel has to copy it. Else None."""
    ops, nodes, u = [], [], v
    while True:
        n = S.prod.get(u)
        if n is None or S.kind[n] in STORED:
            break
        if S.kind[n] != NodeKind.VIEW or n.prim in (P.broadcast_in_dim, P.rev):
            return None
        p = n.params
        if n.prim is P.transpose:
            ops.append(f".transpose({tuple(p['perm'])!r})")
        elif n.prim is P.slice:
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


def strided_operands(S):
    """Dot operands read through a strided view step instead of a copying kernel: those
    whose only non-kernel readers are dots (kernels read the chain by index arithmetic)
    and that are not graph outputs. Operand -> its strided_chain."""
    out, outs = {}, set(S.g.outputs)
    for n in S.g.nodes:
        if S.kind[n] != NodeKind.DOT:
            continue
        for v in n.inputs:
            if v in out or v in outs or v in S.graph_inputs:
                continue
            readers = [u for u in S.users.get(v, ()) if S.kind[u] not in IN_KERNEL]
            if any(S.kind[u] != NodeKind.DOT for u in readers):
                continue
            chain = strided_chain(S, v)
            if chain is not None:
                out[v] = chain
    return out


def products_written_transposed(S, steps):
    """Drop each kernel that only transposes a product's result (attention's heads going
    back to (batch, seq, heads, dim)): the product writes straight into the transposed
    layout instead (BLAS takes the result's strides). The dot step then produces the
    transposed value and `out_view = (its own result, inverse perm)`."""
    outs = set(S.g.outputs)
    made_by = {v: st for st in steps for v in st.outputs}
    kept = []
    for st in steps:
        n = st.nodes[0] if isinstance(st, Kernel) and len(st.nodes) == 1 else None
        if n is not None and n.prim is P.transpose and st.outputs == n.outputs:
            d, dot = n.inputs[0], made_by.get(n.inputs[0])
            if dot is not None and dot.kind == StepKind.DOT and d not in outs and \
                    len(S.users.get(d, ())) == 1 and d.ndim == len(
                        dot.nodes[0].params.get("batch", ((), ()))[0]) + 2:
                perm = tuple(n.params["perm"])
                dot.outputs = list(n.outputs)
                dot.out_view = (d, tuple(perm.index(i) for i in range(len(perm))))
                continue
        kept.append(st)
    return kept


# readers of a concatenation that treat a -0.0 part element as the +0.0 the slice copies
# make of it: sums, whose accumulators start at +0.0 (+0.0 + -0.0 is +0.0), and products,
# which sum products of it (the gemm accumulators start at zero, as the sums' do)
_SIGN_BLIND_READERS = (P.dot_general, P.reduce_sum)


def products_written_into_concatenations(S, steps):
    """Drop each concatenation step (codegen.concat: attention's q, k and v gradients going
    back into the qkv projection's gradient) whose every part is a product's result,
    reshaped: each product writes straight into its slice of the concatenation's buffer
    (its DOT step gets `into`), and the part's reshape and the copies go.

    Only for static sizes, and only where the parts are read by nothing else and the
    concatenation only by products and sums: the copies add +0.0 (a -0.0 element becomes
    +0.0, as in the traced sum of pads), and those readers add from +0.0 themselves."""
    outs = set(S.g.outputs)
    if any(not isinstance(d, int) for v in S.g.inputs for d in v.shape):
        return steps
    made_by = {v: st for st in steps for v in st.outputs}
    drop = set()
    for st in steps:
        route = st.route
        if route is None or route.kind is not RouteKind.CONCAT:
            continue
        root = route.node.outputs[0]
        found, dim = route.detail
        if root in outs or any(not isinstance(d, int) for d in root.shape) or \
                any(u.prim not in _SIGN_BLIND_READERS for u in S.users.get(root, ())):
            continue
        probe = layout_probe(root.shape)
        plan = []
        for x, lo in found:
            view = made_by.get(x)
            t = view.inputs[0] if view is not None and view.kind == StepKind.VIEW and \
                not view.view_expr else None
            dot = made_by.get(t)
            if dot is None or dot.kind != StepKind.DOT or dot.into is not None or \
                    x in outs or t in outs or len(S.users.get(x, ())) != 1 or \
                    len(S.users.get(t, ())) != 1:
                break
            into = Into(root, dim, lo, x.shape[dim])
            try:
                part = into.view(probe, t.shape)
            except ValueError:      # the slice reshaped to the product's result copies
                break
            if not np.shares_memory(part, probe) or part.size != math.prod(t.shape):
                break
            plan.append((view, dot, into))
        else:
            for view, dot, into in plan:
                dot.into = into
                drop.add(view)
            drop.add(st)
    return [s for s in steps if s not in drop]
