"""gradcheck's check that a backward copes with outputs that get no gradient (None), and the
tensor hooks of such an output, which see None as in PyTorch."""
import warnings

import pytest

import aotgrad as ag
from aotgrad.autograd.gradcheck import GradcheckError


def _clone_with_hook(hook):
    def fn(x):
        y = x.clone()
        y.register_hook(hook)
        return y
    return fn


def _refuse_none(g):
    if g is None:
        raise RuntimeError("x is undefined")


def test_backward_that_raises_on_none_fails_the_check():
    x = ag.ones(2, dtype=ag.float64, requires_grad=True)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        with pytest.raises(GradcheckError, match="handle undefined output grads"):
            ag.autograd.gradcheck(_clone_with_hook(_refuse_none), (x,))
    assert any("Backwards compatibility" in str(m.message) for m in w)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert ag.autograd.gradcheck(_clone_with_hook(_refuse_none), (x,),
                                     raise_exception=False) is False
    assert ag.autograd.gradcheck(_clone_with_hook(_refuse_none), (x,),
                                 check_undefined_grad=False)


class _OnesForNone(ag.autograd.Function):
    """Linear in a given gradient, but makes up ones when given none."""

    @staticmethod
    def forward(ctx, x):
        ctx.set_materialize_grads(False)
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return ag.ones(2, dtype=ag.float64) if g is None else 2 * g


def test_backward_that_makes_up_a_gradient_fails_the_check():
    x = ag.ones(2, dtype=ag.float64, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(GradcheckError, match="undefined or zero"):
            ag.autograd.gradcheck(_OnesForNone.apply, (x,))


@pytest.mark.parametrize("fn", [lambda x: ag.var_mean(x, 0), lambda x: x.split(1),
                                lambda x: (x.sin(), x * 3), lambda x: x.sort(0)])
def test_correct_backwards_pass_with_outputs_undefined_one_at_a_time(fn):
    x = ag.tensor([[0.3, -1.2], [2.0, 0.7]], dtype=ag.float64, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert ag.autograd.gradcheck(fn, (x,))


def _hook_calls(T):
    seen = []
    x = T.randn(4, requires_grad=True)
    a, b = x.split(2)
    b.register_hook(lambda g: seen.append(("b", g is None)))
    a.register_hook(lambda g: seen.append(("a", g is None)))
    a.sum().backward()

    class Drop(T.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            return t.clone()

        @staticmethod
        def backward(ctx, g):
            return None
    y = x.clone()
    y.register_hook(lambda g: seen.append(("y", g is None)))
    Drop.apply(y).sum().backward()
    return seen


def test_hooks_of_an_output_without_gradient_see_none():
    assert sorted(_hook_calls(ag)) == [("a", False), ("b", True), ("y", True)]


def test_hooks_see_none_as_in_torch(torch):
    assert sorted(_hook_calls(ag)) == sorted(_hook_calls(torch))
