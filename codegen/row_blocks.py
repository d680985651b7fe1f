"""How a first-tier kernel (codegen.first_tier) runs in blocks of rows: `row_blocks` finds
the leading axes whose rows its nodes keep to themselves (pointwise chains, reductions
within rows, broadcasts of per-row and per-column values, a chunk, a reversal or a
transpose within each row, a gather or scatter-add at each row's own indices), and a
`RowBlocks` plan says which values are cut into rows, which nodes run once per call, per
block, or after the rows (on the sums over them), and each node's params for a block. The
numpy blocks (codegen.first_tier) and the row machine's programs (codegen.row_program) both
run from it. `numpy_impl(prim)`: the numpy impl a first-tier node runs with (`full` as one
broadcast value)."""
import dataclasses
import functools
import math

import numpy as np

from aotgrad.ir import prims
from aotgrad.ir.tags import Tag

BLOCK_ELEMENTS = 1 << 15    # elements of the widest value per block of rows (L2-sized)


def _full(*, shape, value, dtype):
    """`prims.full` as a broadcast of one value (read-only: the impls never write their
    inputs, and the kernel's results are copied into its buffers), made once per shape,
    dtype and value (a small kernel's call made several, each as dear as a node)."""
    return _constant(tuple(shape), dtype.np, repr(value), value)


@functools.lru_cache(maxsize=4096)
def _constant(shape, np_dtype, value_repr, value):
    # (value_repr in the key: 0.0 == -0.0 and 1 == True, but their arrays differ)
    return np.broadcast_to(np.full((), value, dtype=np_dtype), shape)


def numpy_impl(prim):
    return _full if prim is prims.full else prim.impl


@dataclasses.dataclass
class RowBlocks:
    """How a kernel runs in blocks of rows: the rows are the flattened leading `axes` axes
    (`rows` of them), shared by every value cut into blocks (`split`); a block of n rows of
    such a value is its (n, *rest) view; the other values are read whole. `once`: the nodes
    that read only whole values (run once per call); `per_block`: the rest, with their params
    for a block (`params[node]`: dims remapped, a "shape" or a slice's "limit" without its
    leading entry, filled in per block size); `summed`: values reduced over the rows (sum,
    max or min), combined across blocks (sums in float64); `after`: the nodes run once
    after the rows, on those combined values and whole ones (a loss's mean: its sum over
    the rows divided by their count)."""
    axes: int
    rows: int
    block: int
    split: frozenset
    once: list
    per_block: list
    params: dict
    summed: dict            # var -> the numpy function combining two partials
    squeeze: dict           # broadcast node -> the shape its whole input takes in a block
    after: list

    @functools.cached_property
    def after_values(self):
        return frozenset(v for n in self.after for v in n.outputs)

    def block_steps(self, n):
        """node -> (impl, params) for a block of n rows."""
        out = {}
        for node in self.per_block:
            p = self.params[node]
            for key in _PER_BLOCK_SIZE.intersection(p):
                p = dict(p, **{key: (n,) + p[key]})
            impl = numpy_impl(node.prim)
            if node in self.squeeze:
                impl = functools.partial(_broadcast_reshaped, self.squeeze[node])
            out[node] = (impl, p)
        return out


# the params whose leading entry is the block's rows (a block's params hold the rest)
_PER_BLOCK_SIZE = frozenset({"shape", "limit"})


def _broadcast_reshaped(shape_in, x, *, shape, dims):
    return prims.broadcast_in_dim.impl(x.reshape(shape_in), shape=shape, dims=dims)


# a reduction over the rows, per block: how two blocks' partial results combine
_COMBINE = {prims.reduce_sum: np.add, prims.reduce_max: np.maximum,
            prims.reduce_min: np.minimum}


def row_blocks(nodes, reads, writes, one_block=False):
    """A RowBlocks plan for `nodes` (reads, writes: the kernel's (index, var) pairs), or
    None where a node mixes rows (a transpose, a pad...) or, unless `one_block`, the kernel
    is one block anyway. The most leading axes that work are taken (the finest blocks)."""
    values = [v for n in nodes for v in n.outputs]
    if not writes or not values:
        return None
    # the kernel's domain: a kernel whose values are all narrower than an input (a bias's
    # gradient alone, a sum over the rows of its input) runs whole, where numpy's own sum
    # over the leading axes took less time than the machine's rows or their native code
    widest = max(values, key=lambda v: math.prod(v.shape))
    for axes in range(len(widest.shape), 0, -1):
        plan = _plan(nodes, writes, widest.shape[:axes], one_block)
        if plan is not None:
            return plan
    return None


def _plan(nodes, writes, prefix, one_block):
    k, rows = len(prefix), math.prod(prefix)
    if rows < 2:
        return None

    def is_split(v):
        return tuple(v.shape[:k]) == tuple(prefix)

    def over_rows(n):       # a reduction over every row axis of a value cut into rows
        return (n.prim in _COMBINE and set(range(k)) <= set(n.params["dims"])
                and is_split(n.inputs[0]))
    after = _after_rows(nodes, over_rows, is_split)
    if after is None:
        return None
    late = {v for n in after for v in n.outputs}
    nodes = [n for n in nodes if n not in after]
    consumed = {v for n in nodes for v in n.inputs}
    if late & consumed:
        return None             # a value of the rows made from their sum (not in rows)
    split, params, summed, squeeze = {}, {}, {}, {}   # split: var -> True / False (whole)

    def need(v, s):
        if s and not is_split(v) or split.setdefault(v, s) != s:
            raise _Mixed
    sums = {n.outputs[0] for n in nodes if over_rows(n)}
    try:
        for _, v in writes:
            if v in late or v not in consumed and not is_split(v):
                continue                   # maybe a reduction over the rows (below)
            need(v, True)
        for n in after:                    # they read sums over the rows and whole values
            for v in n.inputs:
                if v not in late and v not in sums:
                    need(v, False)
        for n in reversed(nodes):
            out = n.outputs[0]
            if over_rows(n) and out not in split and out not in consumed:
                split[out] = False
                summed[out] = _COMBINE[n.prim]
                need(n.inputs[0], True)
                params[n] = dict(n.params, dims=(0,) + tuple(
                    d - k + 1 for d in n.params["dims"] if d >= k))
                continue
            s = {split.get(v) for v in n.outputs} - {None}
            if len(s) != 1:
                raise _Mixed              # (an output nothing reads: not worth the case)
            if not s.pop():
                for v in n.inputs:
                    need(v, False)
                continue
            if n.prim.multiple_results:
                raise _Mixed
            params[n] = _block_params(n, k, need, squeeze)
    except _Mixed:
        return None
    read_after = {v for n in after for v in n.inputs} - late
    if any(v not in split for _, v in writes if v not in late) or any(
            split[v] is False and v not in summed for _, v in writes if v not in late) or \
            any(v in sums and v not in summed for v in read_after):
        return None
    widest = max(math.prod(v.shape[k:]) for v, s in split.items() if s)
    block = max(1, BLOCK_ELEMENTS // max(1, widest))
    if block >= rows and not one_block:
        return None
    per_block = [n for n in nodes if n in params]
    once = [n for n in nodes if n not in params]
    return RowBlocks(k, rows, block, frozenset(v for v, s in split.items() if s), once,
                     per_block, params, summed, squeeze, after)


def _after_rows(nodes, over_rows, is_split):
    """The nodes that can run after the rows: each reads a reduction over the rows
    (`over_rows`) or another such node's value, and no other value cut into rows; None where
    a node reads both kinds (then the kernel does not run by rows)."""
    late, after = set(), []
    for n in nodes:
        if over_rows(n):
            late.update(n.outputs)
            continue
        if not any(v in late for v in n.inputs):
            continue
        if n.prim.multiple_results or any(is_split(v) for v in n.inputs if v not in late):
            return None
        after.append(n)
        late.update(n.outputs)
    return after


def _block_params(n, k, need, squeeze):
    """The params of split node n over a block (dims remapped to the block's axes; "shape"
    without its leading dim); calls need(var, split) for its inputs; sets squeeze[n] to the
    shape its whole input takes in a block (without axes of length 1 that fall on the rows)
    where it differs; raises _Mixed where n mixes rows."""
    out = n.outputs[0]
    if Tag.POINTWISE in n.prim.tags:
        for v in n.inputs:
            if v.shape != out.shape:
                raise _Mixed
            need(v, True)
        return n.params
    if n.prim is prims.full:
        return dict(n.params, shape=tuple(out.shape[k:]))
    if n.prim is prims.reshape:
        need(n.inputs[0], True)
        return dict(n.params, shape=tuple(out.shape[k:]))
    if n.prim is prims.broadcast_in_dim:
        x, dims = n.inputs[0], tuple(n.params["dims"])
        if dims[:k] == tuple(range(k)) and tuple(x.shape[:k]) == tuple(out.shape[:k]):
            need(x, True)                  # its rows are the output's rows
            dims = (0,) + tuple(d - k + 1 for d in dims[k:])
        elif all(d >= k or x.shape[i] == 1 for i, d in enumerate(dims)):
            need(x, False)                 # repeated along the rows
            keep = tuple(i for i, d in enumerate(dims) if d >= k)
            dims = tuple(dims[i] - k + 1 for i in keep)
            if len(keep) < len(x.shape):   # its axes of length 1 that fall on the rows
                squeeze[n] = tuple(x.shape[i] for i in keep)
        else:
            raise _Mixed
        return dict(n.params, dims=dims, shape=tuple(out.shape[k:]))
    if Tag.AXIS_REDUCTION in n.prim.tags and all(d >= k for d in n.params["dims"]):
        need(n.inputs[0], True)
        return dict(n.params, dims=tuple(d - k + 1 for d in n.params["dims"]))
    if n.prim in (prims.gather, prims.scatter_add) and n.params["dim"] >= k:
        # each row's elements picked (or added) at the indices of the same row (a
        # cross-entropy's target class): every operand cut into the same rows
        for v in n.inputs:
            need(v, True)
        return dict(n.params, dim=n.params["dim"] - k + 1)
    # a value's elements rearranged within each row (a chunk of the last axis, its
    # reversal, a transpose of the axes past the rows): each row from the same row
    x = n.inputs[0]
    if n.prim is prims.slice:
        strides = n.params.get("strides") or (1,) * len(x.shape)
        start, limit = n.params["start"], n.params["limit"]
        if (tuple(start[:k]) == (0,) * k and tuple(limit[:k]) == tuple(x.shape[:k])
                and tuple(strides[:k]) == (1,) * k):
            need(x, True)
            p = dict(n.params, start=(0,) + tuple(start[k:]), limit=tuple(limit[k:]))
            if n.params.get("strides") is not None:
                p["strides"] = (1,) + tuple(strides[k:])
            return p
    elif n.prim is prims.transpose and tuple(n.params["perm"][:k]) == tuple(range(k)):
        need(x, True)
        return dict(n.params, perm=(0,) + tuple(d - k + 1 for d in n.params["perm"][k:]))
    elif n.prim is prims.rev and all(d >= k for d in n.params["dims"]):
        need(x, True)
        return dict(n.params, dims=tuple(d - k + 1 for d in n.params["dims"]))
    raise _Mixed


class _Mixed(Exception):
    """A node mixes rows: the kernel runs whole."""
