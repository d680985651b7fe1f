"""Whole-slice gathers and scatter-adds (embedding lookups and their gradients) as library
kernels over the un-broadcast index; and gathers, scatter-adds and argmaxes along one axis
with an index per element (a max pool's window choice and its gradient).

`index_select(weight, 0, i)` (an embedding) traces to `gather(x, broadcast_in_dim(i), dim)`
and its gradient to `scatter_add(zeros, broadcast_in_dim(i), g, dim)`: every slice
x[..., i[r], ...] is taken (or added to) whole. As reference steps those materialised the
broadcast index (one int64 per element) and ran `np.take_along_axis` / `np.add.at` over it;
`np.add.at` is slow (an indexed read-modify-write per element). Here the step reads the 1-D
index itself and a compiled loop copies or adds whole slices.

The scatter adds the slices in index order, as `np.add.at` does, so the sums are the
eager ones bit for bit. An index out of range (after numpy's wrap of negatives) makes the
kernel return nonzero; the driver then raises numpy's IndexError.

`row_index(node, producers)` recognises the pattern (codegen.routes: the step reads the
1-D index instead of the broadcast), `step_lines` writes the driver's lines for it.

Along one axis (`axis_index`, `axis_step_lines`): a gather or scatter-add whose index has its
operand's shape outside `dim` (`take_along_axis`'s form), and an argmax over `dim`, each
operand viewed as (pre, size along dim, post). As reference steps numpy ran them as
`np.take_along_axis`, `np.add.at` (an indexed read-modify-write per element) and
`np.argmax` over a middle axis: about a millisecond of each step of LeNet's max pools.
The kernels keep numpy's semantics: a negative index wraps, one out of range raises numpy's
IndexError, the scatter adds in index order (the same sums), and argmax takes the first
largest value with a NaN counting as the largest.
"""
import math
from typing import NamedTuple

import numpy as np
from numba import njit

from aotgrad.codegen.emit_base import PartsLayout
from aotgrad.codegen.parts import NO_WORKSPACE, PartsKernel
from aotgrad.codegen.symbols import by_size
from aotgrad.ir import dtypes as dt
from aotgrad.ir import prims

# slices moved per call below which the copy loop runs on the calling thread: a parallel
# region costs more than it saves on an embedding's few hundred thousand elements
PARALLEL_MIN = 1 << 20


class RowIndex(NamedTuple):
    """A gather/scatter_add node whose index is `index` (1-D) broadcast along `dim`:
    the operand arrays viewed as (pre, size along dim, post)."""
    index: object      # the 1-D integer Var
    broadcast: object  # the broadcast index Var the node reads
    dim: int


def row_index(node, producers):
    """The RowIndex of a gather or scatter_add that moves whole slices along its dim, or
    None. producers: var -> the node that makes it."""
    if node.prim is not prims.gather and node.prim is not prims.scatter_add:
        return None
    x, idx = node.inputs[0], node.inputs[1]
    dim = node.params["dim"]
    b = producers.get(idx)
    if b is None or b.prim is not prims.broadcast_in_dim or tuple(b.params["dims"]) != (dim,):
        return None
    i = b.inputs[0]
    if i.ndim != 1 or not dt.is_integer(i.dtype):   # (sizes may be symbolic: the driver's
        return None                                   # views compute them per call)
    if node.prim is prims.scatter_add and not (x.dtype.is_floating_point or dt.is_integral(x.dtype)):
        return None     # bool (np.add.at ors them) and complex stay reference steps
    rest = lambda s: tuple(s[:dim]) + tuple(s[dim + 1:])   # noqa: E731
    if rest(idx.shape) != rest(x.shape):    # a gather of part of each slice: not whole rows
        return None
    return RowIndex(i, idx, dim)


class AxisIndex(NamedTuple):
    """An argmax over `dim`, or a gather/scatter_add along `dim` whose index has its
    operand's shape outside `dim`."""
    dim: int


def axis_index(node):
    """The AxisIndex of an argmax, gather or scatter_add node that an axis kernel runs, or
    None (another pattern, or a bool scatter: np.add.at ors them)."""
    dim = node.params.get("dim")
    x = node.inputs[0]
    if node.prim is prims.argmax:
        return AxisIndex(dim)
    if node.prim is not prims.gather and node.prim is not prims.scatter_add:
        return None
    idx = node.inputs[1]
    if not dt.is_integer(idx.dtype):
        return None
    if node.prim is prims.scatter_add and not (x.dtype.is_floating_point or
                                                dt.is_integral(x.dtype)):
        return None     # bool: np.add.at ors them
    rest = lambda s: tuple(s[:dim]) + tuple(s[dim + 1:])   # noqa: E731
    if rest(idx.shape) != rest(x.shape):
        return None     # a gather of part of each slice (PyTorch's smaller index)
    return AxisIndex(dim)


def axis_step_lines(node, ax, shaped, name_of, bind):
    """The driver's lines running `node` (an AxisIndex `ax`) with its axis kernel."""
    out, dim = node.outputs[0], ax.dim
    x = node.inputs[0]
    v3 = lambda v: shaped(v, _view3(v.shape, dim))   # noqa: E731
    if node.prim is prims.argmax:
        shape = _view3(x.shape, dim)
        return [f"{bind(argmax_axis, '_ka')}({v3(x)}, {shaped(out, (shape[0], shape[2]))})"]
    idx = node.inputs[1]
    if node.prim is prims.gather:
        call = f"{bind(take_axis, '_ka')}({v3(x)}, {v3(idx)}, {v3(out)})"
    else:
        call = f"{bind(add_axis, '_ka')}({v3(x)}, {v3(idx)}, {v3(node.inputs[2])}, {v3(out)})"
    err = bind(_index_error, "_ka")
    return [f"if {call}:",
            f"    {err}({node.prim.name!r}, {name_of(idx)}, {x.shape[dim]}, {dim})"]


def _view3(shape, dim):
    return (math.prod(shape[:dim]), shape[dim], math.prod(shape[dim + 1:]))


def step_lines(node, rows, shaped, name_of, bind):
    """The driver's lines running `node` (a RowIndex `rows`) with take_rows / add_rows.
    shaped(var, shape) -> the source of var viewed with shape; name_of(var) -> its name."""
    out = node.outputs[0]
    dim = rows.dim
    idx = name_of(rows.index)
    if node.prim is prims.gather:
        x = node.inputs[0]
        take = by_size(math.prod(out.shape), PARALLEL_MIN, take_rows, take_rows_threads,
                       bind, "_kr")
        call = (f"{take}({shaped(x, _view3(x.shape, dim))}, {idx}, "
                f"{shaped(out, _view3(out.shape, dim))})")
    else:
        x, _, src = node.inputs
        call = (f"{bind(add_rows, '_kr')}({shaped(x, _view3(x.shape, dim))}, {idx}, "
                f"{shaped(src, _view3(src.shape, dim))}, "
                f"{shaped(out, _view3(out.shape, dim))})")
    n_in = x.shape[dim]
    err = bind(_index_error, "_kr")
    return [f"if {call}:",
            f"    {err}({node.prim.name!r}, {idx}, {n_in}, {dim})"]


def _index_error(op, idx, n, dim):
    """numpy's IndexError for the first index out of range of a size-n dim."""
    i = np.asarray(idx)
    bad = i[(i < -n) | (i >= n)]
    v = int(bad[0]) if bad.size else int(i[0])
    raise IndexError(f"{op}(): index {v} is out of bounds for axis {dim} with size {n}")


@njit(cache=True, nogil=True, error_model="numpy")
def _fits(idx, n):
    for r in range(idx.size):
        j = idx[r]
        if j < -n or j >= n:
            return False
    return True


@njit(cache=True, nogil=True, error_model="numpy")
def take_rows_parts(phase, part, nparts, ws, x, idx, out):
    """take_rows' rows of share `part` of `nparts` (a kernel in parts, codegen.parts); 1
    when an index is out of range (each part checks them all, and writes nothing then)."""
    n = x.shape[1]
    if not _fits(idx, n):
        return 1
    k = idx.size
    total = x.shape[0] * k
    for it in range(total * part // nparts, total * (part + 1) // nparts):
        p, r = it // k, it % k
        j = idx[r]
        if j < 0:
            j += n
        src, dst = x[p, j], out[p, r]
        for c in range(dst.size):
            dst[c] = src[c]
    return 0


take_rows_threads = PartsKernel(take_rows_parts, PartsLayout(loops=1, shared=False, final=False))


@njit(cache=True, nogil=True, error_model="numpy")
def take_rows(x, idx, out):
    """out[p, r, :] = x[p, idx[r], :] (x: (pre, n, post), out: (pre, k, post)); 1 when an
    index is out of range (nothing written), else 0. On the calling thread (take_rows_parts
    in one part)."""
    return take_rows_parts(1, 0, 1, NO_WORKSPACE, x, idx, out)


@njit(cache=True, nogil=True, error_model="numpy")
def add_rows(x, idx, src, out):
    """out = x; out[p, idx[r], :] += src[p, r, :] for r in order (np.add.at's order, so
    the same sums); 1 when an index is out of range (nothing written), else 0."""
    n = x.shape[1]
    if not _fits(idx, n):
        return 1
    for p in range(x.shape[0]):
        xp, op_, sp = x[p], out[p], src[p]
        for j in range(n):
            a, b = xp[j], op_[j]
            for c in range(b.size):
                b[c] = a[c]
        for r in range(idx.size):
            j = idx[r]
            if j < 0:
                j += n
            s, dst = sp[r], op_[j]
            for c in range(dst.size):
                dst[c] += s[c]
    return 0


@njit(cache=True, nogil=True, error_model="numpy")
def argmax_axis(x, out):
    """out[p, q] = the first j with x[p, j, q] largest (x: (pre, n, post)); a NaN counts
    as the largest, as in np.argmax. Returns 0."""
    n = x.shape[1]
    for p in range(x.shape[0]):
        xp, op_ = x[p], out[p]
        for q in range(x.shape[2]):
            best = xp[0, q]
            at = 0
            if best == best:
                for j in range(1, n):
                    v = xp[j, q]
                    if v != v:
                        at = j
                        break
                    if v > best:
                        best = v
                        at = j
            op_[q] = at
    return 0


@njit(cache=True, nogil=True, error_model="numpy")
def take_axis(x, idx, out):
    """out[p, r, q] = x[p, idx[p, r, q], q] (x: (pre, n, post); idx, out: (pre, k, post));
    1 when an index is out of range (nothing written), else 0."""
    n = x.shape[1]
    if not _fits(idx.ravel(), n):
        return 1
    for p in range(x.shape[0]):
        xp, ip, op_ = x[p], idx[p], out[p]
        for r in range(ip.shape[0]):
            for q in range(ip.shape[1]):
                j = ip[r, q]
                if j < 0:
                    j += n
                op_[r, q] = xp[j, q]
    return 0


@njit(cache=True, nogil=True, error_model="numpy")
def add_axis(x, idx, src, out):
    """out = x; out[p, idx[p, r, q], q] += src[p, r, q] in index order (np.add.at's order,
    so the same sums); 1 when an index is out of range (nothing written), else 0."""
    n = x.shape[1]
    if not _fits(idx.ravel(), n):
        return 1
    out[...] = x
    for p in range(x.shape[0]):
        ip, sp, op_ = idx[p], src[p], out[p]
        for r in range(ip.shape[0]):
            for q in range(ip.shape[1]):
                j = ip[r, q]
                if j < 0:
                    j += n
                op_[j, q] += sp[r, q]
    return 0
