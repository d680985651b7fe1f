"""Ops whose index is a constant made inside the compiled function (`tensor`, `arange`,
`full`) compile without a graph break, and their bounds checks hold in the compiled program
as eagerly (an index out of range raises the eager error at run time, not garbage)."""
import numpy as np
import pytest

import aotgrad
from aotgrad.testing import assert_close

BACKENDS = ["interpret", "numba"]


def scatter_sum_const(x):
    return aotgrad.zeros(2).scatter_reduce(0, aotgrad.tensor([0, 1, 0, 1]), x, reduce="sum")


def scatter_amax_arange(x):
    return aotgrad.zeros(2).scatter_reduce(0, aotgrad.arange(4) % 2, x, reduce="amax")


def scatter_mean_full(x):
    return aotgrad.zeros(2).scatter_reduce(0, aotgrad.full((4,), 1), x, reduce="mean",
                                           include_self=False)


def index_reduce_const(x):
    return aotgrad.ones(3).index_reduce(0, aotgrad.tensor([2, 0, 2, 1]), x, "prod")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", [scatter_sum_const, scatter_amax_arange, scatter_mean_full,
                                index_reduce_const])
def test_constant_index_compiles_in_one_graph(fn, backend):
    x = aotgrad.tensor(np.array([0.5, -1.5, 2.0, 3.0], np.float32), requires_grad=True)
    cf = aotgrad.compile(fn, backend=backend, fullgraph=True)
    got = cf(x)
    want = fn(x)
    assert_close(got.detach().numpy(), want.detach().numpy(), rtol=1e-6, atol=1e-7)
    g_got, = aotgrad.autograd.grad(got.sum(), x)
    g_want, = aotgrad.autograd.grad(want.sum(), x)
    assert_close(g_got.numpy(), g_want.numpy(), rtol=1e-6, atol=1e-7)


def scatter_const_out_of_range(x):
    return aotgrad.zeros(2).scatter_reduce(0, aotgrad.tensor([0, 1, 7, 1]), x, reduce="sum")


def scatter_arg_index(x, i):
    return aotgrad.zeros(2).scatter_reduce(0, i, x, reduce="sum")


def index_reduce_arg_index(x, i):
    return aotgrad.ones(2).index_reduce(0, i, x, "prod")


def _error(fn, *args):
    with pytest.raises(Exception) as info:
        fn(*args)
    return type(info.value), str(info.value)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn, index", [
    (scatter_const_out_of_range, None),
    (scatter_arg_index, [0, 5, 1, 1]),
    (scatter_arg_index, [0, -3, 1, 1]),
    (index_reduce_arg_index, [0, 2, 1, 1]),
    (index_reduce_arg_index, [0, -1, 1, 1]),
], ids=["constant", "argument", "argument_negative", "index_reduce", "index_reduce_negative"])
def test_index_out_of_range_raises_the_eager_error_compiled(fn, index, backend):
    args = (aotgrad.tensor(np.arange(4, dtype=np.float32)),) + \
        (() if index is None else (aotgrad.tensor(index),))
    eager = _error(fn, *args)
    assert "out of" in eager[1]
    assert _error(aotgrad.compile(fn, backend=backend), *args) == eager


def test_scatter_reduce_out_of_range_is_torch(vs_torch):
    vs_torch.same(lambda M: M.zeros(2).scatter_reduce(0, M.tensor([0, 5, 1]), M.ones(3),
                                                      reduce="sum"))
