"""The numpy first tier (codegen.first_tier, codegen.tiers): a cold kernel runs its nodes
with the reference impls until helper processes have compiled it, then the compiled kernel
is swapped in; what is left at exit is compiled by a detached helper, so the next process
starts warm."""
import os
import textwrap
import time

import numpy as np
import pytest

import aotgrad
from aotgrad.codegen import compile_graph, parallel_compile, tiers, wait_for_parallel_kernels
from aotgrad.codegen.first_tier import ReferenceKernel
from aotgrad.ir import Aval, GraphBuilder, evaluate, prims
from aotgrad.ir import dtypes as dt
from aotgrad.testing import assert_close
from child_process import run_child


@pytest.fixture
def cold(empty_cache, monkeypatch):
    monkeypatch.setenv("AOTGRAD_BACKGROUND_COMPILE", "1")
    monkeypatch.delenv("AOTGRAD_FIRST_TIER", raising=False)
    return empty_cache


@pytest.fixture
def held_jobs(monkeypatch):
    """Background jobs kept here instead of run: the test runs them when it wants."""
    jobs = []
    monkeypatch.setattr(tiers, "submit", lambda job, priority=None: jobs.append(job))
    return jobs


def graph():
    """Three kernels: an elementwise one with two outputs, a row reduction (softmax) and a
    column reduction."""
    b = GraphBuilder("g")
    x = b.add_input(Aval((40, 24), dt.float32), "x")
    y = b.add_input(Aval((24,), dt.float32), "y")
    with b:
        yb = prims.broadcast_in_dim(y, shape=(40, 24), dims=(1,))
        t = prims.tanh(prims.add(x, yb))
        e = prims.exp(prims.sub(t, prims.broadcast_in_dim(
            prims.reduce_max(t, dims=(1,)), shape=(40, 24), dims=(0,))))
        soft = prims.div(e, prims.broadcast_in_dim(prims.reduce_sum(e, dims=(1,)),
                                                   shape=(40, 24), dims=(0,)))
        cols = prims.reduce_sum(prims.mul(t, x), dims=(0,))
        neg = prims.neg(t)
    b.graph.outputs = [soft, cols, neg, t]
    return b.graph


RNG = np.random.default_rng(3)
X = RNG.uniform(-2, 2, (40, 24)).astype(np.float32)
Y = RNG.uniform(-1, 1, (24,)).astype(np.float32)


def _bound(prog):
    g, names = prog.plan.prepared().bound_kernels[0]
    return [g[n] for n in names.values()]


def test_cold_kernels_run_on_numpy_then_compiled_ones_are_swapped_in(cold, held_jobs):
    g = graph()
    want = evaluate(g, [X, Y])
    prog = compile_graph(g)
    assert prog.first_tier and len(prog.first_tier) == len(prog.kernels())
    assert "numpy reference impls until it is compiled" in prog.report()
    assert all(isinstance(k, ReferenceKernel) for k in _bound(prog))
    assert not any(cold.glob("__pycache__/*.nbi"))     # nothing compiled for the first call
    for got, w in zip(prog(X, Y), want):                # the reference impls: eager's values
        assert_close(got, w, rtol=1e-6, atol=1e-7)
    assert len(held_jobs) == 1 and held_jobs[0]() is True
    assert not prog.first_tier and "numpy reference" not in prog.report()
    assert all(getattr(k, "overloads", None) for k in _bound(prog))   # numba dispatchers now
    for got, w in zip(prog(X, Y), want):
        assert_close(got, w, rtol=1e-5, atol=1e-6)


def test_without_helpers_the_job_compiles_in_this_process(cold, held_jobs, monkeypatch):
    monkeypatch.setenv("AOTGRAD_COMPILE_WORKERS", "0")
    g = graph()
    prog = compile_graph(g)
    assert prog.first_tier
    assert held_jobs[0]() is True and not prog.first_tier
    for got, w in zip(prog(X, Y), evaluate(g, [X, Y])):
        assert_close(got, w, rtol=1e-5, atol=1e-6)


def test_a_kernel_compiled_meanwhile_is_swapped_in_without_a_helper(cold, held_jobs,
                                                                     monkeypatch):
    g = graph()
    first = compile_graph(g)
    second = compile_graph(g)          # the same kernels, still on numpy
    assert second.first_tier
    monkeypatch.setenv("AOTGRAD_COMPILE_WORKERS", "0")
    assert held_jobs[0]() is True      # compiles them here
    monkeypatch.setattr(parallel_compile, "compile_in_helpers",
                        lambda *a, **k: pytest.fail("compiled again"))
    assert held_jobs[1]() is True and not second.first_tier
    assert not first.first_tier


def test_serial_first_tier_and_no_background_compile_compile_up_front(cold, held_jobs,
                                                                       monkeypatch):
    monkeypatch.setenv("AOTGRAD_FIRST_TIER", "serial")
    assert not compile_graph(graph()).first_tier
    monkeypatch.setenv("AOTGRAD_FIRST_TIER", "reference")
    monkeypatch.setenv("AOTGRAD_BACKGROUND_COMPILE", "0")
    assert not compile_graph(graph()).first_tier
    monkeypatch.setenv("AOTGRAD_FIRST_TIER", "numpy-please")
    monkeypatch.setenv("AOTGRAD_BACKGROUND_COMPILE", "1")
    with pytest.raises(ValueError, match="AOTGRAD_FIRST_TIER must be one of reference, serial"):
        compile_graph(graph())


def test_a_compiled_training_step_on_the_first_tier_equals_eager(cold):
    rng = np.random.default_rng(0)
    x = aotgrad.tensor(rng.standard_normal((16, 12)).astype(np.float32))
    labels = aotgrad.tensor(rng.integers(0, 5, 16))
    w1 = rng.standard_normal((20, 12)).astype(np.float32) * 0.3
    w2 = rng.standard_normal((5, 20)).astype(np.float32) * 0.3

    def loss_fn(w1, w2):
        h = aotgrad.nn.functional.gelu(aotgrad.nn.functional.layer_norm(x @ w1.T, (20,)),
                                       approximate="tanh")
        return aotgrad.nn.functional.cross_entropy(h @ w2.T, labels)

    def grads(fn):
        ps = [aotgrad.tensor(w1, requires_grad=True), aotgrad.tensor(w2, requires_grad=True)]
        loss = fn(*ps)
        loss.backward()
        return [loss.detach().numpy()] + [p.grad.numpy() for p in ps]

    step = aotgrad.compile(loss_fn)
    want = grads(loss_fn)
    first = grads(step)                 # the first tier (numpy): eager's values
    for got, w in zip(first, want):
        assert_close(got, w, rtol=1e-5, atol=1e-6)
    assert wait_for_parallel_kernels(timeout=300)
    later = grads(step)                 # compiled kernels
    for got, w in zip(later, want):
        assert_close(got, w, rtol=1e-4, atol=1e-5)


CHILD = textwrap.dedent("""
    import importlib.util, json, sys
    import numpy as np
    spec = importlib.util.spec_from_file_location("first_tier_case", sys.argv[1])
    case = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(case)
    graph, X, Y = case.graph, case.X, case.Y
    from aotgrad.codegen import compile_graph, cache
    prog = compile_graph(graph())
    prog(X, Y)
    print(json.dumps({"status": prog.cache_status, "first_tier": len(prog.first_tier),
                      "compiled_here": cache.stats.compiled,
                      "modules": prog.module_names}))
""")


def _child(cache_dir):
    return run_child(CHILD, __file__, cache_dir)


# (a second process starting warm after the detached helper: test_tier_order.py, in the
# default suite)
@pytest.mark.slow
def test_work_left_at_exit_is_compiled_after_the_process_ends(cold):
    """The first process runs its one call on numpy and exits at once: a detached helper
    compiles its kernels into the cache, and a second process starts warm."""
    first = _child(cold)
    assert first["status"] == "new" and first["first_tier"] >= 1
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        done = [m for m in first["modules"]
                if list(cold.glob(f"__pycache__/{m}.*.nbi")) and
                list(cold.glob(f"__pycache__/{m}.*.nbc"))]
        if len(done) == len(first["modules"]):
            break
        time.sleep(0.5)
    else:
        pytest.fail(f"only {len(done)} of {len(first['modules'])} kernels compiled after exit")
    second = _child(cold)
    assert second == dict(status="disk", first_tier=0, compiled_here=0,
                          modules=first["modules"])


def test_compare_with_eager_checks_the_compiled_kernels(cold, monkeypatch):
    """Inside tiers.compiled_kernels() (what compare_with_eager uses) a program compiles its
    kernels before its first call: comparing the numpy first tier with eager would compare
    eager with itself."""
    from aotgrad.testing import compare_with_eager
    from aotgrad.codegen.program import CompiledGraph
    built = []
    real = CompiledGraph.__init__

    def spy(self, *a, **k):
        real(self, *a, **k)
        built.append(self)
    monkeypatch.setattr(CompiledGraph, "__init__", spy)
    x = aotgrad.tensor(np.linspace(-2, 2, 48, dtype=np.float32).reshape(6, 8),
                       requires_grad=True)
    compare_with_eager(lambda x: (aotgrad.softmax(x, -1) * x).sum(), x)
    assert built and not any(p.first_tier for p in built)
    with tiers.compiled_kernels():
        assert tiers.first_tier() is tiers.FirstTier.SERIAL
    assert tiers.first_tier() is tiers.FirstTier.REFERENCE


def test_background_helpers_run_at_a_lower_priority(tmp_path, monkeypatch):
    from aotgrad.codegen import cache
    monkeypatch.setenv("AOTGRAD_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("AOTGRAD_COMPILE_WORKERS", "1")
    monkeypatch.setattr(parallel_compile, "LINGER", 60.0)
    parallel_compile.shutdown()
    mod, _ = cache.load_module("import numba\n\n@numba.njit(cache=True)\n"
                               "def k_one(n):\n    return n + 1\n")
    unit = parallel_compile.Unit(mod.__file__, mod.__name__, "k_one", [["size"]])
    seen = []
    done = parallel_compile.compile_in_helpers([unit], str(tmp_path), on_done=seen.append)
    try:
        assert done == [unit] and seen == [unit]
        helpers = [p for p, _ in parallel_compile._idle]
        assert len(helpers) == 1
        mine = os.getpriority(os.PRIO_PROCESS, 0)
        assert os.getpriority(os.PRIO_PROCESS, helpers[0].pid) == \
            min(19, mine + parallel_compile.BACKGROUND_NICE)
        if hasattr(os, "SCHED_IDLE"):   # only the CPU time the training leaves
            assert os.sched_getscheduler(helpers[0].pid) == os.SCHED_IDLE
    finally:
        parallel_compile.shutdown()
