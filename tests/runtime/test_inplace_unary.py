"""The in-place unary methods PyTorch's Tensor has (`x.sin_()`, `x.log1p_()`, ...): the same
tensor back, the values of the out-of-place op, and a gradient through the write."""
import math

import numpy as np
import pytest

import aotgrad as ag
from aotgrad.testing import assert_close

# name -> (derivative at x, as a Python function): closed forms that need no oracle
DERIVATIVES = {
    "sin": math.cos, "cos": lambda v: -math.sin(v), "tan": lambda v: 1 / math.cos(v) ** 2,
    "rsqrt": lambda v: -0.5 * v ** -1.5, "log1p": lambda v: 1 / (1 + v),
    "expm1": math.exp, "log2": lambda v: 1 / (v * math.log(2)),
    "log10": lambda v: 1 / (v * math.log(10)),
    "erf": lambda v: 2 / math.sqrt(math.pi) * math.exp(-v * v),
}
VALUES = [0.3, 1.7, 0.5]


@pytest.mark.parametrize("name", sorted(DERIVATIVES))
def test_inplace_unary_writes_the_out_of_place_value_and_differentiates(name):
    x = ag.tensor(VALUES, dtype=ag.float64)
    want = getattr(x, name)().numpy()
    assert getattr(x, name + "_")() is x
    assert_close(x.numpy(), want, rtol=1e-15, atol=0, equal_nan=True)
    leaf = ag.tensor(VALUES, dtype=ag.float64, requires_grad=True)
    y = leaf * 1
    getattr(y, name + "_")()
    y.sum().backward()
    assert_close(leaf.grad.numpy(), [DERIVATIVES[name](v) for v in VALUES], rtol=1e-12, atol=0,
                 equal_nan=True)


@pytest.mark.parametrize("name", sorted(DERIVATIVES))
def test_inplace_unary_matches_torch(torch, name):
    ours, theirs = ag.tensor(VALUES), torch.tensor(VALUES)
    getattr(ours, name + "_")()
    getattr(theirs, name + "_")()
    assert_close(ours.numpy(), theirs.numpy(), rtol=2e-6, atol=0, equal_nan=True)
    assert ours.dtype is ag.float32


def test_inplace_unary_on_a_leaf_that_requires_grad_raises():
    with pytest.raises(RuntimeError, match="leaf"):
        ag.ones(2, requires_grad=True).sin_()
