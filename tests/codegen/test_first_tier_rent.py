"""The first tier is rented (codegen.rent.Rent): a program's numpy runs are charged
what they cost beyond their compiled kernels' estimate, and once the charges reach a share
of the estimated compile of the kernels still on numpy, the program waits for those
compiles, once, never in its first call, and then runs them compiled, with the values it
had on numpy. A program whose steps compete with the compile for the cores holds its
compiles back until then."""
import threading
import time

import numpy as np
import pytest

from aotgrad.codegen import compile_graph, cost, tiers
from aotgrad.codegen.first_tier import ReferenceKernel
from aotgrad.codegen.rent import Rent
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
        rent.charge(0.1, "k1")
    rent.charge(-5.0, "k1")                    # a call faster than its estimate: no credit
    assert rent.charged == pytest.approx(1.9)
    assert time.perf_counter() - t0 < 1.0 and rent.waited == 0.0


def test_the_charge_that_reaches_the_estimate_waits_for_the_compiles_once():
    rent = Rent("p", {"k1": 1.0, "k2": 3.0}, workers=2)
    rent.started()
    rent.compiled("k2")                        # 1 s left, on one helper: due 1 s
    assert rent.due() == pytest.approx(1.0)
    rent.charge(0.5, "k1")
    _finish_later(rent, 0.3)
    rent.charge(0.6, "k1")
    assert rent.waited >= 0.25
    t0 = time.perf_counter()
    rent.charge(10.0, "k1")                    # it waits once only
    assert time.perf_counter() - t0 < 0.2


def test_a_finished_job_is_never_waited_for():
    rent = Rent("p", {"k": 0.0}, workers=1)
    rent.started()
    rent.finished()
    rent.charge(1.0, "k")
    rent.charge(1.0, "k")
    assert rent.waited == 0.0


def test_a_job_not_started_is_never_waited_for():
    rent = Rent("p", {"k": 1.0}, workers=1)
    t0 = time.perf_counter()
    rent.charge(5.0, "k")       # (queued behind another job, or held: nothing to wait on)
    rent.charge(5.0, "k")
    assert rent.waited == 0.0 and time.perf_counter() - t0 < 0.2
    rent.started()                              # running now: the next charge waits
    _finish_later(rent, 0.2)
    rent.charge(0.1, "k")
    assert rent.waited >= 0.15


def test_the_first_call_never_waits_whatever_its_charges():
    rent = Rent("p", {"k1": 1.0, "k2": 1.0}, workers=2)
    rent.started()
    t0 = time.perf_counter()
    rent.charge(5.0, "k1")                     # each kernel's first run: the first call
    rent.charge(5.0, "k2")
    assert rent.waited == 0.0 and time.perf_counter() - t0 < 0.2
    _finish_later(rent, 0.2)
    rent.charge(0.0, "k1")                     # k1 again: the second call, long due
    assert rent.waited >= 0.15


def test_a_held_back_job_starts_when_the_rent_is_due_and_is_waited_for():
    started = []
    rent = None

    def start():                           # (tiers.defer's start: the job runs elsewhere)
        started.append(True)
        rent.started()
        _finish_later(rent, 0.2)
    rent = Rent("p", {"k": 1.0}, workers=1, start=start)
    rent.charge(0.6, "k")                      # the first call: never waits, nor starts it
    rent.charge(0.3, "k")                      # 0.9 s of 1 s: not due
    assert not started and rent.waited == 0.0
    rent.charge(0.2, "k")                      # due: started, and waited for
    assert started == [True] and rent.waited >= 0.15
    rent.charge(5.0, "k")                      # once
    assert started == [True]


def test_a_kernel_that_runs_twice_a_call_waits_only_in_the_second_call():
    # (four identical transformer blocks run one kernel four times a call)
    rent = Rent("p", {"k": 0.0}, workers=1, runs_per_call={"k": 2})
    rent.started()
    rent.charge(1.0, "k")
    rent.charge(1.0, "k")                      # the first call, twice
    assert rent.waited == 0.0
    _finish_later(rent, 0.2)
    rent.charge(0.0, "k")                      # the second call
    assert rent.waited >= 0.15


def test_charges_wait_at_the_estimate_and_not_before():
    rent = Rent("p", {"k": 10.0}, workers=1)
    rent.started()
    t0 = time.perf_counter()
    for _ in range(99):
        rent.charge(0.1, "k")                  # 9.9 s of 10: not due
    assert rent.waited == 0.0 and time.perf_counter() - t0 < 0.5
    _finish_later(rent, 0.2)
    rent.charge(0.2, "k")                      # 10.1 s charged
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


def test_each_run_is_charged_at_its_kernels_fastest_run(cold, monkeypatch):
    """A run slowed by other work on the cores is charged as much as the kernel's fastest
    run so far, not its own time (the compiled kernel would have been slowed too)."""
    monkeypatch.setattr(cost, "COMPILE_SECONDS", 1e6)
    monkeypatch.setattr(tiers, "submit", lambda job, priority=tiers.Priority.UPGRADE: None)
    prog = compile_graph(graph())
    charges = []
    charge = Rent.charge
    monkeypatch.setattr(Rent, "charge", lambda self, seconds, kernel: (
        charges.append((kernel, seconds)), charge(self, seconds, kernel)))
    for _ in range(3):
        prog(X)
    slow = next(k for k in _bound(prog) if isinstance(k, ReferenceKernel))
    before = slow.best_seconds
    for name in ("_run_blocks", "_run_whole"):        # a call slowed by 0.2 s
        run = getattr(slow, name)
        monkeypatch.setattr(slow, name, lambda *a, run=run: (time.sleep(0.2), run(*a))[1])
    charges.clear()
    prog(X)
    assert slow.seconds >= 0.2 and slow.best_seconds == before
    got = [s for k, s in charges if k == slow.name]
    assert got and all(s == pytest.approx(before - slow.compiled_seconds) for s in got)


@pytest.mark.parametrize("boosted", [True, False])
def test_a_program_competing_with_its_compiles_holds_them_back_until_its_rent_is_due(
        cold, monkeypatch, boosted):
    # a program estimated at BOOST_MIN_SECONDS or more runs its steps on every core: its
    # compiles wait (tiers.defer) until its charges reach their estimate, and that call
    # waits for them; a smaller one compiles beside its steps from the start
    monkeypatch.setattr(tiers, "BOOST_MIN_SECONDS", 0.0 if boosted else 1e9)
    submitted = []

    def submit(job, priority=tiers.Priority.UPGRADE):
        submitted.append(job)
        if boosted:                      # (the small program's job is not run here)
            threading.Thread(target=job, daemon=True).start()
    monkeypatch.setattr(tiers, "submit", submit)
    due = [1e9]
    monkeypatch.setattr(Rent, "due", lambda self: due[0])
    prog = compile_graph(graph())
    assert prog.first_tier_boosted == (tiers.FIRST_TIER_BOOSTED if boosted else 0)
    assert len(submitted) == (0 if boosted else 1)
    want = evaluate(graph(), [X])
    got = [prog(X), prog(X)]                 # charges far below the estimate: no compile
    assert prog.rent.waited == 0.0 and prog.first_tier
    assert len(submitted) == (0 if boosted else 1)
    due[0] = 0.0
    got.append(prog(X))                      # the rent is due: the compile starts, and waits
    if boosted:
        assert len(submitted) == 1 and prog.rent.waited > 0.0 and not prog.first_tier
        got.append(prog(X))
    for g in got:
        for a, b in zip(g, want):
            assert_close(a, b, rtol=1e-5, atol=1e-4)


def test_a_held_back_compile_starts_when_the_tiers_are_waited_for(cold, monkeypatch):
    monkeypatch.setattr(tiers, "BOOST_MIN_SECONDS", 0.0)
    prog = compile_graph(graph())
    prog(X)
    assert prog.first_tier and not tiers.pending()
    assert tiers.wait(300)
    assert not prog.first_tier
    want = evaluate(graph(), [X])
    for a, b in zip(prog(X), want):
        assert_close(a, b, rtol=1e-5, atol=1e-4)


def test_a_dropped_programs_held_back_compile_never_starts(cold, monkeypatch):
    import gc
    monkeypatch.setattr(tiers, "BOOST_MIN_SECONDS", 0.0)
    submitted = []
    monkeypatch.setattr(tiers, "submit",
                        lambda job, priority=tiers.Priority.UPGRADE: submitted.append(job))
    prog = compile_graph(graph())
    prog(X)
    del prog
    gc.collect()
    tiers.wait(10)
    assert submitted == []


@pytest.mark.parametrize("boosted", [True, False])
def test_a_program_whose_compiles_are_held_back_keeps_the_workers_polling(
        cold, monkeypatch, boosted):
    """A reference kernel of a program whose compiles are held back holds the thread pool's
    workers polling while it runs (parts.hold), once its runs take long enough, so the
    product after it starts on every thread; not where compiles run beside the steps (a
    small program's, or any pending), which take the idle cores."""
    from aotgrad.codegen import first_tier, parts, row_native
    monkeypatch.setattr(tiers, "BOOST_MIN_SECONDS", 0.0 if boosted else 1e9)
    monkeypatch.setattr(tiers, "submit", lambda job, priority=tiers.Priority.UPGRADE: None)
    monkeypatch.setattr(Rent, "due", lambda self: 1e9)
    monkeypatch.setattr(first_tier, "HOLD_SECONDS", 0.0)
    monkeypatch.setattr(row_native, "idle", lambda: True)
    pending = [0]
    monkeypatch.setattr(tiers, "pending", lambda priority=None: pending[0])
    events = []
    hold, let_go = parts.hold, parts.let_go
    monkeypatch.setattr(parts, "hold", lambda: events.append("hold") or hold())
    monkeypatch.setattr(parts, "let_go", lambda b: (events.append(("let go", b is None)),
                                                    let_go(b)))
    prog = compile_graph(graph())
    refs = [k for k in _bound(prog) if isinstance(k, ReferenceKernel)]
    assert refs and all(r.holds_workers == boosted for r in refs)
    want = evaluate(graph(), [X])
    prog(X)                         # a first run: its time not known yet, nothing held
    assert "hold" not in events
    got = prog(X)
    assert events.count("hold") == (len(refs) if boosted else 0)
    assert sum(1 for e in events if e[0] == "let go" and not e[1]) == events.count("hold")
    events.clear()
    pending[0] = 1                  # a compile in the background: the cores are its
    prog(X)
    assert "hold" not in events
    for a, b in zip(got, want):
        assert_close(a, b, rtol=1e-5, atol=1e-4)
    assert parts._pool[0].board[parts.HOLDS] == 0
