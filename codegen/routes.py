"""Reference-kind steps that run a library kernel of codegen instead of a prim's numpy
implementation or a generated loop: whole-slice gathers and scatter-adds (index_rows),
concatenations traced as sums of zero pads (concat).

The scheduler asks `routed_nodes` which nodes to treat as such steps (beyond the ones that
are reference steps anyway) and `step_inputs` what each step reads (not always the node's
inputs: the 1-D index instead of its broadcast, a concatenation's parts instead of their
pads). The executor, the report and the profiler ask `route_of` how a step runs: a Route,
or None for an ordinary step. A routed step writes its result into a planned buffer.
"""
import enum
from typing import NamedTuple

from aotgrad.codegen import concat, index_rows


class RouteKind(str, enum.Enum):
    SLICES = "whole slices at a 1-D index"
    CONCAT = "slice copies of a concatenation"


class Route(NamedTuple):
    kind: RouteKind
    node: object
    detail: object    # index_rows.RowIndex, or concat's ([(part, low)], dim)

    def describe(self):
        return f"{self.kind.value} (codegen.{'index_rows' if self.kind is RouteKind.SLICES else 'concat'} kernel)"

    def lines(self, shaped, name_of, bind):
        """The driver's lines for the step."""
        if self.kind is RouteKind.SLICES:
            return index_rows.step_lines(self.node, self.detail, shaped, name_of, bind)
        found, dim = self.detail
        return concat.step_lines(self.node, found, dim, shaped, bind)


def routed_nodes(graph, producers, users):
    """Nodes that are not reference steps by their prim but become routed steps."""
    return concat.concat_roots(graph, producers, users)


def step_inputs(node, producers):
    """What the step of `node` (a step of its own: product, reference, check) reads."""
    if node.prim.name == "add":
        p = concat.parts(node, producers)
        if p is not None:
            return [x for x, _ in p[0]]
    return index_rows.step_inputs(node, producers)


def route_of(st, producers):
    """The Route of a reference step, or None (its prim's numpy implementation runs)."""
    if not st.nodes:
        return None
    n = st.nodes[0]
    r = index_rows.from_step(st)
    if r is not None:
        return Route(RouteKind.SLICES, n, r)
    if n.prim.name == "add":
        p = concat.parts(n, producers)
        if p is not None:
            return Route(RouteKind.CONCAT, n, p)
    return None
