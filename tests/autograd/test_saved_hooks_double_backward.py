"""saved_tensors_hooks around a double backward: the tensors the backward of `a ** b` (b a
Python number) saves when it runs with create_graph=True are the ones PyTorch's saves (the
base for the power, the incoming gradient for the product; never the number b), so a pack
hook that changes the values changes the second derivative exactly as in PyTorch.

With `pack = 2 * x` and `unpack = identity`, a packed tensor reads back doubled but keeps the
saved tensor's place in the graph (its gradient flows to the original unchanged). For
s = sum(a ** 3): the forward saves a (doubled -> g = 3 (2a)^2, dg/da = 12 a); the backward
under the hooks saves a for a^2 and the incoming ones for the product (both doubled -> 24 a);
both together give 48 a."""
import numpy as np
import pytest

import aotgrad as ag
from aotgrad.testing import assert_close


def _double(x):
    return 2 * x


def _same(x):
    return x


def _second_derivative(T, exponent, pack_forward, pack_backward):
    """d/da sum(d/da sum(a ** exponent)) with the (2x, identity) hooks around the forward
    and/or the first backward."""
    H = T.autograd.graph.saved_tensors_hooks
    a = T.tensor([0.5, 1.25, 2.0, 3.0], dtype=T.float64, requires_grad=True)
    if pack_forward:
        with H(_double, _same):
            s = T.sum(a ** exponent)
    else:
        s = T.sum(a ** exponent)
    if pack_backward:
        with H(_double, _same):
            (g,) = T.autograd.grad(s, (a,), create_graph=True)
            g.sum().backward()
    else:
        (g,) = T.autograd.grad(s, (a,), create_graph=True)
        g.sum().backward()
    return np.array(g.tolist()), np.array(a.grad.tolist()), np.array(a.tolist())


@pytest.mark.parametrize("pack_forward,pack_backward,factor",
                         [(False, False, 6), (True, False, 12), (False, True, 24),
                          (True, True, 48)])
def test_cube_second_derivative_closed_form(pack_forward, pack_backward, factor):
    g, gg, a = _second_derivative(ag, 3, pack_forward, pack_backward)
    assert_close(gg, factor * a, rtol=1e-12, atol=0, equal_nan=True)
    assert_close(g, (12 if pack_forward else 3) * a ** 2, rtol=1e-12, atol=0, equal_nan=True)


@pytest.mark.parametrize("exponent", [3, 2, 0.5, -1.5, 2.5, 1, 0])
@pytest.mark.parametrize("pack_forward,pack_backward", [(True, False), (False, True),
                                                        (True, True)])
def test_number_exponent_matches_torch(torch, exponent, pack_forward, pack_backward):
    if exponent == 0.5 and pack_backward:
        pytest.skip("a ** 0.5's backward takes rsqrt (bit-exact with compiled code): a hook "
                    "around the double backward sees rsqrt's result, PyTorch's sees a")
    try:
        theirs = _second_derivative(torch, exponent, pack_forward, pack_backward)
    except RuntimeError:  # a ** 0: g (zeros) does not require grad, on either side
        with pytest.raises(RuntimeError):
            _second_derivative(ag, exponent, pack_forward, pack_backward)
        return
    ours = _second_derivative(ag, exponent, pack_forward, pack_backward)
    for o, t in zip(ours, theirs):
        assert_close(o, t, rtol=1e-12, atol=0, equal_nan=True)


def test_number_exponent_is_not_packed():
    packed = []
    a = ag.tensor([1.0, 2.0], requires_grad=True)
    with ag.autograd.graph.saved_tensors_hooks(lambda t: packed.append(t.tolist()) or t,
                                               _same):
        s = (a ** 3).sum()
        (g,) = ag.autograd.grad(s, (a,), create_graph=True)
    # the forward packs a; its backward packs a (for a ** 2) and the ones (for the product)
    assert packed == [[1.0, 2.0], [1.0, 2.0], [1.0, 1.0]]
    assert g.tolist() == [3.0, 12.0]


def test_pow_number_exponent_keeps_float32_and_compiles():
    f = ag.compile(lambda x: (x ** 3 + x ** -1.5).sum(), backend="interpret")
    x = ag.tensor([0.5, 1.5, 2.0], requires_grad=True)
    f(x).backward()
    expected = 3 * np.array([0.5, 1.5, 2.0]) ** 2 - 1.5 * np.array([0.5, 1.5, 2.0]) ** -2.5
    assert x.grad.dtype is ag.float32
    assert_close(x.grad.numpy(), expected, rtol=1e-6, atol=0, equal_nan=True, check_dtype=False)
