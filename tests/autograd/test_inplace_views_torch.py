"""In-place view ops (t_, transpose_, swapdims_, swapaxes_, squeeze_, unsqueeze_) change the
tensor's shape in place: same elements, new shape and strides, version bumped, history through
the view's node; a leaf that requires grad refuses them. Compared with PyTorch."""
import numpy as np
import pytest

import aotgrad
from aotgrad.testing import assert_close

OPS = [
    ("t_", (), (2, 3)),
    ("transpose_", (0, 1), (2, 3)),
    ("swapdims_", (0, 2), (1, 2, 3)),
    ("swapaxes_", (1, 2), (1, 2, 3)),
    ("squeeze_", (0,), (1, 2, 3)),
    ("squeeze_", (), (1, 2, 1)),
    ("unsqueeze_", (1,), (2, 3)),
]


def _run(mod, name, args, shape):
    base = mod.arange(float(np.prod(shape))).reshape(shape)
    x = base.clone()
    v0 = x._version
    r = getattr(x, name)(*args)
    return r is x, tuple(x.shape), x.stride(), x._version - v0, x.numpy().copy()


@pytest.mark.parametrize("name,args,shape", OPS)
def test_shape_value_version(name, args, shape):
    same, new_shape, _, bumped, value = _run(aotgrad, name, args, shape)
    assert same and bumped == 1
    assert new_shape != shape or name == "squeeze_"
    assert value.size == int(np.prod(shape))


@pytest.mark.parametrize("name,args,shape", OPS)
def test_matches_torch(torch, name, args, shape):
    a = _run(aotgrad, name, args, shape)
    t = _run(torch, name, args, shape)
    assert a[:4] == t[:4]
    np.testing.assert_array_equal(a[4], t[4])


@pytest.mark.parametrize("name,args,shape", OPS)
def test_gradient_through_inplace_view(torch, name, args, shape):
    def grads(mod):
        w = mod.arange(float(np.prod(shape))).reshape(shape) + 1
        x = mod.tensor(np.linspace(-1, 1, int(np.prod(shape))).reshape(shape),
                       requires_grad=True)
        y = x * 2
        getattr(y, name)(*args)
        (y * getattr(w.clone(), name)(*args)).sum().backward()
        return x.grad.numpy()
    assert_close(grads(aotgrad), grads(torch), rtol=1e-6, atol=0, equal_nan=True)


def test_leaf_requiring_grad_refused():
    x = aotgrad.ones(1, 2, 3, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        x.squeeze_(0)
    with aotgrad.no_grad():
        x.squeeze_(0)
    assert tuple(x.shape) == (2, 3)


def test_inference_tensor_outside_inference_mode_refused():
    with aotgrad.inference_mode():
        c = aotgrad.ones(1, 2, 3)
        c.transpose_(0, 1)
        assert tuple(c.shape) == (2, 1, 3)
    with pytest.raises(RuntimeError, match="Inplace update to inference tensor"):
        c.transpose_(0, 1)
