"""Casts to float16/bfloat16 inside a compiled program round exactly as eager's (round to
nearest even; overflow to inf, subnormals, NaN, +-inf and -0.0 kept), and chains of
elementwise ops in a 16-bit dtype store eager's bits, on both backends."""
import numpy as np
import pytest

import aotgrad as ag
from aotgrad.testing import assert_close

LOW = ("bfloat16", "float16")
BACKENDS = ("interpret", "numba")


def _edges(np_dtype):
    f32 = np.float32
    v = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 1 + 2 ** -8, 1 + 2 ** -8 + 2 ** -9,
         1 + 3 * 2 ** -9, 1 + 2 ** -11, 1 + 3 * 2 ** -11, 1 + 2 ** -11 + 2 ** -20, 65504.0,
         65519.0, 65520.0, 70000.0, -65520.0, 2.0 ** -14, 2.0 ** -24, 2.0 ** -25,
         3 * 2.0 ** -26, 2.0 ** -26, 1e-7, -1e-7, 1e-40, -1e-42, 2.0 ** -133, 2.0 ** -134,
         3.3895313e38, 3.39e38, 3.4e38, -3.4e38, float(np.finfo(f32).max),
         float(np.finfo(f32).tiny), 0.1, 1 / 3, np.pi, 1e30]
    rng = np.random.default_rng(0)
    rand = [rng.standard_normal(64) * 10.0 ** rng.integers(-8, 6, 64),
            np.ldexp(rng.uniform(1, 2, 32), rng.integers(-150, 128, 32))]
    with np.errstate(over="ignore"):
        return np.concatenate([np.array(v, np.float64)] + rand).astype(np_dtype)


def _same_bits(a, b):
    a, b = a.detach().numpy(), b.detach().numpy()
    assert a.dtype == b.dtype and a.shape == b.shape
    nan = np.isnan(a.astype(np.float64))
    np.testing.assert_array_equal(nan, np.isnan(b.astype(np.float64)))
    np.testing.assert_array_equal(a[~nan].view(np.uint8 if a.itemsize == 1 else
                                                f"u{a.itemsize}"),
                                  b[~nan].view(f"u{b.itemsize}"))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("source", ("float32", "float64"))
@pytest.mark.parametrize("dtype", LOW)
def test_cast_rounds_as_eager(dtype, source, backend):
    d = getattr(ag, dtype)
    x = ag.tensor(_edges(getattr(np, source)))

    def f(x):
        # a round trip through the 16-bit dtype, a 16-bit result and a cast of a sum
        return x.to(d).to(x.dtype), x.to(d), (x + 0.5).to(d).float()

    with np.errstate(over="ignore", invalid="ignore"):
        e = f(x)
        c = ag.compile(f, backend=backend, fullgraph=True)(x)
    for a, b in zip(e, c):
        _same_bits(a, b)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", LOW)
def test_elementwise_chain_in_16_bit_is_bit_exact(dtype, backend):
    d = getattr(ag, dtype)
    ag.manual_seed(0)
    x, y = ag.randn(257).to(d), (ag.rand(257) + 0.5).to(d)

    def f(x, y):
        h = x * y + 0.1          # every intermediate is a 16-bit tensor eagerly
        g = ag.tanh(h) / y - x.exp() * 0.3
        return g, (g * g).sqrt() + h, ag.full((3,), 0.1, dtype=d) * 3

    e = f(x, y)
    c = ag.compile(f, backend=backend, fullgraph=True)(x, y)
    for a, b in zip(e, c):
        assert b.dtype is d
        _same_bits(a, b)


@pytest.mark.parametrize("dtype", LOW)
def test_half_and_bfloat16_methods_round_inside_the_program(dtype):
    d = getattr(ag, dtype)
    ag.manual_seed(1)
    x = ag.randn(33, 7) * 3

    def f(x):
        # rounding on purpose: the float32 result holds the 16-bit value eager holds
        q = (x * 1.7).to(d).float() - x * 1.7
        y = (x.half() if d is ag.float16 else x.bfloat16()) * 2 + 1
        return q, y.float() - x

    e = f(x)
    c = ag.compile(f, fullgraph=True)(x)
    for a, b in zip(e, c):
        assert a.dtype is b.dtype is ag.float32 and a.abs().max().item() > 0
        _same_bits(a, b)


@pytest.mark.parametrize("dtype", LOW)
def test_matmul_and_reductions_in_16_bit_round_once_like_eager(dtype):
    """A matmul or a reduction rounds its float32 result once, as eager: equal to eager
    within one unit in the last 16-bit place (float32 accumulation order may differ)."""
    d = getattr(ag, dtype)
    ag.manual_seed(2)
    x, w = ag.randn(16, 32).to(d), ag.randn(32, 8).to(d)

    def f(x, w):
        h = ag.tanh(x @ w) * 0.5 + 1
        return h, h.sum(dim=1), h.mean()

    eps = float(np.finfo(np.float16).eps) if d is ag.float16 else 2.0 ** -7
    for a, b in zip(f(x, w), ag.compile(f, fullgraph=True)(x, w)):
        assert b.dtype is d
        assert_close(b.float().numpy(), a.float().numpy(), rtol=eps, atol=0, equal_nan=True)
