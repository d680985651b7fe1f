"""poisson inside a compiled function: drawn from the generator's seeded stream by the
poisson prim (no graph break), the same numbers as eager for the same seed, zero gradient."""
import numpy as np
import pytest

import aotgrad as ag


@pytest.mark.parametrize("backend", ("interpret", "numba"))
@pytest.mark.parametrize("dtype", ("float32", "float64"))
def test_poisson_compiled_draws_as_eager(dtype, backend):
    d = getattr(ag, dtype)
    rate = ag.tensor([0.0, 0.5, 3.0, 40.0, 1e3], dtype=d, requires_grad=True)

    def f(r):
        return ag.poisson(r * 2) * 1.0 + r

    ag.manual_seed(7)
    e = f(rate)
    cf = ag.compile(f, backend=backend, fullgraph=True)
    ag.manual_seed(7)
    c = cf(rate)
    assert c.dtype is d
    np.testing.assert_array_equal(c.detach().numpy(), e.detach().numpy())
    c.sum().backward()   # poisson's gradient is zero: only the `+ r` term flows
    np.testing.assert_array_equal(rate.grad.numpy(), np.ones(5))
    assert cf(rate).shape == (5,)   # the next call draws anew from the advanced stream


def test_poisson_statistics_and_errors():
    ag.manual_seed(0)
    lam = np.array([0.3, 4.0, 250.0])
    draws = ag.poisson(ag.tensor(np.tile(lam, (4000, 1)))).numpy()
    assert np.all(draws == np.floor(draws)) and draws.min() >= 0
    # the sample mean is within 5 standard errors of the rate
    np.testing.assert_array_less(np.abs(draws.mean(0) - lam), 5 * np.sqrt(lam / 4000))
    with pytest.raises(RuntimeError, match="invalid"):
        ag.poisson(ag.tensor([1.0, -1.0]))
    with pytest.raises(RuntimeError, match="floating-point"):
        ag.poisson(ag.tensor([1, 2]))
