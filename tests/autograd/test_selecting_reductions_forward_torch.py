"""Forward mode of the full reductions that pick one value (max(), min(), median(),
nanmedian() without a dim): the tangent is the mean of the tangents at the elements equal to
the result (ties share it) and NaN where the result is NaN, as PyTorch's forward formula
gives; amax/amin the same split (NaN input: NaN). Closed forms, and PyTorch where installed."""
import math

import numpy as np
import pytest

import aotgrad as ag
from aotgrad.testing import assert_close

NAN = float("nan")
INPUTS = [[1., 3., 3., 2.], [1., NAN, 3., NAN], [NAN, NAN, NAN, 2.], [3., 3., 3., 3.],
          [-0.0, 0.0, -1., 1.], [float("inf"), 1., float("inf"), float("-inf")],
          [[2., 5.], [5., NAN]]]
OPS = ("max", "min", "median", "nanmedian", "amax", "amin")


def _tangent(T, op, values, dtype):
    fw = T.autograd.forward_ad
    x = T.tensor(values, dtype=dtype)
    t = T.arange(1, x.numel() + 1, dtype=dtype).reshape(x.shape) ** 2
    with fw.dual_level():
        y = getattr(T, op)(fw.make_dual(x, t))
        return fw.unpack_dual(y).tangent


def _expected(op, values):
    """Closed form: mean of the tangents where the input equals the result; NaN result: NaN."""
    x = np.asarray(values, dtype=np.float64).reshape(-1)
    t = np.arange(1, x.size + 1, dtype=np.float64) ** 2
    pick = {"max": np.max, "min": np.min, "amax": np.max, "amin": np.min,
            "median": lambda a: np.sort(a)[(a.size - 1) // 2] if not np.isnan(a).any()
            else NAN,
            "nanmedian": lambda a: np.sort(a[~np.isnan(a)])[(np.sum(~np.isnan(a)) - 1) // 2]
            if (~np.isnan(a)).any() else NAN}[op]
    r = pick(x)
    if math.isnan(r):
        return NAN
    hit = x == r
    return t[hit].sum() / hit.sum()


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("values", INPUTS, ids=range(len(INPUTS)))
def test_tangent_closed_form(op, values):
    for dtype in (ag.float64, ag.float32):
        got = _tangent(ag, op, values, dtype)
        assert got.dtype is dtype
        assert_close(got.numpy(), _expected(op, values), rtol=1e-6, atol=0, equal_nan=True,
                     check_dtype=False)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("values", INPUTS, ids=range(len(INPUTS)))
def test_tangent_matches_torch(torch, op, values):
    for dtype in ("float64", "float32"):
        want = _tangent(torch, op, values, getattr(torch, dtype))
        got = _tangent(ag, op, values, getattr(ag, dtype))
        assert_close(got.numpy(), want.numpy(), rtol=1e-6, atol=0, equal_nan=True)


def test_reverse_still_splits_among_nans():
    """The backward of max() with NaN keeps sending the gradient to the NaN elements."""
    x = ag.tensor([1., NAN, 3., NAN], dtype=ag.float64, requires_grad=True)
    x.max().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0., .5, 0., .5])


def test_tangent_is_differentiable_under_grad_mode():
    """Reverse over forward through the NaN fix-up: the tangent's gradient with respect to the
    tangent input is the split (finite result) or zero (NaN result, whose tangent is NaN
    whatever the input tangent)."""
    fw = ag.autograd.forward_ad
    for values, want in (([1., 3., 3.], [0., .5, .5]), ([1., NAN, 2.], [0., 0., 0.])):
        x = ag.tensor(values, dtype=ag.float64)
        t = ag.ones(3, dtype=ag.float64, requires_grad=True)
        with fw.dual_level():
            jt = fw.unpack_dual(fw.make_dual(x, t).max()).tangent
        jt.backward()
        np.testing.assert_array_equal(t.grad.numpy(), want)
