"""aotgrad.special and the other new elementwise functions at their closed forms and
special values (no PyTorch needed), second derivatives, and against PyTorch on NaN, inf,
0-d, empty and integer inputs."""
import math

import numpy as np
import pytest

import aotgrad as ag
from aotgrad import special
from aotgrad.testing import assert_close

EULER = 0.5772156649015329
ZETA3 = 1.2020569031595942


def _t(v, dtype=ag.float64, grad=False):
    return ag.tensor(v, dtype=dtype, requires_grad=grad)


def _v(t):
    return t.detach().numpy()


# ---- closed forms ---------------------------------------------------------------------------
@pytest.mark.parametrize("dtype,tol", [(ag.float64, 1e-14), (ag.float32, 3e-7)])
def test_erfinv_inverts_erf(dtype, tol):
    x = np.linspace(-0.999999, 0.999999, 2001)
    y = _v(special.erfinv(_t(x, dtype)))
    back = np.array([math.erf(float(v)) for v in y])
    assert_close(back, _t(x, dtype).numpy(), rtol=tol, atol=tol, equal_nan=True, check_dtype=False)
    assert y.dtype == dtype.np


def test_erfinv_special_values():
    y = _v(special.erfinv(_t([1.0, -1.0, 1.5, -2.0, 0.0, -0.0, math.nan])))
    assert y[0] == math.inf and y[1] == -math.inf
    assert np.isnan(y[2]) and np.isnan(y[3]) and np.isnan(y[6])
    assert y[4] == 0 and not np.signbit(y[4]) and y[5] == 0 and np.signbit(y[5])
    # the tails: erfc of the result gives back 1 - x to float64 precision
    for x in (1 - 1e-12, 1 - 2 ** -52, -(1 - 1e-15)):
        y = float(special.erfinv(_t(x)))
        assert math.isclose(math.erfc(abs(y)), 1 - abs(x), rel_tol=1e-10)


def test_gammaln_digamma_polygamma_closed_forms():
    n = np.arange(1, 15.0)
    assert_close(_v(special.gammaln(_t(n))), [math.log(math.factorial(int(k) - 1)) for k in n],
                 rtol=1e-7, atol=1e-13, equal_nan=True)
    assert math.isclose(float(special.gammaln(_t(0.5))), 0.5 * math.log(math.pi),
                        rel_tol=1e-14)
    assert math.isclose(float(special.digamma(_t(1.0))), -EULER, rel_tol=1e-14)
    assert math.isclose(float(special.psi(_t(0.5))), -EULER - 2 * math.log(2), rel_tol=1e-14)
    # digamma(n) = H_(n-1) - gamma; the reflection formula for negative arguments
    for k in range(1, 30):
        h = sum(1 / j for j in range(1, k))
        assert math.isclose(float(special.digamma(_t(float(k)))), h - EULER, rel_tol=1e-13,
                            abs_tol=1e-14)
    x = np.array([-0.3, -1.7, -5.25, 0.2])
    lhs = _v(special.digamma(_t(1 - x))) - _v(special.digamma(_t(x)))
    assert_close(lhs, math.pi / np.tan(math.pi * x), rtol=1e-12, atol=0, equal_nan=True)
    assert math.isclose(float(special.polygamma(1, _t(1.0))), math.pi ** 2 / 6, rel_tol=1e-14)
    assert math.isclose(float(special.polygamma(1, _t(0.5))), math.pi ** 2 / 2, rel_tol=1e-14)
    assert math.isclose(float(special.polygamma(2, _t(1.0))), -2 * ZETA3, rel_tol=1e-14)
    assert math.isclose(float(special.polygamma(3, _t(1.0))), math.pi ** 4 / 15, rel_tol=1e-13)
    # recurrence psi_n(x + 1) = psi_n(x) + (-1)^n n! / x^(n+1), also for negative x
    x = np.array([-2.5, -0.25, 0.3, 3.7, 40.0])
    for order in (1, 2, 3):
        a = _v(special.polygamma(order, _t(x + 1)))
        b = _v(special.polygamma(order, _t(x)))
        assert_close(a, b + (-1) ** order * math.factorial(order) /
                                   x ** (order + 1), rtol=1e-11, atol=0, equal_nan=True)


def test_gamma_family_special_values():
    d = _v(special.digamma(_t([0.0, -0.0, -1.0, -3.0, math.inf, -math.inf, math.nan])))
    assert d[0] == -math.inf and d[1] == math.inf
    assert np.isnan(d[2:4]).all() and d[4] == math.inf and np.isnan(d[5:]).all()
    g = _v(special.gammaln(_t([0.0, -1.0, -2.0, math.inf, -math.inf, math.nan])))
    assert (g[:5] == math.inf).all() and np.isnan(g[5])
    p = _v(special.polygamma(1, _t([0.0, -2.0, math.inf, math.nan])))
    assert p[0] == math.inf and p[1] == math.inf and p[2] == 0 and np.isnan(p[3])
    with pytest.raises(RuntimeError, match="polygamma"):
        special.polygamma(-1, _t(1.0))


def test_ndtri_inverts_ndtr():
    p = np.concatenate([np.logspace(-300, -1, 60), np.linspace(0.01, 0.99, 99),
                        1 - np.logspace(-15, -1, 30)])
    x = special.ndtri(_t(p))
    assert_close(_v(special.ndtr(x)), p, rtol=1e-12, atol=0, equal_nan=True)
    e = _v(special.ndtri(_t([0.0, 1.0, 0.5, -0.1, 1.1, math.nan])))
    assert e[0] == -math.inf and e[1] == math.inf and e[2] == 0 and np.isnan(e[3:]).all()


def test_bessel_closed_forms():
    # I0(x) = sum (x^2/4)^k / k!^2, I1(x) = (x/2) sum (x^2/4)^k / (k! (k+1)!)
    for x in (0.0, 0.3, -2.0, 7.5, 19.9, 20.1, -35.0):
        q = x * x / 4
        i0 = math.fsum(math.exp(k * math.log(q) - 2 * math.lgamma(k + 1)) if q else float(k == 0)
                       for k in range(150))
        i1 = x / 2 * math.fsum(math.exp(k * math.log(q) - math.lgamma(k + 1) - math.lgamma(k + 2))
                               if q else float(k == 0) for k in range(150))
        assert math.isclose(float(special.i0(_t(x))), i0, rel_tol=1e-14)
        assert math.isclose(float(special.i1(_t(x))), i1, rel_tol=1e-14, abs_tol=1e-300)
        assert math.isclose(float(special.i0e(_t(x))), i0 * math.exp(-abs(x)), rel_tol=1e-14)
    assert float(special.i0e(_t(1e300))) > 0 and float(special.i0e(_t(math.inf))) == 0
    x = _t([0.0, 0.5, -3.0, 25.0], grad=True)
    special.i1e(x).sum().backward()
    assert float(x.grad[0]) == 0.5


def test_log_ndtr_ndtr_closed_forms():
    x = np.array([-37.0, -30.0, -20.5, -19.5, -5.0, -1.0, 0.0, 2.0, 8.0])
    want = [math.log(0.5 * math.erfc(-v / math.sqrt(2))) for v in x[:7]]
    want += [math.log1p(-0.5 * math.erfc(v / math.sqrt(2))) for v in x[7:]]
    assert_close(_v(special.log_ndtr(_t(x))), want, rtol=1e-13, atol=0, equal_nan=True)
    assert_close(_v(special.ndtr(_t(x))), [0.5 * math.erfc(-v / math.sqrt(2)) for v in x],
                 rtol=1e-12, atol=0, equal_nan=True)
    # far below where ndtr underflows: the asymptotic series, finite gradient ~ -x
    x = _t([-100.0, -1e4], grad=True)
    y = special.log_ndtr(x)
    assert np.isfinite(_v(y)).all()
    y.sum().backward()
    assert_close(_v(x.grad), [100.0, 1e4], rtol=1e-3, atol=0, equal_nan=True)


def test_pointwise_special_cases():
    assert float(special.sinc(_t(0.0))) == 1.0
    x = _t([0.0, 1.0], grad=True)
    special.sinc(x).sum().backward()
    assert float(x.grad[0]) == 0.0 and math.isclose(float(x.grad[1]), -1.0, rel_tol=1e-12)
    xl = _v(special.xlogy(_t([0.0, 0.0, 0.0, 2.0]), _t([0.0, math.nan, math.inf, 0.0])))
    assert xl[0] == 0 and np.isnan(xl[1]) and xl[2] == 0 and xl[3] == -math.inf
    xl = _v(special.xlog1py(_t([0.0, 0.0, 1.0]), _t([-1.0, math.nan, -1.0])))
    assert xl[0] == 0 and np.isnan(xl[1]) and xl[2] == -math.inf
    e = _v(special.entr(_t([0.0, -1.0, 1.0, math.nan, 0.5])))
    assert e[0] == 0 and e[1] == -math.inf and e[2] == 0 and np.isnan(e[3])
    assert math.isclose(e[4], 0.5 * math.log(2), rel_tol=1e-14)
    lg = _v(special.logit(_t([0.0, 1.0, 0.5, -1.0])))
    assert lg[0] == -math.inf and lg[1] == math.inf and lg[2] == 0 and np.isnan(lg[3])
    lg = _v(special.logit(_t([0.0, 1.0]), eps=0.25))
    assert_close(lg, [-math.log(3), math.log(3)], rtol=1e-14, atol=0, equal_nan=True)


@pytest.mark.parametrize("name", ["erfinv", "gammaln", "digamma", "erfc", "log_ndtr",
                                  "sinc", "entr", "logit", "ndtri", "i0", "i1e", "erfcx"])
def test_second_derivatives(name):
    dom = {"erfinv": (-0.8, 0.8), "logit": (0.1, 0.9), "entr": (0.2, 2.0), "ndtri": (0.05, 0.95),
           "gammaln": (0.3, 4.0), "digamma": (0.3, 4.0)}.get(name, (-3.0, 3.0))
    x = _t(np.random.default_rng(0).uniform(*dom, 6), grad=True)
    fn = getattr(special, name)
    assert ag.autograd.gradcheck(fn, (x,))
    assert ag.autograd.gradgradcheck(fn, (x,))


def test_trig_and_hyperbolic_identities():
    x = _t(np.linspace(-3, 3, 13))
    u = _t(np.linspace(-0.99, 0.99, 13))
    assert_close(_v(ag.asinh(ag.sinh(x))), _v(x), rtol=1e-7, atol=1e-14, equal_nan=True)
    one = _v(ag.cosh(x) ** 2 - ag.sinh(x) ** 2)
    assert_close(one, np.ones_like(one), rtol=1e-7, atol=1e-11, equal_nan=True)
    assert_close(_v(ag.acosh(ag.cosh(x))), np.abs(_v(x)), rtol=1e-7, atol=1e-7, equal_nan=True)
    half_pi = _v(ag.asin(u) + ag.acos(u))
    assert_close(half_pi, np.full_like(half_pi, math.pi / 2), rtol=1e-7, atol=1e-15, equal_nan=True)
    assert_close(_v(ag.tanh(ag.atanh(u))), _v(u), rtol=1e-7, atol=1e-15, equal_nan=True)
    assert_close(_v(ag.atan(x)), np.arctan(_v(x)), rtol=1e-7, atol=0, equal_nan=True)
    y = _v(ag.atanh(_t([1.0, -1.0, 2.0]))), _v(ag.acosh(_t([1.0, 0.5])))
    assert list(y[0][:2]) == [math.inf, -math.inf] and np.isnan(y[0][2])
    assert y[1][0] == 0 and np.isnan(y[1][1])
    assert ag.sinh(ag.tensor([1, 2])).dtype is ag.float32  # integers -> float32


def test_logaddexp_extremes():
    a = _t([math.inf, -math.inf, math.inf, 1000.0, -1000.0, 0.0, -math.inf])
    b = _t([math.inf, -math.inf, -math.inf, 1000.0, -1000.0, 1e-300, 5.0])
    r = _v(ag.logaddexp(a, b))
    assert r[0] == math.inf and r[1] == -math.inf and r[2] == math.inf
    assert_close(r[3:6], [1000 + math.log(2), -1000 + math.log(2), math.log(2)], rtol=1e-7, atol=0,
                 equal_nan=True)
    assert r[6] == 5.0
    r2 = _v(ag.logaddexp2(_t([3.0, -math.inf]), _t([3.0, 2.0])))
    assert_close(r2, [4.0, 2.0], rtol=1e-7, atol=0, equal_nan=True)


# ---- against PyTorch: special values, 0-d, empty, integers ----------------------------------
UNARY = ["sinh", "cosh", "asinh", "acosh", "atanh", "asin", "acos", "atan", "erfinv",
         "lgamma", "digamma", "special.erfc", "special.ndtr", "special.log_ndtr",
         "special.sinc", "special.entr", "special.logit", "special.expit", "special.gammaln",
         "special.psi", "special.erfcx", "special.ndtri", "special.i0", "special.i0e", "special.i1",
         "special.i1e"]
SPECIAL_VALUES = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.5, 30.0, -30.0, 1e-30, 1e30,
                  math.inf, -math.inf, math.nan]


def _fn(M, name):
    obj = M
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


@pytest.mark.parametrize("name", UNARY)
def test_unary_special_values_like_torch(torch, name):
    for agd, td in ((ag.float64, torch.float64), (ag.float32, torch.float32)):
        r = _v(_fn(ag, name)(ag.tensor(SPECIAL_VALUES, dtype=agd)))
        t = _fn(torch, name)(torch.tensor(SPECIAL_VALUES, dtype=td)).numpy()
        assert r.dtype == t.dtype
        # (atol: PyTorch's ndtr flushes ndtr(-30) = 4.9e-198 to 0)
        assert_close(r, t, rtol=2e-6 if agd is ag.float32 else 1e-12, atol=1e-100, equal_nan=True,
                     msg=f"{name} {agd}")
        assert (np.signbit(r) == np.signbit(t))[np.isfinite(t) & (t == 0)].all(), name


@pytest.mark.parametrize("name", UNARY)
def test_unary_shapes_and_int_inputs_like_torch(torch, name):
    for shape in [(), (0,), (2, 0, 3)]:
        r = _fn(ag, name)(ag.ones(shape, dtype=ag.float64) * 0.5)
        t = _fn(torch, name)(torch.ones(shape, dtype=torch.float64) * 0.5)
        assert tuple(r.shape) == tuple(t.shape)
        assert_close(_v(r), t.numpy(), rtol=1e-12, atol=0, equal_nan=True)
    r = _fn(ag, name)(ag.tensor([1, 2, 3]))
    t = _fn(torch, name)(torch.tensor([1, 2, 3]))
    assert r.dtype.name == str(t.dtype).replace("torch.", "")
    assert_close(_v(r), t.numpy(), rtol=2e-6, atol=0, equal_nan=True)


@pytest.mark.parametrize("name", ["polygamma1", "polygamma2", "polygamma3"])
def test_polygamma_like_torch(torch, name):
    n = int(name[-1])
    x = np.concatenate([np.linspace(-9.7, 9.7, 41), [0.5, 1e-3, 25.0, 1e4]])
    r = _v(special.polygamma(n, _t(x)))
    t = torch.special.polygamma(n, torch.tensor(x)).numpy()
    assert_close(r, t, rtol=1e-8, atol=0, equal_nan=True)  # PyTorch's trigamma is good to ~1e-9


@pytest.mark.parametrize("name", ["xlogy", "xlog1py", "logaddexp", "logaddexp2", "atan2"])
def test_binary_special_values_like_torch(torch, name):
    vals = [0.0, -1.0, 1.0, 2.5, math.inf, -math.inf, math.nan]
    a, b = np.meshgrid(vals, vals)
    mod = "special." if name.startswith("xlog") else ""
    r = _v(_fn(ag, mod + name)(_t(a.ravel()), _t(b.ravel())))
    t = _fn(torch, mod + name)(torch.tensor(a.ravel()), torch.tensor(b.ravel())).numpy()
    assert_close(r, t, rtol=1e-14, atol=1e-15, equal_nan=True)
    # broadcasting, integer tensors -> float (and a Python number where PyTorch takes one)
    other = 3.0 if mod else torch.tensor([3.0, 4.0])
    r = _fn(ag, mod + name)(ag.tensor([[1, 2]]), other if mod else ag.tensor([3.0, 4.0]))
    t = _fn(torch, mod + name)(torch.tensor([[1, 2]]), other)
    assert r.dtype.name == str(t.dtype).replace("torch.", "")
    assert_close(_v(r), t.numpy(), rtol=1e-6, atol=0, equal_nan=True)
