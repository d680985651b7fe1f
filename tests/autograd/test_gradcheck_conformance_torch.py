"""gradcheck behaves as PyTorch's where its own suite relies on it: func runs in grad mode
(hooks on intermediates work), stride-0 inputs and value-dependent output shapes are refused,
a backward that is not linear in grad_output fails, and the forward-mode check makes every
checked input dual."""
import pytest

import aotgrad as ag


def _x(*shape):
    return ag.rand(*shape, dtype=ag.float64, requires_grad=True)


def _shifted_hook(x):
    y = x.clone()
    y.register_hook(lambda g: g + 1e-2)
    return y


@pytest.mark.parametrize("lib", ["aotgrad", "torch"])
def test_gradcheck_conformance(lib, torch):
    T = ag if lib == "aotgrad" else torch
    x = T.ones(1, dtype=T.float64, requires_grad=True)
    with pytest.raises(RuntimeError, match="backward not multiplied by grad_output"):
        T.autograd.gradcheck(_shifted_hook, (x,), atol=1e-1)
    assert not T.autograd.gradcheck(_shifted_hook, (x,), atol=1e-1, raise_exception=False)
    with pytest.raises(RuntimeError, match="The 0th input has a dimension with stride 0"):
        T.autograd.gradcheck(lambda a: a, (x.expand(2, 2),), raise_exception=False)

    def grows(a):
        return T.cat([a, a]) if bool((a >= 1).all()) else a
    with pytest.raises(AssertionError, match="same shape when inputs are perturbed"):
        T.autograd.gradcheck(grows, (x,))
    with pytest.raises(AssertionError, match="Expected at least one of"):
        T.autograd.gradcheck(lambda a: a * 2, (x,), check_backward_ad=False)

    fw = T.autograd.forward_ad
    assert fw._current_level == -1

    def skewed(a, b):
        if fw._current_level >= 0:
            bp, bt = fw.unpack_dual(b)
            b = fw.make_dual(bp, bt * 1.1)
        return a + b
    a, b = (T.rand(2, dtype=T.float64, requires_grad=True) for _ in range(2))
    assert T.autograd.gradcheck(lambda u, v: u + v, (a, b), check_forward_ad=True)
    with pytest.raises(RuntimeError, match="forward mode mismatch for output 0 with respect to "
                                           "input 1"):
        T.autograd.gradcheck(skewed, (a, b), check_forward_ad=True)


@pytest.mark.parametrize("lib", ["aotgrad", "torch"])
def test_get_numerical_jacobian_with_a_target(lib, torch):
    import warnings
    from importlib import import_module
    T = ag if lib == "aotgrad" else torch
    get = import_module(T.__name__ + ".autograd.gradcheck").get_numerical_jacobian
    a, b = _x(2, 2) if T is ag else torch.rand(2, 2, dtype=torch.float64, requires_grad=True), \
        _x(2, 2) if T is ag else torch.rand(2, 2, dtype=torch.float64, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        only_a = get(lambda xs: (2 * xs[0] + xs[1],), (a, b), target=a, eps=1e-6)
        both = get(lambda xs: (2 * xs[0] + xs[1],), (a, b), eps=1e-6)
    assert len(only_a) == 1 and len(both) == 2
    assert abs(float((only_a[0] - 2 * T.eye(4, dtype=T.float64)).abs().max())) < 1e-6
    assert abs(float((both[1] - T.eye(4, dtype=T.float64)).abs().max())) < 1e-6
