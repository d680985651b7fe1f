"""A floating tensor with a Python number (op_base._binary_args' eager shortcut: the number
as a stride-0 constant of the tensor's shape) gives what the general path gives: the values
of the same op with a 0-d tensor of the number, the dtype, the gradient, the node's edges,
and PyTorch's results where installed."""
import numpy as np
import pytest

import aotgrad as ag

OPS = [("add", lambda x, s: x + s), ("radd", lambda x, s: s + x), ("sub", lambda x, s: x - s),
       ("rsub", lambda x, s: s - x), ("mul", lambda x, s: x * s), ("div", lambda x, s: x / s),
       ("rdiv", lambda x, s: s / x), ("maximum", lambda x, s: ag.clamp(x, min=s))]


@pytest.mark.parametrize("scalar", [2.5, -3, 0.0, float("nan"), float("inf")], ids=repr)
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("name,fn", OPS, ids=[n for n, _ in OPS])
def test_number_operand_equals_a_zero_dim_operand(name, fn, dtype, scalar):
    x = ag.tensor(np.array([[1.5, -2.0, 0.0], [-0.0, 3.0, 7.0]], dtype), requires_grad=True)
    y = fn(x, scalar)
    y_ref = fn(x, ag.tensor(np.array(scalar, dtype)))
    assert y.dtype == x.dtype == y_ref.dtype and tuple(y.shape) == (2, 3)
    np.testing.assert_array_equal(y.detach().numpy(), y_ref.detach().numpy())
    g, = ag.autograd.grad(y.sum(), [x])
    g_ref, = ag.autograd.grad(y_ref.sum(), [x])
    np.testing.assert_array_equal(g.numpy(), g_ref.numpy())
    # the number has no edge in the node (PyTorch's `tensor op number` nodes)
    assert all(e[0] is None or e[0].name() == "AccumulateGrad"
               for e in y.grad_fn.next_functions)


def test_zero_dim_and_empty_tensors_with_a_number():
    for shape in [(), (0,), (0, 3)]:
        x = ag.zeros(*shape, requires_grad=True)
        y = x * 2.0 + 1
        assert tuple(y.shape) == shape and y.dtype == ag.float32
        g, = ag.autograd.grad(y.sum(), [x])
        assert tuple(g.shape) == shape


def test_in_place_op_with_a_number_and_the_number_stays_unwritten():
    x = ag.tensor([1.0, 2.0])
    y = x * 3.0
    y.add_(1.0)
    np.testing.assert_array_equal(y.numpy(), [4.0, 7.0])
    np.testing.assert_array_equal((x * 3.0).numpy(), [3.0, 6.0])


def test_matches_pytorch(torch):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 4)).astype(np.float32)
    ours = ag.tensor(a, requires_grad=True)
    theirs = torch.tensor(a, requires_grad=True)
    for t, M in ((ours, ag), (theirs, torch)):
        ((2.0 - t) * 0.5 / 3 + 1e-3).pow(2).sum().backward()
    np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-6)
