"""The row machine's float32 registers (codegen/row_vm.py): a program whose values are all
float32, bools or integers runs on registers of float32, and every result is the one its
float64 registers give, bit for bit: element-wise instructions in each rounding mode on
NaN, infinities, -0.0 and denormals, reductions within rows by runs and by an index map
(made in float64 either way), sums over the rows, gathers and scatter-adds at each row's
indices, a training step's kernels. A program with a float64 value, or an integer
constant float32 does not hold exactly, keeps float64 registers; an integer beyond float32's
exact ones (2**24) runs that call on float64 registers, with the right answer."""
import numpy as np
import pytest
from attention_step import attention_step
from test_row_machine import _bcast, _const, _graph, compiled_equals_eager
from test_row_machine_indices import _cross_entropy

from aotgrad.codegen import compile_graph, parts, row_machine
from aotgrad.codegen.row_program import address
from aotgrad.codegen.row_vm import Op, ReduceForm, Round
from aotgrad.ir import evaluate, prims
from aotgrad.ir import dtypes as dt

RNG = np.random.default_rng(3)
SPECIALS = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, -1e-40, 1e-45, -1.0, 1.0, 88.0, 89.5,
            -104.0, -105.0, 9.5, -9.5, 3.9, 0.5, 1e30, -1e30, 3.4e38, -3.4e38, 1.2e-38]
UNARY = [prims.neg, prims.abs, prims.exp, prims.log, prims.log1p, prims.expm1, prims.sqrt,
         prims.rsqrt, prims.sin, prims.cos, prims.tanh, prims.logistic, prims.erf, prims.sign,
         prims.floor, prims.ceil, prims.reciprocal]
BINARY = [prims.add, prims.sub, prims.mul, prims.div, prims.pow, prims.maximum, prims.minimum,
          prims.eq, prims.ne, prims.lt, prims.le, prims.gt, prims.ge]


@pytest.fixture(autouse=True)
def _threads():
    count = parts._Threads.count
    yield
    parts._Threads.count = count


def _values(shape):
    x = RNG.uniform(-4, 4, shape).astype(np.float32)
    flat = x.reshape(-1)
    specials = np.array(SPECIALS, np.float32)
    both = np.concatenate([specials, RNG.permutation(specials)])[:flat.size]
    flat[:both.size] = both
    return x


def _bits(a):
    return np.ascontiguousarray(a).view(np.uint8)


def _registers_agree(runs, threads=(1, 2, 3)):
    """Run every recorded program on float32 and on float64 registers, with each number of
    threads: the same bytes in every output. Returns the programs."""
    assert runs, "no kernel ran as a row program"
    machine = row_machine.machine()
    programs = []
    for program, args, whole in list(runs):       # (each run is recorded too)
        if program in programs:
            continue
        programs.append(program)
        assert program.float32, program.code
        for n in threads:
            parts._Threads.count = n
            results = []
            for float32 in (True, False):
                program.float32 = float32
                out = [a.copy() for a in args]
                assert program.run(out, dict(whole), machine=machine)
                results.append(out)
            program.float32 = True
            for a, b in zip(*results):
                assert np.array_equal(_bits(a), _bits(b)), (a, b)
    return programs


def test_element_wise_instructions_agree_on_both_registers(captured):
    shape = (6, 40)
    x, y = _values(shape), _values(shape)[::-1].copy()
    for prim in UNARY:
        g = _graph(prim.name, [(shape, dt.float32)], lambda a: [prim(a)])
        compile_graph(g)(x)
    for prim in BINARY:
        g = _graph(prim.name, [(shape, dt.float32)] * 2, lambda a, b: [prim(a, b)])
        compile_graph(g)(x, y)

    def masks(a, b):
        m = prims.logical_and(prims.gt(a, b), prims.logical_not(prims.eq(a, a)))
        return [prims.where(m, a, b), prims.convert_element_type(m, dtype=dt.float32),
                prims.logical_or(m, prims.lt(a, _const(0.5, shape)))]
    compile_graph(_graph("masks", [(shape, dt.float32)] * 2, masks))(x, y)
    _registers_agree(captured)


def test_reductions_gathers_and_scatters_agree_on_both_registers(captured):
    R, A, C = 9, 5, 7

    def body(x, label, src):
        within = prims.reduce_sum(prims.mul(x, x), dims=(1,))        # an index map
        biggest = prims.reduce_max(x, dims=(2,))                       # runs
        smallest = prims.reduce_min(x, dims=(1,))
        over_rows = prims.reduce_sum(prims.exp(prims.neg(prims.abs(x))), dims=(0,))
        ok = prims.ne(label, _const(-100, (R, A), dt.int64))
        idx = prims.reshape(prims.where(ok, label, _const(0, (R, A), dt.int64)),
                            shape=(R, A, 1))
        added = prims.scatter_add(x, idx, prims.reshape(src, shape=(R, A, 1)), dim=2)
        picked = prims.gather(x, idx, dim=2)
        centred = prims.sub(x, _bcast(biggest, (R, A, C), (0, 1)))
        return [within, biggest, smallest, over_rows, added, picked, centred]
    g = _graph("reductions", [((R, A, C), dt.float32), ((R, A), dt.int64),
                              ((R, A), dt.float32)], body)
    x = RNG.normal(size=(R, A, C)).astype(np.float32) * 1e3
    x[0, 0, :3] = [np.nan, -0.0, 1e-40]
    label = RNG.integers(-C, C, (R, A))
    label[::4, 1] = -100
    src = RNG.normal(size=(R, A)).astype(np.float32) * 1e4
    compile_graph(g)(x, label, src)
    n, c = 50, 13
    compile_graph(_cross_entropy(n, c, dt.int32))(
        RNG.normal(size=(n, c)).astype(np.float32), RNG.integers(0, c, n).astype(np.int32))
    programs = _registers_agree(captured)
    forms = {(Op(int(r[0])), int(r[4])) for p in programs for r in p.code}
    assert {(Op.REDUCE_MAX, ReduceForm.RUNS), (Op.REDUCE_SUM, ReduceForm.RUNS)} <= forms
    assert {Op.ACC_SUM, Op.GATHER_AT, Op.SCATTER_ADD_AT, Op.LOAD_I64, Op.LOAD_I32} <= {
        op for op, _ in forms}


def test_a_training_step_on_float32_registers_equals_eager(captured):
    loss_fn, grads = attention_step(seq=16, width=12, hidden=24, classes=7, seed=2)
    compiled_equals_eager(loss_fn, grads, rtol=2e-5, atol=1e-6)
    programs = _registers_agree(captured, threads=(2,))
    assert len(programs) > 3


def test_float64_values_and_inexact_constants_keep_float64_registers(captured):
    shape = (4, 30)
    x = RNG.normal(size=shape)
    compile_graph(_graph("f64", [(shape, dt.float64)], lambda a: [prims.exp(a)]))(x)
    # an integer constant float32 cannot hold (2**24 + 1 would compare equal to 2**24)
    g = _graph("constant", [(shape, dt.float32), (shape, dt.int64)], lambda a, i: [
        prims.where(prims.eq(i, _const(2 ** 24 + 1, shape, dt.int64)), a,
                    _const(0.0, shape))])
    a, i = x.astype(np.float32), np.full(shape, 2 ** 24)
    i[0] = 2 ** 24 + 1
    got = compile_graph(g)(a, i)
    assert np.array_equal(np.asarray(got[0]), evaluate(g, [a, i])[0])
    assert len({id(program) for program, _, _ in captured}) == 2
    assert not any(program.float32 for program, _, _ in captured)


def test_integers_beyond_float32s_exact_ones_run_on_float64_registers(captured):
    R, C = 8, 5
    big = 2 ** 24

    def body(x, a, b, s):
        same = prims.eq(a, b)
        scalar = prims.eq(a, _bcast(s, (R, C), ()))
        return [prims.where(same, x, _const(0.0, (R, C))),
                prims.where(scalar, x, _const(-1.0, (R, C)))]
    g = _graph("ints", [((R, C), dt.float32), ((R, C), dt.int64), ((R, C), dt.int64),
                        ((), dt.int64)], body)
    x = RNG.normal(size=(R, C)).astype(np.float32)
    a = RNG.integers(0, 5, (R, C))
    prog = compile_graph(g)
    for a_, b_, s_ in [(a, a.copy(), np.int64(3)),                  # float32 registers
                       (a + big, a + big + 1, np.int64(big + 3)),   # float32 would tie them
                       (a, a.copy(), np.int64(big + 1))]:           # a per-call integer
        b_ = np.array(b_)
        b_[::2] = a_[::2]
        got = prog(x, a_, b_, s_)
        want = evaluate(g, [x, a_, b_, s_])
        for gv, wv in zip(got, want):
            assert np.array_equal(np.asarray(gv), wv)
    assert captured and all(program.float32 for program, _, _ in captured)
    # each call ran on the machine (not on numpy): on float64 registers where it had to
    for program, args, whole in list(captured):      # (each run is recorded too)
        assert program.run([a.copy() for a in args], dict(whole), machine=row_machine.machine())


@pytest.mark.parametrize("op", [Op.REDUCE_SUM, Op.REDUCE_MAX, Op.REDUCE_MIN])
def test_a_reduction_by_an_index_map_is_made_in_float64_on_both_registers(op):
    """Every n-th element of a row summed (a reduction over a middle axis): in float64, then
    rounded once, on float32 registers as on float64 ones (a sum kept in float32 would
    lose the small terms beside the large ones)."""
    assert row_machine.wait(900), f"the row machine did not load: {row_machine._machine.failed!r}"
    rows, n, m = 6, 5, 40
    x = (RNG.normal(size=(rows, m)) * np.repeat([1e8, 1.0, 3e-3, 1e4], n * 2)).astype(np.float32)
    x[0, :3] = [np.nan, -0.0, 1e-40]
    ix = np.arange(m, dtype=np.int64) % n
    group = 2                              # (registers of group rows: x's, then the result's)
    code = np.array([(Op.LOAD_F32, 0, 0, 0, 0, m, 0, 0),
                     (op, group * m, 0, 0, ReduceForm.INDEXED, n, m, Round.F32),
                     (Op.STORE_F32, 0, group * m, 0, 0, n, 0, 0)], np.int64)
    want = np.full((rows, n), {Op.REDUCE_SUM: 0.0, Op.REDUCE_MAX: -np.inf,
                               Op.REDUCE_MIN: np.inf}[op])
    combine = {Op.REDUCE_SUM: np.add, Op.REDUCE_MAX: np.fmax, Op.REDUCE_MIN: np.fmin}[op]
    for i in range(m):                     # element by element, in order, in float64
        want[:, ix[i]] = combine(want[:, ix[i]], x[:, i].astype(np.float64))
    want[0, 0] = np.nan                    # (the machine's max and min carry a NaN on)
    for registers in (np.zeros(0, np.float32), np.zeros(0, np.float64)):
        out = np.empty((rows, n), np.float32)
        row_machine.machine()(1, 0, 1, parts.NO_WORKSPACE, code, ix, np.zeros(0), registers,
                         np.array([address(x)]), np.array([address(out)]), np.zeros((1, 1)),
                         rows, group, group * (m + n))
        assert np.array_equal(out, want.astype(np.float32), equal_nan=True), registers.dtype
