"""The row machine's integers and its gathers and scatter-adds at each row's own indices
(codegen/row_vm.py: LOAD_I64, LOAD_I32, GATHER_AT, SCATTER_ADD_AT): a cross-entropy's
kernels, which pick each row's target class, run on the machine on the first tier, and
natively once compiled (codegen/row_lower.py). Each kernel's results are compared with the
IR's reference evaluation (numpy, as eager computes), and the native programs' with the
machine's, bit for bit; an index out of range, and an int64 the machine's float64
registers cannot hold exactly, send the call to numpy, whose impl raises or computes
exactly, on the machine and natively alike."""
import numpy as np
import pytest
from test_row_machine import _bcast, _check, _const, _graph, compiled_equals_eager
from test_row_native import _native_equals_machine

from aotgrad.codegen import compile_graph, row_machine, row_native
from aotgrad.codegen.row_vm import Op
from aotgrad.ir import evaluate, prims
from aotgrad.ir import dtypes as dt

RNG = np.random.default_rng(5)


def _ops(prog):
    return {Op(int(op)) for r in prog.first_tier.values() if r.program is not None
            for op in r.program.code[:, 0]}


def _cross_entropy(n, c, index_dtype=dt.int64):
    """A cross-entropy's forward and backward kernels over `n` rows of `c` classes, with
    PyTorch's ignore_index (-100): the loss per row and the logits' gradient."""
    def body(x, label):
        ignore = prims.ne(label, _const(-100, (n,), index_dtype))
        safe = prims.where(ignore, label, _const(0, (n,), index_dtype))
        idx = prims.reshape(safe, shape=(n, 1))
        m = prims.reduce_max(x, dims=(1,))
        z = prims.sub(x, _bcast(m, (n, c), (0,)))
        lse = prims.log(prims.reduce_sum(prims.exp(z), dims=(1,)))
        picked = prims.reshape(prims.gather(z, idx, dim=1), shape=(n,))
        loss = prims.where(ignore, prims.sub(lse, picked), _const(0.0, (n,)))
        weight = prims.convert_element_type(ignore, dtype=dt.float32)
        p = prims.exp(prims.sub(z, _bcast(lse, (n, c), (0,))))
        onehot = prims.scatter_add(_const(0.0, (n, c)), idx,
                                   prims.reshape(weight, shape=(n, 1)), dim=1)
        grad = prims.sub(prims.mul(p, _bcast(weight, (n, c), (0,))), onehot)
        return [loss, grad]
    return _graph("ce", [((n, c), dt.float32), ((n,), index_dtype)], body)


@pytest.mark.parametrize("index_dtype", [dt.int64, dt.int32])
def test_a_cross_entropy_runs_on_the_machine(machine_tier, index_dtype):
    n, c = 37, 11
    g = _cross_entropy(n, c, index_dtype)
    x = RNG.normal(size=(n, c)).astype(np.float32) * 4
    label = RNG.integers(0, c, n).astype(index_dtype.np)
    label[:5] = [-100, -1, -c, c - 1, 0]        # ignored, and counted from the end
    prog, got, want = _check(g, [x, label], machine_tier, rtol=2e-6, atol=1e-7)
    ops = _ops(prog)
    assert {Op.GATHER_AT, Op.SCATTER_ADD_AT} <= ops
    assert (Op.LOAD_I64 if index_dtype is dt.int64 else Op.LOAD_I32) in ops
    assert got[0][0] == 0.0 and np.all(got[0][1:] > 0)


def test_an_index_out_of_range_raises_numpys_error(machine_tier):
    n, c = 16, 6
    g = _cross_entropy(n, c)
    x = RNG.normal(size=(n, c)).astype(np.float32)
    for bad in (c, -c - 1, 2 ** 40):
        label = RNG.integers(0, c, n)
        label[7] = bad
        with pytest.raises(IndexError):
            evaluate(g, [x, label])
        prog = compile_graph(g)
        machine_tier.clear()
        with pytest.raises(IndexError):
            prog(x, label)
        assert False in machine_tier, "the machine did not flag the index"


def test_int64_beyond_2_53_run_on_numpy_exactly(machine_tier):
    # float64 registers hold every integer up to 2**53; 2**53 + 1 would equal 2**53 there,
    # and its float32 rounding could come out wrong, so the call runs on numpy
    n = 12

    def body(a):
        near = prims.eq(a, _const(2 ** 53, (n, 3), dt.int64))
        return [near, prims.convert_element_type(a, dtype=dt.float32)]
    g = _graph("wide", [((n, 3), dt.int64)], body)
    a = RNG.integers(-1000, 1000, (n, 3))
    _check(g, [a], machine_tier)                # small integers: on the machine
    a[3, 1] = 2 ** 53 + 1
    a[5, 2] = -(2 ** 60) - 1
    prog = compile_graph(g)
    machine_tier.clear()
    got = prog(a)
    want = evaluate(g, [a])
    assert machine_tier and not any(machine_tier)
    for gv, wv in zip(got, want):
        assert np.array_equal(np.asarray(gv), wv)
    assert not got[0][3, 1]


def test_a_constant_beyond_2_53_keeps_the_kernel_on_numpy(machine_tier):
    g = _graph("wide_const", [((10, 4), dt.int64)],
               lambda a: [prims.ne(a, _const(2 ** 53 + 1, (10, 4), dt.int64))])
    prog = compile_graph(g)
    assert all(r.program is None for r in prog.first_tier.values())
    a = np.full((10, 4), 2 ** 53, np.int64)
    assert np.array_equal(prog(a)[0], a != 2 ** 53 + 1)


def test_rows_of_several_axes_and_repeated_indices(machine_tier):
    # a pick per row of (R, A, C) values along their last axis, in a kernel whose rows are
    # its values' first axis (a sum over the other two): each of a row's A picks at its own
    # offset in the row; a scatter-add at repeated indices adds up in order
    R, A, C = 6, 5, 7

    def body(x, label, src):
        ok = prims.ne(label, _const(-100, (R, A), dt.int64))
        idx = prims.reshape(prims.where(ok, label, _const(0, (R, A), dt.int64)),
                            shape=(R, A, 1))
        picked = prims.gather(x, idx, dim=2)
        total = prims.reduce_sum(prims.exp(x), dims=(1, 2))
        added = prims.scatter_add(prims.mul(x, x), idx, prims.reshape(src, shape=(R, A, 1)),
                                  dim=2)
        return [prims.mul(picked, picked), total, added]
    g = _graph("inner", [((R, A, C), dt.float32), ((R, A), dt.int64), ((R, A), dt.float32)],
               body)
    x = RNG.normal(size=(R, A, C)).astype(np.float32)
    label = RNG.integers(-C, C, (R, A))
    label[0, 0] = -100
    src = RNG.normal(size=(R, A)).astype(np.float32) * np.float32(1e4)
    prog, got, want = _check(g, [x, label, src], machine_tier, rtol=2e-6, atol=0)
    assert {Op.GATHER_AT, Op.SCATTER_ADD_AT} <= _ops(prog)


def test_float64_and_bool_operands(machine_tier):
    n, c = 9, 4

    def body(x, m, label):
        idx = prims.reshape(label, shape=(n, 1))
        return [prims.gather(x, idx, dim=1), prims.gather(m, idx, dim=1),
                prims.scatter_add(x, idx, prims.gather(x, idx, dim=1), dim=1)]
    g = _graph("kinds", [((n, c), dt.float64), ((n, c), dt.bool_), ((n,), dt.int64)], body)
    x = RNG.normal(size=(n, c))
    x[0, :] = [np.nan, -0.0, np.inf, 1.0]
    m = RNG.random((n, c)) < 0.5
    label = RNG.integers(0, c, n)
    label[0] = 1
    _, got, want = _check(g, [x, m, label], machine_tier, rtol=1e-15, atol=0)
    assert np.signbit(got[0][0, 0]) and got[0].dtype == np.float64
    assert got[1].dtype == np.bool_


def test_a_compiled_cross_entropy_step_on_the_machine_equals_eager(captured):
    import aotgrad
    import aotgrad.nn.functional as F
    rng = np.random.default_rng(0)
    w0 = rng.normal(size=(12, 7)).astype(np.float32)
    x = aotgrad.tensor(rng.normal(size=(20, 12)).astype(np.float32))
    y = aotgrad.tensor(np.r_[rng.integers(0, 7, 17), [-100, 3, 6]])

    def loss_fn(w, x, y):
        return F.cross_entropy(x @ w, y, label_smoothing=0.1)

    def grads(fn):
        w = aotgrad.tensor(w0, requires_grad=True)
        loss = fn(w, x, y)
        loss.backward()
        return loss.detach().numpy(), w.grad.numpy()
    compiled_equals_eager(loss_fn, grads, rtol=2e-6, atol=1e-7)
    assert Op.GATHER_AT in {Op(int(op)) for program, _, _ in captured
                            for op in program.code[:, 0]}


def test_a_cross_entropy_runs_in_numpy_blocks_without_the_machine(empty_cache, monkeypatch):
    from aotgrad.codegen import tiers
    monkeypatch.setenv("AOTGRAD_BACKGROUND_COMPILE", "1")
    monkeypatch.setenv("AOTGRAD_ROW_MACHINE", "0")
    monkeypatch.setattr(tiers, "submit", lambda job, priority=None: None)
    monkeypatch.setattr(tiers, "track", lambda units, priority=None: None)
    n, c = 300, 200                                   # more rows than one block holds
    g = _cross_entropy(n, c)
    prog = compile_graph(g)
    assert any(r.blocks is not None and any(nd.prim is prims.gather for nd in r.nodes)
               for r in prog.first_tier.values())
    x = RNG.normal(size=(n, c)).astype(np.float32)
    label = RNG.integers(-c, c, n)
    label[::7] = -100
    for got, want in zip(prog(x, label), evaluate(g, [x, label])):
        assert np.array_equal(np.asarray(got), want)


def _several_axes(R=6, A=5, C=7):
    def body(x, label, src):
        ok = prims.ne(label, _const(-100, (R, A), dt.int64))
        idx = prims.reshape(prims.where(ok, label, _const(0, (R, A), dt.int64)),
                            shape=(R, A, 1))
        total = prims.reduce_sum(prims.exp(x), dims=(1, 2))
        added = prims.scatter_add(prims.mul(x, x), idx, prims.reshape(src, shape=(R, A, 1)),
                                  dim=2)
        return [prims.gather(x, idx, dim=2), total, added]
    return _graph("inner", [((R, A, C), dt.float32), ((R, A), dt.int64),
                            ((R, A), dt.float32)], body)


def test_native_programs_equal_the_machine(captured):
    n, c = 70, 13
    x = RNG.normal(size=(n, c)).astype(np.float32)
    label = RNG.integers(-c, c, n).astype(np.int32)
    label[::9] = -100
    compile_graph(_cross_entropy(n, c, dt.int32))(x, label)
    compile_graph(_cross_entropy(n, c))(x, label.astype(np.int64))
    x3 = RNG.normal(size=(6, 5, 7)).astype(np.float32)
    compile_graph(_several_axes())(x3, RNG.integers(-7, 7, (6, 5)),
                                   RNG.normal(size=(6, 5)).astype(np.float32) * 1e4)
    programs = _native_equals_machine(captured)
    assert {Op.LOAD_I64, Op.LOAD_I32, Op.GATHER_AT, Op.SCATTER_ADD_AT} <= {
        Op(int(op)) for p in programs for op in p.code[:, 0]}


@pytest.mark.parametrize("bad", [13, -14, 2 ** 53 + 1, 2 ** 63 - 1])
def test_native_programs_flag_what_the_machine_flags(captured, bad):
    n, c = 40, 13
    x = RNG.normal(size=(n, c)).astype(np.float32)
    label = RNG.integers(0, c, n)
    compile_graph(_cross_entropy(n, c))(x, label)
    label[17] = bad
    for program, args, whole in {id(p): (p, a, w) for p, a, w in captured}.values():
        at = next(i for i, v in program.inputs if np.dtype(v.dtype.np) == np.int64)
        args = list(args)
        args[at] = label
        native = row_native.compile_program(program)
        assert not program.run([a.copy() for a in args], whole, machine=row_machine.machine())
        assert not program.run([a.copy() for a in args], whole, native=native)
        args[at] = np.clip(label, 0, c - 1)
        assert program.run([a.copy() for a in args], whole, native=native)
