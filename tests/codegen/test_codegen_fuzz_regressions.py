"""Regressions found by differential fuzzing of the code generator (tests/codegen_fuzz.py:
random IR graphs, compiled against the numpy reference prims), and a fixed-seed fuzz run."""
import math

import numpy as np
import pytest

from aotgrad.codegen import compile_graph
from aotgrad.ir import Aval, GraphBuilder, evaluate, prims
from aotgrad.ir import dtypes as dt

import codegen_fuzz  # noqa: E402
from aotgrad.testing import assert_close

SPECIALS = [math.nan, math.inf, -math.inf, 0.0, -0.0, 1e-30, -1e-30, 88.8, 1e38, 3.5,
            -2.5, 0.5, 1e-45, 1e-40, 2.0, 1.17e-38]


def _graph(avals, fn):
    b = GraphBuilder("g")
    with b:
        ins = [b.add_input(Aval(s, d)) for s, d in avals]
        b.graph.outputs = list(fn(*ins))
    return b.graph


@pytest.mark.parametrize("d", [dt.float32, dt.float64])
def test_rsqrt_at_zero_inf_and_denormals(d):
    # float32 1/sqrt(x) was LLVM's reciprocal-sqrt estimate (fast-math "arcp"): NaN at 0, inf
    # and -0, -inf at denormals; x / sqrt(y) and pow(x, -0.5) likewise
    n = len(SPECIALS)
    g = _graph([((n,), d)] * 2, lambda x, y: (
        prims.rsqrt(x), prims.div(y, prims.sqrt(x)),
        prims.pow(x, prims.full(shape=(n,), value=-0.5, dtype=d))))
    x = np.array(SPECIALS, d.np)
    y = np.linspace(-3, 3, n).astype(d.np)
    ref = evaluate(g, [x, y])
    got = compile_graph(g)(x, y)
    for r, o in zip(ref, got):
        np.testing.assert_array_equal(np.isnan(o), np.isnan(r))
        assert_close(o, r, rtol=3e-7, atol=0, equal_nan=True)
    assert got[0][1] == 0 and got[0][3] == np.inf and got[0][4] == -np.inf


def test_rsqrt_float32_error_over_the_range():
    rng = np.random.default_rng(0)
    x = (rng.random(1 << 16) * 10.0 ** rng.integers(-44, 38, 1 << 16)).astype(np.float32)
    g = _graph([(x.shape, dt.float32)], lambda x: (prims.rsqrt(x),))
    got, = compile_graph(g)(x)
    ref = 1.0 / np.sqrt(x.astype(np.float64))
    m = np.isfinite(ref) & (x > 0)
    assert m.sum() > 60000
    assert np.max(np.abs(got[m] - ref[m]) / ref[m]) < 2e-7


# a fixed-seed slice of the fuzz campaign: about 20 random graphs, compared with ir.evaluate
@pytest.mark.parametrize("seed", range(20))
def test_fuzz_fixed_seeds(seed):
    graph, arrays = codegen_fuzz.random_case(seed)
    msg = codegen_fuzz.check_case(graph, arrays)
    assert msg is None, f"{msg}\n{graph}"


def test_fuzz_bound_is_per_element_and_follows_the_references_own_error():
    ref = np.array([1e30, 1.0], np.float32)
    # one large element does not loosen the others
    assert codegen_fuzz.compare(ref, np.array([1e30, 1.0001], np.float32)) is not None
    assert codegen_fuzz.compare(ref, np.array([1e30, 1.000001], np.float32)) is None
    # where the float32 reference is itself off (cancellation), so may the compiled result be
    shadow = np.array([1e30, 1.01])
    assert codegen_fuzz.compare(ref, np.array([1e30, 1.02], np.float32), shadow) is None
    assert codegen_fuzz.compare(ref, np.array([1e30, 1.1], np.float32), shadow) is not None
    # integers: exact, except where the reference sits at a rounding edge
    iref = np.array([3, 4], np.int64)
    assert codegen_fuzz.compare(iref, np.array([3, 5])) is not None
    assert codegen_fuzz.compare(iref, np.array([3, 5]), np.array([3.0, 4.6])) is None


def test_fuzz_check_needs_an_error_where_the_reference_raises():
    g = _graph([((3,), dt.float32), ((2,), dt.int64)],
               lambda x, i: (prims.gather(x, i, dim=0),))
    arrays = [np.ones(3, np.float32), np.array([0, 7])]   # index 7 is out of range
    returns = lambda graph, name: (lambda *a: [np.zeros(2, np.float32)])  # noqa: E731
    assert "the reference raised" in codegen_fuzz.check_case(g, arrays, returns)
    assert codegen_fuzz.check_case(g, arrays) is None      # the compiled program raises too


def test_fuzz_check_catches_a_kernel_off_by_a_little(monkeypatch):
    from aotgrad.codegen import templates
    g = _graph([((64,), dt.float64)], lambda x: (prims.exp(x),))
    x = np.linspace(-3, 3, 64)
    assert codegen_fuzz.check_case(g, [x]) is None
    monkeypatch.setitem(templates.TEMPLATES, prims.exp,
                        lambda ctx, node, a: f"np.exp({a[0]}) * 1.00000001")
    assert "beyond tolerance" in codegen_fuzz.check_case(g, [x])


@pytest.mark.slow
@pytest.mark.parametrize("block", range(10))
def test_fuzz_more_seeds(block):
    bad = []
    for seed in range(1000 + 50 * block, 1050 + 50 * block):
        graph, arrays = codegen_fuzz.random_case(seed)
        msg = codegen_fuzz.check_case(graph, arrays)
        if msg:
            bad.append(f"seed {seed}: {msg}")
    assert not bad, "\n".join(bad)


def test_gather_reference_with_smaller_index():
    x = np.arange(20, dtype=np.float32).reshape(4, 5)
    idx = np.array([[0, 2, 1, 3]], dtype=np.int64)      # (1, 4): smaller than x outside dim 0
    out = prims.gather.bind(x, idx, dim=0)
    np.testing.assert_array_equal(out, [[0, 11, 7, 18]])   # out[i, j] = x[idx[i, j], j]


def test_gather_reference_with_smaller_index_matches_torch(torch):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 5, 3)).astype(np.float32)
    for dim in range(3):
        shape = [2, 3, 2]
        idx = rng.integers(0, x.shape[dim], size=shape).astype(np.int64)
        out = prims.gather.bind(x, idx, dim=dim)
        ref = torch.gather(torch.from_numpy(x), dim, torch.from_numpy(idx)).numpy()
        np.testing.assert_array_equal(out, ref)
