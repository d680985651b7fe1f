"""Reference-kind steps that run a library kernel of codegen instead of a prim's numpy
implementation or a generated loop: whole-slice gathers and scatter-adds (index_rows),
gathers, scatter-adds and argmaxes along one axis with an index per element (index_rows),
concatenations traced as sums of zero pads that a product reads (concat).

The scheduler asks `find_routes` once per graph which nodes run so (a concatenation's root
becomes a step of its own), makes each such node's step read `Route.inputs` (the 1-D index
instead of its broadcast, a concatenation's parts instead of their pads) and records the
Route on the step (`Step.route`). The executor writes the step's driver lines with
`Route.lines` into a planned output buffer; the report and the profiler name it with
`Route.describe`.
"""
import enum
from typing import NamedTuple

from aotgrad.codegen import concat, index_rows
from aotgrad.codegen.node_kinds import NodeKind


class RouteKind(str, enum.Enum):
    SLICES = "whole slices at a 1-D index"
    AXIS = "along one axis, an index per element"
    CONCAT = "slice copies of a concatenation"


_MODULE = {RouteKind.SLICES: "index_rows", RouteKind.AXIS: "index_rows",
           RouteKind.CONCAT: "concat"}


class Route(NamedTuple):
    kind: RouteKind
    node: object
    inputs: list      # the values the step reads
    detail: object    # index_rows.RowIndex, or concat's ([(part, low)], dim)

    def describe(self):
        return f"{self.kind.value} (codegen.{_MODULE[self.kind]} kernel)"

    def lines(self, shaped, name_of, bind):
        """The driver's lines for the step (see index_rows / concat step_lines)."""
        if self.kind is RouteKind.SLICES:
            return index_rows.step_lines(self.node, self.detail, shaped, name_of, bind)
        if self.kind is RouteKind.AXIS:
            return index_rows.axis_step_lines(self.node, self.detail, shaped, name_of, bind)
        found, dim = self.detail
        return concat.step_lines(self.node, found, dim, shaped, bind)


def find_routes(graph, producers, users, kind):
    """node -> Route for every node of `graph` that runs as a library kernel. kind: node ->
    its NodeKind (an axis kernel takes only nodes that no generated kernel fuses)."""
    out = {}
    for n in concat.concat_roots(graph, producers, users):
        found, dim = concat.parts(n, producers)
        out[n] = Route(RouteKind.CONCAT, n, [x for x, _ in found], (found, dim))
    for n in graph.nodes:
        r = index_rows.row_index(n, producers)
        if r is not None:
            ins = [r.index if v is r.broadcast else v for v in n.inputs]
            out[n] = Route(RouteKind.SLICES, n, ins, r)
            continue
        a = index_rows.axis_index(n) if kind[n] is NodeKind.REFERENCE else None
        if a is not None:
            out[n] = Route(RouteKind.AXIS, n, list(n.inputs), a)
    return out
