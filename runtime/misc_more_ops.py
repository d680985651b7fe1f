"""Tensor odds and ends real scripts call: share_memory_, data_ptr, storage_offset,
apply_/map_ (Python callables, eager only), randint_like, slice_scatter, select_scatter,
renorm, histc, mode, masked_scatter, put, and the data-dependent bincount and unique (they read the values: a graph
break inside a compiled function, like nonzero).

>>> import aotgrad
>>> from aotgrad.runtime import misc_more_ops as mm
>>> mm.histc(aotgrad.tensor([1., 2., 1.]), bins=4, min=0, max=3).tolist()
[0.0, 2.0, 1.0, 0.0]
"""
import numpy as np

from aotgrad.ir import dtypes as dt
from aotgrad.runtime import elementwise_ops as ew
from aotgrad.runtime import reduction_ops as red
from aotgrad.runtime import shape_ops as so
from aotgrad.runtime.factories import arange, randint, tensor
from aotgrad.runtime.op_base import cast, norm_dims, op
from aotgrad.runtime.op_base import return_types
from aotgrad.runtime.storage import expose
from aotgrad.runtime.not_implemented_derivative import without_derivative


def share_memory_(self):
    """A no-op here (the buffer is process memory); returns self as PyTorch does."""
    return self


def _buffer(self, what):
    v = self._concrete(what)
    return v if isinstance(v, np.ndarray) else np.asarray(v)


def data_ptr(self):
    """The address of the first element of the eager buffer."""
    return int(expose(_buffer(self, "data_ptr")).__array_interface__["data"][0])


def storage_offset(self):
    """Elements between the start of the underlying buffer and this view's first element."""
    v = _buffer(self, "storage_offset")
    base = v
    while isinstance(base.base, np.ndarray):
        base = base.base
    return (v.__array_interface__["data"][0] - base.__array_interface__["data"][0]) \
        // v.itemsize


def apply_(self, callable):
    """Replace each element by callable(element) (Python numbers; eager only)."""
    v = _buffer(self, "apply_ (a Python callable per element)")
    new = np.vectorize(callable, otypes=[self.dtype.np])(v) if v.size else v.copy()
    return self.copy_(tensor(np.asarray(new, dtype=self.dtype.np)))


def map_(self, other, callable):
    """Replace each element by callable(element, other's element) (eager only)."""
    v = _buffer(self, "map_ (a Python callable per element)")
    o = np.broadcast_to(_buffer(other, "map_"), v.shape)
    new = np.vectorize(callable, otypes=[self.dtype.np])(v, o) if v.size else v.copy()
    return self.copy_(tensor(np.asarray(new, dtype=self.dtype.np)))


def randint_like(input, low=0, high=None, *, dtype=None, generator=None, **kwargs):
    """Integers from [low, high) in input's shape (randint_like(x, high) is [0, high))."""
    if high is None:
        low, high = 0, low
    return randint(low, high, tuple(input.shape), dtype=dtype or input.dtype,
                   generator=generator)


@op("slice_scatter")
def slice_scatter(input, src, dim=0, start=None, end=None, step=1):
    """input with input[..., start:end:step, ...] (along dim) replaced by src."""
    d = norm_dims(dim, input.ndim)[0]
    idx = arange(*slice(start, end, step).indices(input.shape[d]), dtype=dt.int64)
    return so.index_copy(input, d, idx, cast(src, input.dtype))


@op("select_scatter")
def select_scatter(input, src, dim, index):
    """input with input.select(dim, index) replaced by src."""
    d = norm_dims(dim, input.ndim)[0]
    i = index % input.shape[d]
    return so.index_copy(input, d, tensor([i]), so.unsqueeze(cast(src, input.dtype), d))


@op("renorm")
def renorm(input, p, dim, maxnorm):
    """Each slice along dim rescaled so that its p-norm is at most maxnorm."""
    d = norm_dims(dim, input.ndim)[0]
    others = tuple(i for i in range(input.ndim) if i != d)
    norms = red.norm(input, p, others, keepdim=True) if others else ew.abs(input)
    scale = ew.where(ew.gt(norms, maxnorm), ew.div(maxnorm, ew.add(norms, 1e-7)), 1.0)
    return ew.mul(input, scale)


@op("histc")
def histc(input, bins=100, min=0, max=0):
    """Counts in `bins` equal bins over [min, max] (the data's range when both are 0);
    values outside are ignored. Float result in input's dtype."""
    if not input.dtype.is_floating_point:
        raise RuntimeError(f"\"histogram_cpu\" not implemented for '{input.dtype.name}'")
    if bins <= 0:
        raise RuntimeError(f"torch.histc: bins must be > 0, but got {bins} for bins")
    x = so.reshape(input.detach(), -1)
    if min == 0 and max == 0 and x.shape[0]:
        lo, hi = red.amin(x), red.amax(x)
    else:
        lo, hi = cast(tensor(float(min)), x.dtype), cast(tensor(float(max)), x.dtype)
    same = ew.eq(lo, hi)
    lo, hi = ew.where(same, ew.sub(lo, 1), lo), ew.where(same, ew.add(hi, 1), hi)
    b = ew.floor(ew.div(ew.mul(ew.sub(x, lo), float(bins)), ew.sub(hi, lo)))
    b = ew.where(ew.eq(x, hi), float(bins - 1), b)
    inside = ew.logical_and(ew.ge(x, lo), ew.le(x, hi))
    hit = ew.logical_and(ew.eq(so.unsqueeze(b, 1), cast(arange(bins), x.dtype)),
                         so.unsqueeze(inside, 1))
    return cast(red.sum(hit, 0), input.dtype)


def bincount(input, weights=None, minlength=0):
    """Occurrences of each non-negative integer (weighted sums with weights)."""
    v = input._concrete("bincount (data-dependent shape)")
    if v.ndim != 1 or v.dtype.kind not in "iu":
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    if v.size and v.min() < 0:
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    n = int(max(int(v.max()) + 1 if v.size else 0, minlength))
    onehot = ew.eq(so.unsqueeze(input, 1), arange(n))
    if weights is None:
        return red.sum(onehot, 0)
    w = weights if weights.dtype.is_floating_point else cast(weights, dt.float64)
    return red.sum(ew.mul(cast(onehot, w.dtype), so.unsqueeze(w, 1)), 0)


def unique(input, sorted=True, return_inverse=False, return_counts=False, dim=None):
    """The distinct values (or slices along dim), sorted; optionally the inverse indices
    and the counts. No derivative, as in PyTorch (the values' node raises if reached)."""
    v = input._concrete("unique (data-dependent shape)")
    if dim is None:
        vals, inv, counts = np.unique(v.reshape(-1), return_inverse=True, return_counts=True)
        inv = inv.reshape(v.shape)
    else:
        d = norm_dims(dim, v.ndim)[0]
        vals, inv, counts = np.unique(v, return_inverse=True, return_counts=True, axis=d)
        inv = inv.reshape(-1)
    out = [without_derivative(tensor(vals.astype(v.dtype)),
                              "Unique2Backward0" if dim is None else "UniqueDimBackward0",
                              "_unique2" if dim is None else "unique_dim", [input])]
    if return_inverse:
        out.append(tensor(inv.astype(np.int64)))
    if return_counts:
        out.append(tensor(counts.astype(np.int64)))
    return out[0] if len(out) == 1 else tuple(out)


def unique_consecutive(input, return_inverse=False, return_counts=False, dim=None):
    """Collapse runs of equal values (or slices along dim)."""
    v = input._concrete("unique_consecutive (data-dependent shape)")
    d = 0 if dim is None else norm_dims(dim, v.ndim)[0]
    a = v.reshape(-1) if dim is None else np.moveaxis(v, d, 0)
    if a.shape[0] == 0:
        starts = np.zeros(0, dtype=bool)
    else:
        diff = np.any((a[1:] != a[:-1]).reshape(a.shape[0] - 1, -1), axis=1)
        starts = np.concatenate([[True], diff])
    vals = a[starts]
    if dim is not None:
        vals = np.moveaxis(vals, 0, d)
    out = [without_derivative(tensor(np.ascontiguousarray(vals)), "UniqueConsecutiveBackward0",
                              "unique_consecutive", [input])]
    if return_inverse:
        inv = np.cumsum(starts) - 1
        out.append(tensor(inv.reshape(v.shape if dim is None else -1).astype(np.int64)))
    if return_counts:
        out.append(tensor(np.diff(np.append(np.flatnonzero(starts), a.shape[0])).astype(
            np.int64)))
    return out[0] if len(out) == 1 else tuple(out)


FUNCTION_NAMES = ("randint_like slice_scatter select_scatter renorm histc bincount unique "
                  "unique_consecutive").split()
METHOD_NAMES = ("share_memory_ data_ptr storage_offset apply_ map_ slice_scatter "
                "select_scatter renorm histc bincount unique unique_consecutive").split()


@op("mode")
def mode(input, dim=-1, keepdim=False):
    """(values, indices): the most frequent value along dim (the smallest among equally
    frequent ones) and the index of its last occurrence; the gradient goes to that element."""
    if input.ndim == 0:
        return return_types["mode"](ew.mul(input, 1), tensor(0))
    d = norm_dims(dim, input.ndim)[0]
    x = so.movedim(input, d, -1)
    n = x.shape[-1]
    if n == 0:
        raise IndexError(f"mode(): Expected reduction dim {d} to have non-zero size.")
    s = so.sort(x.detach(), -1)[0]
    counts = red.sum(ew.eq(so.unsqueeze(s, -1), so.unsqueeze(s, -2)), -1)
    best = so.gather(s, -1, so.unsqueeze(red.argmax(counts, -1), -1))      # (..., 1)
    pos = ew.where(ew.eq(x.detach(), best), arange(n), -1)
    index = red.argmax(pos, -1, keepdim=True)
    values = so.gather(x, -1, index)
    values, index = so.movedim(values, -1, d), so.movedim(index, -1, d)
    if not keepdim:
        values, index = so.squeeze(values, d), so.squeeze(index, d)
    return return_types["mode"](values, index)


@op("masked_scatter")
def masked_scatter(input, mask, source):
    """input with the positions where mask is True (in row-major order) filled by
    consecutive elements of source."""
    m = so.reshape(so.broadcast_to(mask, tuple(input.shape)), -1)
    k = ew.sub(red.cumsum(cast(m, dt.int64), 0), 1)
    k = ew.maximum(k, 0)
    flat_src = so.reshape(source, -1)
    if flat_src.shape[0] == 0:
        flat_src = so.reshape(ew.mul(so.reshape(input, -1)[:1], 0), -1)
    taken = so.gather(flat_src, 0, ew.minimum(k, flat_src.shape[0] - 1))
    out = ew.where(m, cast(taken, input.dtype), so.reshape(input, -1))
    return so.reshape(out, *input.shape)


@op("put")
def put(input, index, source, accumulate=False):
    """input with its flattened positions `index` set to (or, accumulate, increased by)
    source."""
    n = input.numel()
    idx = ew.remainder(so.reshape(index, -1), max(n, 1))
    flat = so.reshape(input, -1)
    src = so.reshape(cast(source, input.dtype), -1)
    out = so.index_add(flat, 0, idx, src) if accumulate else so.index_copy(flat, 0, idx, src)
    return so.reshape(out, *input.shape)


FUNCTION_NAMES += ["mode", "masked_scatter"]
METHOD_NAMES += ["mode", "masked_scatter", "put"]
INPLACE_NAMES = ["masked_scatter", "put", "renorm"]
