"""A symbolic kernel whose work depends on a symbol runs, at each call, the loop structure
a static program of that call's size runs (range loops below emit_base.PAR_MIN elements of
work, prange loops above): the static program's numbers at every size (up to how LLVM
vectorises a sum in a loop of constant or variable length), and the
variant the traced sizes did not need is compiled on the first call that needs it."""
import numpy as np
import pytest

from aotgrad.codegen import CompiledGraph, compile_graph, tiers
from aotgrad.codegen.emit_base import PAR_MIN
from aotgrad.codegen.scheduler import Kernel, Scheduler
from aotgrad.codegen.size_variants import emit_variants
from aotgrad.codegen.symbols import concrete_graph
from aotgrad.ir import prims, symbolic
from aotgrad.ir.core import evaluate
from aotgrad.testing import assert_close
from symbolic_graphs import build

pytestmark = pytest.mark.usefixtures("module_cache_dir")

W = 256                       # row width: PAR_MIN // W rows make a large call
SMALL, LARGE = 8, PAR_MIN // W + 40


def _rows(n, x):
    """A row kernel (softmax-like) and a column sum: work n * W elements each."""
    w = x.shape[1]
    m = prims.reduce_max(x, dims=(1,))
    e = prims.exp(prims.sub(x, prims.broadcast_in_dim(m, shape=(n, w), dims=(0,))))
    s = prims.reduce_sum(e, dims=(1,))
    y = prims.div(e, prims.broadcast_in_dim(s, shape=(n, w), dims=(0,)))
    return y, prims.reduce_sum(prims.mul(x, x), dims=(0,))


def _x(n, seed=0, w=W):
    return np.random.default_rng(seed).uniform(-3, 3, (n, w)).astype(np.float32)


def _static(graph, n):
    return compile_graph(concrete_graph(graph, {"s0": n}))


def _equal(got, want):
    """The same values up to the order LLVM vectorises a row sum in: the static kernel's
    loops have constant trip counts, the symbolic one's do not, and on some CPUs (AVX2)
    LLVM groups the sum's reassociable adds differently for each (a last-bit difference in
    a quarter of a softmax's rows); the kernels' choice is checked apart."""
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_max_ulp(g, w, maxulp=4)


def test_each_size_runs_the_static_programs_kernels(monkeypatch):
    monkeypatch.setenv("AOTGRAD_BACKGROUND_COMPILE", "0")   # deferred variants compile at once
    g = build(_rows, ("n", W), hint=SMALL)
    prog = compile_graph(g)
    assert isinstance(prog, CompiledGraph) and prog.small_variants
    # traced small: the prange variants are not compiled until a large call needs them
    assert all(prog.deferred.get(st) is prog.specs[st] for st in prog.small_variants)
    assert "compiled on the first call that needs it" in prog.report()
    for n in (SMALL, LARGE, 5, LARGE + 7):
        x = _x(n, n)
        got = prog(x, (n,))
        static = _static(g, n)
        _equal(got, static(x))
        assert_close(got, evaluate(g, [x], values={"s0": n}), rtol=1e-5, atol=1e-6)
        # the static program of this size chose the loops the symbolic one ran
        par = n * W >= PAR_MIN
        assert all(s.parallel == par for s in static.specs.values())
        assert all((symbolic.evaluate(v.work, {"s0": n}) < PAR_MIN) == (not par)
                   for v in prog.small_variants.values())
    assert not prog.deferred
    names = {s.name for s in prog.specs.values()} | \
        {v.spec.name for v in prog.small_variants.values()}
    assert len(names) == 2 * len(prog.small_variants)


def test_traced_large_compiles_the_small_variant_on_first_use(monkeypatch):
    monkeypatch.setenv("AOTGRAD_BACKGROUND_COMPILE", "0")
    w = W // 2
    large = PAR_MIN // w + 3
    # (of x's negative: kernels of their own, not in the kernel cache from the test above)
    g = build(lambda n, x: _rows(n, prims.neg(x)), ("n", w), hint=large)
    prog = compile_graph(g)
    assert prog.small_variants and all(
        prog.deferred.get(st) is v.spec for st, v in prog.small_variants.items())
    for n in (large, 6):
        x = _x(n, w=w)
        _equal(prog(x, (n,)), _static(g, n)(x))
    assert not prog.deferred


def test_background_compile_of_a_deferred_variant(tmp_path, monkeypatch):
    monkeypatch.setenv("AOTGRAD_CACHE_DIR", str(tmp_path))        # nothing compiled yet
    monkeypatch.setenv("AOTGRAD_BACKGROUND_COMPILE", "1")
    assert tiers.wait(300)                                       # no other test's job
    g = build(lambda n, x: prims.tanh(prims.mul(x, x)), ("n", W), hint=SMALL)
    prog = compile_graph(g)
    (st, v), = prog.small_variants.items()
    assert prog.deferred == {st: prog.specs[st]}
    x = _x(LARGE)
    want = evaluate(g, [x], values={"s0": LARGE})
    # the first large call runs the compiled (range) variant while the other compiles
    assert_close(prog(x, (LARGE,)), want, rtol=1e-6, atol=1e-6)
    assert tiers.wait(300)
    assert "first call" not in prog.report()
    # the prange variant swapped in (compiled by a helper process, else by the job itself)
    compiled = prog.plan.kernel_fns[st][0]       # (a kernel in parts: codegen.parts)
    assert getattr(compiled, "fn", compiled).py_func.__name__ == prog.specs[st].name
    assert_close(prog(x, (LARGE,)), want, rtol=1e-6, atol=1e-6)
    assert_close(prog.plan.runner(0)(x, (LARGE,)), want, rtol=1e-6, atol=1e-6)


def _emitted(graph):
    """[(spec, SmallVariant or None)] per kernel of graph's schedule (nothing compiled)."""
    sch = Scheduler(graph)
    return [emit_variants(sch, st, set()) for st in sch.run().steps if isinstance(st, Kernel)]


def test_each_variant_is_emitted_as_the_static_program_at_a_size_it_runs_at():
    # a column sum: by row blocks or by column chunks, chosen on the rows each thread gets
    g = build(lambda n, x: prims.reduce_sum(prims.tanh(x), dims=(0,)), ("n", 64), hint=8)
    large = PAR_MIN // 64 + 5
    sym = _emitted(g)
    assert sym and all(v is not None for _, v in sym)
    assert [s.body for s, _ in sym] == \
        [s.body for s, _ in _emitted(concrete_graph(g, {"s0": large}))]
    assert [v.spec.body for _, v in sym] == \
        [s.body for s, _ in _emitted(concrete_graph(g, {"s0": 8}))]


def test_workspace_views_made_once_per_size_and_dropped_when_a_buffer_grows():
    def f(n, x, w):     # a product between two kernels: its operand lives in the workspace
        h = prims.tanh(prims.mul(x, x))
        y = prims.dot_general(h, w, contract=((1,), (0,)), batch=((), ()))
        return prims.reduce_sum(prims.exp(y), dims=(1,))
    g = build(f, ("n", 16), (16, 8))
    prog = compile_graph(g)
    w = np.random.default_rng(1).uniform(-1, 1, (16, 8)).astype(np.float32)
    for n in (5, 40, 3, 40, 5, 64, 5):
        x = np.random.default_rng(n).uniform(-1, 1, (n, 16)).astype(np.float32)
        assert_close(prog(x, w, (n,)), evaluate(g, [x, w], values={"s0": n}), rtol=1e-5,
                     atol=1e-6)
    cache, = prog.plan.view_caches
    # 64 grew the buffers: the views of the sizes before it (3, 40) were dropped
    assert set(cache) == {(64,), (5,)}
    assert "_views" in prog.plan.driver_source
