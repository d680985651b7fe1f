"""Sorting: argsort, sort and topk (stable; NaN sorts as the largest value).

>>> import aotgrad
>>> from aotgrad.runtime import sort_ops
>>> sort_ops.argsort(aotgrad.tensor([3., 1., 2.])).tolist()
[1, 2, 0]
"""
from aotgrad.ir import dtypes as dt
from aotgrad.runtime.sizes import hint
from aotgrad.runtime import tprims as tp
from aotgrad.runtime.index_ops import take_along_dim
from aotgrad.runtime.join_ops import narrow
from aotgrad.runtime.op_base import op
from aotgrad.runtime.view_ops import _alias, _dim
from aotgrad.runtime.ops import return_types


@op("argsort")
def argsort(x, dim=-1, descending=False, stable=False):
    """Indices that sort x along dim; always stable: equal elements keep their order, also
    when descending (NaN sorts as the largest value, as in PyTorch)."""
    d = _dim(dim, x.ndim)
    if x.ndim == 0:
        return tp.constant(0, dt.int64)
    if not descending:
        return tp.argsort(x, dim=d)
    # ascending stable sort of the reversed input, read backwards: ties keep their order
    n = x.shape[d]
    idx = tp.rev(tp.argsort(tp.rev(x, dims=(d,)), dim=d), dims=(d,))
    return tp.sub(tp.broadcast_to(tp.constant(n - 1, dt.int64), tuple(idx.shape)), idx)


@op("sort", "SortBackward0")
def sort(x, dim=-1, descending=False, stable=False):
    idx = argsort(x, dim, descending)
    if x.ndim == 0:
        return return_types["sort"](_alias(x), idx)
    return return_types["sort"](take_along_dim(x, idx, _dim(dim, x.ndim)), idx)


@op("topk", "TopkBackward0")
def topk(x, k, dim=-1, largest=True, sorted=True):
    """The k largest (smallest) elements along dim, in order; among equal elements the
    first ones are taken (PyTorch leaves that order unspecified)."""
    d = _dim(dim, x.ndim)
    if x.ndim == 0:
        if k not in (0, 1):
            raise RuntimeError(f"selected index k out of range (k={k}, size 1)")
        return return_types["topk"](_alias(x), argsort(x))
    if not 0 <= k <= x.shape[d]:
        raise RuntimeError(f"selected index k out of range (k={k}, size {hint(x.shape[d])})")
    idx = narrow(argsort(x, d, descending=largest), d, 0, k)
    return return_types["topk"](take_along_dim(x, idx, d), idx)
