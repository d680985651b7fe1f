"""Symbolic sizes in compiled programs: which symbols a graph takes, and a graph's static
copy at given symbol values (the fallback for a graph the symbolic code generator cannot
serve with one set of kernels)."""
from aotgrad.ir.core import Eqn, Graph, Var, evaluate_params
from aotgrad.ir.symbolic import SymInt, evaluate, free_symbols


def _param_symbols(p):
    if isinstance(p, SymInt):
        return p.free_symbols
    if isinstance(p, (tuple, list)):
        out = set()
        for x in p:
            out |= _param_symbols(x)
        return out
    if isinstance(p, slice):
        return _param_symbols((p.start, p.stop, p.step))
    return set()


def symbols_of(graph):
    """The sorted names of the symbols in a graph's sizes (inputs, outputs, every value and
    param): the order of the values tuple its compiled callable takes."""
    names = set()
    for v in graph.inputs:
        for d in v.shape:
            names |= free_symbols(d)
    for n in graph.nodes:
        for v in n.outputs:
            for d in v.shape:
                names |= free_symbols(d)
        for p in n.params.values():
            names |= _param_symbols(p)
    return tuple(sorted(names))


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
