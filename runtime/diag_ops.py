"""Triangles and diagonals: tril/triu, diagonal, diag_embed, diag.

Known difference from PyTorch: `diagonal` and `diag` return copies, not views (writing into
them leaves the input unchanged).

>>> import aotgrad
>>> from aotgrad.runtime import diag_ops
>>> diag_ops.diagonal(aotgrad.arange(4.).reshape(2, 2)).tolist()
[0.0, 3.0]
"""
import builtins

import numpy as np

from aotgrad.ir import dtypes as dt
from aotgrad.runtime import tprims as tp
from aotgrad.runtime.elementwise_ops import where
from aotgrad.runtime.index_ops import _const_index, index_add, index_select
from aotgrad.runtime.op_base import _named, op
from aotgrad.runtime.view_meta import mark_copy_of_view, unmark_copy_of_view
from aotgrad.runtime.view_ops import _dim, movedim, reshape


def _tri_mask(x, diagonal, upper):
    if x.ndim < 2:
        raise RuntimeError(f"{'triu' if upper else 'tril'}: input tensor must have at least 2 "
                           f"dimensions")
    r, c = x.shape[-2], x.shape[-1]
    rows = tp.iota(shape=(r, c), dim=0, dtype=dt.int64)
    cols = tp.iota(shape=(r, c), dim=1, dtype=dt.int64)
    diff = tp.sub(cols, rows)
    k = tp.broadcast_to(tp.constant(diagonal, dt.int64), (r, c))
    m = tp.ge(diff, k) if upper else tp.le(diff, k)
    return tp.broadcast_to(m, tuple(x.shape))


@op("tril", "TrilBackward0")
def tril(x, diagonal=0):
    return where(_tri_mask(x, diagonal, False), x, tp.zeros(tuple(x.shape), x.dtype))


@op("triu", "TriuBackward0")
def triu(x, diagonal=0):
    return where(_tri_mask(x, diagonal, True), x, tp.zeros(tuple(x.shape), x.dtype))


@op("diagonal", "DiagonalBackward0")
def diagonal(x, offset=0, dim1=0, dim2=1):
    """The diagonal of the (dim1, dim2) planes, as a new last dim (a copy, not a view)."""
    d1, d2 = _dim(dim1, x.ndim), _dim(dim2, x.ndim)
    if d1 == d2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    y = movedim(x, (d1, d2), (-2, -1))
    r, c = y.shape[-2], y.shape[-1]
    k = builtins.max(0, builtins.min(r, c - offset) if offset >= 0 else
                     builtins.min(r + offset, c))
    rows = np.arange(k) + builtins.max(0, -offset)
    pos = rows * c + rows + offset
    flat = reshape(y, tuple(y.shape[:-2]) + (r * c,))
    return mark_copy_of_view(index_select(flat, flat.ndim - 1, _const_index(pos)), "diagonal")


@op("diag_embed", "DiagEmbedBackward0")
def diag_embed(x, offset=0, dim1=-2, dim2=-1):
    """Matrices with x's last dim on their `offset` diagonal: `diag_embed(v)[i, i] = v[i]`."""
    n = x.shape[-1] + builtins.abs(offset)
    k = x.shape[-1]
    rows = np.arange(k) + builtins.max(0, -offset)
    pos = rows * n + rows + offset
    lead = tuple(x.shape[:-1])
    out = index_add(tp.zeros(lead + (n * n,), x.dtype), x.ndim - 1, _const_index(pos), x)
    out = reshape(out, lead + (n, n))
    d1, d2 = _dim(dim1, out.ndim), _dim(dim2, out.ndim)
    if (d1, d2) != (out.ndim - 2, out.ndim - 1):
        out = movedim(out, (-2, -1), (d1, d2))
    return out


def diag(x, diagonal=0):
    """A 1-D x becomes a square matrix with x on the `diagonal`; a 2-D x gives its diagonal."""
    if x.ndim == 1:
        return _named(diag_embed(x, diagonal), "DiagEmbedBackward0")
    if x.ndim == 2:
        return unmark_copy_of_view(globals()["diagonal"](x, diagonal))  # a copy in PyTorch too
    raise RuntimeError(f"diag(): Supports 1D or 2D tensors. Got {x.ndim}D")
