"""index_reduce: values and gradients against a per-slice loop (and PyTorch where installed),
gradcheck for every reduction (amin/amax ties share the gradient with self, as in PyTorch),
the in-place method, the errors, and compiled == eager."""
import itertools
import warnings

import numpy as np
import pytest

import aotgrad as ag
from aotgrad.testing import assert_close

REDUCE = {"prod": np.prod, "mean": np.mean, "amax": np.max, "amin": np.min}


def _loop(x, dim, index, source, reduce, include_self):
    """index_reduce by hand: every destination slice reduces its own sources."""
    x, source = np.moveaxis(x, dim, 0), np.moveaxis(source, dim, 0)
    out = x.copy()
    for j in range(x.shape[0]):
        rows = [source[i] for i in range(len(index)) if index[i] == j]
        if not rows:
            continue
        if include_self:
            rows = [x[j]] + rows
        out[j] = REDUCE[reduce](np.stack(rows), axis=0)
    return np.moveaxis(out, 0, dim)


@pytest.mark.parametrize("reduce,include_self,dim",
                         list(itertools.product(REDUCE, (True, False), (0, 1, -1))))
def test_values_match_a_loop(reduce, include_self, dim):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 4))
    n = x.shape[dim]
    index = np.array([0, n - 1, 0, 1, n - 1])
    shape = list(x.shape)
    shape[dim] = len(index)
    source = rng.standard_normal(shape)
    out = ag.tensor(x).index_reduce(dim, ag.tensor(index), ag.tensor(source), reduce,
                                    include_self=include_self)
    assert_close(out.numpy(), _loop(x, dim % 2, index, source, reduce,
                                                  include_self), rtol=1e-12, atol=0, equal_nan=True)


@pytest.mark.parametrize("reduce", list(REDUCE))
def test_gradcheck_with_ties(reduce):
    x = ag.randn(2, 3, dtype=ag.float64, requires_grad=True)
    # source == x slice by slice: every amax/amin is a tie between self and a source (with
    # include_self=False PyTorch's gradient drops self's share of a tie: not a derivative)
    source = x.detach().clone().requires_grad_(True)
    assert ag.autograd.gradcheck(
        lambda a, b: ag.index_reduce(a, 0, ag.arange(2), b, reduce, include_self=True),
        (x, source))


@pytest.mark.parametrize("reduce,include_self", list(itertools.product(REDUCE, (True, False))))
def test_gradients_match_torch(torch, reduce, include_self):
    def run(T):
        x = T.tensor([[1., 2, 3], [4, 5, 6]], dtype=T.float64, requires_grad=True)
        s = T.tensor([[1., 0, 3, 9], [4, 5, 7, 2]], dtype=T.float64, requires_grad=True)
        out = x.index_reduce(1, T.tensor([0, 2, 0, 0]), s, reduce, include_self=include_self)
        out.backward(T.arange(6, dtype=T.float64).reshape(2, 3) + 1)
        return out.tolist(), x.grad.tolist(), s.grad.tolist(), out.grad_fn.name()
    assert run(ag) == run(torch)


def test_inplace_integer_mean_floors():
    y = ag.ones(2, 3, dtype=ag.int64)
    r = y.index_reduce_(1, ag.tensor([0, 0, 2, 1], dtype=ag.int32),
                        ag.arange(8).reshape(2, 4), "mean")
    assert r is y
    # (1 + 0 + 1) // 3, (1 + 3) // 2, (1 + 2) // 2 on the first row
    assert y.tolist() == [[0, 2, 1], [3, 4, 3]]


@pytest.mark.parametrize("args,error,text", [
    ((ag.ones(2), 0, ag.tensor([0, 1]), ag.ones(2), "sum"), RuntimeError,
     "one of prod, mean, amax or amin"),
    ((ag.ones(2), 0, ag.tensor([0., 1.]), ag.ones(2), "amax"), RuntimeError, "int32/int64"),
    ((ag.ones(2), 0, ag.tensor([0, 1, 1]), ag.ones(2), "amax"), RuntimeError,
     "Number of indices (3)"),
    ((ag.ones(2), 0, ag.tensor([0, 2]), ag.ones(2), "amax"), IndexError, "out of range"),
    ((ag.ones(2), 0, ag.tensor([-1, 0]), ag.ones(2), "amax"), IndexError, "out of range"),
    ((ag.ones(2, 3), 0, ag.tensor([0, 1]), ag.ones(2, 2), "amax"), RuntimeError,
     "source tensor shape must match"),
    ((ag.ones(2), 0, ag.tensor([[0, 1]]), ag.ones(2), "amax"), IndexError, "vector"),
    ((ag.ones(2), 0, ag.tensor([0, 1]), ag.ones(2, dtype=ag.float64), "amax"), RuntimeError,
     "same scalar type"),
])
def test_errors(args, error, text):
    with pytest.raises(error, match=text.replace("(", r"\(").replace(")", r"\)")):
        ag.index_reduce(*args)


def test_compiled_matches_eager():
    def f(x, s, i):
        return (ag.index_reduce(x, 0, i, s, "amax") * x).sum()
    x = ag.randn(2, 3, requires_grad=True)
    s = ag.randn(3, 3, requires_grad=True)
    i = ag.tensor([1, 0, 1])
    f(x, s, i).backward()
    expected = x.grad.clone(), s.grad.clone()
    x.grad = s.grad = None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no graph break
        ag.compile(f, backend="interpret")(x, s, i).backward()
    assert_close(x.grad.numpy(), expected[0].numpy(), rtol=1e-6, atol=0, equal_nan=True)
    assert_close(s.grad.numpy(), expected[1].numpy(), rtol=1e-6, atol=0, equal_nan=True)
