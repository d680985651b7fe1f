"""The order of a cold kernel's tiers (codegen.tiers): a kernel with parallel loops runs on
numpy first, then compiled once, in parts on threads (codegen.parts), with the same values;
the jobs that take kernels off numpy run before other background compiles, whatever the
order they were queued in; and a second process finds in the disk cache the kernels the
first one left queued at exit."""
import os
import textwrap
import threading
import time

import numpy as np
import pytest

from aotgrad.codegen import compile_graph, parallel_compile, tiers
from aotgrad.codegen.first_tier import ReferenceKernel
from aotgrad.codegen.parts import PartsKernel
from aotgrad.ir import Aval, GraphBuilder, evaluate, prims
from aotgrad.ir import dtypes as dt
from aotgrad.testing import assert_close
from child_process import run_child


@pytest.fixture
def cold(empty_cache, monkeypatch):
    monkeypatch.setenv("AOTGRAD_BACKGROUND_COMPILE", "1")
    monkeypatch.delenv("AOTGRAD_FIRST_TIER", raising=False)
    monkeypatch.delenv("AOTGRAD_PARALLEL_MIN", raising=False)
    return empty_cache


@pytest.fixture
def held_jobs(monkeypatch):
    """Background jobs kept here, with their priorities, instead of run."""
    jobs = []
    monkeypatch.setattr(tiers, "submit",
                        lambda job, priority=tiers.Priority.UPGRADE: jobs.append((job, priority)))
    return jobs


def graph():
    """One kernel with enough work for prange loops (256 x 512 elements): a row sum of
    tanh(x) * x."""
    b = GraphBuilder("order")
    x = b.add_input(Aval((256, 512), dt.float32), "x")
    with b:
        rows = prims.reduce_sum(prims.mul(prims.tanh(x), x), dims=(1,))
    b.graph.outputs = [rows]
    return b.graph


X = np.random.default_rng(5).uniform(-2, 2, (256, 512)).astype(np.float32)


def _bound(prog):
    """The kernel objects the driver calls now."""
    g, names = prog.plan.prepared().bound_kernels[0]
    return [g[n] for n in names.values()]


def _in_parts(fn):
    return isinstance(fn, PartsKernel) and bool(fn.fn.overloads)


def test_numpy_then_compiled_in_parts_with_the_same_values(cold, held_jobs):
    g = graph()
    (want,) = evaluate(g, [X])
    prog = compile_graph(g)
    assert all(s.parts and "prange(" not in s.body for s in prog.specs.values())
    assert prog.first_tier and all(isinstance(k, ReferenceKernel) for k in _bound(prog))
    assert [p for _, p in held_jobs] == [tiers.Priority.FIRST_TIER]    # one compile, no upgrade
    (on_numpy,) = prog(X)
    assert held_jobs[0][0]() is True and not prog.first_tier
    assert all(_in_parts(k) for k in _bound(prog))
    assert "in parts on threads" in prog.report()
    (compiled,) = prog(X)
    for got in (on_numpy, compiled):
        assert_close(got, want, rtol=1e-5, atol=1e-4)
    # the same program again in this process starts compiled
    again = compile_graph(graph())
    assert not again.first_tier and all(_in_parts(k) for k in _bound(again))
    np.testing.assert_array_equal(again(X)[0], compiled)


def test_first_tier_jobs_run_before_upgrades_queued_earlier():
    assert tiers.wait(timeout=300)
    release, started, ran = threading.Event(), threading.Event(), []

    def blocker():
        started.set()
        release.wait(30)
        return True

    def job(name):
        def run():
            ran.append((name, tiers.more_urgent(tiers.Priority.UPGRADE)))
            return True
        return run
    tiers.submit(blocker, tiers.Priority.UPGRADE)
    assert started.wait(30)
    tiers.submit(job("upgrade"), tiers.Priority.UPGRADE)
    assert not tiers.more_urgent(tiers.Priority.UPGRADE)
    tiers.submit(job("first tier"), tiers.Priority.FIRST_TIER)
    assert tiers.more_urgent(tiers.Priority.UPGRADE)
    assert not tiers.more_urgent(tiers.Priority.FIRST_TIER)
    assert tiers.pending(tiers.Priority.FIRST_TIER) == 1
    release.set()
    assert tiers.wait(timeout=30)
    assert ran == [("first tier", False), ("upgrade", False)]
    assert tiers.pending(tiers.Priority.FIRST_TIER) == 0


CHILD = textwrap.dedent("""
    import importlib.util, json, sys
    spec = importlib.util.spec_from_file_location("tier_order_case", sys.argv[1])
    case = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(case)
    from aotgrad.codegen import compile_graph, cache
    prog = compile_graph(case.graph())
    prog(case.X)
    g, names = prog.plan.prepared().bound_kernels[0]
    print(json.dumps({"status": prog.cache_status, "first_tier": len(prog.first_tier),
                      "compiled_here": cache.stats.compiled,
                      "parts": [case._in_parts(g[n]) for n in names.values()]}))
""")


def _child(cache_dir):
    return run_child(CHILD, __file__, cache_dir)


def _helpers_in(d):
    """Compile helper processes working in directory d (the detached one)."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.readlink(f"/proc/{pid}/cwd") == str(d):
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if b"compile_worker" in f.read():
                        out.append(pid)
        except OSError:
            pass
    return out


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="finds the detached helper in /proc")
def test_a_second_process_starts_on_the_kernels_left_queued_at_exit(cold):
    """The first process exits right after its first call, its kernel still on numpy and
    its compile still queued: the detached helper compiles it, and the second process runs
    it in parts from its first call."""
    first = _child(cold)
    assert first["status"] == "new" and first["first_tier"] == 1
    deadline = time.monotonic() + 240
    while _helpers_in(cold) and time.monotonic() < deadline:
        time.sleep(0.2)
    second = _child(cold)
    assert second == dict(status="disk", first_tier=0, compiled_here=0, parts=[True])


@pytest.mark.skipif(not hasattr(os, "getsid") or not hasattr(os, "sched_getscheduler"),
                    reason="sessions and scheduling classes are POSIX / Linux")
def test_the_detached_helper_stays_in_this_session_in_a_group_of_its_own(tmp_path,
                                                                        monkeypatch):
    # Its own process group: a Ctrl-C in the terminal (sent to the foreground group) does
    # not stop it. This session: Linux's autogroup shares the cores between sessions first,
    # so a helper in a session of its own took a core from the next training process of
    # this one whatever its class (that process's steps ran at half speed meanwhile).
    from aotgrad.codegen import cache
    monkeypatch.setenv("AOTGRAD_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("AOTGRAD_COMPILE_WORKERS", "1")
    mod, _ = cache.load_module("import numba\n\n@numba.njit(cache=True)\n"
                               "def k_left(n):\n    return n + 1\n")
    unit = parallel_compile.Unit(mod.__file__, mod.__name__, "k_left", [["size"]])
    helper = parallel_compile.start_detached([unit], str(tmp_path))
    assert helper is not None
    try:
        assert os.getpgid(helper.pid) == helper.pid != os.getpgid(0)
        assert os.getsid(helper.pid) == os.getsid(0)
        deadline = time.monotonic() + 60       # (the class is set once it reads its setup)
        while os.sched_getscheduler(helper.pid) != os.SCHED_IDLE:
            assert helper.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        helper.wait(240)
    assert helper.returncode == 0


def test_a_boosted_helper_runs_at_the_callers_priority(tmp_path, monkeypatch):
    """(Niced helpers: test_first_tier.py's test_background_helpers_run_at_a_lower_priority.)"""
    from aotgrad.codegen import cache
    monkeypatch.setenv("AOTGRAD_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("AOTGRAD_COMPILE_WORKERS", "1")     # one helper
    monkeypatch.setattr(parallel_compile, "LINGER", 60.0)
    parallel_compile.shutdown()
    units = []
    for k in range(2):
        mod, _ = cache.load_module(f"import numba\n\n@numba.njit(cache=True)\n"
                                   f"def k_{k}(n):\n    return n + {k}\n")
        units.append(parallel_compile.Unit(mod.__file__, mod.__name__, f"k_{k}", [["size"]]))
    try:
        assert parallel_compile.compile_in_helpers([], str(tmp_path), boosted=1) == []
        # a stop() true at once: nothing is taken
        assert parallel_compile.compile_in_helpers(units, str(tmp_path), boosted=1,
                                                   stop=lambda: True) == []
        done = parallel_compile.compile_in_helpers(units, str(tmp_path), boosted=1)
        assert sorted(u.kernel for u in done) == ["k_0", "k_1"]
        helpers = [p for p, _ in parallel_compile._idle]
        assert len(helpers) == 1
        assert os.getpriority(os.PRIO_PROCESS, helpers[0].pid) == \
            os.getpriority(os.PRIO_PROCESS, 0)
    finally:
        parallel_compile.shutdown()


def test_a_fused_program_from_an_empty_cache_equals_eager(cold):
    """A compiled loss backpropagated at once, from an empty cache: the kernels of its split
    and fused programs go numpy -> serial -> parallel in the background, two steps share
    each layer's kernel (the same sizes), and every step's gradients equal eager's."""
    import aotgrad as ag
    from aotgrad.compiler.fused_call import FusedChoice

    def loss(x, w1, b1, w2, b2, w3):
        h = ag.relu(ag.relu(x @ w1 + b1) @ w2 + b2)
        return ((h @ w3) ** 2).mean()
    rng = np.random.default_rng(7)
    shapes = [(256, 512), (512, 512), (512,), (512, 512), (512,), (512, 16)]
    arrays = [rng.uniform(-1, 1, s).astype(np.float32) / (s[0] ** 0.5 if len(s) == 2 else 1)
              for s in shapes]
    args = [ag.from_numpy(a.copy()).requires_grad_(True) for a in arrays]
    eager = [ag.from_numpy(a.copy()).requires_grad_(True) for a in arrays]
    loss(*eager).backward()
    want = [e.grad.numpy() for e in eager]
    f = ag.compile(loss, backend="numba")
    kinds = []
    for step in range(40):
        for a in args:
            a.grad = None
        out = f(*args)
        if step == 0:       # the trial's timing aside: fused once its kernels are final
            f.ir(*args).call_plan().fused_choice = FusedChoice.FUSED
        kinds.append(type(out.grad_fn).__name__ == "_FusedBackward")
        out.backward()
        for a, w in zip(args, want):
            assert_close(a.grad.numpy(), w, rtol=1e-4, atol=1e-6)
        if kinds[-1] and step > kinds.index(True) + 2:
            break
        if step >= 8:
            assert tiers.wait(timeout=300)
    assert kinds[-1], kinds
    prog = f.ir(*args)
    assert all(not prog.compiled_graph(w).first_tier for w in ("forward", "fused"))


def test_a_helper_at_the_callers_priority_only_for_a_program_of_milliseconds():
    """(Small programs: a boosted helper would only slow their numpy steps.)"""
    assert tiers.first_tier_boosted(tiers.BOOST_MIN_SECONDS / 10) == 0
    assert tiers.first_tier_boosted(tiers.BOOST_MIN_SECONDS) == tiers.FIRST_TIER_BOOSTED >= 1
