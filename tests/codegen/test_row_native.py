"""Row programs compiled by LLVM directly (codegen/row_native.py) compute what the row
machine computes (codegen/row_vm.py), bit for bit: every element-wise instruction in each
rounding mode on NaN, infinities, -0.0 and denormals, every form of gather, reduction and
accumulation over the rows, per-row and repeated values, a group's tail rows and several
threads' partial results. A cold kernel runs its program natively once it is compiled,
except where an output is written over its input; a compiled training step on the native
programs equals eager."""
import os
import threading

import numpy as np
import pytest
from attention_step import attention_step

from aotgrad.codegen import compile_graph, parts, rent, row_lower, row_native, row_program, \
    row_machine, row_vm, tiers
from aotgrad.ir import Aval, GraphBuilder, evaluate, prims
from aotgrad.ir import dtypes as dt
from aotgrad.testing import assert_close


def _graph(name, avals, body):
    b = GraphBuilder(name)
    xs = [b.add_input(Aval(shape, dtype), f"x{i}") for i, (shape, dtype) in enumerate(avals)]
    with b:
        outs = body(*xs)
    b.graph.outputs = list(outs)
    return b.graph


def _same(x, y):
    """Equal arrays, NaN where NaN, and the sign of every zero."""
    if x.dtype.kind != "f":
        return np.array_equal(x, y)
    return (np.array_equal(x, y, equal_nan=True)
            and np.array_equal(np.signbit(x[x == 0]), np.signbit(y[y == 0])))


def _native_equals_machine(runs, threads=(1, 2, 3)):
    """Run every recorded program on the machine and natively, on the same arguments, with
    each number of threads: the same arrays, bit for bit. Returns the programs."""
    assert runs, "no kernel ran as a row program"
    machine = row_machine.machine()
    programs = []
    for program, args, whole in runs:
        if program in programs:
            continue
        programs.append(program)
        assert row_lower.supported(program)
        native = row_native.compile_program(program)
        for n in threads:
            parts._Threads.count = n
            want = [a.copy() for a in args]
            got = [a.copy() for a in args]
            assert program.run(want, whole, machine=machine)
            assert program.run(got, whole, native=native)
            for w, g in zip(want, got):
                assert _same(w, g), (w, g)
    return programs


RNG = np.random.default_rng(5)
UNARY = [prims.neg, prims.abs, prims.exp, prims.log, prims.log1p, prims.expm1, prims.sqrt,
         prims.rsqrt, prims.sin, prims.cos, prims.tanh, prims.logistic, prims.erf, prims.sign,
         prims.floor, prims.ceil, prims.reciprocal]
BINARY = [prims.add, prims.sub, prims.mul, prims.div, prims.maximum, prims.minimum,
          prims.eq, prims.ne, prims.lt, prims.le, prims.gt, prims.ge]
SPECIALS = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, -1e-40, 1e-310, -1.0, 1.0, 88.0,
            89.5, -104.0, -105.0, 9.5, -9.5, 3.9, 4.0, 0.625, -0.624, 1e30, -1e30, 0.5,
            # float64 exp's overflow and underflow, the clamps and branch points of
            # codegen.approx's float64 exp, expm1 and tanh
            709.79, -745.2, -746.5, 40.5, -40.5, 0.55, -0.7, 0.35, 19.1]


def _values(shape, dtype):
    x = RNG.uniform(-4, 4, shape).astype(dtype)
    flat = x.reshape(-1)
    specials = np.array(SPECIALS).astype(dtype)
    both = np.concatenate([specials, RNG.permutation(specials)])[:flat.size]
    flat[:both.size] = both
    return x


@pytest.fixture(autouse=True)
def _threads():
    count = parts._Threads.count
    yield
    parts._Threads.count = count


@pytest.mark.parametrize("dtype", [dt.float32, dt.float64])
@pytest.mark.parametrize("prim", UNARY)
def test_unary_instructions_equal_the_machine(captured, prim, dtype):
    shape = (37, 24)
    g = _graph(prim.name, [(shape, dtype)], lambda x: [prim(x)])
    compile_graph(g)(_values(shape, dtype.np))
    _native_equals_machine(captured)


@pytest.mark.parametrize("dtype", [dt.float32, dt.float64])
@pytest.mark.parametrize("prim", BINARY)
def test_binary_instructions_equal_the_machine(captured, prim, dtype):
    shape = (29, 32)
    g = _graph(prim.name, [(shape, dtype), (shape, dtype)], lambda x, y: [prim(x, y)])
    x = _values(shape, dtype.np)
    y = _values(shape, dtype.np)[::-1].copy()
    compile_graph(g)(x, y)
    _native_equals_machine(captured)


def test_a_chain_with_constants_scalars_masks_and_conversions(captured):
    shape = (50, 40)

    def body(x, y, m, s):
        c = prims.full(shape=shape, value=-0.0, dtype=dt.float32)
        t = prims.add(prims.mul(x, prims.broadcast_in_dim(s, shape=shape, dims=())), c)
        u = prims.tanh(prims.sub(t, y))
        big = prims.gt(u, y)
        w = prims.where(prims.logical_and(big, m), u, prims.neg(x))
        d = prims.convert_element_type(prims.convert_element_type(w, dtype=dt.float64),
                                       dtype=dt.float32)
        f = prims.convert_element_type(prims.logical_or(big, m), dtype=dt.float32)
        return [w, d, f, prims.logical_not(big), prims.exp(prims.mul(d, f))]
    g = _graph("chain", [(shape, dt.float32), (shape, dt.float32), (shape, dt.bool_),
                         ((), dt.float32)], body)
    compile_graph(g)(_values(shape, np.float32), _values(shape, np.float32)[::-1].copy(),
                     RNG.random(shape) < 0.5, np.float32(1.5))
    _native_equals_machine(captured)


@pytest.mark.parametrize("group", [64, 1024])
def test_reductions_gathers_and_accumulations_of_every_form(captured, monkeypatch, group):
    monkeypatch.setattr(row_program, "GROUP_ELEMENTS", group)   # 64: a group's tail rows
    monkeypatch.setattr(row_program, "PARTS_MIN_ELEMENTS", 0)
    R, M, C = 41, 4, 7

    def body(x, y, b):
        t = prims.mul(prims.broadcast_in_dim(prims.exp(x), shape=(R, M, C), dims=(0, 2)),
                      prims.broadcast_in_dim(y, shape=(R, M, C), dims=(0, 1)))
        t = prims.add(t, prims.broadcast_in_dim(b, shape=(R, M, C), dims=(1, 2)))
        soft = prims.div(t, prims.broadcast_in_dim(prims.reduce_sum(t, dims=(2,)),
                                                   shape=(R, M, C), dims=(0, 1)))
        return [soft, prims.reduce_max(t, dims=(1,)), prims.reduce_min(t, dims=(1, 2)),
                prims.reduce_sum(t, dims=(0,)), prims.reduce_max(t, dims=(0, 2)),
                prims.reduce_min(t, dims=(0, 1)), prims.reduce_sum(t, dims=(0, 1, 2))]
    g = _graph("forms", [((R, C), dt.float32), ((R, M), dt.float32), ((M, C), dt.float32)],
               body)
    x = _values((R, C), np.float32)
    x[x > 80] = 3.0                       # (no inf from exp: sums of mixed signs stay finite)
    compile_graph(g)(x, _values((R, M), np.float32), _values((M, C), np.float32))
    programs = _native_equals_machine(captured)
    # and reductions over the rows only: each element into its own accumulator
    captured.clear()
    g = _graph("over rows", [((R, C), dt.float32)],
               lambda x: [prims.reduce_sum(prims.exp(x), dims=(0,)),
                          prims.reduce_max(x, dims=(0,)), prims.reduce_min(x, dims=(0,))])
    compile_graph(g)(x)
    programs += _native_equals_machine(captured)
    # (over the rows and the last axis)
    captured.clear()
    g = _graph("over rows and columns", [((R, M, C), dt.float32)],
               lambda x: [prims.reduce_sum(prims.exp(x), dims=(0, 2)),
                          prims.reduce_min(x, dims=(0, 2))])
    compile_graph(g)(_values((R, M, C), np.float32))
    programs += _native_equals_machine(captured)
    ops = {(row_vm.Op(int(r[0])), int(r[4]) if r[0] < 80 else int(r[5]))
           for p in programs for r in p.code}
    assert {(row_vm.Op.GATHER, row_vm.GatherForm.TILE),
            (row_vm.Op.GATHER, row_vm.GatherForm.REPEAT),
            (row_vm.Op.REDUCE_SUM, row_vm.ReduceForm.RUNS),
            (row_vm.Op.ACC_SUM, row_vm.AccForm.DIRECT),
            (row_vm.Op.ACC_MAX, row_vm.AccForm.DIRECT)} <= ops
    assert any(op in (row_vm.Op.REDUCE_MAX, row_vm.Op.REDUCE_MIN) for op, _ in ops)


@pytest.mark.parametrize("run", [1, 15, 16, 17, 40, 129])
def test_reductions_over_runs_of_every_length(captured, run):
    """Partial results in vectors, a tail and halves combined: the machine's order, bit for
    bit, with NaN and zeros of both signs; max and min exact, sums close to float64's."""
    shape = (12, 3, run)
    x = _values(shape, np.float32)
    x[:4] = np.where(RNG.random((4, 3, run)) < 0.5, np.float32(0.0), np.float32(-0.0))
    g = _graph("runs", [(shape, dt.float32)],
               lambda x: [prims.reduce_sum(x, dims=(2,)), prims.reduce_max(x, dims=(2,)),
                          prims.reduce_min(x, dims=(2,))])
    total, big, small = compile_graph(g)(x)
    _native_equals_machine(captured)
    assert_close(big, x.max(axis=2), rtol=0, atol=0, equal_nan=True)
    assert_close(small, x.min(axis=2), rtol=0, atol=0, equal_nan=True)
    finite = np.isfinite(x).all(axis=2)
    want = x.astype(np.float64).sum(axis=2)
    assert_close(total[finite], want[finite].astype(np.float32), rtol=1e-6, atol=1e-6)


def test_a_causal_softmax_over_long_rows(captured):
    shape = (2, 3, 40, 40)

    def body(s, m):
        t = prims.where(prims.broadcast_in_dim(m, shape=shape, dims=(0, 1, 2, 3)), s,
                        prims.broadcast_in_dim(prims.full(shape=(), value=-np.inf,
                                                          dtype=dt.float32), shape=shape,
                                               dims=()))
        mx = prims.reduce_max(t, dims=(3,))
        e = prims.exp(prims.sub(t, prims.broadcast_in_dim(mx, shape=shape, dims=(0, 1, 2))))
        return [prims.div(e, prims.broadcast_in_dim(prims.reduce_sum(e, dims=(3,)),
                                                    shape=shape, dims=(0, 1, 2)))]
    g = _graph("attn", [(shape, dt.float32), ((1, 1, 40, 40), dt.bool_)], body)
    compile_graph(g)(RNG.normal(size=shape).astype(np.float32),
                     np.tril(np.ones((40, 40), bool))[None, None])
    programs = _native_equals_machine(captured)
    # each row's max and sum read per row by the loops that use them
    assert any(row_lower._row_values(p.code) for p in programs)


def test_float32_programs_keep_their_values_in_a_float32_scratch(captured):
    # values that cross loops (a row's mean and variance, read back by the loops after
    # them; a sum over the rows) go through the scratch: float32s for a float32 program,
    # the same bits as the machine, NaN, infinities and -0.0 included
    shape = (33, 48)

    def body(x, w):
        inner = (1,)
        mean = prims.div(prims.reduce_sum(x, dims=inner),
                         prims.full(shape=(33,), value=48.0, dtype=dt.float32))
        d = prims.sub(x, prims.broadcast_in_dim(mean, shape=shape, dims=(0,)))
        var = prims.reduce_sum(prims.mul(d, d), dims=inner)
        y = prims.mul(prims.mul(d, prims.broadcast_in_dim(prims.rsqrt(var), shape=shape,
                                                           dims=(0,))),
                      prims.broadcast_in_dim(w, shape=shape, dims=(1,)))
        return [y, prims.reduce_sum(prims.mul(y, x), dims=(0,))]
    g = _graph("ln", [(shape, dt.float32), ((48,), dt.float32)], body)
    x = _values(shape, np.float32)
    x[3, :5] = [np.nan, np.inf, -np.inf, -0.0, 0.0]
    x[7] = -0.0
    compile_graph(g)(x, _values((48,), np.float32))
    programs = _native_equals_machine(captured)
    assert any(p.float32_scratch for p in programs)
    assert all(p.float32_scratch == p.float32 for p in programs)
    # a program holding integers keeps float64s (one beyond 2**24 would not be exact)
    captured.clear()
    gi = _graph("ints", [((40, 8), dt.int64)], lambda i: [prims.mul(
        prims.convert_element_type(i, dtype=dt.float32),
        prims.full(shape=(40, 8), value=0.5, dtype=dt.float32))])
    compile_graph(gi)(np.arange(320, dtype=np.int64).reshape(40, 8) * 3)
    for p in _native_equals_machine(captured):
        assert not p.float32_scratch


def test_whole_values_broadcast_into_the_rows_are_read_afresh_each_call(captured):
    """Values the same for every row (a per-column vector tiled along a row, one repeated
    along it, a scalar, a vector of one element) are preloaded per call from the call's
    arguments, wherever their elements land in a row; machine and native agree with the
    reference on each of three calls with new values."""
    R, M, C = 23, 3, 8
    shape = (R, M, C)

    def body(x, col, per_m, s, one):
        t = prims.mul(x, prims.broadcast_in_dim(col, shape=shape, dims=(2,)))
        t = prims.add(t, prims.broadcast_in_dim(per_m, shape=shape, dims=(1,)))
        t = prims.sub(t, prims.broadcast_in_dim(s, shape=shape, dims=()))
        t = prims.mul(t, prims.broadcast_in_dim(one, shape=shape, dims=(2,)))
        return [t, prims.tanh(t)]
    g = _graph("whole", [(shape, dt.float32), ((C,), dt.float32), ((M,), dt.float32),
                         ((), dt.float32), ((1,), dt.float32)], body)
    prog = compile_graph(g)
    indexed = set()
    for call in range(3):
        args = [_values(shape, np.float32), RNG.normal(size=C).astype(np.float32),
                RNG.normal(size=M).astype(np.float32), np.float32(call - 0.5),
                np.array([2.0 + call], np.float32)]
        want = evaluate(g, args)
        for got, w in zip(prog(*args), want):
            assert_close(got, w, rtol=2e-6, atol=1e-6, equal_nan=True)
        for program in _native_equals_machine(captured):
            indexed |= {p.index is not None for p in program.pre if p.node is not None}
        captured.clear()
    assert indexed == {True, False}     # a row made by indexing its value, and one not


def test_values_rearranged_within_rows_are_gathers(captured):
    """A chunk of the last axis (a gated unit), a strided slice, a reversal and a transpose
    past the rows run as row programs (gathers within a row), not whole on numpy: machine
    and native agree bit for bit, and with the reference."""
    shape = (30, 5, 16)

    def body(x):
        a = prims.slice(x, start=(0, 0, 0), limit=(30, 5, 8))
        gate = prims.slice(x, start=(0, 0, 8), limit=(30, 5, 16))
        glu = prims.mul(prims.mul(a, prims.logistic(a)), gate)
        odd = prims.slice(x, start=(0, 0, 1), limit=(30, 5, 16), strides=(1, 1, 3))
        back = prims.rev(prims.exp(x), dims=(1, 2))
        t = prims.transpose(prims.reshape(prims.tanh(x), shape=(30, 5, 4, 4)),
                            perm=(0, 2, 1, 3))
        return [glu, prims.add(odd, odd), back, t]
    g = _graph("within", [(shape, dt.float32)], body)
    prog = compile_graph(g)
    x = _values(shape, np.float32)
    for got, w in zip(prog(x), evaluate(g, [x])):
        assert_close(got, w, rtol=2e-6, atol=1e-6, equal_nan=True)
    assert all(r.program is not None for r in prog.first_tier.values())
    programs = _native_equals_machine(captured)
    gathers = [row for p in programs for row in p.code if row[0] == row_vm.Op.GATHER]
    assert gathers


def test_only_loops_of_long_chains_interleave_vectors(captured):
    """A loop whose instructions include an approximation's long chain keeps several
    vectors in flight; a loop of plain arithmetic takes one vector an iteration."""
    shape = (16, 64)
    hints = {}
    for name, body in (("chain", lambda x: [prims.mul(prims.tanh(x), x)]),
                       ("plain", lambda x: [prims.add(prims.mul(x, x), x)])):
        prog = compile_graph(_graph(name, [(shape, dt.float32)], body))
        ref, = prog.first_tier.values()
        text = row_lower.lower(ref.program, 8)
        hints[name] = {line.split("i32")[-1].strip(" }!") for line in text.splitlines()
                       if "llvm.loop.interleave.count" in line}
    assert hints == {"chain": {str(row_lower.INTERLEAVE)}, "plain": {"1"}}


def test_loops_calling_the_c_library_ask_for_no_vector_width(captured, capfd):
    """A float64 erf is a call of the C library's function, which LLVM cannot take as
    vectors: its loop asks for no vector width (asked, LLVM printed a warning on the
    process's stderr for each such loop), while a float32 one and a float64 tanh (both
    approximations) do."""
    shape = (16, 64)
    texts = {}
    for prim, dtype in ((prims.erf, dt.float32), (prims.erf, dt.float64),
                        (prims.tanh, dt.float64)):
        prog = compile_graph(_graph(f"{prim.name}_{dtype}", [(shape, dtype)],
                                    lambda x: [prims.mul(prim(x), x)]))
        ref, = prog.first_tier.values()
        texts[prim, dtype] = row_lower.lower(ref.program, 8)
        capfd.readouterr()
        row_native.compile_program(ref.program)
        assert "not vectorized" not in capfd.readouterr().err
    assert "llvm.loop.vectorize.width" in texts[prims.erf, dt.float32]
    assert "llvm.loop.vectorize.width" not in texts[prims.erf, dt.float64]
    assert "llvm.loop.vectorize.width" in texts[prims.tanh, dt.float64]


def test_pow_stays_on_the_machine(captured):
    g = _graph("pow", [((20, 8), dt.float32), ((20, 8), dt.float32)],
               lambda x, y: [prims.pow(x, y)])
    prog = compile_graph(g)
    ref, = prog.first_tier.values()
    assert ref.program is not None and not row_lower.supported(ref.program)


def test_a_cold_kernel_runs_natively_once_compiled_but_not_over_its_input(empty_cache,
                                                                          monkeypatch):
    monkeypatch.setenv("AOTGRAD_BACKGROUND_COMPILE", "1")
    monkeypatch.setenv("AOTGRAD_ROW_MACHINE", "1")
    monkeypatch.delenv("AOTGRAD_FIRST_TIER", raising=False)
    monkeypatch.setattr(tiers, "submit", lambda job, priority=None: None)
    monkeypatch.setattr(tiers, "track", lambda units, priority=None: None)
    calls = []
    native_call = row_native.NativeRows.run
    monkeypatch.setattr(row_native.NativeRows, "run",
                        lambda self, *a: calls.append(1) or native_call(self, *a))
    g = _graph("pw", [((64, 48), dt.float32)],
               lambda x: [prims.mul(prims.tanh(x), prims.full(shape=(64, 48), value=2.0,
                                                              dtype=dt.float32))])
    prog = compile_graph(g)
    ref, = prog.first_tier.values()
    x = RNG.normal(size=(64, 48)).astype(np.float32)
    want = (np.tanh(x.astype(np.float64)) * 2).astype(np.float32)
    for _ in range(3):                    # the second call asks for the native compile
        assert_close(prog(x)[0], want, rtol=2e-6, atol=1e-7)
        row_native.wait()
    assert ref.program.native is not None and calls
    # the compiles ran at the lowest niceness (taking little CPU time from the steps)
    thread, = [t for t in threading.enumerate() if t.name == "aotgrad-row-native"]
    if hasattr(os, "getpriority") and os.path.isdir(f"/proc/self/task/{thread.native_id}"):
        assert os.getpriority(os.PRIO_PROCESS, thread.native_id) == 19
    # the same kernel writing over its input: the machine's run, not the native one
    kinds = [a.kind for a in next(iter(prog.specs.values())).args]
    n = len(calls)
    y = x.copy()
    assert ref(*[y if k in ("in", "out") else 0 for k in kinds]) == 0
    assert len(calls) == n
    assert_close(y, want, rtol=2e-6, atol=1e-7)


def test_exit_waits_for_the_compile_in_progress_and_starts_no_other(captured, monkeypatch):
    # (a compile still running in LLVM while the process destroyed LLVM's state at exit
    # aborted the process)
    for prim in (prims.tanh, prims.exp):
        g = _graph(prim.name, [((64, 32), dt.float32)], lambda x: [prims.mul(prim(x), x)])
        compile_graph(g)(_values((64, 32), np.float32))
    (first, _, _), (later, _, _) = captured
    started, release, closed = threading.Event(), threading.Event(), threading.Event()
    compile_program = row_native.compile_program

    def held(program):
        started.set()
        assert release.wait(60)
        return compile_program(program)
    monkeypatch.setattr(row_native, "compile_program", held)
    # the exit's own handler (codegen.tiers), on this test's flag and no units left over
    monkeypatch.setattr(tiers, "_closing", [])
    monkeypatch.setattr(tiers, "_outstanding", {})
    compiler = row_native._Compiler()
    compiler.submit(first, 0.01)
    assert started.wait(60)
    exiting = threading.Thread(target=lambda: (tiers._close(), closed.set()))
    exiting.start()
    assert not closed.wait(0.3)            # the exit waits for the compile in progress
    release.set()
    exiting.join(60)
    assert closed.is_set()
    compiler.submit(later, 0.01)
    compiler.jobs.join()
    assert first.native is not None and later.native is None


def test_a_compiled_training_step_on_native_programs_equals_eager(empty_cache, monkeypatch):
    import aotgrad
    monkeypatch.setenv("AOTGRAD_BACKGROUND_COMPILE", "1")
    monkeypatch.setenv("AOTGRAD_ROW_MACHINE", "1")
    monkeypatch.delenv("AOTGRAD_FIRST_TIER", raising=False)
    monkeypatch.setattr(tiers, "submit", lambda job, priority=None: None)
    monkeypatch.setattr(tiers, "track", lambda units, priority=None: None)
    monkeypatch.setattr(rent.Rent, "charge", lambda self, seconds, kernel: None)
    calls = []
    native_call = row_native.NativeRows.run
    monkeypatch.setattr(row_native.NativeRows, "run",
                        lambda self, *a: calls.append(1) or native_call(self, *a))
    loss_fn, grads = attention_step(seq=16, width=24, hidden=32, classes=7, seed=1,
                                    value="silu")
    want = grads(loss_fn)
    compiled = aotgrad.compile(loss_fn)
    for _ in range(4):
        got = grads(compiled)
        row_native.wait()
        for g, w in zip(got, want):
            assert_close(g, w, rtol=2e-5, atol=2e-6)
    assert calls, "no kernel of the step ran natively"


def test_a_loss_mean_sums_each_row_then_accumulates_the_rows(captured, monkeypatch):
    """A reduction over the rows and over each row's elements (a loss's sum) reduces each
    row first and accumulates one value a row; the nodes after it (the mean) run once the
    rows are summed. Natively as on the machine, bit for bit."""
    monkeypatch.setattr(row_program, "PARTS_MIN_ELEMENTS", 0)
    R, C = 37, 300

    def body(x, y):
        t = prims.add(x, prims.broadcast_in_dim(y, shape=(R, C), dims=(1,)))
        return [prims.div(prims.reduce_sum(prims.mul(t, t), dims=(0, 1)),
                          prims.full(shape=(), value=float(R * C), dtype=dt.float32)),
                prims.reduce_max(t, dims=(0, 1))]
    g = _graph("mean", [((R, C), dt.float32), ((C,), dt.float32)], body)
    x, y = _values((R, C), np.float32), RNG.uniform(-1, 1, (C,)).astype(np.float32)
    x[x > 1e20] = 2.0
    x[x < -1e20] = -2.0
    got = compile_graph(g)(x, y)
    for a, w in zip(got, evaluate(g, [x, y])):
        assert_close(a, w, rtol=1e-6, atol=0, equal_nan=True)
    programs = _native_equals_machine(captured)
    ops = [(row_vm.Op(int(r[0])), int(r[5]) if r[0] >= 80 else int(r[4]))
           for p in programs for r in p.code]
    assert (row_vm.Op.REDUCE_SUM, row_vm.ReduceForm.RUNS) in ops
    assert (row_vm.Op.ACC_SUM, row_vm.AccForm.DIRECT) in ops
    assert all(op is not row_vm.Op.ACC_SUM or form == row_vm.AccForm.DIRECT
               for op, form in ops)


@pytest.mark.parametrize("threads", [2, 3])
def test_native_parts_are_taken_off_the_pools_board(captured, monkeypatch, threads):
    """A native program's parts are posted on the thread pool's board (codegen.board) and
    taken there, whether the workers are polling or asleep: each call equals the machine's
    run in as many parts, bit for bit, sums over the rows included."""
    import time

    from aotgrad.codegen import board
    monkeypatch.setattr(row_program, "PARTS_MIN_ELEMENTS", 0)
    R, C = 203, 70

    def body(x, y):
        t = prims.tanh(prims.add(x, prims.broadcast_in_dim(y, shape=(R, C), dims=(1,))))
        return [t, prims.reduce_sum(t, dims=(0,)), prims.reduce_sum(prims.mul(t, x),
                                                                    dims=(0, 1))]
    g = _graph("posted", [((R, C), dt.float32), ((C,), dt.float32)], body)
    compile_graph(g)(_values((R, C), np.float32), _values((C,), np.float32))
    program, args, whole = captured[0]
    native = row_native.compile_program(program)
    parts._Threads.count = threads
    want = [a.copy() for a in args]
    assert program.run(want, dict(whole), machine=row_machine.machine())
    pool_board = parts._pool[0].board
    for i in range(12):
        if i % 3 == 2:
            time.sleep(0.01)              # the workers went to sleep meanwhile
        written = {j for j, _ in program.outputs} | {j for j, *_ in program.summed}
        assert program.outputs and program.summed
        got = [np.zeros_like(a) if j in written else a.copy() for j, a in enumerate(args)]
        assert program.run(got, dict(whole), native=native)
        assert pool_board[board.KIND] == board.ROWS
        assert pool_board[board.DONE] == pool_board[board.TOTAL] == threads
        for w, g_ in zip(want, got):
            assert _same(w, g_)


def test_the_layers_of_a_stack_share_their_row_programs(captured):
    # Identical layers make one generated kernel each, but the schedule gives each layer's
    # nodes its own order: their row programs (registers, preloaded values, instructions)
    # must be equal, so that each is compiled natively once, not once per layer
    import aotgrad
    nn = aotgrad.nn
    aotgrad.manual_seed(0)
    width, layers = 24, 3
    blocks = nn.ModuleList([nn.Sequential(nn.LayerNorm(width), nn.Linear(width, 2 * width),
                                          nn.GELU(), nn.Linear(2 * width, width))
                            for _ in range(layers)])
    opt = aotgrad.optim.AdamW(blocks.parameters(), lr=1e-3)

    def step(x):
        opt.zero_grad()
        for block in blocks:
            x = x + block(x)
        loss = (x * x).mean()
        loss.backward()
        opt.step()
        return loss
    compiled = aotgrad.compile(step)
    x = aotgrad.from_numpy(RNG.normal(size=(16, width)).astype(np.float32))
    for _ in range(3):
        compiled(x)
    keys = {}           # (kernel, the shapes it writes) -> the row programs' keys
    for prog in compiled.cache.values():
        for kernels in prog._kernels.values():
            for ref in kernels.first_tier.values():
                if ref.program is not None:
                    shapes = tuple(tuple(v.shape) for _, v in ref.writes)
                    keys.setdefault((ref.name, shapes), []).append(
                        row_native.program_key(ref.program))
    repeated = {k: v for k, v in keys.items() if len(v) >= layers}
    assert repeated, "no kernel was made once per layer"
    for k, v in repeated.items():
        assert len(set(v)) == 1, k
    # the optimizer's update of parameters of several shapes (the linear layers' vectors of
    # 48, matrices 48x24 and 24x48), one element a row: one program, whatever the number
    # of rows
    updates = {}
    for (name, shapes), v in keys.items():
        if all(len(s) <= 2 for s in shapes):
            updates.setdefault(name, set()).update((shapes[0], key) for key in v)
    shared = [u for u in updates.values() if len({s for s, _ in u}) >= 3]
    assert shared, "no kernel updated parameters of three shapes"
    assert all(len({key for _, key in u}) == 1 for u in shared)
