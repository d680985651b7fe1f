"""Full reductions that pick one value (max(), min(), median(), nanmedian() without a dim)
split the gradient evenly among the elements equal to the result, a NaN result among the
NaN elements, as PyTorch does; amax/amin keep their own rule (NaN gradients where the input
has NaN), and the dim forms send it to the one returned index. Eager, compiled and PyTorch
agree."""
import numpy as np
import pytest

import aotgrad as ag
from aotgrad.testing import compare_with_eager
from aotgrad.testing import assert_close

NAN = float("nan")
# ties, NaNs, a single NaN, ties at the ends, -0.0 == 0.0, +-inf
INPUTS = [[1., 3., 3., 2.], [1., NAN, 3., NAN], [1., NAN, 3., 2.], [3., 1., 3., 3.],
          [-0.0, 0.0, -1., 1.], [float("inf"), 1., float("inf"), float("-inf")],
          [NAN, NAN, NAN, 2.], [[2., 5.], [5., NAN]]]
OPS = {
    "max": lambda x: x.max(), "min": lambda x: x.min(),
    "median": lambda x: x.median(), "nanmedian": lambda x: x.nanmedian(),
    "amax": lambda x: x.amax(), "amin": lambda x: x.amin(),
    "max-dim": lambda x: x.max(0).values, "min-dim": lambda x: x.min(0).values,
    "median-dim": lambda x: x.median(0).values, "nanmedian-dim": lambda x: x.nanmedian(0).values,
    "amax-dim": lambda x: x.amax(0),
}


def _grad(T, op, values, dtype):
    x = T.tensor(values, dtype=dtype, requires_grad=True)
    y = OPS[op](x)
    y.backward(T.full_like(y, 1.5))
    return y, x.grad


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("values", INPUTS, ids=range(len(INPUTS)))
def test_gradient_and_node_match_torch(torch, op, values):
    for dtype in ("float64", "float32"):
        ty, tg = _grad(torch, op, values, getattr(torch, dtype))
        ay, ag_ = _grad(ag, op, values, getattr(ag, dtype))
        np.testing.assert_array_equal(ay.detach().numpy(), ty.detach().numpy())
        assert_close(ag_.numpy(), tg.numpy(), rtol=1e-6, atol=0, equal_nan=True)
        assert str(ag_.dtype).rsplit(".")[-1] == dtype
        assert ay.grad_fn.name() == ty.grad_fn.name()


@pytest.mark.parametrize("values", [[1., NAN, 3., NAN], [NAN, 1., NAN], [NAN, NAN, 2.],
                                    [2., NAN, NAN, NAN], [[NAN, 1., NAN], [4., 4., 2.]]])
def test_median_dim_index_is_torchs_with_nan(torch, values):
    for op in ("median", "nanmedian"):
        for d in range(np.ndim(values)):
            t = getattr(torch.tensor(values), op)(d)
            a = getattr(ag.tensor(values), op)(d)
            np.testing.assert_array_equal(a.indices.numpy(), t.indices.numpy())
            np.testing.assert_array_equal(a.values.numpy(), t.values.numpy())


def test_double_backward_matches_torch(torch):
    def run(T):
        x = T.tensor([1., 3., 3., NAN, NAN], dtype=T.float64, requires_grad=True)
        g = T.tensor(2., dtype=T.float64, requires_grad=True)
        gx, = T.autograd.grad(x.max(), x, g, create_graph=True)
        (gx * T.arange(5, dtype=T.float64)).sum().backward()
        return gx.detach().numpy(), g.grad.numpy()
    for a, t in zip(run(ag), run(torch)):
        assert_close(a, t, rtol=1e-7, atol=0, equal_nan=True)


@pytest.mark.parametrize("values", [[1., 3., 3., 2.], [3., 1., 3., 3.], [2., 1., 2., 3.]])
def test_forward_mode_with_ties_matches_torch(torch, values):
    # (with NaN in the input PyTorch's tangent is NaN, its forward rule not counting NaN
    # as equal to NaN; ours is the mean of the NaN positions' tangents, like the reverse rule)
    def run(T):
        fwAD = T.autograd.forward_ad
        with fwAD.dual_level():
            x = fwAD.make_dual(T.tensor(values, dtype=T.float64),
                               T.tensor([1., 2., 3., 4.], dtype=T.float64))
            return [fwAD.unpack_dual(f(x)).tangent.item()
                    for f in (lambda x: x.max(), lambda x: x.min(), lambda x: x.median(),
                              lambda x: x.nanmedian())]
    assert_close(run(ag), run(torch), rtol=1e-7, atol=0, equal_nan=True)


@pytest.mark.parametrize("op", ["max", "min", "median", "nanmedian"])
@pytest.mark.parametrize("values", INPUTS, ids=range(len(INPUTS)))
def test_compiled_matches_eager(op, values):
    x = ag.tensor(values, dtype=ag.float32, requires_grad=True)
    compare_with_eager(lambda x: OPS[op](x) * 2.0, x, backend="interpret")
