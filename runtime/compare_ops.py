"""Closeness and ordering queries: isclose, allclose, equal, bucketize, searchsorted.

allclose and equal return Python bools (inside a compiled function they need the value:
a graph break, like `bool(tensor)`). bucketize/searchsorted are the `searchsorted` prim
(a reference step in compiled programs): no gradient, NaN sorts after every number.

>>> import aotgrad
>>> from aotgrad.runtime import compare_ops
>>> compare_ops.bucketize(aotgrad.tensor([0.5, 1., 2.5]), aotgrad.tensor([1., 2.])).tolist()
[0, 0, 2]
"""
from aotgrad.ir import dtypes as dt
from aotgrad.runtime.sizes import size_list
from aotgrad.runtime import tprims as tp
from aotgrad.runtime.elementwise_ops import (abs, add, eq, isfinite, isnan, le, logical_and,
                                             logical_or, mul, sub)
from aotgrad.runtime.index_ops import take_along_dim
from aotgrad.runtime.op_base import as_tensor_like, cast, op
from aotgrad.runtime.reduction_ops import all as all_
from aotgrad.runtime.tensor import Tensor


@op("isclose")
def isclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    """|input - other| <= atol + rtol * |other|, elementwise (equal infinities are close;
    NaNs are close to each other only with equal_nan). Both tensors need one dtype."""
    if input.dtype is not other.dtype:
        raise RuntimeError(f"{input.dtype.name} did not match {other.dtype.name}")
    if rtol < 0 or atol < 0:
        raise RuntimeError(f"rtol and atol must be non-negative, got rtol={rtol}, atol={atol}")
    close = eq(input, other)
    if equal_nan and input.dtype.is_floating_point:
        close = logical_or(close, logical_and(isnan(input), isnan(other)))
    if rtol == 0 and atol == 0:
        return close
    if not input.dtype.is_floating_point:
        input, other = cast(input, dt.float32), cast(other, dt.float32)
    err = abs(sub(input, other))
    allowed = add(abs(mul(other, rtol)), atol)
    return logical_or(close, logical_and(isfinite(err), le(err, allowed)))


def allclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    """True when every element of input is close to other's (see isclose)."""
    return bool(all_(isclose(input, other, rtol, atol, equal_nan)))


def equal(input, other):
    """True when both have the same shape and the same elements (NaN is unequal)."""
    if tuple(input.shape) != tuple(other.shape):
        return False
    return bool(all_(eq(input, other)))


def _common(seq, values):
    d = dt.promote(seq.dtype, values.dtype)
    return cast(seq, d), cast(values, d)


@op("searchsorted")
def searchsorted(sorted_sequence, input, *, out_int32=False, right=False, side=None,
                 sorter=None):
    """Indices where the values would be inserted to keep the innermost dim of
    sorted_sequence sorted: the first such place, or the last with right=True (or
    side="right"). sorted_sequence is 1-d or has the values' leading dims."""
    if side is not None:
        if side not in ("left", "right"):
            raise RuntimeError(f"side can only be 'left' or 'right' but got {side!r}")
        if right and side == "left":
            raise RuntimeError("side and right can't be set to opposites, got side of left "
                               "while right was True")
        right = side == "right"
    scalar = not isinstance(input, Tensor)
    values = as_tensor_like(input, sorted_sequence.dtype)
    if sorter is not None:
        sorted_sequence = take_along_dim(sorted_sequence, sorter, -1)
    seq, vals = _common(sorted_sequence, values)
    if scalar or vals.ndim == 0:
        if seq.ndim != 1:
            raise RuntimeError("searchsorted: a scalar input needs a 1-D sorted_sequence, got "
                               f"shape {size_list(seq.shape)}")
        vals = tp.reshape(vals, shape=(1,))
        out = tp.reshape(tp.searchsorted(seq, vals, right=bool(right)), shape=())
    else:
        out = tp.searchsorted(seq, vals, right=bool(right))
    return cast(out, dt.int32) if out_int32 else out


@op("bucketize")
def bucketize(input, boundaries, *, out_int32=False, right=False):
    """The bucket of each value: i with boundaries[i-1] < x <= boundaries[i] (right=False)
    or boundaries[i-1] <= x < boundaries[i] (right=True); boundaries is 1-D and sorted."""
    if boundaries.ndim != 1:
        raise RuntimeError(f"boundaries tensor must be 1 dimension, but got dim("
                           f"{boundaries.ndim})")
    return searchsorted(boundaries, input, out_int32=out_int32, right=right)
