"""Numpy reference implementations of the special-function prims (erfc, erfinv, lgamma,
polygamma), vectorised, in float64 and cast back to the input's dtype.

scipy is not a dependency: erfc and lgamma map Python's `math` functions over the array
(exact, about 0.1 us per element); erfinv refines an initial closed-form guess with Halley
steps on erf/erfc; digamma and polygamma shift the argument up with the recurrence and sum
the asymptotic (Bernoulli) series. The generated kernels run the same algorithms as scalar
code (codegen/approx.py: `erfinv_f64`, `polygamma_f64`).
"""
import math

import numpy as np

_erfc1 = np.frompyfunc(math.erfc, 1, 1)
_erf1 = np.frompyfunc(math.erf, 1, 1)


def _lgamma_scalar(v):
    try:
        return math.lgamma(v)
    except (ValueError, OverflowError):  # poles at 0, -1, -2, ...: +inf, as in C and PyTorch
        return math.inf


_lgamma1 = np.frompyfunc(_lgamma_scalar, 1, 1)


def _f64(x):
    return np.asarray(x, dtype=np.float64)


def _back(r, x):
    return np.asarray(r, dtype=np.float64).astype(x.dtype, copy=False)


def erfc(x):
    return _back(np.asarray(_erfc1(_f64(x)), dtype=np.float64), x)


def lgamma(x):
    return _back(np.asarray(_lgamma1(_f64(x)), dtype=np.float64), x)


# Winitzki's closed form: erfinv to ~2e-3 relative everywhere, including the tails
_WA = 0.147
_WT = 2.0 / (math.pi * _WA)
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


def erfinv(x):
    """Inverse error function: +-inf at +-1, NaN outside [-1, 1]. Three Halley steps on the
    residual erf(y) - |x| (as (1 - |x|) - erfc(y) for |x| > 0.5, where 1 - |x| is exact) take
    the closed-form guess to float64 precision."""
    v = _f64(x)
    a = np.abs(v)
    with np.errstate(all="ignore"):
        w = np.log((1.0 - a) * (1.0 + a))
        t = _WT + 0.5 * w
        y = np.sqrt(np.sqrt(t * t - w / _WA) - t)
        small = a <= 0.5
        ok = a < 1.0
        for _ in range(3):
            r = np.zeros_like(y)
            m = small & ok
            r[m] = _erf1(y[m]).astype(np.float64) - a[m]
            m = ~small & ok
            r[m] = (1.0 - a[m]) - _erfc1(y[m]).astype(np.float64)
            d = _TWO_OVER_SQRT_PI * np.exp(-y * y) + y * r
            y = np.where(ok, y - r / d, y)
        y = np.where(a == 1.0, np.inf, np.where(a > 1.0, np.nan, y))
        return _back(np.copysign(y, v), x)


# Bernoulli numbers B_2, B_4, ..., B_20
_BERNOULLI = (1 / 6, -1 / 30, 1 / 42, -1 / 30, 5 / 66, -691 / 2730, 7 / 6, -3617 / 510,
              43867 / 798, -174611 / 330)
_SHIFT = 15.0  # the asymptotic series is summed at arguments >= this


def _digamma64(v):
    with np.errstate(all="ignore"):
        refl = v < 0.5
        z = np.where(refl, 1.0 - v, v)
        acc = np.zeros_like(z)
        for _ in range(int(_SHIFT)):
            m = z < _SHIFT
            if not m.any():
                break
            acc = np.where(m, acc - 1.0 / z, acc)
            z = np.where(m, z + 1.0, z)
        iz2 = 1.0 / (z * z)
        s, p = 0.0, iz2
        for k, b in enumerate(_BERNOULLI, 1):
            s = s + b / (2 * k) * p
            p = p * iz2
        r = acc + np.log(z) - 0.5 / z - s
        # reflection: psi(x) = psi(1 - x) - pi / tan(pi x), tan taken on the fraction of x
        frac = v - np.floor(v)
        r = np.where(refl, r - math.pi / np.tan(math.pi * frac), r)
        pole = refl & (frac == 0)  # 0, -1, ...: -inf at +0 and +inf at -0 (PyTorch), else NaN
        zero_pole = np.where(np.signbit(v), np.inf, -np.inf)
        r = np.where(pole, np.where(v == 0, zero_pole, np.nan), r)
        return np.where(v == np.inf, np.inf, np.where(v == -np.inf, np.nan, r))


def _polygamma64(n, v):
    """(-1)^(n+1) n! zeta(n + 1, x) for n >= 1: the recurrence shifts x up to >= 15 (also from
    negative x), then the Euler-Maclaurin tail."""
    sign = 1.0 if n % 2 else -1.0
    fact = math.factorial(n)
    with np.errstate(all="ignore"):
        z = v.copy()
        acc = np.zeros_like(z)
        finite = np.isfinite(z)
        while True:
            m = finite & (z < _SHIFT)
            if not m.any():
                break
            acc = np.where(m, acc + 1.0 / z ** (n + 1), acc)
            z = np.where(m, z + 1.0, z)
        s = math.factorial(n - 1) / z ** n + fact / (2.0 * z ** (n + 1))
        for k, b in enumerate(_BERNOULLI, 1):
            c = b * math.factorial(2 * k + n - 1) / math.factorial(2 * k)
            s = s + c / z ** (2 * k + n)
        r = sign * (fact * acc + s)
        pole = (v <= 0) & (v == np.floor(v))
        r = np.where(pole, sign * np.inf, r)
        return np.where(v == np.inf, 0.0, np.where(v == -np.inf, np.nan, r))


def polygamma(x, *, n):
    """The n-th derivative of digamma (n = 0: digamma itself)."""
    v = _f64(x)
    return _back(_digamma64(v) if n == 0 else _polygamma64(n, v), x)


_SQRT2 = math.sqrt(2.0)
_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


def ndtri(x):
    """The standard normal quantile (inverse of ndtr): sqrt(2) erfinv(2q - 1) on the lower
    half q = min(p, 1 - p) (1 - p is exact there), or the asymptotic guess below q = 1e-15;
    below q = 0.25 (where 2q - 1 rounds) three Newton steps on log ndtr(x) = log q follow,
    with ndtr(x) = erfc(-x / sqrt(2)) / 2 at full relative precision in the lower tail."""
    v = _f64(x)
    with np.errstate(all="ignore"):
        q = np.where(v > 0.5, 1.0 - v, v)
        y = _SQRT2 * erfinv(2.0 * q - 1.0)
        t2 = -2.0 * np.log(q)
        y = np.where(q < 1e-15, -np.sqrt(t2 - np.log(t2) - 2 * _LOG_SQRT_2PI), y)
        ok = (q > 0) & (q < 0.25)  # above, 2q - 1 is exact and erfinv alone is accurate
        for _ in range(3):
            cdf = 0.5 * _erfc1(-y[ok] / _SQRT2).astype(np.float64)
            yo = y[ok]
            step = (np.log(cdf) - np.log(q[ok])) * cdf / np.exp(-0.5 * yo * yo - _LOG_SQRT_2PI)
            y[ok] = yo - step
        y = np.where(q == 0, -np.inf, np.where(q == 0.5, 0.0, y))
        y = np.where(v > 0.5, -y, y)
        return _back(np.where((v < 0) | (v > 1) | np.isnan(v), np.nan, y), x)


# modified Bessel functions of the first kind, exponentially scaled: power series up to
# |x| = 20 (positive terms: no cancellation), the asymptotic series beyond
_BESSEL_SWITCH = 20.0


def _bessel_e64(v, order):
    a = np.abs(v)
    out = np.empty_like(a)
    small = a <= _BESSEL_SWITCH
    s = a[small]
    q = 0.25 * s * s
    term = np.ones_like(s) if order == 0 else 0.5 * s
    total = term.copy()
    for k in range(1, 60):
        term = term * q / (k * (k + order))
        total = total + term
    out[small] = total * np.exp(-s)
    b = a[~small]
    mu = 4.0 * order * order
    term = np.ones_like(b)
    total = term.copy()
    for k in range(1, 30):
        term = term * -(mu - (2 * k - 1) ** 2) / (k * 8.0 * b)
        total = total + term
    with np.errstate(all="ignore"):
        out[~small] = total / np.sqrt(2 * math.pi * b)
    out = np.where(np.isinf(a), 0.0, out)
    return np.where(v < 0, -out, out) if order == 1 else out


def i0e(x):
    """exp(-|x|) I0(x)."""
    return _back(_bessel_e64(_f64(x), 0), x)


def i1e(x):
    """exp(-|x|) I1(x) (odd)."""
    return _back(_bessel_e64(_f64(x), 1), x)


_ERFCX_ASYMPTOTIC = 10.0


def erfcx(x):
    """exp(x^2) erfc(x). Below 10, exp(x^2) is taken as exp(h^2) exp(2 h l + l^2) with
    x = h + l and h rounded to float32 (h^2 is exact, so x^2 loses nothing to rounding);
    above, the asymptotic series 1 / (x sqrt(pi)) sum (-1)^n (2n - 1)!! / (2 x^2)^n."""
    v = _f64(x)
    with np.errstate(all="ignore"):
        h = v.astype(np.float32).astype(np.float64)
        lo = v - h
        direct = np.exp(h * h) * np.exp(2.0 * h * lo + lo * lo) * \
            np.asarray(_erfc1(v), dtype=np.float64)
        z = 1.0 / (2.0 * v * v)
        term = np.ones_like(v)
        total = term.copy()
        for n in range(1, 25):
            term = term * -(2 * n - 1) * z
            total = total + term
        asym = total / (v * math.sqrt(math.pi))
        r = np.where(v > _ERFCX_ASYMPTOTIC, asym, direct)
        r = np.where(v == np.inf, 0.0, np.where(v == -np.inf, np.inf, r))
        return _back(r, x)
