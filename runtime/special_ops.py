"""Special functions (the ops behind `aotgrad.special` and their top-level names): erfc,
erfcx, erfinv, lgamma/gammaln, digamma/psi, polygamma, logit, xlogy, xlog1py, ndtr, ndtri,
log_ndtr, sinc, entr, i0/i0e/i1/i1e. Integer inputs give float32, as in PyTorch.

>>> import aotgrad
>>> from aotgrad.runtime import special_ops
>>> round(special_ops.erfinv(aotgrad.tensor(0.5)).item(), 6)
0.476936
"""
import math

import numpy as np

from aotgrad.ir import dtypes as dt
from aotgrad.runtime import tprims as tp
from aotgrad.runtime.elementwise_ops import (_unary, abs, add, clamp, div, eq, exp, isinf,
                                             le, log, log1p, logical_and, logical_or, lt, mul,
                                             neg, sigmoid, sin, sub, where)
from aotgrad.runtime.op_base import _binary_args, cast, op
from aotgrad.runtime.composite import composite

erfc = _unary(tp.erfc, "erfc", "ErfcBackward0")
erfcx = _unary(tp.erfcx, "erfcx", "SpecialErfcxBackward0")
erfinv = _unary(tp.erfinv, "erfinv", "ErfinvBackward0")
lgamma = _unary(tp.lgamma, "lgamma", "LgammaBackward0")
gammaln = lgamma


def _float(x):
    return x if x.dtype.is_floating_point else cast(x, dt.float32)


ndtri = _unary(tp.ndtri, "ndtri", "SpecialNdtriBackward0")
i0e = _unary(tp.i0e, "i0e", "SpecialI0EBackward0")
i1e = _unary(tp.i1e, "i1e", "SpecialI1EBackward0")


@op("i0", "I0Backward0")
@composite("I0Backward0", ("x",))
def i0(x):
    """The modified Bessel function I0, as i0e(x) * exp(|x|) (its gradient is i1)."""
    x = _float(x)
    return mul(i0e(x), exp(abs(x)))


@op("i1", "SpecialI1Backward0")
@composite("SpecialI1Backward0", ("x",))
def i1(x):
    """The modified Bessel function I1, as i1e(x) * exp(|x|)."""
    x = _float(x)
    return mul(i1e(x), exp(abs(x)))


@op("digamma", "DigammaBackward0")
def digamma(x):
    """d/dx lgamma(x): -inf at +0, inf at -0, NaN at the negative integers (PyTorch)."""
    return tp.polygamma(_float(x), n=0)


psi = digamma


@op("polygamma", "PolygammaBackward0")
def polygamma(n, x):
    """The n-th derivative of digamma (n >= 0)."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise RuntimeError(f"polygamma(n, x) does not support negative n (or a non-int n), "
                           f"got {n!r}")
    return tp.polygamma(_float(x), n=n)


@op("multigammaln", "MvlgammaBackward0")
def multigammaln(a, p):
    """The log of the multivariate gamma function of dimension p:
    p (p - 1) / 4 log(pi) + sum_{j < p} lgamma(a - j / 2); every element of a must exceed
    (p - 1) / 2."""
    a = _float(a)
    if not isinstance(p, int) or p < 1:
        raise RuntimeError(f"p has to be greater than or equal to 1, got {p!r}")
    value = a._value
    if isinstance(value, np.ndarray) and value.size and not (value > (p - 1) / 2).all():
        raise RuntimeError(f"All elements of the input must be greater than {(p - 1) / 2} "
                           f"(p = {p})")
    r = lgamma(a)
    for j in range(1, p):
        r = add(r, lgamma(sub(a, j / 2)))
    return add(r, p * (p - 1) / 4 * math.log(math.pi))


mvlgamma = multigammaln


@op("logit", "LogitBackward0")
@composite("LogitBackward0", ("x",))
def logit(x, eps=None):
    """log(x / (1 - x)); with eps, x is first clamped to [eps, 1 - eps] (its gradient is
    then 0 outside that range)."""
    x = _float(x)
    if eps is not None:
        x = clamp(x, eps, 1 - eps)
    return log(div(x, sub(1, x)))


def _x_log(x, y, log_fn, pole):
    """x * log_fn(y), and 0 where x == 0 unless y is NaN (PyTorch's xlogy/xlog1py): the
    log is replaced by 0 where x == 0 and log_fn(y) would be infinite, so the value there is
    0 and the gradients are finite (d/dx = log_fn(y), or 0 where that is infinite)."""
    x, y = _binary_args(x, y, float_result=True)
    inf_log = logical_or(le(y, pole), isinf(y))
    ly = where(logical_and(eq(x, 0), inf_log), 0.0, log_fn(y))
    # PyTorch's value where x == 0 is +0.0 whatever the signs: + 0.0 there turns a -0.0
    # product into +0.0, and + -0.0 elsewhere changes nothing (x * log(1) of a negative x
    # stays -0.0); constants, so the gradients are the product's
    return add(mul(x, ly), where(eq(x, 0), 0.0, -0.0))


@op("xlogy", "XlogyBackward0")
@composite("XlogyBackward0", ("x", "y"))
def xlogy(x, y):
    """x * log(y), 0 where x == 0 (unless y is NaN)."""
    return _x_log(x, y, log, 0)


@op("xlog1py", "SpecialXlog1pyBackward0")
@composite("SpecialXlog1pyBackward0", ("x", "y"))
def xlog1py(x, y):
    """x * log1p(y), 0 where x == 0 (unless y is NaN)."""
    return _x_log(x, y, log1p, -1)


@op("ndtr", "SpecialNdtrBackward0")
@composite("SpecialNdtrBackward0", ("x",))
def ndtr(x):
    """The standard normal CDF, 0.5 * erfc(-x / sqrt(2)): accurate in the lower tail."""
    return mul(erfc(mul(_float(x), -1 / math.sqrt(2))), 0.5)


# where log_ndtr switches to its asymptotic series: ndtr(x) is still a normal number there,
# and the first term the series leaves out (135135 / x^14) is below the dtype's precision
_LOG_NDTR_ASYMPTOTIC = {dt.float64: -20.0, dt.float32: -10.0}


@op("log_ndtr", "SpecialLogNdtrBackward0")
@composite("SpecialLogNdtrBackward0", ("x",))
def log_ndtr(x):
    """log of the standard normal CDF: log1p(-ndtr(-x)) for x > 0, log(ndtr(x)) down to
    -20 (-10 in float32), and below that the asymptotic series -x^2/2 - log(-x) - log(2 pi)/2 +
    log(1 - 1/x^2 + 3/x^4 - ... + 10395/x^12) (ndtr underflows near -38). Each branch is
    evaluated at an input clamped into its own range, so none gives the others NaN
    gradients."""
    x = _float(x)
    edge = _LOG_NDTR_ASYMPTOTIC.get(x.dtype, -20.0)
    pos = lt(0.0, x)
    deep = lt(x, edge)
    xp = where(pos, x, 1.0)
    upper = log1p(neg(ndtr(neg(xp))))
    xm = where(logical_or(pos, deep), -1.0, x)
    middle = log(ndtr(xm))
    xd = where(deep, x, edge - 1)
    z = div(1.0, mul(xd, xd))
    series = mul(z, 10395.0)  # sum_k (-1)^k (2k - 1)!! z^k for k = 1..6 (Horner form)
    for c in (-945.0, 105.0, -15.0, 3.0, -1.0):
        series = mul(z, add(series, c))
    tail = sub(sub(mul(mul(xd, xd), -0.5), log(neg(xd))), 0.5 * math.log(2 * math.pi))
    tail = add(tail, log1p(series))
    return where(pos, upper, where(deep, tail, middle))


@op("sinc", "SincBackward0")
@composite("SincBackward0", ("x",))
def sinc(x):
    """sin(pi x) / (pi x), 1 at 0 (gradient 0 there)."""
    x = _float(x)
    zero = eq(x, 0)
    safe = mul(where(zero, 1.0, x), math.pi)
    return where(zero, 1.0, div(sin(safe), safe))


@op("entr", "SpecialEntrBackward0")
@composite("SpecialEntrBackward0", ("x",))
def entr(x):
    """-x log(x) for x > 0, 0 at 0, -inf for x < 0, NaN for NaN. The gradient at 0 is 0
    here (PyTorch's is inf)."""
    x = _float(x)
    pos = lt(0.0, x)
    xs = where(pos, x, 1.0)
    r = where(pos, neg(mul(xs, log(xs))), where(eq(x, 0), 0.0, x))
    return where(lt(x, 0), -math.inf, r)


expit = sigmoid
