"""How the scheduler treats each node of a graph (`node_kind`), and the sets of kinds it
asks about: which values a kernel computes at whatever index it reads them (virtual), which
are in memory (stored), which a kernel computes at all.

- *virtual* value: output of a pointwise prim (incl. `full`/`iota`), of a view prim
  (broadcast_in_dim, transpose, slice, rev, unit-dim reshape) or of `pad` without interior
  padding (the VJP of slice: a select between the input, read at a clamped index, and the
  fill value). It is never stored unless it must be; a kernel that reads it recomputes it at
  the index it needs (index arithmetic).
- *stored* value: the output of a BLAS/reference step, a general reshape or a check.
"""
from enum import Enum

from aotgrad.ir import dtypes as dt
from aotgrad.ir import prims as P
from aotgrad.ir.prims import unit_reshape_map
from aotgrad.ir.tags import Tag, reduced_dims


class NodeKind(Enum):
    """How the scheduler treats a node."""
    POINTWISE = "pw"           # computed in a kernel's loop (incl. full/iota)
    VIEW = "view"              # index arithmetic (broadcast, transpose, slice, rev, unit reshape)
    PAD = "pad"                # a select between the input at a clamped index and the fill
    COPY = "pwcopy"            # a reduction over no dims: the input itself
    ROW_REDUCTION = "rowred"   # reduces trailing dims: a `rows` kernel
    COL_REDUCTION = "colred"   # reduces leading dims: a `cols` kernel
    ROW_GATHER = "rowgather"   # one element per row, picked by an index (fused)
    ROW_SCATTER = "rowscatter"  # its transpose: pointwise with a per-row index
    RESHAPE = "reshape"        # a general reshape: a view step of a materialised value
    DOT = "dot"                # a product: BLAS
    CHECK = "check"            # a run-time check of values: an alias of its input
    REFERENCE = "ref"          # the prim's numpy implementation


# values a kernel computes at whatever index it reads them (never stored unless they must be)
EXPANDED = frozenset({NodeKind.POINTWISE, NodeKind.VIEW, NodeKind.COPY, NodeKind.PAD})
VIRTUAL = EXPANDED | {NodeKind.ROW_SCATTER}
# nodes whose values are in memory: products, reference steps, general reshapes, checks
STORED = frozenset({NodeKind.DOT, NodeKind.REFERENCE, NodeKind.RESHAPE, NodeKind.CHECK})
# nodes that a kernel computes
IN_KERNEL = VIRTUAL | {NodeKind.ROW_REDUCTION, NodeKind.COL_REDUCTION, NodeKind.ROW_GATHER}
# views a kernel reads through an offset (a position that is not the loop variable itself)
OFFSET_VIEWS = frozenset({P.slice, P.rev, P.pad})


def node_kind(n):
    prim = n.prim
    if prim is P.reshape:
        unit = unit_reshape_map(n.inputs[0].shape, n.params["shape"]) is not None
        return NodeKind.VIEW if unit else NodeKind.RESHAPE
    if Tag.VIEW in prim.tags:
        return NodeKind.VIEW
    if prim is P.pad and all(it == 0 for _, _, it in n.params["config"]):
        return NodeKind.PAD
    if prim.kind in (Tag.POINTWISE, Tag.CREATION):
        return NodeKind.POINTWISE
    dims = reduced_dims(prim, n.params)
    if dims is not None:
        arg = Tag.ARG_REDUCTION in prim.tags
        nd = n.inputs[0].ndim
        if not dims:
            return NodeKind.COPY if not arg else NodeKind.REFERENCE
        if sorted(dims) == list(range(nd - len(dims), nd)):
            return NodeKind.ROW_REDUCTION
        if sorted(dims) == list(range(len(dims))) and not arg:
            return NodeKind.COL_REDUCTION
        return NodeKind.REFERENCE
    if prim is P.dot_general:
        return NodeKind.DOT
    if prim is P.check_values:   # raises or passes its input through: an alias, no copy
        return NodeKind.CHECK
    if Tag.BOUNDS_CHECKED in prim.tags and last_dim_row_index(n):
        return NodeKind.ROW_GATHER if prim is P.gather else NodeKind.ROW_SCATTER
    return NodeKind.REFERENCE


def last_dim_row_index(n):
    """gather/scatter_add along the last dim with one index per row (index shape
    (*rows, 1), e.g. cross-entropy's label pick and its transpose): fusable as index
    arithmetic. out[r] = x[r, idx[r]] is a per-row value of a row kernel over x;
    scatter_add's out[r, j] = x[r, j] + (src[r] if j == idx[r] else 0) is pointwise."""
    x, idx = n.inputs[0], n.inputs[1]
    nd = x.ndim
    return nd >= 2 and n.params["dim"] == nd - 1 and dt.is_integer(idx.dtype) and \
        tuple(idx.shape) == tuple(x.shape[:-1]) + (1,)


def red_dims(n):
    return reduced_dims(n.prim, n.params)
