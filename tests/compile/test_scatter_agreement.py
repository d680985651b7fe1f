"""scatter, scatter_add, index_copy and `x[index] = v` compiled give eager's answer where
an index repeats a position (the last write wins, eagerly and compiled; the compiled
program used to sum the writes), and PyTorch's answer or error for the operand shapes it
accepts or refuses (an empty index, 0-d tensors, a src larger than the index)."""
import warnings

import numpy as np
import pytest

import aotgrad

BACKENDS = ["interpret", "numba"]


def scatter_rows(x, i, s):
    return x.scatter(1, i, s)


def index_copy_rows(x, i, s):
    return x.index_copy(0, i, s)


def setitem_rows(x, i, s):
    x = x.clone()
    x[i] = s
    return x


def setitem_pairs(x, i, s):
    x = x.clone()
    x[i, i] = s
    return x


CASES = {
    scatter_rows: lambda rng: ((4, 6), rng.integers(0, 6, (4, 5)), (4, 5)),
    index_copy_rows: lambda rng: ((4, 6), rng.integers(0, 4, (7,)), (7, 6)),
    setitem_rows: lambda rng: ((4, 6), rng.integers(0, 4, (7,)), (7, 6)),
    setitem_pairs: lambda rng: ((4, 4), rng.integers(0, 4, (9,)), (9,)),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", list(CASES), ids=lambda f: f.__name__)
def test_repeated_positions_last_write_wins_compiled(fn, backend):
    rng = np.random.default_rng(0)
    cf = aotgrad.compile(fn, backend=backend)
    for _ in range(3):
        xs, idx, ss = CASES[fn](rng)
        assert len(np.unique(idx)) < idx.size  # the case repeats a position
        x = aotgrad.tensor(rng.standard_normal(xs).astype(np.float32), requires_grad=True)
        s = aotgrad.tensor(rng.standard_normal(ss).astype(np.float32), requires_grad=True)
        i = aotgrad.tensor(idx)
        want, got = fn(x, i, s), cf(x, i, s)
        np.testing.assert_array_equal(got.detach().numpy(), want.detach().numpy())
        gw = aotgrad.autograd.grad((want * want).sum(), (x, s))
        gg = aotgrad.autograd.grad((got * got).sum(), (x, s))
        for a, b in zip(gg, gw):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, atol=1e-6)


def test_setitem_repeated_positions_is_torch(vs_torch):
    def case(M):
        x = M.zeros(3)
        x[M.tensor([0, 0, 2])] = M.tensor([1.0, 2.0, 3.0])
        return x
    vs_torch.same(case)


# (self, index, src) shapes along dim 0
SHAPES = [((5, 3), (7, 3), (5, 3)), ((5, 3), (3, 4), (5, 4)), ((5, 3), (3, 3), (2, 3)),
          ((5, 3), (3,), (5, 3)), ((5,), (0,), (5,)), ((5, 3), (0,), (5, 3)), ((), (), ()),
          ((), (1,), (1,)), ((5,), (), ()), ((1,), (), (1,)), ((), (2,), (2,)),
          ((5, 3), (2, 2), (3, 3))]


@pytest.mark.parametrize("op", ["scatter", "scatter_add"])
@pytest.mark.parametrize("shapes", SHAPES, ids=str)
def test_scatter_operand_shapes_are_torch(op, shapes, vs_torch):
    xs, i_s, ss = shapes
    vs_torch.same(lambda M: getattr(M.zeros(xs), op)(0, M.zeros(i_s, dtype=M.int64),
                                                      M.ones(ss)), exact_error=True)


@pytest.mark.parametrize("op", ["scatter", "scatter_add"])
@pytest.mark.parametrize("shapes", SHAPES, ids=str)
def test_scatter_operand_shapes_compiled_is_eager(op, shapes):
    xs, i_s, ss = shapes

    def fn(x, i, s):
        return getattr(x, op)(0, i, s)
    args = (aotgrad.zeros(xs), aotgrad.zeros(i_s, dtype=aotgrad.int64), aotgrad.ones(ss))
    outcomes = []
    for f in (fn, aotgrad.compile(fn, backend="interpret")):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                outcomes.append(f(*args).tolist())
        except RuntimeError as e:
            outcomes.append(str(e))
    assert outcomes[0] == outcomes[1]
