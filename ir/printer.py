"""Render a Graph as readable, valid Python.

    def forward(x: f32[4,3], w: f32[5,3]):
        t0: f32[4,5] = prims.dot_general(x, w, contract=((1,), (1,)))  # mlp.py:12 linear
        return (t0,)

The text runs as is with the numpy reference prims: `load_graph_source(text)` (or a file
starting with `HEADER`) gives back a function over numpy arrays.
"""
from aotgrad.ir import dtypes as dt
from aotgrad.ir import prims
from aotgrad.ir.text import annotation_str as type_str  # noqa: F401  (the printer's name)
from aotgrad.ir.text import format_graph, format_node  # noqa: F401  (printed here)

HEADER = "import aotgrad\nfrom aotgrad.ir.printer import prims, f32, f64, i32, i64, b1\n\n"


class _Annotation:
    """`f32[2,3]` in a signature evaluates to this: printable, ignored at run time."""

    def __init__(self, short):
        self.short = short

    def __getitem__(self, shape):
        return f"{self.short}[{shape}]"


f32, f64, i32, i64, b1 = (_Annotation(s) for s in ("f32", "f64", "i32", "i64", "b1"))


def load_graph_source(text, name=None):
    """Execute printed graph text and return the function it defines (numpy in, numpy out)."""
    ns = {"aotgrad": _DtypeNamespace, "prims": prims, "f32": f32, "f64": f64, "i32": i32,
          "i64": i64, "b1": b1}
    exec(compile(text, "<aotgrad graph>", "exec"), ns)
    if name is None:
        import ast
        name = [n.name for n in ast.parse(text).body if isinstance(n, ast.FunctionDef)][-1]
    return ns[name]


class _DtypeNamespace:
    float32, float64, int32, int64 = dt.float32, dt.float64, dt.int32, dt.int64
    bool = dt.bool_
