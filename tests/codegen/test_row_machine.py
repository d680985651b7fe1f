"""The row machine (codegen/row_vm.py, codegen/row_program.py): a cold kernel that keeps its
rows to itself runs as a program of row instructions until its own machine code is
compiled. Each kernel's results are compared with the IR's reference evaluation (numpy,
as eager computes): element-wise prims of float32, float64 and bool, NaN, infinities and
-0.0, reductions within rows and over them (partial sums of several threads), broadcasts
of per-row, per-column and repeated values, a causal mask, outputs written over their
inputs; and a training step compiled on the first tier against eager. The machine is
compiled once (in a helper process) the first time this module needs it."""
import threading

import numpy as np
import pytest
from attention_step import attention_step

from aotgrad.codegen import cache, compile_graph, parts, row_program, row_vm
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


def _check(graph, args, runs, rtol=1e-6, atol=1e-6, machine=True):
    prog = compile_graph(graph)
    assert prog.first_tier, "no kernel on the first tier"
    got = [np.array(a) for a in prog(*args)]
    want = evaluate(graph, args)
    if machine:
        assert runs and all(runs), "no kernel ran on the row machine"
    for g, w in zip(got, want):
        assert g.dtype == np.asarray(w).dtype
        assert_close(g, w, rtol=rtol, atol=atol, equal_nan=True)
    return prog, got, want


def _bcast(v, shape, dims):
    return prims.broadcast_in_dim(v, shape=shape, dims=dims)


def _const(value, shape, dtype=dt.float32):
    return prims.full(shape=shape, value=value, dtype=dtype)


RNG = np.random.default_rng(11)
UNARY = [prims.neg, prims.abs, prims.exp, prims.log, prims.log1p, prims.expm1, prims.sqrt,
         prims.rsqrt, prims.sin, prims.cos, prims.tanh, prims.logistic, prims.erf, prims.sign,
         prims.floor, prims.ceil, prims.reciprocal]
BINARY = [prims.add, prims.sub, prims.mul, prims.div, prims.pow, prims.maximum,
          prims.minimum]
COMPARE = [prims.eq, prims.ne, prims.lt, prims.le, prims.gt, prims.ge]


def _specials(shape, dtype, rng):
    x = rng.uniform(-3, 3, shape).astype(dtype)
    flat = x.reshape(-1)
    flat[:8] = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, -1.0, 88.0]
    return x


@pytest.mark.parametrize("dtype", [dt.float32, dt.float64])
@pytest.mark.parametrize("prim", UNARY)
def test_unary_prims_equal_the_reference(machine_tier, prim, dtype):
    shape = (33, 20)
    g = _graph(prim.name, [(shape, dtype)], lambda x: [prim(x)])
    x = _specials(shape, dtype.np, RNG)
    # float32: the compiled kernels' approximations (<= 5e-7 relative), exact elsewhere
    rtol = 2e-6 if dtype is dt.float32 else 1e-12
    _, got, want = _check(g, [x], machine_tier, rtol=rtol, atol=1e-30)
    # NaN where the reference has NaN, and the sign of every zero (-0.0 stays -0.0)
    assert np.array_equal(np.isnan(got[0]), np.isnan(want[0]))
    zeros = want[0] == 0
    assert np.array_equal(np.signbit(got[0][zeros]), np.signbit(want[0][zeros]))


@pytest.mark.parametrize("dtype", [dt.float32, dt.float64])
@pytest.mark.parametrize("prim", BINARY + COMPARE)
def test_binary_prims_equal_the_reference(machine_tier, prim, dtype):
    shape = (17, 12)
    g = _graph(prim.name, [(shape, dtype), (shape, dtype)], lambda x, y: [prim(x, y)])
    x, y = _specials(shape, dtype.np, RNG), _specials(shape, dtype.np, RNG)[::-1].copy()
    y.reshape(-1)[20:24] = [0.0, -0.0, np.inf, np.nan]
    x.reshape(-1)[20:24] = [-0.0, 0.0, np.inf, 2.0]
    _, got, want = _check(g, [x, y], machine_tier, rtol=2e-6 if dtype is dt.float32 else 1e-12,
                          atol=1e-30)
    zeros = want[0] == 0
    if want[0].dtype.kind == "f":
        assert np.array_equal(np.signbit(got[0][zeros]), np.signbit(want[0][zeros]))


def test_bool_values_masks_and_conversions(machine_tier):
    shape = (24, 10)

    def body(x, y, m):
        big = prims.gt(x, y)
        both = prims.logical_and(big, m)
        either = prims.add(big, m)                        # bool + bool: or
        none_ = prims.logical_not(prims.logical_or(both, either))
        f = prims.convert_element_type(both, dtype=dt.float32)
        back = prims.convert_element_type(prims.mul(x, f), dtype=dt.bool_)
        w = prims.where(m, x, prims.neg(y))
        d = prims.convert_element_type(prims.convert_element_type(x, dtype=dt.float64),
                                       dtype=dt.float32)
        return [both, either, none_, f, back, w, d]
    g = _graph("bools", [(shape, dt.float32), (shape, dt.float32), (shape, dt.bool_)], body)
    x, y = RNG.normal(size=shape).astype(np.float32), RNG.normal(size=shape).astype(np.float32)
    m = RNG.random(shape) < 0.5
    _check(g, [x, y, m], machine_tier, rtol=0, atol=0)


def test_row_reductions_softmax_and_reductions_over_the_rows(machine_tier, monkeypatch):
    monkeypatch.setattr(row_program, "GROUP_ELEMENTS", 64)   # groups of 2 rows and a tail
    monkeypatch.setattr(row_program, "PARTS_MIN_ELEMENTS", 0)  # small, yet on every thread
    R, C = 41, 24

    def body(x, y):
        t = prims.tanh(prims.add(x, _bcast(y, (R, C), (1,))))
        e = prims.exp(prims.sub(t, _bcast(prims.reduce_max(t, dims=(1,)), (R, C), (0,))))
        soft = prims.div(e, _bcast(prims.reduce_sum(e, dims=(1,)), (R, C), (0,)))
        tx = prims.mul(t, x)
        return [soft, prims.reduce_sum(tx, dims=(0,)), prims.reduce_max(tx, dims=(0,)),
                prims.reduce_min(tx, dims=(0,)), prims.reduce_sum(tx, dims=(0, 1)),
                prims.reduce_min(t, dims=(1,)),
                prims.mul(t, _const(0.5, (R, C)))]
    g = _graph("rows", [((R, C), dt.float32), ((C,), dt.float32)], body)
    x = RNG.uniform(-2, 2, (R, C)).astype(np.float32)
    x[3, 5] = np.nan                       # a NaN row: its max, min and sums are NaN
    y = RNG.uniform(-1, 1, (C,)).astype(np.float32)
    for threads in (1, 2, 3):              # partial results of each thread, combined
        monkeypatch.setattr(parts._Threads, "count", threads)
        _check(g, [x, y], machine_tier, rtol=1e-6, atol=1e-6)


def test_layer_norm_forward_and_backward_over_three_axes(machine_tier):
    shape = (4, 6, 8)

    def body(x, w, gy):
        mean = prims.div(prims.reduce_sum(x, dims=(2,)), _bcast(_const(8.0, ()), (4, 6), ()))
        c = prims.sub(x, _bcast(prims.reshape(mean, shape=(4, 6, 1)), shape, (0, 1, 2)))
        var = prims.div(prims.reduce_sum(prims.mul(c, c), dims=(2,)),
                        _bcast(_const(8.0, ()), (4, 6), ()))
        r = prims.rsqrt(prims.add(var, _bcast(_const(1e-5, ()), (4, 6), ())))
        xhat = prims.mul(c, _bcast(r, shape, (0, 1)))
        y = prims.mul(xhat, _bcast(w, shape, (2,)))
        gw = prims.reduce_sum(prims.mul(gy, xhat), dims=(0, 1))
        gb = prims.reduce_sum(gy, dims=(0, 1))
        return [y, gw, gb]
    g = _graph("ln", [(shape, dt.float32), ((8,), dt.float32), (shape, dt.float32)], body)
    args = [RNG.normal(size=shape).astype(np.float32),
            RNG.uniform(0.5, 2, (8,)).astype(np.float32),
            RNG.normal(size=shape).astype(np.float32)]
    prog, _, _ = _check(g, args, machine_tier, rtol=2e-6, atol=1e-6)
    acc_forms = {(int(op), int(n)) for r in prog.first_tier.values() if r.program is not None
                 for op, n in zip(r.program.code[:, 0], r.program.code[:, 5])}
    assert (row_vm.Op.ACC_SUM, row_vm.AccForm.DIRECT) in acc_forms     # the bias's gradient


def test_a_causal_mask_repeated_over_batch_and_heads(machine_tier):
    shape = (2, 3, 6, 6)

    def body(s, m):
        t = prims.where(_bcast(m, shape, (0, 1, 2, 3)), s, _bcast(_const(-np.inf, ()), shape, ()))
        e = prims.exp(prims.sub(t, _bcast(prims.reduce_max(t, dims=(3,)), shape, (0, 1, 2))))
        return [prims.div(e, _bcast(prims.reduce_sum(e, dims=(3,)), shape, (0, 1, 2)))]
    g = _graph("attn", [(shape, dt.float32), ((1, 1, 6, 6), dt.bool_)], body)
    args = [RNG.normal(size=shape).astype(np.float32), np.tril(np.ones((6, 6), bool))[None, None]]
    _check(g, args, machine_tier, rtol=2e-6, atol=1e-7)


def test_an_output_written_over_its_input(machine_tier):
    g = _graph("pw", [((40, 24), dt.float32)],
               lambda x: [prims.add(prims.tanh(x), _const(1.0, (40, 24)))])
    prog = compile_graph(g)
    ref, = prog.first_tier.values()
    assert ref.program is not None
    kinds = [a.kind for a in next(iter(prog.specs.values())).args]
    x = RNG.normal(size=(40, 24)).astype(np.float32)
    want = evaluate(g, [x])[0]
    assert ref(*[x if k in ("in", "out") else 0 for k in kinds]) == 0
    assert machine_tier == [True]
    assert_close(x, want, rtol=2e-6, atol=2.4e-7)     # tanh(x) + 1: an ulp of 1 near -1


def test_kernels_the_machine_does_not_run_stay_on_numpy(machine_tier, monkeypatch):
    # an integer value: no instruction (float64 registers would not hold every int64)
    g = _graph("ints", [((20, 8), dt.int64)], lambda x: [prims.add(x, x)])
    prog = compile_graph(g)
    assert all(r.program is None for r in prog.first_tier.values())
    x = RNG.integers(-2 ** 62, 2 ** 62, (20, 8))
    assert np.array_equal(prog(x)[0], x + x)
    # turned off
    monkeypatch.setenv("AOTGRAD_ROW_MACHINE", "0")
    g = _graph("off", [((20, 8), dt.float32)], lambda x: [prims.exp(x)])
    prog = compile_graph(g)
    assert all(r.program is None for r in prog.first_tier.values())


def compiled_equals_eager(loss_fn, grads, rtol, atol):
    """`grads(fn)` of aotgrad.compile(loss_fn), twice, against `grads(loss_fn)`."""
    import aotgrad
    want = grads(loss_fn)
    compiled = aotgrad.compile(loss_fn)
    for _ in range(2):
        for g, w in zip(grads(compiled), want):
            assert_close(g, w, rtol=rtol, atol=atol)


def test_a_compiled_training_step_on_the_machine_equals_eager(machine_tier):
    loss_fn, grads = attention_step(seq=9, width=12, hidden=20, classes=5, seed=0,
                                    value="gelu")
    compiled_equals_eager(loss_fn, grads, rtol=2e-5, atol=2e-6)
    assert any(machine_tier), "no kernel of the step ran on the row machine"


def test_broadcasts_and_reductions_within_rows_of_every_form(machine_tier):
    R, M, C = 9, 4, 5

    def body(x, y, z):
        tiled = _bcast(prims.exp(x), (R, M, C), (0, 2))       # the row M times (TILE)
        repeated = _bcast(prims.exp(y), (R, M, C), (0, 1))    # each element C times (REPEAT)
        mixed = prims.transpose(z, perm=(0, 1))               # (a view: kept apart below)
        t = prims.mul(tiled, repeated)
        return [t, prims.reduce_sum(t, dims=(2,)),            # runs of C (RUNS)
                prims.reduce_max(t, dims=(1,)),               # every C-th element
                prims.reduce_min(t, dims=(1, 2)), prims.reduce_sum(t, dims=(0,)),
                prims.reduce_max(t, dims=(0, 2)), mixed]
    g = _graph("forms", [((R, C), dt.float32), ((R, M), dt.float32), ((R, C), dt.float32)],
               body)
    args = [RNG.normal(size=(R, C)).astype(np.float32), RNG.normal(size=(R, M)).astype(np.float32),
            RNG.normal(size=(R, C)).astype(np.float32)]
    prog, _, _ = _check(g, args, machine_tier, rtol=2e-6, atol=1e-6)
    codes = [r.program.code for r in prog.first_tier.values() if r.program is not None]
    forms = {(int(op), int(c)) for code in codes for op, c in zip(code[:, 0], code[:, 4])}
    assert {(row_vm.Op.GATHER, row_vm.GatherForm.TILE),
            (row_vm.Op.GATHER, row_vm.GatherForm.REPEAT),
            (row_vm.Op.REDUCE_SUM, row_vm.ReduceForm.RUNS)} <= forms


def test_an_empty_row_stays_on_numpy(machine_tier):
    g = _graph("empty", [((6, 0), dt.float32)], lambda x: [prims.exp(x)])
    prog = compile_graph(g)
    assert all(r.program is None for r in prog.first_tier.values())
    assert prog(np.zeros((6, 0), np.float32))[0].shape == (6, 0)


def test_the_machines_compile_lock_leaves_the_kernel_loads_free(tmp_path):
    # (where the installation is read-only the machine compiles in the kernel cache: the
    # lock held meanwhile must not stop a program's kernels loading from it)
    got = threading.Event()

    def load_lock():
        with cache.dir_lock(str(tmp_path), exclusive=False):
            got.set()
    with cache.dir_lock(str(tmp_path), exclusive=True, name=".machine.lock"):
        t = threading.Thread(target=load_lock, daemon=True)
        t.start()
        assert got.wait(10.0)
    t.join(10.0)


def test_values_made_of_sums_over_the_rows_run_after_the_rows(machine_tier, monkeypatch):
    """A loss's mean, a column sum scaled by a whole value, a max over the rows minus their
    sum: the rows run on the machine, what their sums make after them; with an inf and a
    NaN column, several threads' partial sums, and a group's tail rows."""
    monkeypatch.setattr(row_program, "GROUP_ELEMENTS", 64)
    monkeypatch.setattr(row_program, "PARTS_MIN_ELEMENTS", 0)
    R, M, C = 9, 5, 8

    def body(x, y):
        t = prims.add(x, _bcast(y, (R, M, C), (2,)))
        cols = prims.reduce_sum(t, dims=(0, 1))
        return [prims.div(prims.reduce_sum(prims.mul(t, t), dims=(0, 1, 2)),
                          _const(float(R * M * C), ())),
                cols, prims.mul(cols, y),
                prims.sub(prims.reduce_max(t, dims=(0, 1)), cols),
                prims.mul(prims.reduce_min(t, dims=(0, 2)), _const(2.0, (M,)))]
    g = _graph("after rows", [((R, M, C), dt.float32), ((C,), dt.float32)], body)
    rng = np.random.default_rng(3)
    x = _specials((R, M, C), np.float32, rng)
    y = rng.uniform(-1, 1, (C,)).astype(np.float32)
    for threads in (1, 2, 3):
        monkeypatch.setattr(parts._Threads, "count", threads)
        machine_tier.clear()
        # (the reference sums in float32, the machine in float64: a sum near 16 may differ
        # by an ulp or two of float32)
        prog, _, _ = _check(g, [x, y], machine_tier, rtol=1e-5, atol=1e-5)
    assert any(r.program is not None and r.program.rb.after
               for r in prog.first_tier.values())
