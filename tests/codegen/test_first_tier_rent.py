"""The first tier is rented (codegen.first_tier.Rent): a program's numpy runs are charged
what they cost beyond their compiled kernels' estimate, and once the charges reach the
estimated compile of the kernels still on numpy, the program waits for those compiles,
once, and then runs them compiled, with the values it had on numpy."""
import threading
import time

import numpy as np
import pytest

from aotgrad.codegen import compile_graph, cost, tiers
from aotgrad.codegen.first_tier import ReferenceKernel, Rent
from aotgrad.ir import Aval, GraphBuilder, evaluate, prims
from aotgrad.ir import dtypes as dt
from aotgrad.testing import assert_close


def _finish_later(rent, seconds):
    t = threading.Thread(target=lambda: (time.sleep(seconds), rent.finished()), daemon=True)
    t.start()
    return t


def test_charges_below_the_compile_estimate_do_not_wait():
    rent = Rent("p", {"k1": 1.0, "k2": 3.0}, workers=2)
    rent.started()
    assert rent.due() == pytest.approx(2.0)     # 4 s of compiles on two helpers
    t0 = time.perf_counter()
    for _ in range(19):
        rent.charge(0.1)
    rent.charge(-5.0)                          # a call faster than its estimate: no credit
    assert rent.charged == pytest.approx(1.9)
    assert time.perf_counter() - t0 < 1.0 and rent.waited == 0.0


def test_the_charge_that_reaches_the_estimate_waits_for_the_compiles_once():
    rent = Rent("p", {"k1": 1.0, "k2": 3.0}, workers=2)
    rent.started()
    rent.compiled("k2")                        # 1 s left, on one helper: due 1 s
    assert rent.due() == pytest.approx(1.0)
    rent.charge(0.5)
    _finish_later(rent, 0.3)
    rent.charge(0.6)
    assert rent.waited >= 0.25
    t0 = time.perf_counter()
    rent.charge(10.0)                          # it waits once only
    assert time.perf_counter() - t0 < 0.2


def test_a_finished_job_is_never_waited_for():
    rent = Rent("p", {"k": 0.0}, workers=1)
    rent.started()
    rent.finished()
    rent.charge(1.0)
    assert rent.waited == 0.0


def test_a_job_not_started_is_never_waited_for():
    rent = Rent("p", {"k": 1.0}, workers=1)
    t0 = time.perf_counter()
    rent.charge(5.0)            # (queued behind another job, or held: nothing to wait on)
    assert rent.waited == 0.0 and time.perf_counter() - t0 < 0.2
    rent.started()                              # running now: the next charge waits
    _finish_later(rent, 0.2)
    rent.charge(0.1)
    assert rent.waited >= 0.15


def graph():
    """A pointwise chain with a row sum over 256 x 512 elements: one kernel."""
    b = GraphBuilder("rent")
    x = b.add_input(Aval((256, 512), dt.float32), "x")
    with b:
        y = prims.mul(prims.tanh(x), prims.exp(prims.neg(prims.mul(x, x))))
        rows = prims.reduce_sum(y, dims=(1,))
    b.graph.outputs = [y, rows]
    return b.graph


X = np.random.default_rng(11).uniform(-3, 3, (256, 512)).astype(np.float32)


@pytest.fixture
def cold(empty_cache, monkeypatch):
    monkeypatch.setenv("AOTGRAD_BACKGROUND_COMPILE", "1")
    monkeypatch.delenv("AOTGRAD_FIRST_TIER", raising=False)
    return empty_cache


def _bound(prog):
    g, names = prog.plan.prepared().bound_kernels[0]
    return [g[n] for n in names.values()]


def test_a_program_whose_rent_is_due_waits_and_then_runs_compiled(cold, monkeypatch):
    # compiles estimated free: the first numpy run already costs more than waiting
    monkeypatch.setattr(cost, "COMPILE_SECONDS", 0.0)
    monkeypatch.setattr(cost, "COMPILE_SECONDS_PER_CHAR", 0.0)
    g = graph()
    want = evaluate(g, [X])
    prog = compile_graph(g)
    assert prog.first_tier and all(isinstance(k, ReferenceKernel) for k in _bound(prog))
    first = prog(X)
    # (the call that waits is the first one charged after the first-tier job has started)
    deadline = time.monotonic() + 120
    while prog.rent.waited == 0.0 and prog.first_tier and time.monotonic() < deadline:
        prog(X)
    assert prog.rent.waited > 0.0 and not prog.first_tier
    assert not any(isinstance(k, ReferenceKernel) for k in _bound(prog))
    second = prog(X)
    for got in (first, second):
        for a, b in zip(got, want):
            assert_close(a, b, rtol=1e-5, atol=1e-4)
    assert tiers.wait(timeout=300)


def test_a_program_whose_rent_is_not_due_keeps_running_on_numpy(cold, monkeypatch):
    monkeypatch.setattr(cost, "COMPILE_SECONDS", 1e6)     # a compile never worth waiting for
    held = []
    monkeypatch.setattr(tiers, "submit",
                        lambda job, priority=tiers.Priority.UPGRADE: held.append(job))
    g = graph()
    want = evaluate(g, [X])
    prog = compile_graph(g)
    for _ in range(3):
        got = prog(X)
    assert prog.rent.waited == 0.0 and prog.rent.charged > 0.0 and prog.first_tier
    for a, b in zip(got, want):
        assert_close(a, b, rtol=1e-5, atol=1e-4)
