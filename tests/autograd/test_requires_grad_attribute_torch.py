"""Tensor.requires_grad as an attribute: only floating-point tensors may be set to require
grad (by assignment too), it cannot be deleted, and neither can .data; `del t.grad` clears
the gradient."""
import pytest

import aotgrad as ag

INTEGERS = ["int8", "int16", "int32", "int64"]


@pytest.mark.parametrize("dtype", INTEGERS)
def test_integer_tensors_cannot_require_grad(dtype):
    dt = getattr(ag, dtype)
    t = ag.ones(1, dtype=dt)
    t.requires_grad = False
    t.requires_grad_(False)
    with pytest.raises(RuntimeError, match="floating point"):
        t.requires_grad = True
    with pytest.raises(RuntimeError, match="floating point"):
        t.requires_grad_()
    with pytest.raises(RuntimeError, match="floating point"):
        ag.ones(1, dtype=dt, requires_grad=True)
    assert t.requires_grad is False


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_floating_tensors_can(dtype):
    t = ag.ones(2, dtype=getattr(ag, dtype))
    t.requires_grad = True
    assert t.requires_grad and t.is_leaf
    (t * 2).sum().backward()
    assert t.grad.tolist() == [2.0, 2.0]


def test_attribute_deletion():
    x = ag.randn(3, requires_grad=True)
    (x * 2).sum().backward()
    del x.grad
    assert x.grad is None
    with pytest.raises(RuntimeError):
        del x.data
    with pytest.raises(TypeError):
        x.data = None
    with pytest.raises(RuntimeError):
        del x.requires_grad
    assert x.requires_grad


def test_same_errors_as_torch(torch):
    for T in (ag, torch):
        t = T.ones(1, dtype=T.int64)
        with pytest.raises(RuntimeError):
            t.requires_grad = True
        x = T.randn(2, requires_grad=True)
        with pytest.raises(RuntimeError):
            del x.requires_grad
