"""Graphs built directly in the IR for the codegen tests: `static` over inputs of given avals,
`build` over inputs whose shapes name one symbolic size."""
from aotgrad.ir.core import Aval, GraphBuilder
from aotgrad.ir import dtypes as dt
from aotgrad.ir.symbolic import ShapeEnv


def static(fn, *avals):
    """A graph over inputs of the given (shape, dtype) pairs: `fn(*input_vars)` returns its
    output var(s)."""
    b = GraphBuilder("forward")
    xs = [b.add_input(Aval(s, d), f"x{i}") for i, (s, d) in enumerate(avals)]
    with b:
        outs = fn(*xs)
    b.graph.outputs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    return b.graph


def build(fn, *shapes, hint=8, dtype=dt.float32):
    """A graph over inputs whose shapes name the symbol "n" (one symbol, hint `hint`):
    `fn(n, *input_vars)` returns its output var(s)."""
    env = ShapeEnv()
    n = env.create_symbol(hint, "x.size(0)")
    b = GraphBuilder("forward")
    xs = [b.add_input(Aval(tuple(n if d == "n" else d for d in s), dtype), f"x{i}")
          for i, s in enumerate(shapes)]
    with env, b:
        outs = fn(n, *xs)
    b.graph.outputs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    return b.graph
