"""`scatter_reduce`: reduce the entries of `src` into `x` at `index` along a dim, as
`torch.scatter_reduce` (reduce = "sum", "prod", "mean", "amax", "amin").

Every output position j along `dim` reduces the src entries whose index is j (and x's own
value with include_self=True). This is written densely: a candidate axis of length
x.shape[dim] holds each src entry where its index matches and the reduction's identity
elsewhere, and the reduction runs over the src axis. So the gradient is that of the
reductions it uses (sum, prod, amax/amin: ties share the gradient evenly, as in PyTorch),
with no rule of its own, and the same code traces. Memory is index.numel() * x.shape[dim].

>>> aotgrad.zeros(2).scatter_reduce(0, aotgrad.tensor([0, 1, 0]), aotgrad.tensor([1., 2., 3.]),
...                                 reduce="amax", include_self=False)
tensor([3., 2.])
"""
import math

from aotgrad.ir import dtypes as dt
from aotgrad.runtime.sizes import size_list
from aotgrad.runtime import tprims as tp
from aotgrad.runtime.op_base import cast, op
from aotgrad.runtime.tensor import Tensor
from aotgrad.runtime import ops, shape_ops
from aotgrad.runtime.factories import arange
from aotgrad.runtime.value_checks import checked
from aotgrad.runtime.view_ops import _dim

REDUCTIONS = ("sum", "prod", "mean", "amax", "amin")
_ALIASES = {"max": "amax", "min": "amin"}  # accepted by PyTorch too


def _identity(reduce, dtype):
    """The value a candidate slot holds where no src entry lands."""
    if reduce in ("sum", "mean"):
        return 0
    if reduce == "prod":
        return 1
    if dtype.is_floating_point:
        return -math.inf if reduce == "amax" else math.inf
    import numpy as np
    info = np.iinfo(dtype.np)
    return info.min if reduce == "amax" else info.max


@op("scatter_reduce", "ScatterReduceBackward0")
def scatter_reduce(x, dim, index, src, reduce, *, include_self=True):
    reduce = _ALIASES.get(reduce, reduce)
    if reduce not in REDUCTIONS:
        raise RuntimeError(f"reduce argument must be either sum, prod, mean, amax or amin, got "
                           f"{reduce}")
    if not isinstance(index, Tensor) or index.dtype is not dt.int64:
        raise RuntimeError("scatter_reduce(): Expected dtype int64 for index")
    if not isinstance(src, Tensor) or src.dtype is not x.dtype:
        raise RuntimeError(f"scatter_reduce(): Expected self.dtype to be equal to src.dtype "
                           f"(got {x.dtype.name} and "
                           f"{getattr(getattr(src, 'dtype', None), 'name', type(src).__name__)})")
    d = _dim(dim, x.ndim)
    if index.ndim != x.ndim or src.ndim != x.ndim:
        raise RuntimeError(f"scatter_reduce(): Index tensor must have the same number of "
                           f"dimensions as self and src tensors (got {index.ndim}, {x.ndim}, "
                           f"{src.ndim})")
    for k in range(x.ndim):
        if index.shape[k] > src.shape[k] or (k != d and index.shape[k] != x.shape[k]):
            raise RuntimeError(
                f"scatter_reduce(): index of shape {size_list(index.shape)} must match self "
                f"{size_list(x.shape)} outside dim {d} and be no larger than src "
                f"{size_list(src.shape)} (a smaller index outside dim is not supported)")
    for k in range(src.ndim):  # only the part of src that index covers is used
        if index.shape[k] < src.shape[k]:
            src = shape_ops.narrow(src, k, 0, index.shape[k])
    if x.ndim == 0:
        return shape_ops.reshape(scatter_reduce(
            shape_ops.reshape(x, (1,)), 0, shape_ops.reshape(index, (1,)),
            shape_ops.reshape(src, (1,)), reduce, include_self=include_self), ())
    n = x.shape[d]
    # checked on the values eagerly and, in a compiled program, at run time (an index known
    # while tracing, a constant made in the function, is checked then: no graph break)
    index = checked(index, RuntimeError, f"scatter_reduce(): index {{value}} is out of bounds "
                    f"for dimension {d} with size {{high}}", low=-n, high=n)
    index = ops.where(ops.lt(index, 0), ops.add(index, n), index)
    # candidate axis d + 1: position j along it holds src where index == j
    cand_shape = tuple(index.shape[:d + 1]) + (n,) + tuple(index.shape[d + 1:])
    positions = shape_ops.reshape(_arange(n), (1,) * (d + 1) + (n,) + (1,) * (x.ndim - d - 1))
    mask = ops.eq(shape_ops.unsqueeze(index, d + 1), positions)
    mask = shape_ops.expand(mask, cand_shape)
    cand = shape_ops.expand(shape_ops.unsqueeze(src, d + 1), cand_shape)
    filled = ops.where(mask, cand, tp.constant(_identity(reduce, x.dtype), x.dtype, ()))
    hits = ops.sum(cast(mask, dt.int64), d)          # src entries landing on each position
    hit = ops.gt(hits, 0)
    if reduce in ("amax", "amin"):
        extreme = ops.amax if reduce == "amax" else ops.amin
        if include_self:  # x joins the candidates: ties with it share the gradient too
            return extreme(shape_ops.cat([shape_ops.unsqueeze(x, d), filled], d), d)
        # PyTorch counts x among the ties even when it is left out, and drops its share: a
        # detached copy of x joins the candidates where it equals the result
        red = extreme(filled, d).detach()
        tie = ops.where(ops.eq(x, red), x.detach(), tp.constant(_identity(reduce, x.dtype),
                                                                 x.dtype, ()))
        red = extreme(shape_ops.cat([shape_ops.unsqueeze(tie, d), filled], d), d)
        return ops.where(hit, red, x)
    if reduce == "prod":
        red = ops.prod(filled, d)
        return ops.mul(x, red) if include_self else ops.where(hit, red, x)
    red = ops.sum(filled, d)
    if reduce == "sum":
        return ops.add(x, red) if include_self else ops.where(hit, red, x)
    count = cast(ops.add(hits, 1) if include_self else ops.where(hit, hits, 1), x.dtype)
    total = ops.add(x, red) if include_self else ops.where(hit, red, x)
    if x.dtype.is_floating_point:
        return ops.div(total, count)
    return ops.floor_divide(total, count)


def _arange(n):
    return arange(n)
