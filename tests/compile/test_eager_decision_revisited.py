"""A guard key whose trace broke the graph runs eagerly, but not forever: once what the
break depended on changes (a global flag the function reads, a hook removed from a tensor
it reaches), the next call traces again and compiles; for causes no guard sees, a retry
comes after a number of eager calls that doubles (bounded), so a break that stays costs
little."""
import warnings

import numpy as np
import pytest

import aotgrad

BACKENDS = ["interpret", "numba"]

USE_ITEM = True   # read by `scaled`: while True, its trace breaks (a Python float of a sum)


def scaled(x):
    if USE_ITEM:
        return x * float(x.sum())
    return x * 2


@pytest.fixture
def quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


@pytest.mark.parametrize("backend", BACKENDS)
def test_flag_flipped_after_a_break_compiles(backend, quiet):
    global USE_ITEM
    cf = aotgrad.compile(scaled, backend=backend)
    x = aotgrad.tensor(np.arange(3, dtype=np.float32))
    np.testing.assert_array_equal(cf(x).numpy(), scaled(x).numpy())
    assert cf.stats.eager_fallbacks == 1 and cf.stats.compiles == 0
    USE_ITEM = False
    try:
        for _ in range(3):
            np.testing.assert_array_equal(cf(x).numpy(), scaled(x).numpy())
        assert cf.stats.compiles == 1 and cf.stats.eager_fallbacks == 1
        USE_ITEM = True   # back: the program's own guard sees it, and the break repeats
        np.testing.assert_array_equal(cf(x).numpy(), scaled(x).numpy())
    finally:
        USE_ITEM = True


@pytest.mark.parametrize("backend", BACKENDS)
def test_post_accumulate_hook_removed_after_a_break_compiles(backend, quiet):
    w = aotgrad.tensor(np.ones(3, np.float32), requires_grad=True)
    seen = []
    handle = w.register_post_accumulate_grad_hook(lambda p: seen.append(p.grad.clone()))

    def step(x):
        (x * w).sum().backward()
        return w.grad * 1

    cf = aotgrad.compile(step, backend=backend)
    x = aotgrad.tensor(np.arange(3, dtype=np.float32))
    cf(x)
    w.grad = None
    assert cf.stats.compiles == 0 and len(seen) == 1
    handle.remove()
    for _ in range(2):
        np.testing.assert_array_equal(cf(x).numpy(), x.numpy())
        w.grad = None
    assert cf.stats.compiles == 1 and len(seen) == 1


def test_a_break_that_stays_is_retried_ever_more_rarely(quiet):
    def f(x):
        return x * float(x.sum())   # always breaks
    cf = aotgrad.compile(f, backend="interpret")
    x = aotgrad.tensor(np.arange(3, dtype=np.float32))
    for _ in range(200):
        cf(x)
    assert cf.stats.eager_fallbacks == 200
    # the first trace, then retries after 8, 16, 32, 64 eager calls
    assert cf.stats.traces == 5
