"""An argument's `.grad` inside a compiled function is what eager mode sees: a backward()
inside accumulates into a .grad that is set, and a function that reads an argument's .grad
reads the caller's. Whether it is set is a guard (a call where that changed traces again)."""
import warnings

import numpy as np
import pytest

import aotgrad
from aotgrad.testing import assert_close

BACKENDS = ["interpret", "numba"]


def _step(x, w):
    (x * w).sum().backward()
    return w.grad * 1


def _read(x, w):
    return x * w.grad


def _clear_then_step(x, w):
    w.grad = None
    (x * w * w).sum().backward()
    return w.grad + 0


def _leaf(seed):
    return aotgrad.tensor(np.random.default_rng(seed).standard_normal(4).astype(np.float32),
                          requires_grad=True)


def _run(fn, backend, calls, preset=False, clear_at=None):
    x = aotgrad.tensor(np.linspace(-1, 2, 4, dtype=np.float32))
    we, wc = _leaf(0), _leaf(0)
    if preset:
        we.grad = aotgrad.ones(4)
        wc.grad = aotgrad.ones(4)
    cf = aotgrad.compile(fn, backend=backend)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")       # (recompile warnings are expected here)
        for i in range(calls):
            if i == clear_at:
                we.grad = wc.grad = None
            assert_close(cf(x, wc), fn(x, we))
            assert_close(wc.grad, we.grad)
    return cf


@pytest.mark.parametrize("backend", BACKENDS)
def test_backward_inside_accumulates_across_calls(backend):
    cf = _run(_step, backend, 4)
    assert cf.stats.compiles <= 2     # grad unset at the first call, set from the second on


@pytest.mark.parametrize("backend", BACKENDS)
def test_backward_inside_with_grad_set_before_the_first_call(backend):
    _run(_step, backend, 3, preset=True)


@pytest.mark.parametrize("backend", ["interpret"])
def test_grad_cleared_between_calls(backend):
    _run(_step, backend, 4, clear_at=2)


@pytest.mark.parametrize("backend", ["interpret"])
def test_reading_an_arguments_grad(backend):
    _run(_read, backend, 3, preset=True)


@pytest.mark.parametrize("backend", ["interpret"])
def test_clearing_inside_then_backward(backend):
    _run(_clear_then_step, backend, 3)
