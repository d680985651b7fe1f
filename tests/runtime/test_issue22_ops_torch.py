"""gcd, lcm, nextafter, as_strided, diagonal_scatter, resize_ and poisson against PyTorch;
gradients by gradcheck; compiled == eager for the ops that compile."""
import numpy as np
import pytest

import aotgrad
from aotgrad.autograd import gradcheck
from aotgrad.testing import assert_close


def _t(torch, a):
    return aotgrad.tensor(a), torch.tensor(a)


@pytest.mark.parametrize("name", ("int8", "int16", "int32", "int64"))
def test_gcd_lcm_match_torch(torch, name):
    rng = np.random.default_rng(0)
    a = rng.integers(-60, 60, 50).astype(name)
    b = rng.integers(-60, 60, 50).astype(name)
    a[:3], b[:3] = 0, [0, 5, 0]
    (x, tx), (y, ty) = _t(torch, a), _t(torch, b)
    np.testing.assert_array_equal(aotgrad.gcd(x, y).numpy(), torch.gcd(tx, ty).numpy())
    np.testing.assert_array_equal(x.lcm(y).numpy(), tx.lcm(ty).numpy())
    with pytest.raises(RuntimeError, match="gcd.*float32"):
        aotgrad.gcd(aotgrad.tensor([1.0]), aotgrad.tensor([2.0]))


@pytest.mark.parametrize("dtype", ("float32", "float64"))
def test_nextafter_matches_torch(torch, dtype):
    a = np.array([1.0, 0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, 1e-38, 3.0], dtype)
    b = np.array([2.0, -1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 0.0, np.nan], dtype)
    (x, tx), (y, ty) = _t(torch, a), _t(torch, b)
    got = aotgrad.nextafter(x, y)
    assert got.dtype.name == dtype
    np.testing.assert_array_equal(got.numpy(), torch.nextafter(tx, ty).numpy())


@pytest.mark.parametrize("args", [((3, 3), (2, 1), 1), ((2, 2), (1, 2)), ((4,), (3,)),
                                  ((2, 3), (0, 1), 2), ((), (), 5)])
def test_as_strided_matches_torch_and_gradcheck(torch, args):
    x, tx = _t(torch, np.arange(12.0).reshape(3, 4))
    np.testing.assert_array_equal(x.as_strided(*args).numpy(), tx.as_strided(*args).numpy())
    w = aotgrad.randn(3, 4, dtype=aotgrad.float64, requires_grad=True)
    assert gradcheck(lambda t: aotgrad.as_strided(t, *args), (w,))
    tw = torch.tensor(w.detach().numpy(), requires_grad=True)
    g = np.random.default_rng(1).normal(size=x.as_strided(*args).shape)
    (aotgrad.as_strided(w, *args) * aotgrad.tensor(g)).sum().backward()
    (torch.as_strided(tw, *args) * torch.tensor(g)).sum().backward()
    assert_close(w.grad.numpy(), tw.grad.numpy(), rtol=1e-12, atol=0, equal_nan=True)


def test_as_strided_out_of_bounds_names_sizes():
    with pytest.raises(RuntimeError, match=r"as_strided.*\[3, 3\].*out of"):
        aotgrad.zeros(4).as_strided((3, 3), (3, 1))


@pytest.mark.parametrize("offset,dims", [(0, (0, 1)), (1, (0, 1)), (-1, (1, 2)), (2, (2, 0))])
def test_diagonal_scatter_matches_torch_and_gradcheck(torch, offset, dims):
    rng = np.random.default_rng(2)
    a = rng.normal(size=(3, 4, 5))
    x, tx = _t(torch, a)
    src_shape = tx.diagonal(offset, *dims).shape
    s = rng.normal(size=src_shape)
    np.testing.assert_array_equal(
        aotgrad.diagonal_scatter(x, aotgrad.tensor(s), offset, *dims).numpy(),
        torch.diagonal_scatter(tx, torch.tensor(s), offset, *dims).numpy())
    xs = (aotgrad.tensor(a, requires_grad=True), aotgrad.tensor(s, requires_grad=True))
    assert gradcheck(lambda p, q: aotgrad.diagonal_scatter(p, q, offset, *dims), xs)


def test_resize_matches_torch(torch):
    x, tx = _t(torch, np.arange(6.0, dtype=np.float32))
    x.resize_(2, 2)
    tx.resize_(2, 2)
    assert x.tolist() == tx.tolist() and x._version == tx._version
    x.resize_as_(aotgrad.zeros(5))
    assert x.shape == (5,) and x[:4].tolist() == [0.0, 1.0, 2.0, 3.0]
    with pytest.raises(RuntimeError, match="require grad"):
        aotgrad.ones(2, requires_grad=True).resize_(3)


def test_poisson_moments_and_zero_gradient():
    rates = aotgrad.tensor([0.0, 0.5, 4.0, 30.0], dtype=aotgrad.float64).repeat(4000, 1)
    rates.requires_grad_(True)
    g = aotgrad.Generator().manual_seed(3)
    draws = aotgrad.poisson(rates, generator=g)
    assert draws.dtype is aotgrad.float64 and draws.grad_fn.name() == "PoissonBackward0"
    d = draws.detach().numpy()
    assert np.all(d == np.round(d)) and np.all(d[:, 0] == 0)
    lam = np.array([0.0, 0.5, 4.0, 30.0])
    assert np.all(np.abs(d.mean(0) - lam) <= 5 * np.sqrt(lam / 4000) + 1e-12)
    draws.sum().backward()
    assert float(rates.grad.abs().sum()) == 0.0
    again = aotgrad.poisson(rates.detach(), generator=aotgrad.Generator().manual_seed(3))
    np.testing.assert_array_equal(again.numpy(), d)


@pytest.mark.parametrize("backend", ("interpret", "numba"))
def test_compiled_equals_eager(backend):
    def f(a, b, x, y, w, s):
        return (aotgrad.gcd(a, b), aotgrad.lcm(a, b), aotgrad.nextafter(x, y),
                w.as_strided((3, 3), (2, 1), 1) * 2, aotgrad.diagonal_scatter(w, s, 1))

    rng = np.random.default_rng(4)
    args = (aotgrad.tensor(rng.integers(-40, 40, 20)), aotgrad.tensor(rng.integers(-40, 40, 20)),
            aotgrad.randn(20), aotgrad.randn(20), aotgrad.randn(3, 4), aotgrad.randn(3))
    for e, c in zip(f(*args), aotgrad.compile(f, backend=backend)(*args)):
        assert e.dtype is c.dtype
        np.testing.assert_array_equal(e.numpy(), c.numpy())
