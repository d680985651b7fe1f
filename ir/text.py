"""How IR values, nodes and graphs read as text (`f32[4,3]`, `t0: f32[4,5] = prims.add(a, b)`).

Only attributes are read (name, shape, dtype, prim, params, provenance), so this module
imports nothing of the IR: core.py uses it for `repr`/`str`, and the printer (which also
loads printed graphs back) builds on it.
"""


def type_str(a):
    """`f32[2,3]` (`f32[]` for a 0-d value)."""
    return f"{a.dtype.short}[{','.join(map(str, a.shape))}]"


def annotation_str(v):
    """`f32[2,3]`; a 0-d value prints as `f32[()]` so the annotation stays valid Python."""
    return type_str(v) if v.shape else f"{v.dtype.short}[()]"


def _fmt_param(v):
    if isinstance(v, float) and v != v:
        return "float('nan')"
    if isinstance(v, float) and v in (float("inf"), float("-inf")):
        return f"float('{v}')"
    if isinstance(v, list):
        return repr(tuple(v))
    return repr(v)


def format_node(node, width=72):
    outs = ", ".join(f"{v.name}: {annotation_str(v)}" for v in node.outputs)
    if len(node.outputs) > 1:  # annotated tuple targets are not Python: annotate in a comment
        outs = ", ".join(v.name for v in node.outputs)
    args = [v.name for v in node.inputs]
    args += [f"{k}={_fmt_param(v)}" for k, v in node.params.items()]
    line = f"{outs} = prims.{node.prim.name}({', '.join(args)})"
    if node.provenance is not None:
        line = line.ljust(width) + f"  # {node.provenance!r}"
    return line


def format_graph(graph, name=None):
    sig = ", ".join(f"{v.name}: {annotation_str(v)}" for v in graph.inputs)
    lines = [f"def {name or graph.name}({sig}):"]
    lines += ["    " + format_node(n) for n in graph.nodes]
    outs = "".join(f"{v.name}, " for v in graph.outputs)
    lines.append(f"    return ({outs.rstrip(' ')})")
    return "\n".join(lines) + "\n"
