"""Shape, joining, indexing, sorting and in-place ops, decomposed into prims.

In eager mode, ops that numpy computes as views (reshape, transpose, slicing, expand)
share storage and the version counter with their input, as PyTorch views do.

In-place ops are computed out of place and written back (`commit_inplace`), which bumps the
version counter. Known difference from PyTorch: an in-place op on a *view* of a tensor that
requires grad (`y[1:].mul_(2)` with `y` requiring grad) raises instead of rebasing the view's
history onto the base; use the out-of-place op, or write into the base with `y[1:] = ...`.
Other known differences: `diagonal`, `diag`, `unfold` and `take` return copies, not views
(writing into them leaves the input unchanged); writing into an expanded tensor raises;
`view(dtype)` and integer bitwise operators are not supported; `scatter` with repeated target
positions keeps the last write (PyTorch leaves it unspecified).

This module gathers the shape op families under one name (`shape_ops.cat`); each family
lives in its own module: `view_ops` (views, reshapes, transposes), `join_ops` (cat/stack,
narrow/select, split/chunk), `index_ops` (indexing, gather/scatter), `diag_ops` (tril/triu,
diagonals), `sort_ops` (argsort/sort/topk), `inplace_ops` (in-place guards, `x[i] = v`).

>>> import aotgrad
>>> from aotgrad.runtime import shape_ops
>>> tuple(shape_ops.cat([aotgrad.ones(2), aotgrad.ones(3)]).shape)
(5,)
"""
import builtins
import math

import numpy as np

from aotgrad.ir import dtypes as dt
from aotgrad.ir.core import current_builder
from aotgrad.runtime import tprims as tp
from aotgrad.runtime import view_ops as _view_ops
from aotgrad.runtime.diag_ops import diag, diag_embed, diagonal, tril, triu
from aotgrad.runtime.elementwise_ops import add, eq, ge, logical_and, lt, mul, where
from aotgrad.runtime.index_ops import (argwhere, gather, getitem, index_add, index_copy,
                                       index_fill, index_select, masked_fill, masked_select,
                                       nonzero, one_hot, repeat_interleave, scatter, scatter_add,
                                       take, take_along_dim, unfold)
from aotgrad.runtime.inplace_ops import commit_inplace, index_put_, setitem, snapshot
from aotgrad.runtime.join_ops import (cat, chunk, concat, concatenate, hstack, narrow, roll,
                                      select, split, stack, tensor_split, unbind, vstack)
from aotgrad.runtime.op_base import as_tensor_like, broadcast_shapes, cast, norm_dims, op
from aotgrad.runtime.sort_ops import argsort, sort, topk
from aotgrad.runtime.tensor import Tensor
from aotgrad.runtime.view_ops import (broadcast_tensors, broadcast_to, clone, contiguous, expand,
                                      expand_as, flatten, flip, infer_shape, is_contiguous,
                                      movedim, permute, repeat, reshape, reshape_as, rot90,
                                      squeeze, swapaxes, swapdims, t, tile, transpose, unflatten,
                                      unsqueeze, view, view_as)

_dim = _view_ops._dim  # used as shape_ops._dim by Tensor methods

# the public names of this module, unchanged since it was split into families (the module
# imports and the elementwise ops listed first stay reachable as attributes, as they were)
__all__ = [
    "builtins", "math", "np", "dt", "current_builder", "tp", "Tensor",
    "as_tensor_like", "broadcast_shapes", "cast", "norm_dims", "op",
    "add", "eq", "ge", "logical_and", "lt", "mul", "where",
    # view_ops
    "broadcast_tensors", "broadcast_to", "clone", "contiguous", "expand", "expand_as", "flatten",
    "flip", "infer_shape", "is_contiguous", "movedim", "permute", "repeat", "reshape",
    "reshape_as", "rot90", "squeeze", "swapaxes", "swapdims", "t", "tile", "transpose",
    "unflatten", "unsqueeze", "view", "view_as",
    # join_ops
    "cat", "chunk", "concat", "concatenate", "hstack", "narrow", "roll", "select", "split",
    "stack", "tensor_split", "unbind", "vstack",
    # index_ops
    "argwhere", "gather", "getitem", "index_add", "index_copy", "index_fill", "index_select",
    "masked_fill", "masked_select", "nonzero", "one_hot", "repeat_interleave", "scatter",
    "scatter_add", "take", "take_along_dim", "unfold",
    # diag_ops
    "diag", "diag_embed", "diagonal", "tril", "triu",
    # sort_ops
    "argsort", "sort", "topk",
    # inplace_ops
    "commit_inplace", "index_put_", "setitem", "snapshot",
]
