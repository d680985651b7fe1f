"""Ops that combine or split tensors, and dtype queries, as decompositions into existing
ops: inner, tensordot, kron, block_diag, cartesian_prod, meshgrid, vander, hsplit, vsplit,
dstack, column_stack, diagflat, isin, tril_indices, triu_indices, result_type,
promote_types, can_cast.

>>> import aotgrad
>>> from aotgrad.runtime import combine_ops
>>> combine_ops.kron(aotgrad.eye(2), aotgrad.ones(1, 2)).shape
aotgrad.Size([2, 4])
"""
import numpy as np

from aotgrad.ir import dtypes as dt
from aotgrad.runtime.sizes import hint
from aotgrad.runtime import elementwise_ops as ew
from aotgrad.runtime import linalg_ops as la
from aotgrad.runtime import reduction_ops as red
from aotgrad.runtime import shape_ops as so
from aotgrad.runtime import tprims as tp
from aotgrad.runtime.op_base import _binary_args, cast, op, scalar_dtype
from aotgrad.runtime.tensor import Tensor
from aotgrad.runtime.factories import tensor, zeros
from aotgrad.runtime.reduction_more_ops import atleast_3d


@op("tensordot")
def tensordot(a, b, dims=2):
    """Contract the last `dims` dims of a with the first of b, or the listed dims pairs."""
    if isinstance(dims, int):
        if dims < 0:
            raise RuntimeError(f"tensordot expects dims >= 0, but got dims={dims}")
        da, db = list(range(a.ndim - dims, a.ndim)), list(range(dims))
    else:
        da, db = ([d] if isinstance(d, int) else list(d) for d in dims)
    da = [d % a.ndim for d in da]
    db = [d % b.ndim for d in db]
    for i, j in zip(da, db):
        if a.shape[i] != b.shape[j]:
            raise RuntimeError(f"contracted dimensions need to match, but first has size "
                               f"{hint(a.shape[i])} in dim {i} and second has size "
                               f"{hint(b.shape[j])} in dim {j}")
    fa = [d for d in range(a.ndim) if d not in da]
    fb = [d for d in range(b.ndim) if d not in db]
    k = int(np.prod([a.shape[d] for d in da]))
    a2 = so.reshape(so.permute(a, *(fa + da)), -1 if fa or k == 0 else 1, k) if a.ndim else \
        so.reshape(a, 1, 1)
    b2 = so.reshape(so.permute(b, *(db + fb)), k, -1 if fb or k == 0 else 1) if b.ndim else \
        so.reshape(b, 1, 1)
    a2 = so.reshape(a2, int(np.prod([a.shape[d] for d in fa])), k)
    b2 = so.reshape(b2, k, int(np.prod([b.shape[d] for d in fb])))
    out = la.mm(*_binary_args(a2, b2)) if a2.dtype is not b2.dtype else la.mm(a2, b2)
    return so.reshape(out, *([a.shape[d] for d in fa] + [b.shape[d] for d in fb]))


@op("inner")
def inner(input, other):
    """Sum over the last dims of both (a scalar operand multiplies)."""
    if input.ndim == 0 or other.ndim == 0:
        return ew.mul(input, other)
    return tensordot(input, other, ([input.ndim - 1], [other.ndim - 1]))


@op("kron")
def kron(input, other):
    """Kronecker product."""
    n = max(input.ndim, other.ndim)
    a = so.reshape(input, *([1] * (n - input.ndim) + list(input.shape)))
    b = so.reshape(other, *([1] * (n - other.ndim) + list(other.shape)))
    ai = so.reshape(a, *[s for d in a.shape for s in (d, 1)])
    bi = so.reshape(b, *[s for d in b.shape for s in (1, d)])
    return so.reshape(ew.mul(ai, bi), *[x * y for x, y in zip(a.shape, b.shape)])


@op("block_diag")
def block_diag(*tensors):
    """The tensors (0-, 1- or 2-D) on the diagonal of one matrix, zeros elsewhere."""
    mats = [so.reshape(t, 1, 1) if t.ndim == 0 else so.reshape(t, 1, -1) if t.ndim == 1 else t
            for t in tensors]
    if not mats:
        return zeros(1, 0)
    dtype = mats[0].dtype
    for m in mats[1:]:
        dtype = dt.promote(dtype, m.dtype)
    cols = sum(m.shape[1] for m in mats)
    rows, left = [], 0
    for m in mats:
        right = cols - left - m.shape[1]
        r = m.shape[0]
        rows.append(so.cat([tp.zeros((r, left), dtype), cast(m, dtype),
                            tp.zeros((r, right), dtype)], 1))
        left += m.shape[1]
    return so.cat(rows, 0)


@op("cartesian_prod")
def cartesian_prod(*tensors):
    """All combinations of the 1-D tensors' elements, one per row."""
    if len(tensors) == 1:
        return tensors[0]
    grids = meshgrid(*tensors, indexing="ij")
    return so.stack([so.reshape(g, -1) for g in grids], 1)


def meshgrid(*tensors, indexing="ij"):
    """Coordinate grids of 1-D (or 0-d) tensors; indexing "ij" (matrix) or "xy" (Cartesian:
    the first two dims swapped)."""
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    if indexing not in ("ij", "xy"):
        raise RuntimeError(f"torch.meshgrid: indexing must be one of \"xy\" or \"ij\", but "
                           f"received: {indexing}")
    ts = [so.reshape(t, -1) for t in tensors]
    shape = tuple(t.shape[0] for t in ts)
    out = []
    for i, t in enumerate(ts):
        view = [1] * len(ts)
        view[i] = shape[i]
        out.append(so.expand(so.reshape(t, *view), *shape))
    if indexing == "xy" and len(ts) >= 2:
        out = [so.transpose(g, 0, 1) for g in out]
    return tuple(out)


@op("vander")
def vander(x, N=None, increasing=False):
    """Columns x**0 ... x**(N-1) (decreasing powers unless increasing)."""
    if x.ndim != 1:
        raise RuntimeError("x must be a one-dimensional tensor.")
    n = x.shape[0] if N is None else N
    if n < 0:
        raise RuntimeError("N must be non-negative.")
    if not x.dtype.is_floating_point:
        x = cast(x, dt.int64)
    cols = [ew.pow(x, k) if k else ew.add(ew.mul(x, 0), 1) for k in range(n)]
    if not increasing:
        cols = cols[::-1]
    return so.stack(cols, 1) if cols else so.reshape(x, -1, 1)[:, :0]


def hsplit(x, indices_or_sections):
    if x.ndim < 1:
        raise RuntimeError("torch.hsplit requires a tensor with at least 1 dimension")
    return so.tensor_split(x, indices_or_sections, 1 if x.ndim > 1 else 0)


def vsplit(x, indices_or_sections):
    if x.ndim < 2:
        raise RuntimeError("torch.vsplit requires a tensor with at least 2 dimension")
    return so.tensor_split(x, indices_or_sections, 0)


def dstack(tensors):
    return so.cat(list(atleast_3d(tuple(tensors))), 2)


def column_stack(tensors):
    cols = [so.reshape(t, -1, 1) if t.ndim <= 1 else t for t in tensors]
    return so.cat(cols, 1)


def diagflat(x, offset=0):
    return so.diag(so.reshape(x, -1), offset)


@op("isin")
def isin(elements, test_elements, *, assume_unique=False, invert=False):
    """Whether each element occurs in test_elements."""
    e = elements if isinstance(elements, Tensor) else None
    t = test_elements if isinstance(test_elements, Tensor) else None
    if e is None:
        e = ew.add(ew.mul(t.reshape(-1)[:1], 0), elements).reshape(())
    if t is None:
        t = ew.add(ew.mul(e.reshape(-1)[:1], 0), test_elements)
    a, b = _binary_args(so.unsqueeze(e, -1), so.reshape(t, -1))
    found = red.any(ew.eq(a, b), -1) if b.shape[-1] else ew.ne(so.reshape(e, *e.shape), e)
    return ew.logical_not(found) if invert else found


def _index_pairs(row, col, offset, lower):
    r, c = np.indices((row, col))
    keep = (c - r <= offset) if lower else (c - r >= offset)
    return tensor(np.stack([r[keep], c[keep]]).astype(np.int64))


def tril_indices(row, col, offset=0, *, dtype=None, device=None, layout=None):
    out = _index_pairs(row, col, offset, True)
    return out if dtype is None else cast(out, dt.as_dtype(dtype))


def triu_indices(row, col, offset=0, *, dtype=None, device=None, layout=None):
    out = _index_pairs(row, col, offset, False)
    return out if dtype is None else cast(out, dt.as_dtype(dtype))


def result_type(tensor1, tensor2):
    """The dtype an op on the two (tensors or Python numbers) computes in."""
    if isinstance(tensor1, Tensor) or isinstance(tensor2, Tensor):
        return _binary_args(tensor1, tensor2)[0].dtype
    return dt.promote(scalar_dtype(tensor1), scalar_dtype(tensor2))


def promote_types(type1, type2):
    return dt.promote(dt.as_dtype(type1), dt.as_dtype(type2))


_KIND = {dt.bool_: 0, **{d: 1 for d in dt.INTEGRAL}}


def can_cast(from_, to):
    """False only where the cast lowers the category (float -> integer or bool, integer ->
    bool), as PyTorch's casting rules in ops with out= or in-place results."""
    f, t = dt.as_dtype(from_), dt.as_dtype(to)
    return _KIND.get(f, 2) <= _KIND.get(t, 2)


FUNCTION_NAMES = ("tensordot inner kron block_diag cartesian_prod meshgrid vander hsplit "
                  "vsplit dstack column_stack diagflat isin tril_indices triu_indices "
                  "result_type promote_types can_cast").split()
METHOD_NAMES = "inner kron hsplit vsplit diagflat".split()
