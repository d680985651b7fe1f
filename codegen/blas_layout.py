"""How products meet memory without a copying kernel: dot operands that BLAS reads in place
through a strided view (`strided_operands`), and products that write their result straight
into a transposed layout (`products_written_transposed`). Both ask the scheduler for the
graph's producers, users and node kinds."""
from aotgrad.codegen.node_kinds import IN_KERNEL, STORED, NodeKind
from aotgrad.codegen.steps import Kernel, StepKind
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
