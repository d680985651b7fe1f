"""Interleaved loops: a parallel kernel's loop body that calls the vectorisable approximations
ends in `_interleave()`, which puts LLVM's "llvm.loop.interleave.count" on that loop; the
results stay those of the reference (NaN, infinities and -0.0 included)."""
import re

import numpy as np
import pytest

from aotgrad.ir import evaluate, prims
from aotgrad.ir import dtypes as dt
from symbolic_graphs import static

pytestmark = pytest.mark.usefixtures("module_cache_dir")
F32 = dt.float32


def _full(shape, v):
    return prims.full(shape=tuple(shape), value=v, dtype=F32)


def _special_inputs(n, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-12, 12, n).astype(np.float32)
    x[:8] = [np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-40, -1e-40, 88.5]
    return x


def _hinted_loops(source):
    return len(re.findall(r"^ +_interleave\(\)$", source, re.M))


def _vector_ops(fn):
    """Vector float multiplies in the optimised LLVM IR of fn's one compiled signature."""
    ir = fn.inspect_llvm(fn.signatures[0])
    return len(re.findall(r"= fmul <\d+ x float>", ir))


def test_the_intrinsic_interleaves_its_loop(tmp_path, monkeypatch):
    # the metadata is consumed by the vectoriser: the interleaved loop shows up as more
    # vector operations per iteration than the same loop without the call
    monkeypatch.setenv("AOTGRAD_CACHE_DIR", str(tmp_path))
    from aotgrad.codegen import approx, cache, prelude
    body = "        out[i] = exp_f32(x[i]) * np.float32(2.0)\n"
    src = prelude.PRELUDE + approx.helper_source({"exp_f32"}) + f"""

@_jit
def hinted(x, out):
    for i in range(x.size):
{body}        _interleave()


@_jit
def plain(x, out):
    for i in range(x.size):
{body}"""
    m, how = cache.load_module(src, fresh=True)
    x = _special_inputs(1001)
    with np.errstate(over="ignore"):
        ref = (np.exp(x.astype(np.float64)) * 2).astype(np.float32)
    for fn in (m.hinted, m.plain):
        out = np.empty_like(x)
        fn(x, out)
        np.testing.assert_allclose(out, ref, rtol=1e-6, atol=0)
        assert np.isnan(out[0]) and out[1] == np.inf and out[2] == 0.0
    plain = _vector_ops(m.plain)
    if plain == 0:
        pytest.skip("this CPU's LLVM target does not vectorise the loop")
    assert _vector_ops(m.hinted) >= 2 * plain


def test_an_approximation_chain_is_interleaved_and_equals_the_reference():
    from aotgrad.codegen import compile_graph
    n = (1 << 17) + 37   # parallel (PAR_MIN elements), with a remainder below one vector step

    def fn(x):
        a = prims.tanh(prims.add(prims.mul(x, _full((n,), 1.5)), _full((n,), 0.5)))
        s = prims.logistic(x)
        e = prims.exp(prims.neg(prims.mul(x, x)))
        return prims.add(prims.mul(a, s), prims.mul(_full((n,), 0.1), e))
    g = static(fn, ((n,), F32))
    prog = compile_graph(g)
    assert _hinted_loops(prog.source) >= 1, prog.source
    x = _special_inputs(n)
    (got,) = prog(x)
    with np.errstate(invalid="ignore", over="ignore"):
        (ref,) = evaluate(g, [x])
    assert got.dtype == np.float32
    ref = np.asarray(ref)
    same_nan = np.isnan(got) == np.isnan(ref)
    assert same_nan.all()
    ok = ~np.isnan(ref)
    np.testing.assert_allclose(got[ok], ref[ok], rtol=2e-6, atol=1e-7)


def test_short_bodies_and_small_kernels_are_left_to_llvm():
    from aotgrad.codegen import compile_graph
    big, small = 1 << 17, 4096

    def plain(x):
        return prims.add(prims.mul(x, x), _full(x.shape, 1.0))

    def summed(x):
        return prims.reduce_sum(prims.exp(x), dims=(0,))
    for fn, n in ((plain, big), (summed, small)):
        prog = compile_graph(static(fn, ((n,), F32)))
        assert _hinted_loops(prog.source) == 0, prog.source


def test_a_sum_of_approximations_adds_in_a_fixed_order():
    # LLVM's own interleave count for a reduction follows its register estimate, which
    # varies with the loop body; the hint fixes it (and with it the order of the sum)
    from aotgrad.codegen import compile_graph
    n = (1 << 17) + 5

    def summed(x):
        return prims.reduce_sum(prims.exp(prims.neg(prims.mul(x, x))), dims=(0,))
    g = static(summed, ((n,), F32))
    prog = compile_graph(g)
    assert _hinted_loops(prog.source) >= 1, prog.source
    x = np.random.default_rng(3).uniform(-3, 3, n).astype(np.float32)
    (got,) = prog(x)
    want = np.exp(-x.astype(np.float64) ** 2).sum()
    assert got.dtype == np.float32
    np.testing.assert_allclose(float(got), want, rtol=1e-6)


def test_a_column_sum_beside_an_approximation_is_interleaved_and_exact():
    # the bias gradient of a GELU-like backward: an elementwise output and its column sum
    from aotgrad.codegen import compile_graph
    R, C = 512, 260

    def fn(x):
        y = prims.mul(prims.tanh(x), prims.exp(prims.neg(prims.mul(x, x))))
        return [y, prims.reduce_sum(y, dims=(0,))]
    g = static(fn, ((R, C), F32))
    prog = compile_graph(g)
    assert _hinted_loops(prog.source) >= 1, prog.source
    x = _special_inputs(R * C, seed=1).reshape(R, C)
    x[:, 5] = 0.25                       # a column without special values
    got = prog(x)
    with np.errstate(invalid="ignore", over="ignore"):
        ref = [np.asarray(r) for r in evaluate(g, [x])]
    for a, r in zip(got, ref):
        assert a.dtype == np.float32 and a.shape == r.shape
        assert (np.isnan(a) == np.isnan(r)).all()
        ok = ~np.isnan(r)
        np.testing.assert_allclose(a[ok], r[ok], rtol=2e-6, atol=1e-6)
