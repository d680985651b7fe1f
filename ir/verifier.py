"""`verify(graph)`: the invariants every Graph keeps between passes (JAX's check_jaxpr).

- every input is a Var, listed once;
- every node's inputs are Vars defined before the node (a graph input or an earlier node's
  output), and every Var is defined once (SSA);
- every node's output Vars have the shape and dtype its prim's shape rule gives for its
  inputs and params (and the rule accepts them);
- Var names are unique (the printed graph is Python that runs);
- every graph output is defined.

A violation is a bug in a pass or in the tracer, never the user's: VerifyError names the
stage, the node and what is wrong. Passes run it on their result when checking is on: in
the test suite, and under AOTGRAD_VERIFY=1 (read once, on the first pass that runs).
"""
import functools
import os

from aotgrad.ir.core import Graph, PrimError, Var
from aotgrad.ir.symbolic import ShapeEnv, same
from aotgrad.ir.text import format_node, type_str


class VerifyError(AssertionError):
    """A Graph breaks an IR invariant (a compiler bug)."""


@functools.cache
def enabled():
    """Is verification after every pass on (AOTGRAD_VERIFY set to anything but 0)?"""
    return os.environ.get("AOTGRAD_VERIFY", "0") not in ("", "0")


def verify(graph, stage=None):
    """Check `graph` (see the module docstring); raise VerifyError at the first violation.
    `stage` names the pass that made the graph, for the message."""
    where = f"{graph.name}" + (f" after {stage}" if stage else "")

    def fail(msg, i=None, node=None):
        at = f" node {i} `{format_node(node, width=0)}`" if node is not None else ""
        raise VerifyError(f"invalid graph {where}:{at}: {msg}")

    defined, names = set(), {}

    def define(v, i=None, node=None):
        if not isinstance(v, Var):
            fail(f"defines {v!r}, which is not a Var", i, node)
        if v in defined:
            fail(f"{v.name} is defined twice", i, node)
        if names.get(v.name) is not None:
            fail(f"two values are named {v.name}", i, node)
        defined.add(v)
        names[v.name] = v

    for v in graph.inputs:
        define(v)
    produced = {v for n in graph.nodes for v in n.outputs}
    for i, n in enumerate(graph.nodes):
        for v in n.inputs:
            if not isinstance(v, Var):
                fail(f"input {v!r} is not a Var", i, n)
            if v not in defined:
                fail(f"uses {v.name} before its definition" if v in produced else
                     f"uses {v.name}, which nothing defines", i, n)
        rejected = None
        try:
            # a graph with symbolic sizes: the rule's checks answer from the hints (the
            # trace's guards keep them true on every call), its results compared structurally
            with ShapeEnv():
                expected = n.prim.shape_rule(*n.inputs, **n.params)
        except PrimError as e:
            rejected = f"the shape rule of prims.{n.prim.name} rejects it: {e}"
        except TypeError as e:   # a missing or unknown param
            rejected = f"prims.{n.prim.name} cannot take these params: {e}"
        if rejected:
            fail(rejected, i, n)
        expected = tuple(expected) if n.prim.multiple_results else (expected,)
        if len(expected) != len(n.outputs):
            fail(f"has {len(n.outputs)} outputs, prims.{n.prim.name} makes "
                 f"{len(expected)}", i, n)
        for v, a in zip(n.outputs, expected):
            if not isinstance(v, Var):
                fail(f"output {v!r} is not a Var", i, n)
            if len(v.shape) != len(a.shape) or v.dtype is not a.dtype or \
                    not all(same(p, q) for p, q in zip(v.shape, a.shape)):
                fail(f"output {v.name} is {type_str(v)}, the shape rule gives "
                     f"{type_str(a)}", i, n)
        for v in n.outputs:
            define(v, i, n)
    for v in graph.outputs:
        if v not in defined:
            fail(f"output {getattr(v, 'name', v)!r} is not defined")
    return graph


def verified(graph_pass):
    """Decorator for a pass: when checking is on, verify the graph(s) it returns (a Graph,
    or an object with `forward` and `backward` Graphs, as the partitioner returns)."""
    @functools.wraps(graph_pass)
    def run(*args, **kwargs):
        out = graph_pass(*args, **kwargs)
        if enabled():
            graphs = [out] if isinstance(out, Graph) else [out.forward, out.backward]
            for g in graphs:
                verify(g, graph_pass.__name__)
        return out
    return run
