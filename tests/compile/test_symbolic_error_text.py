"""Errors raised while tracing with symbolic sizes name the sizes of the call, as eager
does (not the symbols), and a value check whose bound is a symbolic size still runs."""
import numpy as np
import pytest

import aotgrad
import aotgrad.nn.functional as F
from aotgrad.testing import assert_close


def _message(fn, args):
    with pytest.raises(Exception) as info:
        fn(*args)
    return type(info.value), str(info.value)


def _t(shape, dtype=np.float32):
    return aotgrad.tensor(np.zeros(shape, dtype))


def add(x, y):
    return x + y


def matmul(x, w):
    return x @ w


def linear(x, w):
    return F.linear(x, w)


def cross_entropy(x, t):
    return F.cross_entropy(x, t)


@pytest.mark.parametrize("fn, args", [
    (add, (_t((5, 3)), _t((4, 3)))),
    (matmul, (_t((5, 3)), _t((4, 3)))),
    (linear, (_t((5, 3)), _t((4, 2)))),
    (cross_entropy, (_t((5, 3)), aotgrad.tensor(np.array([0, 1, 2, 7, 1])))),
], ids=["broadcast", "matmul", "linear", "target_out_of_range"])
@pytest.mark.parametrize("dynamic", [True, False])
def test_compiled_message_is_eager_message(fn, args, dynamic):
    eager = _message(fn, args)
    compiled = _message(aotgrad.compile(fn, dynamic=dynamic, backend="interpret"), args)
    assert compiled == eager
    assert "s0" not in eager[1] and "s1" not in eager[1]


def test_broadcast_message_names_the_sizes_that_differ():
    _, text = _message(add, (_t((5, 3)), _t((4, 3))))
    assert "tensor a (5)" in text and "tensor b (4)" in text


@pytest.mark.parametrize("backend", ["interpret", "numba"])
def test_class_bound_check_runs_at_every_size_of_a_symbolic_program(backend):
    f = aotgrad.compile(cross_entropy, dynamic=True, backend=backend)
    rng = np.random.default_rng(0)
    for n, c in ((5, 3), (7, 4)):
        x = aotgrad.tensor(rng.standard_normal((n, c)).astype(np.float32))
        good = aotgrad.tensor(np.arange(n) % c)
        assert_close(f(x, good).numpy(), cross_entropy(x, good).numpy(), rtol=1e-6, atol=0,
                     equal_nan=True)
        bad = aotgrad.tensor(np.where(np.arange(n) == 2, c, np.arange(n) % c))
        with pytest.raises(IndexError, match=f"Target {c} is out of bounds \\(number of "
                                             f"classes {c};"):
            f(x, bad)
    assert f.stats.compiles == 1


def take_rows(x, idx):
    return x[idx]


@pytest.mark.parametrize("backend", ["interpret", "numba"])
def test_index_bound_message_names_this_calls_size(backend):
    f = aotgrad.compile(take_rows, dynamic=True, backend=backend)
    for n in (5, 9):
        x = aotgrad.tensor(np.arange(n * 2, dtype=np.float32).reshape(n, 2))
        ok = aotgrad.tensor(np.array([0, n - 1]))
        np.testing.assert_array_equal(f(x, ok).numpy(), take_rows(x, ok).numpy())
        bad = aotgrad.tensor(np.array([0, n]))
        eager = _message(take_rows, (x, bad))
        assert f"with size {n}" in eager[1]
        with pytest.raises(eager[0], match=f"index {n} is out of bounds for dimension with "
                                           f"size {n} "):
            f(x, bad)
    assert f.stats.compiles == 1
