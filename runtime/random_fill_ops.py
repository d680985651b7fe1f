"""In-place random fills that model code calls on parameters (`w.normal_(0, 0.02)`):
normal_, uniform_, bernoulli_, random_, exponential_, geometric_, cauchy_, log_normal_.

Each draws from aotgrad's generators (the global one, or `generator=`) with the stateless
uniform/normal prims and writes the draw through `commit_inplace` as a replacement (like
`fill_`): the old value's history gets a zero gradient, and a leaf that requires grad is
refused outside `no_grad`, as in PyTorch. The numbers are reproducible per seed, not the
numbers PyTorch draws.

>>> import aotgrad
>>> w = aotgrad.empty(3)
>>> w.uniform_(2, 3) is w and bool(((w >= 2) & (w < 3)).all())
True
"""
import math

import numpy as np

from aotgrad.ir import dtypes as dt
from aotgrad.runtime import elementwise_ops as ew
from aotgrad.runtime import tprims as tp
from aotgrad.runtime.factories import default_generator, rand, randn
from aotgrad.runtime.inplace_ops import commit_inplace
from aotgrad.runtime.op_base import as_tensor_like, op
from aotgrad.runtime.tensor import Tensor


def _shape(t):
    return tuple(t.shape)


def _float_dtype(t):
    return t.dtype if t.dtype.is_floating_point else dt.float64


def _write(t, new, name):
    return commit_inplace(t, ew.cast(new, t.dtype) if new.dtype is not t.dtype else new, name,
                          replaces=True)


def normal_(self, mean=0.0, std=1.0, *, generator=None):
    """Fill with N(mean, std^2)."""
    if std < 0:
        raise RuntimeError(f"normal_ expects std >= 0.0, but found std {std}")
    z = randn(_shape(self), dtype=_float_dtype(self), generator=generator)
    return _write(self, ew.add(ew.mul(z, std), mean), "normal_")


def uniform_(self, from_=0.0, to=1.0, *, generator=None, **kwargs):
    """Fill with U[from, to) (`from` is also accepted as a keyword)."""
    from_ = kwargs.pop("from", from_)
    if kwargs:
        raise TypeError(f"uniform_() got an unexpected keyword argument {next(iter(kwargs))!r}")
    if from_ > to:
        raise RuntimeError(f"uniform_ expects to return a [from, to) range, but found "
                           f"from={from_} > to={to}")
    u = rand(_shape(self), dtype=_float_dtype(self), generator=generator)
    return _write(self, ew.add(ew.mul(u, to - from_), from_), "uniform_")


def bernoulli_(self, p=0.5, *, generator=None):
    """Fill with 1 with probability p (a number or a tensor broadcastable to self), else 0."""
    if not isinstance(p, Tensor) and not 0 <= p <= 1:
        raise RuntimeError(f"bernoulli_ expects p to be in [0, 1], but got p={p}")
    u = rand(_shape(self), dtype=dt.float64, generator=generator)
    prob = ew.cast(p, dt.float64) if isinstance(p, Tensor) else float(p)
    return _write(self, ew.cast(ew.lt(u, prob), self.dtype), "bernoulli_")


_RANDOM_HIGH = {dt.float32: 2 ** 24, dt.float64: 2 ** 53, dt.float16: 2 ** 11,
                dt.bfloat16: 2 ** 8, dt.int32: 2 ** 31 - 1, dt.int64: 2 ** 53,
                dt.bool_: 2, dt.uint8: 2 ** 8, dt.int8: 2 ** 7 - 1, dt.int16: 2 ** 15 - 1}


def random_(self, from_=0, to=None, *, generator=None, **kwargs):
    """Fill with integers drawn uniformly from [from, to); `random_(to)` is [0, to), and
    `random_()` is [0, 2**mantissa] for floats (the integers the dtype holds exactly).
    Drawn through float64, so ranges wider than 2**53 are not supported."""
    from_keyword = "from" in kwargs
    from_ = kwargs.pop("from", from_)
    if kwargs:
        raise TypeError(f"random_() got an unexpected keyword argument {next(iter(kwargs))!r}")
    if to is None and from_ != 0 and not from_keyword:
        from_, to = 0, from_
    if to is None:
        to = _RANDOM_HIGH[self.dtype] + (1 if self.dtype.is_floating_point else 0)
    if from_ >= to:
        raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got from={from_} "
                           f">= to={to}")
    u = rand(_shape(self), dtype=dt.float64, generator=generator)
    return _write(self, ew.floor(ew.add(ew.mul(u, float(to - from_)), float(from_))),
                  "random_")


def exponential_(self, lambd=1.0, *, generator=None):
    """Fill with Exp(lambd) draws: -log(1 - u) / lambd."""
    if lambd <= 0:
        raise RuntimeError(f"exponential_ expects lambda > 0.0, but found lambda={lambd}")
    u = rand(_shape(self), dtype=dt.float64, generator=generator)
    return _write(self, ew.div(ew.neg(ew.log1p(ew.neg(u))), lambd), "exponential_")


def geometric_(self, p, *, generator=None):
    """Fill with the number of Bernoulli(p) trials up to the first success (1, 2, ...)."""
    if not 0 < p < 1:
        raise RuntimeError(f"geometric_ expects p to be in (0, 1), but got p={p}")
    u = rand(_shape(self), dtype=dt.float64, generator=generator)
    k = ew.ceil(ew.div(ew.log1p(ew.neg(u)), math.log1p(-p)))
    return _write(self, ew.maximum(k, 1.0), "geometric_")


def cauchy_(self, median=0.0, sigma=1.0, *, generator=None):
    """Fill with Cauchy(median, sigma) draws: median + sigma * tan(pi * (u - 1/2))."""
    u = rand(_shape(self), dtype=dt.float64, generator=generator)
    return _write(self, ew.add(ew.mul(ew.tan(ew.mul(ew.sub(u, 0.5), math.pi)), sigma), median),
                  "cauchy_")


def log_normal_(self, mean=1.0, std=2.0, *, generator=None):
    """Fill with exp(N(mean, std^2)) draws."""
    if std <= 0:
        raise RuntimeError(f"log_normal_ expects std > 0.0, but found std={std}")
    z = randn(_shape(self), dtype=dt.float64, generator=generator)
    return _write(self, ew.exp(ew.add(ew.mul(z, std), mean)), "log_normal_")


METHODS = {f.__name__: f for f in (normal_, uniform_, bernoulli_, random_, exponential_,
                                   geometric_, cauchy_, log_normal_)}


@op("poisson", "PoissonBackward0")
def poisson(input, generator=None):
    """Draws from Poisson(rate) for each rate in input, in input's dtype; zero gradient. Drawn
    from the generator's seeded stream by the poisson prim, so a compiled function draws the
    same numbers as eager. Negative or NaN rates raise (eagerly; in a compiled program, when
    numpy's draw refuses them)."""
    if not input.dtype.is_floating_point:
        raise RuntimeError(f"poisson: expected a floating-point tensor of rates, got "
                           f"{input.dtype.name}")
    rates = getattr(input, "_value", None)
    if isinstance(rates, np.ndarray) and (np.any(rates < 0) or np.any(np.isnan(rates))):
        raise RuntimeError("poisson: invalid (negative or NaN) rate in input")
    seed = (generator or default_generator).next_seed()
    draws = tp.poisson(seed, input.detach(), shape=tuple(input.shape), dtype=input.dtype)
    return ew._zero_grad(draws, input)
