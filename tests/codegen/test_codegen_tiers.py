"""Tiered compilation (codegen.tiers): a cold medium kernel starts serial, its parallel
variant is compiled by helper processes in the background and swapped into the driver; a
variant already compiled is used at once; without helpers the serial kernel stays."""

import numpy as np
import pytest

from aotgrad.codegen import compile_graph, tiers, wait_for_parallel_kernels
from aotgrad.ir import Aval, GraphBuilder, evaluate, prims
from aotgrad.ir import dtypes as dt
from aotgrad.testing import assert_close


@pytest.fixture
def cold(empty_cache, monkeypatch):
    monkeypatch.setenv("AOTGRAD_BACKGROUND_COMPILE", "1")
    monkeypatch.setenv("AOTGRAD_FIRST_TIER", "serial")   # the numpy first tier: test_first_tier.py
    monkeypatch.setenv("AOTGRAD_PARALLEL_MIN", "0")
    return empty_cache


def graph():
    """Two kernels with enough work for prange (300 x 512): a row reduction and a column
    reduction (partials per block, then combined)."""
    b = GraphBuilder("p")
    x = b.add_input(Aval((300, 512), dt.float32), "x")
    with b:
        t = prims.tanh(x)
        rows = prims.reduce_sum(t, dims=(1,))
        cols = prims.reduce_sum(prims.mul(t, x), dims=(0,))
    b.graph.outputs = [rows, cols]
    return b.graph


def _bound(prog):
    """The kernel objects the driver calls now."""
    g, names = prog.plan.prepared().bound_kernels[0]
    return [g[n] for n in names.values()]


X = np.random.default_rng(1).uniform(-2, 2, (300, 512)).astype(np.float32)


# (serial -> parallel on the numpy tier's path: test_tier_order.py, in the default suite)
@pytest.mark.slow
def test_cold_kernels_start_serial_and_are_upgraded(cold):
    g = graph()
    prog = compile_graph(g)
    specs = list(prog.specs.values())
    assert all("prange(" in s.body for s in specs)
    first = prog(X)
    for got, want in zip(first, evaluate(g, [X])):
        assert_close(got, want, rtol=1e-5, atol=1e-4, equal_nan=True)
    assert wait_for_parallel_kernels(timeout=300)
    if not prog.upgraded:       # the job ran before this check could see the serial state
        pytest.fail(f"no kernel upgraded: {prog.report()}")
    assert len(prog.upgraded) == len({s.name for s in specs})
    assert all(f.targetoptions.get("parallel") for f in _bound(prog))
    assert "parallel, compiled in the background" in prog.report()
    again = prog(X)
    for a, b in zip(first, again):        # the same sums, maybe vectorised differently
        assert_close(a, b, rtol=1e-6, atol=1e-6, equal_nan=True)
    # the same program again: its parallel variants are there now, used from the start
    prog2 = compile_graph(graph())
    assert not prog2.upgrading
    assert all(f.targetoptions.get("parallel") for f in _bound(prog2))


def test_report_says_serial_until_upgraded(cold, monkeypatch):
    monkeypatch.setattr(tiers, "submit", lambda job, priority=None: None)   # keep it serial
    prog = compile_graph(graph())
    assert prog.upgrading and not prog.upgraded
    assert "serial until its parallel variant is compiled in the background" in prog.report()
    assert not any(f.targetoptions.get("parallel") for f in _bound(prog))


def test_without_helpers_kernels_stay_serial(cold, monkeypatch):
    monkeypatch.setenv("AOTGRAD_COMPILE_WORKERS", "0")
    g = graph()
    prog = compile_graph(g)
    assert wait_for_parallel_kernels(timeout=300)
    assert not prog.upgraded
    for got, want in zip(prog(X), evaluate(g, [X])):
        assert_close(got, want, rtol=1e-5, atol=1e-4, equal_nan=True)


def test_up_front_when_background_compile_is_off(cold, monkeypatch):
    monkeypatch.setenv("AOTGRAD_BACKGROUND_COMPILE", "0")
    prog = compile_graph(graph())
    assert not prog.upgrading
    assert all(f.targetoptions.get("parallel") for f in _bound(prog))


def shared_kernel_graph():
    """One pointwise kernel run by two steps on different values (the same body, so the
    same kernel), with a product between them."""
    b = GraphBuilder("twice")
    x = b.add_input(Aval((300, 512), dt.float32), "x")
    w = b.add_input(Aval((512, 512), dt.float32), "w")
    with b:
        h = prims.mul(prims.tanh(x), x)
        p = prims.dot_general(h, w, contract=((1,), (0,)))
        o = prims.mul(prims.tanh(p), p)
    b.graph.outputs = [o]
    return b.graph


def test_upgrade_of_a_kernel_two_steps_share_keeps_each_steps_arguments(cold):
    """A kernel's parallel variant swapped into both steps that run it: every driver made
    after the swap (a trusted runner, the profiler's) still passes each step its own
    arrays."""
    g = shared_kernel_graph()
    prog = compile_graph(g)
    names = [s.name for s in prog.specs.values()]
    assert len(names) == 2 and names[0] == names[1], names
    rng = np.random.default_rng(3)
    x = rng.uniform(-1, 1, (300, 512)).astype(np.float32)
    w = rng.uniform(-0.1, 0.1, (512, 512)).astype(np.float32)
    want = evaluate(g, [x, w])[0]
    assert_close(prog(x, w)[0], want, rtol=1e-4, atol=1e-4)
    assert wait_for_parallel_kernels(timeout=300)
    assert prog.upgraded, prog.report()
    assert_close(prog(x, w)[0], want, rtol=1e-4, atol=1e-4)
    assert_close(prog.plan.runner(trusted=2)(x, w)[0], want, rtol=1e-4, atol=1e-4)
    assert_close(prog.plan.profiled(x, w)[0][0], want, rtol=1e-4, atol=1e-4)
    assert prog.report().count("parallel, compiled in the background") == 2
