"""float16/bfloat16 in compiled programs: Numba has no 16-bit float types, so the kernels
compute and keep these values in float32, and the program converts at its boundary (inputs
widened to float32 on entry, outputs rounded to their 16-bit dtype on return).

`widen(graph)` gives the graph with every float16/bfloat16 value retyped float32 (a cast to a
16-bit dtype inside the program becomes a float32 copy, so intermediates are not rounded:
compiled results are at least as accurate as eager ones and equal to them within the 16-bit
dtype's tolerance), plus the 16-bit dtype of each input and output (None for the others).
"""
from aotgrad.ir import dtypes as dt
from aotgrad.ir.core import Eqn, Graph, Var


def widen(graph):
    """(graph with 16-bit floats as float32, input dtypes, output dtypes); the graph itself
    and two Nones when it holds no 16-bit float value."""
    low = dt.LOW_PRECISION

    def touches(n):
        return n.params.get("dtype") in low or any(v.dtype in low for v in n.inputs + n.outputs)

    if not any(v.dtype in low for v in graph.inputs + graph.outputs) and \
            not any(touches(n) for n in graph.nodes):
        return graph, None, None
    new = {}

    def var(v):
        if v.dtype not in low:
            return v
        if v not in new:
            new[v] = Var(v.name, v.shape, dt.float32)
        return new[v]

    nodes = []
    for n in graph.nodes:
        params = n.params
        if params.get("dtype") in low:
            params = dict(params, dtype=dt.float32)
        nodes.append(Eqn(n.prim, [var(v) for v in n.inputs], [var(v) for v in n.outputs],
                         params, n.provenance))
    wide = Graph([var(v) for v in graph.inputs], nodes, [var(v) for v in graph.outputs],
                 name=graph.name)
    ins = [v.dtype if v.dtype in low else None for v in graph.inputs]
    outs = [v.dtype if v.dtype in low else None for v in graph.outputs]
    return wide, ins, outs
