"""Kernels in parts (codegen.parts): a kernel with enough work for several threads is
compiled once, as a serial function whose parallel loops are split into parts that threads
run; its values do not depend on how many parts a call uses, whether the pool is free, or
which loop form the emitter chose (rows, row blocks with column partials, whole-array
blocks and full nests in two phases, column chunks)."""
import threading

import numpy as np
import pytest

from aotgrad.codegen import compile_graph, parts
from aotgrad.codegen.emit_base import PartsLayout
from aotgrad.codegen.board import new_board
from aotgrad.codegen.parts import PartsKernel
from aotgrad.ir import Aval, GraphBuilder, evaluate, prims
from aotgrad.ir import dtypes as dt
from aotgrad.testing import assert_close

F32 = dt.float32


def _bcast(x, shape, dims):
    return prims.broadcast_in_dim(x, shape=tuple(shape), dims=tuple(dims))


def rows_and_cols():
    """A row reduction and a column reduction (partials per row block, combined after)."""
    b = GraphBuilder("rows_cols")
    x = b.add_input(Aval((300, 512), F32), "x")
    with b:
        t = prims.tanh(x)
        rows = prims.reduce_sum(t, dims=(1,))
        cols = prims.reduce_sum(prims.mul(t, x), dims=(0,))
    b.graph.outputs = [rows, cols]
    return b.graph


def whole_array_softmax_sums():
    """One long dim in blocks: a max, then a sum of exp(x - max) (two parallel loops, the
    second reading the first's combined result)."""
    n = 300_000
    b = GraphBuilder("blocks")
    x = b.add_input(Aval((n,), F32), "x")
    with b:
        m = prims.reduce_max(x, dims=(0,))
        s = prims.reduce_sum(prims.exp(prims.sub(x, _bcast(m, (n,), ()))), dims=(0,))
    b.graph.outputs = [m, s]
    return b.graph


def full_nest_softmax_sums():
    """A reduction over both dims of a domain that does not collapse (x * c per column):
    a max, then a sum of exp(y - max), each over rows in parallel."""
    b = GraphBuilder("full")
    x = b.add_input(Aval((600, 500), F32), "x")
    c = b.add_input(Aval((500,), F32), "c")
    with b:
        y = prims.mul(x, _bcast(c, (600, 500), (1,)))
        m = prims.reduce_max(y, dims=(0, 1))
        s = prims.reduce_sum(prims.exp(prims.sub(y, _bcast(m, (600, 500), ()))), dims=(0, 1))
    b.graph.outputs = [m, s]
    return b.graph


def column_max():
    """A column max in column chunks (each chunk sets its own slice's start value)."""
    b = GraphBuilder("colmax")
    x = b.add_input(Aval((300, 1024), F32), "x")
    with b:
        m = prims.reduce_max(prims.tanh(x), dims=(0,))
    b.graph.outputs = [m]
    return b.graph


def _inputs(g, seed=0):
    rng = np.random.default_rng(seed)
    arrays = [rng.uniform(-2, 2, v.shape).astype(np.float32) for v in g.inputs]
    x = arrays[0].reshape(-1)
    x[7] = np.nan if g.name == "colmax" else x[7]      # a NaN sticks in its column's max
    x[11] = -np.inf
    return arrays


GRAPHS = [rows_and_cols, whole_array_softmax_sums, full_nest_softmax_sums, column_max]


def _bound(prog):
    """The kernel objects the driver calls now."""
    g, names = prog.plan.prepared().bound_kernels[0]
    return [g[n] for n in names.values()]


@pytest.fixture
def nparts(monkeypatch):
    """Set how many parts a call splits its loops into (the pool's thread count)."""
    def set_parts(n):
        monkeypatch.setattr(parts._Threads, "count", n)
    return set_parts


@pytest.mark.parametrize("make", GRAPHS, ids=lambda f: f.__name__)
def test_parallel_kernels_are_compiled_once_and_run_in_parts(make):
    g = make()
    prog = compile_graph(g)
    specs = list(prog.specs.values())
    assert specs and all(s.parts and "prange(" not in s.body for s in specs), prog.report()
    kernels = _bound(prog)
    assert all(isinstance(k, PartsKernel) for k in kernels)
    for k in kernels:          # one serial machine code, not numba's parallel backend
        assert not k.fn.targetoptions.get("parallel") and len(k.fn.signatures) == 1
    arrays = _inputs(g)
    for got, want in zip(prog(*arrays), evaluate(g, arrays)):
        assert_close(got, want, rtol=1e-5, atol=1e-4, equal_nan=True)
    assert "in parts on threads" in prog.report()


def test_the_emitted_phases(nparts):
    """Two parallel loops with shared partials: phase 0 sizes the workspace, phases 1 and 2
    run the loops, phase 3 the code after them."""
    prog = compile_graph(whole_array_softmax_sums())
    (spec,) = prog.specs.values()
    assert spec.parts == PartsLayout(loops=2, shared=True, final=True)
    assert spec.body.startswith("def KERNEL(phase, part, nparts, ws, ")
    for k in range(3):
        assert f"    if phase == {k}:" in spec.body


@pytest.mark.parametrize("make", GRAPHS, ids=lambda f: f.__name__)
def test_values_do_not_depend_on_the_number_of_parts(make, nparts):
    g = make()
    prog = compile_graph(g)
    arrays = _inputs(g, seed=1)
    nparts(1)
    one = prog(*arrays)
    for n in (2, 3, 5):        # more parts than cores, and ranges of unequal lengths
        nparts(n)
        for a, b in zip(one, prog(*arrays)):
            np.testing.assert_array_equal(a, b)


def test_a_busy_pool_runs_the_parts_on_the_calling_thread(nparts):
    g = rows_and_cols()
    prog = compile_graph(g)
    arrays = _inputs(g)
    nparts(2)
    free = prog(*arrays)
    pool = parts._pool[0]
    assert pool.busy.acquire(blocking=False)
    try:
        busy = prog(*arrays)
    finally:
        pool.busy.release()
    for a, b in zip(free, busy):
        np.testing.assert_array_equal(a, b)


def test_programs_called_from_several_threads_at_once(nparts):
    g = full_nest_softmax_sums()
    prog = compile_graph(g)
    nparts(2)
    inputs = [_inputs(g, seed=s) for s in range(4)]
    want = [evaluate(g, a) for a in inputs]
    got, errors = [None] * 4, []

    def run(i):
        try:
            for _ in range(5):
                got[i] = prog(*inputs[i])
        except BaseException as e:
            errors.append(e)
    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for g_i, w_i in zip(got, want):
        for a, b in zip(g_i, w_i):
            assert_close(a, b, rtol=1e-5, atol=1e-4, equal_nan=True)


def test_an_error_in_a_part_reaches_the_caller_and_the_pool_goes_on(nparts):
    nparts(3)
    seen = []

    def kernel(phase, part, nparts_, ws, x):
        seen.append((phase, part, nparts_))
        if part == 2 and x < 0:
            raise ValueError("part 2 failed")
        return 0

    k = PartsKernel(kernel, PartsLayout(loops=1, shared=False, final=False))
    with pytest.raises(ValueError, match="part 2 failed"):
        k(-1)
    seen.clear()
    assert k(1) == 0
    assert sorted(seen) == [(1, 0, 3), (1, 1, 3), (1, 2, 3)]


def test_a_nonzero_part_result_is_the_calls(nparts):
    """A part whose index check failed returns nonzero; the call returns nonzero."""
    nparts(2)

    def kernel(phase, part, nparts_, ws, x):
        return int(part == 1)

    assert PartsKernel(kernel, PartsLayout(1, False, False))(0) == 1


def shared_kernel_graph():
    """One pointwise kernel run by two steps on different values (the same body, so the
    same kernel), with a product between them."""
    b = GraphBuilder("twice")
    x = b.add_input(Aval((300, 512), F32), "x")
    w = b.add_input(Aval((512, 512), F32), "w")
    with b:
        h = prims.mul(prims.tanh(x), x)
        p = prims.dot_general(h, w, contract=((1,), (0,)))
        o = prims.mul(prims.tanh(p), p)
    b.graph.outputs = [o]
    return b.graph


def test_a_kernel_two_steps_share_keeps_each_steps_arguments():
    """Every driver (a trusted runner, the profiler's) passes each step its own arrays."""
    g = shared_kernel_graph()
    prog = compile_graph(g)
    names = [s.name for s in prog.specs.values()]
    assert len(names) == 2 and names[0] == names[1], names
    rng = np.random.default_rng(3)
    x = rng.uniform(-1, 1, (300, 512)).astype(np.float32)
    w = rng.uniform(-0.1, 0.1, (512, 512)).astype(np.float32)
    want = evaluate(g, [x, w])[0]
    assert_close(prog(x, w)[0], want, rtol=1e-4, atol=1e-4)
    assert_close(prog.plan.runner(trusted=2)(x, w)[0], want, rtol=1e-4, atol=1e-4)
    assert_close(prog.plan.profiled(x, w)[0][0], want, rtol=1e-4, atol=1e-4)
    assert prog.report().count("(parallel, in parts on threads") == 2


def test_set_num_threads_sets_how_many_parts_a_call_runs():
    import aotgrad
    g = rows_and_cols()
    prog = compile_graph(g)
    arrays = _inputs(g)
    n = aotgrad.get_num_threads()
    try:
        aotgrad.set_num_threads(1)
        assert parts.get_num_threads() == 1
        one = prog(*arrays)
        aotgrad.set_num_threads(3)
        assert aotgrad.get_num_threads() == 3
        three = prog(*arrays)
    finally:
        aotgrad.set_num_threads(n)
    for a, b in zip(one, three):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("delay", [0.0, 0.05])
def test_a_signal_wakes_its_waiter_whether_it_polls_or_sleeps(delay):
    """A worker polls its flag for a while, then sleeps on the lock: a signal set in either
    window wakes it once, and leaves the flag clear for the next one."""
    import time
    signal = parts._Signal(new_board())

    def later():
        time.sleep(delay)
        signal.set()
    t = threading.Thread(target=later)
    t.start()
    signal.wait()
    t.join()
    assert signal.flag[0] == 0
    assert not parts._poll(signal.flag, 1000, signal.board, 0)
    assert not signal.lock.acquire(blocking=False)


def test_a_poll_counts_down_only_while_no_one_holds_the_board():
    """A worker's poll gives up after `spins` empty polls, but not while the board is held
    (parts.hold): it goes on until the hold ends, or its flag is set."""
    import time
    from aotgrad.codegen import board as board_
    b, flag = new_board(), np.zeros(1, np.int64)
    assert not parts._poll(flag, 100, b, 0)
    for release in ("let go", "flag"):
        b[board_.HOLDS] = 1
        seen = []
        t = threading.Thread(target=lambda: seen.append(parts._poll(flag, 100, b, 0)))
        t.start()
        deadline = time.monotonic() + 10
        while b[board_.POLLING] < 1 and time.monotonic() < deadline:
            time.sleep(0.001)
        time.sleep(0.05)                     # far more than 100 polls
        assert t.is_alive() and b[board_.POLLING] == 1
        if release == "let go":
            b[board_.HOLDS] = 0
        else:
            flag[0] = 1
        t.join(10)
        assert not t.is_alive() and seen == [release == "flag"] and b[board_.POLLING] == 0
        flag[0] = 0


def test_a_hold_keeps_the_pools_workers_polling_until_it_is_let_go():
    import time
    import aotgrad
    from aotgrad.codegen import board as board_
    n = aotgrad.get_num_threads()
    try:
        aotgrad.set_num_threads(1)
        assert parts.hold() is None          # no workers: nothing to hold
        parts.let_go(None)
        aotgrad.set_num_threads(3)
        pool_board = parts._pool[0].board
        parts.run_parts(lambda *a: 0, ())    # (the workers started)
        time.sleep(0.05)                     # ... and asleep: no work for longer than SPINS
        held = parts.hold()
        assert held is pool_board and held[board_.HOLDS] == 1
        deadline = time.monotonic() + 10
        while held[board_.POLLING] < 2 and time.monotonic() < deadline:
            time.sleep(0.001)
        time.sleep(0.05)                     # far more than SPINS polls
        assert held[board_.POLLING] == 2
        parts.let_go(held)
        assert held[board_.HOLDS] == 0
        while held[board_.POLLING] and time.monotonic() < deadline:
            time.sleep(0.001)
        assert held[board_.POLLING] == 0
    finally:
        aotgrad.set_num_threads(n)
