"""More reductions and small shape helpers, each a decomposition into existing ops: nansum,
nanmean, median/nanmedian (PyTorch's lower median; with a dim, values and indices),
kthvalue, aminmax, trace, diff, dist, atleast_1d/2d/3d, ravel, fliplr, flipud, msort and
Tensor.sum_to_size. The order statistics sort along the dim and gather the chosen element,
so the gradient flows to that element, as in PyTorch (median()/nanmedian() without a dim
split it among equal elements instead, as PyTorch does).

>>> import aotgrad
>>> from aotgrad.runtime import reduction_more_ops as rm
>>> rm.median(aotgrad.tensor([3., 1., 4., 2.])).item()
2.0
"""
import collections

from aotgrad.ir import dtypes as dt
from aotgrad.runtime import elementwise_ops as ew
from aotgrad.runtime import reduction_ops as red
from aotgrad.runtime import shape_ops as so
from aotgrad.runtime import tprims as tp
from aotgrad.runtime.composite import with_rule
from aotgrad.runtime.op_base import _named, _return_type, cast, norm_dims, op, return_types

aminmax_type = collections.namedtuple("aminmax", ("min", "max"))
_RETURN_TYPES = {"median": _return_type("median"), "nanmedian": _return_type("nanmedian"),
                 "kthvalue": return_types["kthvalue"]}
_DIM_NODE_NAMES = {"median": "MedianBackward1", "nanmedian": "NanmedianBackward1",
                   "kthvalue": "KthvalueBackward0"}


@op("nansum", "NansumBackward0")
def nansum(x, dim=None, keepdim=False, *, dtype=None):
    """sum, treating NaN as zero (NaN elements get a zero gradient)."""
    if x.dtype.is_floating_point:
        x = ew.where(ew.isnan(x.detach()), 0.0, x)
    return red.sum(x, dim, keepdim, dtype=dtype)


@op("nanmean")
def nanmean(x, dim=None, keepdim=False, *, dtype=None):
    """mean over the non-NaN elements (NaN where there are none)."""
    if not x.dtype.is_floating_point:
        raise RuntimeError(f"nanmean(): expected input to have floating point dtype but got "
                           f"{x.dtype.name}")
    count = red.sum(ew.logical_not(ew.isnan(x.detach())), dim, keepdim)
    return ew.div(nansum(x, dim, keepdim, dtype=dtype), count)


def _order_stat(x, dim, keepdim, pick, name):
    """(values, indices) of the element at sorted position pick(sorted, nan_count, n)."""
    if x.ndim == 0:
        return _RETURN_TYPES[name](x * 1 if x.dtype is not dt.bool_ else x,
                                  tp.zeros((), dt.int64))
    d = norm_dims(dim, x.ndim)[0]
    n = x.shape[d]
    if n == 0:
        raise IndexError(f"{name}(): Expected reduction dim {d} to have non-zero size.")
    idx = so.argsort(x.detach(), d, stable=True)          # NaN sorts last
    nans = red.sum(ew.isnan(x.detach()), d, keepdim=True) if x.dtype.is_floating_point \
        else tp.zeros(tuple(1 if i == d else s for i, s in enumerate(x.shape)), dt.int64)
    pos = pick(nans, n)
    index = so.gather(idx, d, cast(pos, dt.int64))
    values = so.gather(x, d, index)
    if not keepdim:
        values, index = so.squeeze(values, d), so.squeeze(index, d)
    return _RETURN_TYPES[name](_named(values, _DIM_NODE_NAMES[name]), index)


def _full_median(x, pick, name):
    flat = so.reshape(x, -1)
    if flat.shape[0] == 0:
        return cast(tp.constant(float("nan"), dt.float32), x.dtype) \
            if x.dtype.is_floating_point else flat.sum()
    return _order_stat(flat, 0, False, pick, name)[0]


def _median_pos(nans, n):   # any NaN: the first NaN (NaN sorts last, stably) is the median,
    return ew.where(ew.gt(nans, 0), ew.sub(n, nans), (n - 1) // 2)  # as in PyTorch


def _nanmedian_pos(nans, n):  # the lower median of the numbers; all NaN: a NaN
    m = ew.sub(n, nans)
    return ew.where(ew.gt(m, 0), ew.div(ew.sub(m, 1), 2, rounding_mode="floor"), 0)


# Without a dim PyTorch splits the gradient evenly among the elements equal to the median
# (and among the NaNs when it is NaN), as for max(); with a dim it goes to the one index.
@with_rule("MedianBackward0", ("x",), red.evenly_distribute_rule,
           nan_result_tangent=True)
def _median_all(x):
    return _full_median(x, _median_pos, "median")


@with_rule("NanmedianBackward0", ("x",), red.evenly_distribute_rule,
           nan_result_tangent=True)
def _nanmedian_all(x):
    return _full_median(x, _nanmedian_pos, "nanmedian")


@op("median")
def median(x, dim=None, keepdim=False):
    """The lower median (of all elements, or (values, indices) along dim); NaN propagates."""
    if dim is None:
        return _median_all(x)
    return _order_stat(x, dim, keepdim, _median_pos, "median")


@op("nanmedian")
def nanmedian(x, dim=None, keepdim=False):
    """median ignoring NaN."""
    if dim is None:
        return _nanmedian_all(x)
    return _order_stat(x, dim, keepdim, _nanmedian_pos, "nanmedian")


@op("kthvalue")
def kthvalue(x, k, dim=-1, keepdim=False):
    """(values, indices) of the k-th smallest element along dim (1-based k)."""
    n = x.shape[norm_dims(dim, x.ndim)[0]] if x.ndim else 1
    if not 1 <= k <= n:
        raise RuntimeError(f"kthvalue(): selected number k out of range for dimension {dim}")
    return _order_stat(x, dim, keepdim, lambda nans, n: ew.add(ew.mul(nans, 0), k - 1),
                       "kthvalue")


@op("aminmax")
def aminmax(x, *, dim=None, keepdim=False):
    """(min, max) in one call."""
    if dim is None and x.numel() == 0:
        raise RuntimeError("aminmax(): cannot compute aminmax over an empty dimension as the "
                           "operation has no identity.")
    red._check_nonempty("aminmax", x, dim)
    d = () if dim is None else dim
    return aminmax_type(red.amin(x, d, keepdim), red.amax(x, d, keepdim))


@op("trace")
def trace(x):
    """Sum of the main diagonal of a 2-D tensor."""
    if x.ndim != 2:
        raise RuntimeError(f"trace: expected a matrix, but got tensor with dim {x.ndim}")
    return red.sum(so.diagonal(x))


@op("diff")
def diff(x, n=1, dim=-1, prepend=None, append=None):
    """n-th forward difference along dim (prepend/append joined first)."""
    if x.ndim == 0:
        raise RuntimeError("diff expects input to be at least one-dimensional")
    d = norm_dims(dim, x.ndim)[0]
    parts = [t for t in (prepend, x, append) if t is not None]
    if len(parts) > 1:
        x = so.cat(parts, d)
    for _ in range(n):
        m = x.shape[d]
        if m == 0:
            break
        a, b = so.narrow(x, d, 1, m - 1), so.narrow(x, d, 0, m - 1)
        x = ew.logical_xor(a, b) if x.dtype is dt.bool_ else ew.sub(a, b)
    return x


@op("dist")
def dist(input, other, p=2):
    """p-norm of input - other."""
    return red.norm(ew.sub(input, other), p)


def atleast_1d(*tensors):
    ts = tensors[0] if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)) else tensors
    out = [so.reshape(t, 1) if t.ndim == 0 else t for t in ts]
    return out[0] if len(tensors) == 1 and not isinstance(tensors[0], (list, tuple)) \
        else tuple(out)


def atleast_2d(*tensors):
    ts = tensors[0] if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)) else tensors
    out = [so.reshape(t, 1, 1) if t.ndim == 0 else so.unsqueeze(t, 0) if t.ndim == 1 else t
           for t in ts]
    return out[0] if len(tensors) == 1 and not isinstance(tensors[0], (list, tuple)) \
        else tuple(out)


def atleast_3d(*tensors):
    ts = tensors[0] if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)) else tensors
    out = []
    for t in ts:
        if t.ndim == 0:
            t = so.reshape(t, 1, 1, 1)
        elif t.ndim == 1:
            t = so.reshape(t, 1, t.shape[0], 1)
        elif t.ndim == 2:
            t = so.unsqueeze(t, -1)
        out.append(t)
    return out[0] if len(tensors) == 1 and not isinstance(tensors[0], (list, tuple)) \
        else tuple(out)


def ravel(x):
    return so.reshape(x, -1)


def fliplr(x):
    if x.ndim < 2:
        raise RuntimeError("Input must be >= 2-d.")
    return so.flip(x, 1)


def flipud(x):
    if x.ndim < 1:
        raise RuntimeError("Input must be >= 1-d.")
    return so.flip(x, 0)


def msort(x):
    return so.sort(x, 0)[0]


def sum_to_size(x, *size):
    """Sum x down to `size` (a shape x broadcasts from)."""
    size = tuple(size[0]) if len(size) == 1 and isinstance(size[0], (tuple, list)) else size
    return red.sum_to_shape(x, size)


METHOD_NAMES = ("nansum nanmean median nanmedian kthvalue aminmax trace diff dist ravel "
                "fliplr flipud msort sum_to_size").split()
FUNCTION_NAMES = METHOD_NAMES[:-1] + ["atleast_1d", "atleast_2d", "atleast_3d"]
