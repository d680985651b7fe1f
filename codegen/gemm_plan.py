"""The BLAS schedule of a product whose sizes are known only per call.

A static program fixes each product's gemm arguments (flags, leading dimensions, offsets,
batch steps, slabs) when its driver is made. With symbolic sizes they depend on the symbol
values, so a `SymbolicGemm` works them out per call from those values, with the same rules
as the static path (`blas.gemm_layout`, `blas.pieces`, SPLIT_MIN / SERIAL_MAX), and keeps
them per distinct values tuple: a repeated size costs one dict lookup.
"""
import math

import numpy as np

from aotgrad.codegen import blas
from aotgrad.codegen.parts import get_num_threads
from aotgrad.ir.symbolic import evaluate

# distinct size tuples kept per product; a program fed more sizes than this starts over
CACHE_MAX = 256


class SymbolicGemm:
    """Per call, `self(values)` gives (serial?, args before a, args between a and b,
    args between b and c, args after c) for blas.gemm_threads / gemm_serial, or None when this
    size runs on np.matmul (a small product, an operand BLAS cannot read without a copy at
    this size, or views that lie over other roots than at the hint the driver was made at).

    `probes_at(values)` gives the program's layout probes at those values (executor
    `_probes`), `roots` the (a, b, out) roots the driver names at the hint. The driver calls
    blas.gemm_serial or gemm_threads through its own globals."""

    def __init__(self, node, dot_plan, symbols, probes_at, roots, fn, dtype):
        self.node, self.plan, self.symbols = node, dot_plan, tuple(symbols)
        self.probes_at, self.roots, self.fn = probes_at, roots, fn
        self.alpha = np.dtype(dtype).type(1)
        self._cache = {}

    def __call__(self, values):
        got = self._cache.get(values, self)
        if got is self:
            if len(self._cache) >= CACHE_MAX:
                self._cache.clear()
            got = self._cache[values] = self._args(values)
        return got

    def _args(self, values):
        at = dict(zip(self.symbols, values))
        pa, sa, pb, sb, so = self.plan
        sa, sb, so = (tuple(int(evaluate(d, at)) for d in s) for s in (sa, sb, so))
        macs = math.prod(sa) * sb[-1]
        if macs < blas.SPLIT_MIN:
            return None
        probes = self.probes_at(values)
        (a, b), out = self.node.inputs, self.node.outputs[0]
        if tuple(probes[v][0] for v in (a, b, out)) != self.roots:
            return None
        la = blas.gemm_layout(probes[a][2], pa, sa)
        lb = blas.gemm_layout(probes[b][2], pb, sb)
        lc = blas.gemm_layout(probes[out][2], None, so)
        if la is None or lb is None or lc is None or lc[1] != blas.NO_TRANS:
            return None
        oa, ob, oc = (blas.offset_of(probes[v][2], probes[v][1]) for v in (a, b, out))
        batch, m, k, n = so[:-2], sa[-2], sa[-1], sb[-1]
        serial = macs < blas.SERIAL_MAX
        parts, cut_cols = (1, False) if serial else \
            blas.pieces(math.prod(batch), m, n, get_num_threads())
        steps = (lambda t: np.array(t, np.int64))
        return (serial,
                (self.fn, la[1], lb[1], m, n, k, self.alpha), (oa, la[2]), (ob, lb[2]),
                (oc, lc[2], steps(batch), steps(la[0]), steps(lb[0]), steps(lc[0]), parts,
                 cut_cols))


def symbol_hints(graph, symbols):
    """The values tuple of the traced call (each symbol's hint), read off the graph's sizes."""
    found = {}
    for v in list(graph.inputs) + [o for n in graph.nodes for o in n.outputs]:
        for d in v.shape:
            for a, h in getattr(d, "_atoms", {}).items():
                if isinstance(a, str):
                    found.setdefault(a, h)
    return tuple(found.get(s) for s in symbols)
