"""`index_reduce`: reduce the slices of `source` into `x` at the positions a 1-D `index`
gives along `dim`, as `torch.index_reduce` (reduce = "prod", "mean", "amax", "amin").

Slice i of source (along dim) goes to slice index[i] of x: that is scatter_reduce with the
index broadcast over source's other dims, so the values, the gradients (ties share them, a
left-out x still counts among the ties) and the traced form are scatter_reduce's.

>>> aotgrad.ones(3).index_reduce(0, aotgrad.tensor([0, 2, 0]), aotgrad.tensor([4., 5., 6.]),
...                              "amax")
tensor([6., 1., 5.])
"""
from aotgrad.ir import dtypes as dt
from aotgrad.runtime.sizes import size_list
from aotgrad.runtime import shape_ops
from aotgrad.runtime.op_base import op
from aotgrad.runtime.scatter_reduce_ops import scatter_reduce
from aotgrad.runtime.tensor import Tensor
from aotgrad.runtime.value_checks import checked
from aotgrad.runtime.view_ops import _dim

REDUCTIONS = ("prod", "mean", "amax", "amin")


@op("index_reduce", "IndexReduceBackward0")
def index_reduce(x, dim, index, source, reduce, *, include_self=True):
    if reduce not in REDUCTIONS:
        raise RuntimeError(f"index_reduce(): Expected reduce to be one of prod, mean, amax or "
                           f"amin but got {reduce}.")
    if not isinstance(index, Tensor) or index.dtype not in (dt.int64, dt.int32):
        got = getattr(getattr(index, "dtype", None), "name", type(index).__name__)
        raise RuntimeError(f"index_reduce(): Expected dtype int32/int64 for index but got: "
                           f"{got}")
    if index.ndim > 1:
        raise IndexError(f"index_reduce(): Index is supposed to be a vector, but got dim: "
                         f"{index.ndim} with size: {size_list(index.shape)}")
    if not isinstance(source, Tensor) or source.dtype is not x.dtype:
        got = getattr(getattr(source, "dtype", None), "name", type(source).__name__)
        raise RuntimeError(f"index_reduce(): self ({x.dtype.name}) and source ({got}) must "
                           f"have the same scalar type")
    d = _dim(dim, x.ndim)
    # a 0-d self and source count as one element along dim
    x_shape, s_shape = tuple(x.shape) or (1,), tuple(source.shape) or (1,)
    if x.ndim != source.ndim or any(k != d and s_shape[k] != x_shape[k]
                                           for k in range(len(x_shape))):
        raise RuntimeError(f"source tensor shape must match self tensor shape, excluding the "
                           f"specified dimension. Got self.shape = {size_list(x.shape)} "
                           f"source.shape = {size_list(source.shape)}")
    n_index, n_source = index.numel(), s_shape[d]
    if n_index != n_source:
        raise RuntimeError(f"index_reduce(): Number of indices ({n_index}) should be equal to "
                           f"source.size(dim): ({n_source}), for dim: {d}")
    size = x.shape[d] if x.ndim else 1
    # checked eagerly and, in a compiled program, at run time
    index = checked(index, IndexError, "index out of range in self", low=0, high=size)
    if x.ndim == 0:
        return shape_ops.reshape(index_reduce(shape_ops.reshape(x, (1,)), 0,
                                              shape_ops.reshape(index, (-1,)),
                                              shape_ops.reshape(source, (-1,)), reduce,
                                              include_self=include_self), ())
    index = index.to(dt.int64) if index.dtype is not dt.int64 else index
    along = shape_ops.reshape(index, (1,) * d + (n_index,) + (1,) * (x.ndim - d - 1))
    return scatter_reduce(x, d, shape_ops.expand(along, tuple(source.shape)), source, reduce,
                          include_self=include_self)
