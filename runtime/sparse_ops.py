"""Sparse COO tensors with dense storage behind PyTorch's sparse API.

`sparse_coo_tensor(indices, values, size)` returns a tensor whose data is the dense array
(duplicate indices summed) and which remembers its COO indices: `is_sparse`, `layout`,
`indices()`, `values()`, `coalesce()`, `to_dense()`, `_nnz()`, and `sparse.mm` /
`spmm` / `sparse.sum` work as in PyTorch, with the same results and gradients (with
respect to the values and to the dense operand; the gradient that reaches a sparse tensor is
zero outside its pattern, as PyTorch's). Memory and time are those of the dense tensor:
this serves graph models of moderate size, not huge sparse matrices. Other ops applied to a
sparse tensor return ordinary (strided) tensors, and the `.grad` of a sparse leaf is a
strided tensor (zero outside the pattern) where PyTorch's is sparse.

Building the dense data is a scatter (`index_add`) of the values and reading the values a
gather (`index_select`), so derivatives come from those ops' rules. Finding the pattern of
a dense tensor (`to_sparse`) or merging duplicates (`coalesce`) reads index values: eager
only (inside a compiled function it is a graph break).

>>> import aotgrad
>>> s = aotgrad.sparse_coo_tensor([[0, 1], [1, 0]], [2., 3.], (2, 2))
>>> s.is_sparse, s.to_dense().tolist(), s._nnz()
(True, [[0.0, 2.0], [3.0, 0.0]], 2)
"""
import math

import numpy as np

from aotgrad.ir import dtypes as dt
from aotgrad.runtime.sizes import hint, size_list
from aotgrad.runtime import device as _device
from aotgrad.runtime import memory_format as _layout
from aotgrad.runtime import ops
from aotgrad.runtime import tprims as tp
from aotgrad.runtime.factories import ones, tensor, zeros
from aotgrad.runtime.grad_mode import no_grad
from aotgrad.runtime.index_ops import index_add, index_select
from aotgrad.runtime.linalg_ops import matmul
from aotgrad.runtime.op_base import cast, norm_dims, op
from aotgrad.runtime.printing import tensor_repr
from aotgrad.runtime.tensor import Size, Tensor
from aotgrad.runtime.view_ops import clone, reshape


class SparseInfo:
    """What a sparse tensor keeps besides its dense data: indices (sparse_dim, nnz) int64,
    the number of sparse dims, whether the indices are sorted and unique, and the values as
    given (`_values()` of an uncoalesced tensor)."""
    __slots__ = ("indices", "sparse_dim", "coalesced", "raw_values")

    def __init__(self, indices, sparse_dim, coalesced, raw_values):
        self.indices, self.sparse_dim, self.coalesced = indices, sparse_dim, coalesced
        self.raw_values = raw_values


def _info(t, what):
    info = t.__dict__.get("_sparse")
    if info is None:
        raise RuntimeError(f"{what}: expected a sparse tensor (layout aotgrad.sparse_coo), got "
                           f"a strided one; call .to_sparse() first")
    return info


def _as_index_tensor(indices):
    idx = indices if isinstance(indices, Tensor) else tensor(indices, dtype=dt.int64)
    if idx.dtype is not dt.int64:
        if not dt.is_integer(idx.dtype):
            raise RuntimeError(f"sparse_coo_tensor: indices must be an int64 tensor, got "
                               f"{idx.dtype.name}")
        idx = cast(idx, dt.int64)
    if idx.ndim != 2:
        raise RuntimeError(f"sparse_coo_tensor: indices must be sparse_dim x nnz, but got "
                           f"indices of shape {size_list(idx.shape)}")
    return idx


def _linear_index(idx, sizes):
    """Row-major position of each column of `idx` (sparse_dim, nnz) in the sparse dims."""
    lin = None
    for d, n in enumerate(sizes):
        row = reshape(index_select(idx, 0, _scalar_index(d)), (-1,))
        lin = row if lin is None else ops.add(ops.mul(lin, n), row)
    if lin is None:  # no sparse dims: every value lands at the one position
        lin = zeros(idx.shape[1], dtype=dt.int64)
    return lin


def _scalar_index(d):
    return tensor([d], dtype=dt.int64)


def _from_coo(idx, values, size, coalesced):
    """The sparse tensor of `values` at `idx` in a dense tensor of `size` (duplicates add)."""
    sd = idx.shape[0]
    sparse_sizes, dense_sizes = tuple(size[:sd]), tuple(size[sd:])
    flat_shape = (math.prod(sparse_sizes),) + dense_sizes
    flat = index_add(zeros(flat_shape, dtype=values.dtype), 0, _linear_index(idx, sparse_sizes),
                     values)
    out = reshape(flat, tuple(size))
    if out is flat:  # the result carries its own sparse record
        out = clone(flat)
    out.__dict__["_sparse"] = SparseInfo(idx, sd, coalesced, values)
    return out


def _check_concrete_indices(idx, size, values):
    v = idx._value
    if not isinstance(v, np.ndarray) or v.size == 0:
        return
    sd = v.shape[0]
    if (v < 0).any():
        raise RuntimeError("sparse_coo_tensor: found negative index")
    for d in range(sd):
        hi = int(v[d].max())
        if hi >= size[d]:
            raise RuntimeError(f"sparse_coo_tensor: size is inconsistent with indices: for "
                               f"dim {d}, size is {size[d]} but found index {hi}")


@op("sparse_coo_tensor")
def sparse_coo_tensor(indices, values, size=None, *, dtype=None, device=None,
                      requires_grad=False, check_invariants=None, is_coalesced=None):
    """A sparse COO tensor: `values[k]` at position `indices[:, k]` (PyTorch's signature).
    Without `size`, each sparse dim is one more than its largest index."""
    _device.check(device, "sparse_coo_tensor")
    idx = _as_index_tensor(indices)
    vals = values if isinstance(values, Tensor) else tensor(values)
    if dtype is not None:
        vals = cast(vals, dt.as_dtype(dtype))
    if vals.ndim < 1 or vals.shape[0] != idx.shape[1]:
        raise RuntimeError(f"sparse_coo_tensor: indices and values must have the same number "
                           f"of elements (nnz), but got {hint(idx.shape[1])} and "
                           f"{vals.shape[0] if vals.ndim else 'a 0-d values tensor'}")
    sd = idx.shape[0]
    if size is None:
        v = idx._concrete("sparse_coo_tensor without size (the size depends on index values)")
        size = tuple(int(v[d].max()) + 1 if v.shape[1] else 0 for d in range(sd)) + \
            tuple(vals.shape[1:])
    size = tuple(int(s) for s in size)
    if len(size) != sd + vals.ndim - 1:
        raise RuntimeError(f"sparse_coo_tensor: number of dimensions must be sparse_dim "
                           f"({sd}) + dense_dim ({vals.ndim - 1}), but got {len(size)}")
    if tuple(vals.shape[1:]) != size[sd:]:
        raise RuntimeError(f"sparse_coo_tensor: values has dense sizes "
                           f"{size_list(vals.shape[1:])}, "
                           f"expected {list(size[sd:])}")
    _check_concrete_indices(idx, size, vals)
    if requires_grad:
        vals = vals.detach()
    out = _from_coo(idx, vals, size, bool(is_coalesced))
    if requires_grad:
        out = _leaf_like(out)
        out.requires_grad_(True)
    return out


def _leaf_like(t):
    """A leaf holding t's data and sparse record (for `requires_grad=True`)."""
    leaf = t.detach()
    leaf.__dict__["_sparse"] = t.__dict__["_sparse"]
    return leaf


def is_sparse(self):
    return "_sparse" in self.__dict__


def layout_of(self):
    return _layout.sparse_coo if "_sparse" in self.__dict__ else _layout.strided


def _masked(self):
    """`self` times its pattern (1 where an index points, 0 elsewhere): the same data, but
    the gradient that reaches `self` through it is zero outside the pattern (PyTorch's
    sparse gradients)."""
    info = _info(self, "sparse")
    mask = cast(_pattern(info, tuple(self.shape), self.dtype), self.dtype)
    out = ops.mul(to_dense(self), mask)
    out.__dict__["_sparse"] = info
    return out


def indices(self):
    info = _info(self, "indices")
    if not info.coalesced:
        raise RuntimeError("Cannot get indices on an uncoalesced tensor, please call "
                           ".coalesce() first")
    return info.indices


def _indices(self):
    return _info(self, "_indices").indices


@op("values")
def values(self, _check=True):
    """The values at the (coalesced) indices, read from the data: its gradient flows back to
    whatever the sparse tensor was built from."""
    info = _info(self, "values")
    if _check and not info.coalesced:
        raise RuntimeError("Cannot get values on an uncoalesced tensor, please call "
                           ".coalesce() first")
    shape = tuple(self.shape)
    sd = info.sparse_dim
    flat = reshape(self, (math.prod(shape[:sd]),) + shape[sd:])
    return index_select(flat, 0, _linear_index(info.indices, shape[:sd]))


def _values(self):
    """The values as given (duplicates not summed) when uncoalesced, like PyTorch's."""
    info = _info(self, "_values")
    return values(self, _check=False) if info.coalesced else info.raw_values


def _nnz(self):
    return _info(self, "_nnz").indices.shape[1]


def sparse_dim(self):
    return _info(self, "sparse_dim").sparse_dim if "_sparse" in self.__dict__ else 0


def dense_dim(self):
    return self.ndim - _info(self, "dense_dim").sparse_dim if "_sparse" in self.__dict__ \
        else self.ndim


def is_coalesced(self):
    return _info(self, "is_coalesced").coalesced


@op("coalesce")
def coalesce(self):
    """Indices sorted and unique, duplicates' values summed (the data is unchanged)."""
    info = _info(self, "coalesce")
    if info.coalesced:
        return self
    shape = tuple(self.shape)
    sd = info.sparse_dim
    idx = info.indices._concrete("coalesce (reads index values)")
    lin = np.ravel_multi_index(tuple(idx), shape[:sd]) if sd else np.zeros(idx.shape[1], int)
    uniq = np.unique(lin)
    new_idx = np.stack(np.unravel_index(uniq, shape[:sd])) if sd else \
        np.zeros((0, uniq.size), np.int64)
    new_idx = tensor(new_idx.astype(np.int64).reshape(sd, uniq.size))
    flat = reshape(self, (math.prod(shape[:sd]),) + shape[sd:])
    vals = index_select(flat, 0, tensor(uniq.astype(np.int64)))
    return _from_coo(new_idx, vals, shape, True)


@op("to_sparse")
def to_sparse(self, sparse_dim=None, *, layout=None):
    """The sparse tensor of this tensor's non-zero entries (over the first `sparse_dim` dims;
    a slice counts as non-zero when any of its elements is)."""
    if layout not in (None, _layout.sparse_coo):
        raise NotImplementedError(f"to_sparse: only layout aotgrad.sparse_coo is supported, "
                                  f"got {layout!r}")
    if "_sparse" in self.__dict__:
        if sparse_dim not in (None, self.__dict__["_sparse"].sparse_dim):
            raise RuntimeError("to_sparse: changing the sparse dim of a sparse tensor is not "
                               "supported")
        return self
    sd = self.ndim if sparse_dim is None else int(sparse_dim)
    if not 0 <= sd <= self.ndim:
        raise RuntimeError(f"to_sparse: sparse_dim {sd} out of range for a {self.ndim}-d "
                           f"tensor")
    v = self._concrete("to_sparse (the pattern depends on tensor values)")
    shape = tuple(self.shape)
    nz = np.reshape(v, (math.prod(shape[:sd]), -1)) != 0
    lin = np.flatnonzero(nz.any(axis=1)) if nz.size else np.zeros(0, np.int64)
    idx = np.stack(np.unravel_index(lin, shape[:sd])) if sd else np.zeros((0, lin.size))
    idx = tensor(idx.astype(np.int64).reshape(sd, lin.size))
    flat = reshape(self, (math.prod(shape[:sd]),) + shape[sd:])
    vals = index_select(flat, 0, tensor(lin.astype(np.int64)))
    return _from_coo(idx, vals, shape, True)


def to_dense(self, dtype=None, *, masked_grad=None):
    """A strided tensor with the same data (the tensor itself when it is strided)."""
    out = self
    if "_sparse" in self.__dict__:
        out = clone(self)
        out.__dict__.pop("_sparse", None)
    return out if dtype is None else cast(out, dt.as_dtype(dtype))


@op("sparse.mm")
def mm(sparse, dense):
    """`sparse @ dense` for a 2-d sparse matrix (PyTorch's `torch.sparse.mm`): a strided result;
    the sparse operand's gradient is zero outside its pattern."""
    _info(sparse, "sparse.mm")
    if sparse.ndim != 2 or dense.ndim != 2:
        raise RuntimeError(f"sparse.mm: expects two 2-d matrices, got {sparse.ndim}-d and "
                           f"{dense.ndim}-d")
    d = to_dense(_masked(dense)) if "_sparse" in dense.__dict__ else dense
    out = matmul(to_dense(_masked(sparse)), d)
    return out.to_sparse() if "_sparse" in dense.__dict__ else out


def spmm(sparse, dense):
    """`torch.spmm`: the same as `sparse.mm`."""
    return mm(sparse, dense)


@op("sparse.sum")
def sparse_sum(input, dim=None, dtype=None):  # noqa: A002
    """Sum of a sparse tensor: a 0-d strided tensor over all dims, else a sparse tensor over
    the sparse dims left (strided when only dense dims remain)."""
    info = _info(input, "sparse.sum")
    x = to_dense(_masked(input))
    if dtype is not None:
        x = cast(x, dt.as_dtype(dtype))
    if dim is None:
        return ops.sum(x)
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    dims = tuple(d % input.ndim for d in dims)
    out = ops.sum(x, dims)
    left = info.sparse_dim - sum(1 for d in dims if d < info.sparse_dim)
    return to_sparse(out, left) if left > 0 else out


def _pattern(info, shape, dtype_like):
    """The dense bool pattern of a sparse tensor's (sparse) dims, broadcast over dense dims."""
    sd = info.sparse_dim
    nnz = info.indices.shape[1]
    hits = index_add(zeros(math.prod(shape[:sd]), dtype=dtype_like), 0,
                     _linear_index(info.indices, shape[:sd]), ones(nnz, dtype=dtype_like))
    return reshape(ops.gt(hits, 0), shape[:sd] + (1,) * (len(shape) - sd))


def _sparse_softmax(input, dim, dtype, log):  # noqa: A002
    x = coalesce(input)
    info = _info(x, "sparse.softmax")
    x_dense = to_dense(x, dtype)
    shape = tuple(x.shape)
    mask = tp.broadcast_to(_pattern(info, shape, x_dense.dtype), shape)
    d = norm_dims(dim, len(shape))[0]
    # unspecified entries are -inf; a slice without entries gets 0s (no -inf - -inf)
    empty = ops.logical_not(ops.any(mask, d, keepdim=True))
    masked = ops.where(mask, x_dense, ops.where(empty, 0.0, -math.inf))
    out = ops.log_softmax(masked, d) if log else ops.softmax(masked, d)
    out = ops.where(mask, out, 0.0)          # rows without entries: 0, not NaN
    return _from_coo(info.indices, values(_with_info(out, info), _check=False), shape, True)


def _with_info(t, info):
    t.__dict__["_sparse"] = info
    return t


@op("sparse.softmax")
def sparse_softmax(input, dim, dtype=None):  # noqa: A002
    """Softmax over the specified entries of each slice along `dim` (unspecified entries
    count as -inf, as in PyTorch); a sparse tensor with the same pattern."""
    return _sparse_softmax(input, dim, dtype, False)


@op("sparse.log_softmax")
def sparse_log_softmax(input, dim, dtype=None):  # noqa: A002
    return _sparse_softmax(input, dim, dtype, True)


def _legacy_sparse(dtype):
    def make(indices, values, size=None):
        """PyTorch's legacy `torch.sparse.FloatTensor(indices, values, size)`."""
        return sparse_coo_tensor(indices, values, size, dtype=dtype)
    return make


def sparse_repr(t):
    """PyTorch's print form: indices, values, size, nnz, layout."""
    info = t.__dict__["_sparse"]
    ind = tensor_repr(info.indices).replace("\n", "\n" + " " * 15)
    with no_grad():
        vals = _values(t).detach()
    body = "values=" + tensor_repr(vals).replace("\n", "\n" + " " * 14)
    tail = f", grad_fn=<{t.grad_fn.name()}>" if t.grad_fn is not None else \
        (", requires_grad=True" if t.requires_grad else "")
    return (f"tensor(indices={ind},\n       {body},\n       size={tuple(t.shape)}, "
            f"nnz={info.indices.shape[1]}, layout=aotgrad.sparse_coo{tail})")


METHODS = {
    "is_sparse": property(is_sparse), "layout": property(layout_of), "to_sparse": to_sparse,
    "to_dense": to_dense, "coalesce": coalesce, "is_coalesced": is_coalesced,
    "indices": indices, "values": values, "_indices": _indices, "_values": _values,
    "_nnz": _nnz, "sparse_dim": sparse_dim, "dense_dim": dense_dim,
}

FloatTensor = _legacy_sparse(dt.float32)
DoubleTensor = _legacy_sparse(dt.float64)
LongTensor = _legacy_sparse(dt.int64)

__all__ = ["sparse_coo_tensor", "mm", "spmm", "sparse_sum", "sparse_softmax",
           "sparse_log_softmax", "FloatTensor", "DoubleTensor", "LongTensor", "Size"]
