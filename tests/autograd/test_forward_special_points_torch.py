"""Tangents and gradients at special points where a masked-off branch of a derivative rule
used to leak NaN (0 * inf) once differentiated again: pow at x = 0 (forward mode, double
backward), smooth_l1/huber at an infinite difference (backward); and the zero tangent of ops
whose derivative is zero (floor, sign, round, ...), as PyTorch's. Closed forms, and PyTorch
where installed."""
import numpy as np
import pytest

import aotgrad as ag
from aotgrad.testing import assert_close

NAN, INF = float("nan"), float("inf")
# (x, y): pow's tangent is y x^(y-1) tx (0 where y == 0) + x^y log(x) ty (0 where x == 0 and
# y >= 0)
POW_POINTS = [(0.0, 0.0), (-0.0, 1.0), (0.0, 2.0), (2.0, 0.0), (0.0, 3.0), (3.0, 2.0)]


def _pow_tangent(T, xs, ys, tx, ty):
    fw = T.autograd.forward_ad
    with fw.dual_level():
        x = fw.make_dual(T.tensor(xs, dtype=T.float64), T.tensor(tx, dtype=T.float64))
        y = fw.make_dual(T.tensor(ys, dtype=T.float64), T.tensor(ty, dtype=T.float64))
        return fw.unpack_dual(x.pow(y)).tangent.tolist()


def test_pow_tangent_at_zero():
    xs, ys = zip(*POW_POINTS)
    tx, ty = [1.0] * len(xs), [0.5] * len(xs)
    want = []
    for x, y in POW_POINTS:
        dx = 0.0 if y == 0 else y * x ** (y - 1)
        dy = 0.0 if x == 0 and y >= 0 else x ** y * np.log(x)
        want.append(dx * 1.0 + dy * 0.5)
    assert_close(_pow_tangent(ag, xs, ys, tx, ty), want, rtol=1e-7, atol=0, equal_nan=True)


def test_pow_tangent_matches_torch(torch):
    xs, ys = zip(*POW_POINTS)
    tx, ty = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0], [0.5] * 6
    assert_close(_pow_tangent(ag, xs, ys, tx, ty), _pow_tangent(torch, xs, ys, tx, ty), rtol=1e-7,
                 atol=0, equal_nan=True)


def test_pow_double_backward_at_zero_is_finite():
    """d2/dx2 x^y at x = 0: 0 for y in (0, 1), 2 for y = 2 (PyTorch 2.13 gives NaN there, its
    own masked branches leaking; the first derivatives agree with it)."""
    x = ag.tensor([0.0, -0.0, 0.0], dtype=ag.float64, requires_grad=True)
    y = ag.tensor([0.0, 1.0, 2.0], dtype=ag.float64)
    (gx,) = ag.autograd.grad(x.pow(y).sum(), x, create_graph=True)
    np.testing.assert_array_equal(gx.tolist(), [0.0, 1.0, 0.0])
    (hx,) = ag.autograd.grad(gx.sum(), x)
    np.testing.assert_array_equal(hx.tolist(), [0.0, 0.0, 2.0])


@pytest.mark.parametrize("loss", ["smooth_l1_loss", "huber_loss"])
def test_smooth_losses_at_an_infinite_difference(loss):
    x = ag.tensor([-INF, INF, 0.25, 3.0, NAN], dtype=ag.float64, requires_grad=True)
    target = ag.zeros(5, dtype=ag.float64)
    getattr(ag.nn.functional, loss)(x, target, reduction="sum").backward()
    np.testing.assert_array_equal(x.grad.tolist()[:4], [-1.0, 1.0, 0.25, 1.0])
    assert np.isnan(x.grad[4].item())


@pytest.mark.parametrize("loss", ["smooth_l1_loss", "huber_loss"])
def test_smooth_losses_match_torch(torch, loss):
    def run(T):
        x = T.tensor([-INF, INF, 0.25, 3.0, -0.5, NAN], dtype=T.float64, requires_grad=True)
        t = T.tensor([0.0, 1.0, INF, 0.5, -0.25, 0.0], dtype=T.float64)
        getattr(T.nn.functional, loss)(x, t).backward()
        return x.grad.numpy()
    assert_close(run(ag), run(torch), rtol=1e-7, atol=0, equal_nan=True)


ZERO_DERIVATIVE = ["floor", "ceil", "round", "trunc", "sign"]


@pytest.mark.parametrize("op", ZERO_DERIVATIVE)
def test_zero_derivative_ops_have_zero_tangents(op):
    fw = ag.autograd.forward_ad
    with fw.dual_level():
        d = fw.make_dual(ag.tensor([-1.5, 0.0, 2.5]), ag.tensor([1.0, 2.0, 3.0]))
        t = fw.unpack_dual(getattr(d, op)()).tangent
        assert t is not None and t.dtype is ag.float32 and t.tolist() == [0.0, 0.0, 0.0]
        # and a function of it carries the zero on
        assert fw.unpack_dual(getattr(d, op)() * d).tangent.tolist() == \
            (getattr(d, op)() * ag.tensor([1.0, 2.0, 3.0])).tolist()
