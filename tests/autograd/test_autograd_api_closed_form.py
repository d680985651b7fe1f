"""The autograd API additions without PyTorch, against closed forms: gradient edges,
multi-grad hooks, mutation of saved tensors, grad_dtype, Variable, calling nodes by hand,
scatter_reduce, gradcheck of outputs that view their input."""
import numpy as np
import pytest

import aotgrad as ag
from aotgrad.autograd import graph as G
from aotgrad.testing import assert_close


def _x(*v):
    return ag.tensor(list(v), dtype=ag.float64, requires_grad=True)


def test_gradient_edge_of_intermediate_and_leaf():
    x = _x(1., -2.)
    h = x * 3
    out = (h * h).sum()
    gh, gx = ag.autograd.grad(out, (G.get_gradient_edge(h), G.get_gradient_edge(x)))
    assert_close(gh.numpy(), 2 * 3 * x.detach().numpy(), rtol=1e-7, atol=0, equal_nan=True)
    assert_close(gx.numpy(), 18 * x.detach().numpy(), rtol=1e-7, atol=0, equal_nan=True)
    with pytest.raises(RuntimeError, match="does not require gradients"):
        G.get_gradient_edge(ag.ones(1))


def test_multi_grad_hook_modes():
    a, b = _x(1., 2.), _x(3., 4.)
    calls = []
    h = G.register_multi_grad_hook((a, b), lambda gs: calls.append([g is None for g in gs]))
    (a * 2).sum().backward()
    (a * b).sum().backward()
    h.remove()
    (a * b).sum().backward()
    assert calls == [[False, True], [False, False]]
    firsts = []
    G.register_multi_grad_hook((a, b), lambda g: firsts.append(g), mode="any")
    (a * b).sum().backward()
    assert len(firsts) == 1


def test_allow_mutation_uses_values_at_save_time():
    with G.allow_mutation_on_saved_tensors():
        a = _x(1., 2.)
        b = a * 1
        y = (b * b).sum()
        b.mul_(10)
        y.backward()
    assert_close(a.grad.numpy(), [2., 4.], rtol=1e-7, atol=0, equal_nan=True)


def test_grad_dtype_variable_and_del_grad():
    x = ag.ones(2, requires_grad=True)
    x.grad_dtype = ag.float64
    (x * 2).sum().backward()
    assert x.grad.dtype is ag.float64
    del x.grad
    assert x.grad is None
    v = ag.autograd.Variable(x * 2)
    assert isinstance(v, ag.autograd.Variable) and v.grad_fn is None and not v.requires_grad


def test_calling_a_node():
    x = _x(2., 5.)
    node = x.exp().grad_fn
    assert_close(node(ag.tensor(1., dtype=ag.float64)).detach().numpy(), np.exp([2., 5.]),
                 rtol=1e-7, atol=0, equal_nan=True)
    assert node(None) is None
    with pytest.raises(TypeError, match="expected 1 arguments, got 2"):
        node(ag.ones(2), ag.ones(2))


@pytest.mark.parametrize("reduce,expected", [("sum", [4., 6.]), ("prod", [3., 8.]),
                                             ("mean", [2., 3.]), ("amax", [3., 4.]),
                                             ("amin", [1., 2.])])
def test_scatter_reduce_closed_form(reduce, expected):
    src = ag.tensor([1., 2., 3., 4.])
    out = ag.zeros(2).scatter_reduce(0, ag.tensor([0, 1, 0, 1]), src, reduce,
                                     include_self=False)
    assert_close(out.numpy(), expected, rtol=1e-7, atol=0, equal_nan=True)


def test_scatter_reduce_amax_ties_share_the_gradient():
    x = ag.tensor([5.], requires_grad=True)
    src = ag.tensor([5., 5., 1.], requires_grad=True)
    out = x.scatter_reduce(0, ag.tensor([0, 0, 0]), src, "amax")
    out.backward()
    assert_close(x.grad.numpy(), [1 / 3], rtol=1e-7, atol=0, equal_nan=True)
    assert_close(src.grad.numpy(), [1 / 3, 1 / 3, 0.], rtol=1e-7, atol=0, equal_nan=True)


@pytest.mark.parametrize("fn", [lambda t: t[:], lambda t: t.t(), lambda t: t.reshape(-1),
                                lambda t: t.split(1, 1)])
def test_gradcheck_of_views(fn):
    x = ag.tensor(np.linspace(-1, 1, 6).reshape(2, 3), dtype=ag.float64, requires_grad=True)
    assert ag.autograd.gradcheck(fn, (x,))
