"""Symbolic sizes in compiled programs: which symbols a graph takes, and a graph's static
copy at given symbol values (the fallback for a graph the symbolic code generator cannot
serve with one set of kernels)."""
from aotgrad.ir.core import Eqn, Graph, Var, evaluate_params, graph_symbols
from aotgrad.ir.symbolic import SymInt, evaluate, source


# the order of the values tuple a compiled callable takes
symbols_of = graph_symbols


def concrete_graph(graph, values):
    """The graph with every size and param evaluated at `values` (symbol name -> int)."""
    new = {}

    def var(v):
        if v not in new:
            new[v] = Var(v.name, tuple(evaluate(d, values) for d in v.shape), v.dtype)
        return new[v]
    nodes = [Eqn(n.prim, [var(v) for v in n.inputs], [var(v) for v in n.outputs],
                 evaluate_params(n.params, values), n.provenance) for n in graph.nodes]
    return Graph([var(v) for v in graph.inputs], nodes, [var(v) for v in graph.outputs],
                 name=graph.name)


def by_size(size, threshold, small, large, bind, prefix):
    """Driver source naming `large` when `size` elements reach `threshold`, else `small`
    (a library kernel's serial and parallel forms): chosen once for a static size, per
    call for a symbolic one (outside a trace a symbolic comparison is only structural)."""
    if not isinstance(size, SymInt):
        return bind(large if size >= threshold else small, prefix)
    return f"({bind(large, prefix)} if {source(size)} >= {threshold} else {bind(small, prefix)})"
