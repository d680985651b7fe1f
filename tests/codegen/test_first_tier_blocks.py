"""The numpy first tier in blocks of rows (codegen.row_blocks.RowBlocks): a kernel whose
nodes keep rows to themselves runs block by block and gives what the whole-array reference
run gives (a tail block, reductions along the rows and over them, broadcasts of per-row
and per-column values, reshapes); a kernel that mixes rows, or an output buffer that
overlaps an input in another layout, runs whole."""
import warnings

import numpy as np
import pytest
from attention_step import attention_step

from aotgrad.codegen import compile_graph, first_tier, row_blocks, tiers
from aotgrad.ir import Aval, GraphBuilder, evaluate, prims
from aotgrad.ir import dtypes as dt
from aotgrad.testing import assert_close


@pytest.fixture
def numpy_tier(tmp_path, monkeypatch):
    """Programs built here keep their kernels on the numpy first tier (no compile), with
    small blocks (BLOCK_ELEMENTS) so that small arrays run in several of them, on numpy
    (not the row machine: tests/codegen/test_row_machine.py)."""
    monkeypatch.setenv("AOTGRAD_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("AOTGRAD_ROW_MACHINE", "0")
    monkeypatch.setenv("AOTGRAD_BACKGROUND_COMPILE", "1")
    monkeypatch.delenv("AOTGRAD_FIRST_TIER", raising=False)
    monkeypatch.setattr(tiers, "submit", lambda job, priority=None: None)
    monkeypatch.setattr(tiers, "track", lambda units, priority=None: None)   # none at exit
    monkeypatch.setattr(row_blocks, "BLOCK_ELEMENTS", 72)


def _refs(prog):
    return list(prog.first_tier.values())


def _rows_graph():
    """Softmax along rows, a column sum (a reduction over the rows), pointwise outputs."""
    b = GraphBuilder("rows")
    x = b.add_input(Aval((40, 24), dt.float32), "x")
    y = b.add_input(Aval((24,), dt.float32), "y")
    with b:
        t = prims.tanh(prims.add(x, prims.broadcast_in_dim(y, shape=(40, 24), dims=(1,))))
        e = prims.exp(prims.sub(t, prims.broadcast_in_dim(
            prims.reduce_max(t, dims=(1,)), shape=(40, 24), dims=(0,))))
        soft = prims.div(e, prims.broadcast_in_dim(prims.reduce_sum(e, dims=(1,)),
                                                   shape=(40, 24), dims=(0,)))
        cols = prims.reduce_sum(prims.mul(t, x), dims=(0,))
        top = prims.reduce_max(prims.mul(t, x), dims=(0,))
        half = prims.mul(t, prims.full(shape=(40, 24), value=0.5, dtype=dt.float32))
    b.graph.outputs = [soft, cols, top, half]
    return b.graph


def _layer_norm_graph():
    """(4, 6, 8): a layer norm over the last axis (reshapes to (4, 6, 1)), a bias and the
    bias's gradient (a sum over the two leading axes)."""
    b = GraphBuilder("ln")
    x = b.add_input(Aval((4, 6, 8), dt.float32), "x")
    w = b.add_input(Aval((8,), dt.float32), "w")
    shape = (4, 6, 8)
    with b:
        mean = prims.div(prims.reduce_sum(x, dims=(2,)),
                         prims.broadcast_in_dim(prims.full(shape=(), value=8.0, dtype=dt.float32),
                                                shape=(4, 6), dims=()))
        c = prims.sub(x, prims.broadcast_in_dim(prims.reshape(mean, shape=(4, 6, 1)),
                                                shape=shape, dims=(0, 1, 2)))
        var = prims.reduce_sum(prims.mul(c, c), dims=(2,))
        r = prims.rsqrt(prims.add(var, prims.broadcast_in_dim(
            prims.full(shape=(), value=1e-5, dtype=dt.float32), shape=(4, 6), dims=())))
        y = prims.mul(prims.mul(c, prims.broadcast_in_dim(r, shape=shape, dims=(0, 1))),
                      prims.broadcast_in_dim(w, shape=shape, dims=(2,)))
        gw = prims.reduce_sum(y, dims=(0, 1))
    b.graph.outputs = [y, gw]
    return b.graph


def _masked_softmax_graph():
    """(2, 3, 6, 6) scores, a causal mask of shape (1, 1, 6, 6) broadcast over the batch
    and heads (its length-1 axes fall on the rows), a softmax along the last axis."""
    b = GraphBuilder("attn")
    s = b.add_input(Aval((2, 3, 6, 6), dt.float32), "s")
    m = b.add_input(Aval((1, 1, 6, 6), dt.bool_), "m")
    shape = (2, 3, 6, 6)
    with b:
        neg = prims.broadcast_in_dim(prims.full(shape=(), value=-np.inf, dtype=dt.float32),
                                     shape=shape, dims=())
        t = prims.where(prims.broadcast_in_dim(m, shape=shape, dims=(0, 1, 2, 3)), s, neg)
        e = prims.exp(prims.sub(t, prims.broadcast_in_dim(
            prims.reduce_max(t, dims=(3,)), shape=shape, dims=(0, 1, 2))))
        p = prims.div(e, prims.broadcast_in_dim(prims.reduce_sum(e, dims=(3,)),
                                                shape=shape, dims=(0, 1, 2)))
    b.graph.outputs = [p]
    return b.graph


def _within_rows_graph():
    """(4, 6, 12): values made of their input's elements rearranged within each row: the
    last axis cut in two (a gated unit, a * logistic(a) * b), every other element of it,
    its reversal, and its (3, 4) view transposed."""
    b = GraphBuilder("within")
    x = b.add_input(Aval((4, 6, 12), dt.float32), "x")
    with b:
        a = prims.slice(x, start=(0, 0, 0), limit=(4, 6, 6))
        gate = prims.slice(x, start=(0, 0, 6), limit=(4, 6, 12))
        glu = prims.mul(prims.mul(a, prims.logistic(a)), gate)
        odd = prims.exp(prims.slice(x, start=(0, 0, 1), limit=(4, 6, 12), strides=(1, 1, 2)))
        back = prims.rev(prims.tanh(x), dims=(2,))
        t = prims.transpose(prims.reshape(prims.neg(x), shape=(4, 6, 3, 4)),
                            perm=(0, 1, 3, 2))
    b.graph.outputs = [glu, odd, back, t]
    return b.graph


RNG = np.random.default_rng(7)


@pytest.mark.parametrize("make, inputs", [
    (_rows_graph, lambda: [RNG.uniform(-2, 2, (40, 24)).astype(np.float32),
                           RNG.uniform(-1, 1, (24,)).astype(np.float32)]),
    (_layer_norm_graph, lambda: [RNG.normal(size=(4, 6, 8)).astype(np.float32),
                                 RNG.uniform(0.5, 2, (8,)).astype(np.float32)]),
    (_masked_softmax_graph, lambda: [RNG.normal(size=(2, 3, 6, 6)).astype(np.float32),
                                     np.tril(np.ones((6, 6), bool))[None, None]]),
    (_within_rows_graph, lambda: [RNG.normal(size=(4, 6, 12)).astype(np.float32)]),
])
def test_blocked_kernels_equal_the_whole_array_reference(numpy_tier, make, inputs):
    g, args = make(), inputs()
    prog = compile_graph(g)
    refs = _refs(prog)
    assert refs and len(refs) == len(prog.kernels())
    blocked = [r for r in refs if r.blocks is not None]
    assert blocked, "no kernel ran in blocks"
    assert all(r.blocks.block < r.blocks.rows for r in blocked)
    if make is not _rows_graph:          # the rows are the two leading axes flattened
        assert {r.blocks.axes for r in blocked} == {2}
    if make is _masked_softmax_graph:
        assert any(r.blocks.squeeze for r in blocked)
    got = [np.array(a) for a in prog(*args)]
    for r in refs:                       # the same program run whole
        r.blocks = None
    whole = [np.array(a) for a in prog(*args)]
    want = evaluate(g, args)
    for a, w, e in zip(got, whole, want):
        assert a.dtype == w.dtype == e.dtype
        # blocks change nothing along a row; a sum over the rows adds partial sums (in
        # float64), so it may differ from one numpy sum in the last bits
        assert_close(a, w, rtol=1e-6, atol=1e-6)
        assert_close(a, e, rtol=1e-6, atol=1e-6)


def test_a_kernel_that_mixes_rows_runs_whole(numpy_tier):
    b = GraphBuilder("mix")
    x = b.add_input(Aval((24, 24), dt.float32), "x")
    with b:
        t = prims.exp(x)
        out = prims.add(t, prims.transpose(t, perm=(1, 0)))
    b.graph.outputs = [out]
    a = RNG.normal(size=(24, 24)).astype(np.float32)
    prog = compile_graph(b.graph)
    assert all(r.blocks is None for r in _refs(prog))
    assert_close(prog(a)[0], evaluate(b.graph, [a])[0], rtol=1e-6, atol=0)


def _stack_graph(dtype):
    """A stack written as zero pads added (a split's gradient), transposed and summed over
    its leading axes, as attention's qkv gradient is; pads added into one region; a pad
    added that is an output too."""
    b = GraphBuilder("stack")
    xs = [b.add_input(Aval((2, 3, 4), dtype), f"x{i}") for i in range(3)]
    with b:
        def pad(x, lo, hi, interior=0):
            return prims.pad(prims.reshape(x, shape=(2, 1, 3, 4)), config=(
                (0, 0, 0), (lo, hi, interior), (0, 0, 0), (0, 0, 0)), value=0.0)
        stacked = prims.add(prims.add(pad(xs[0], 0, 2), pad(xs[1], 1, 1)), pad(xs[2], 2, 0))
        moved = prims.transpose(stacked, perm=(0, 2, 1, 3))
        total = prims.reduce_sum(moved, dims=(0, 1))
        overlapping = prims.add(pad(xs[0], 1, 0), pad(xs[1], 1, 0))
        shared = pad(xs[2], 0, 1)
        twice = prims.add(shared, pad(xs[0], 1, 0))
    b.graph.outputs = [moved, total, overlapping, twice, shared]
    if dtype is dt.float32:
        args = [RNG.normal(size=(2, 3, 4)).astype(np.float32) for _ in range(3)]
        args[0].flat[:3] = [-0.0, np.nan, -np.inf]
        args[1].flat[5] = -0.0
    else:
        args = [RNG.integers(-9, 9, size=(2, 3, 4)).astype(np.int32) for _ in range(3)]
    return b.graph, args


def _same_bits(got, want):
    for a, w in zip(got, want):
        a = np.asarray(a)
        assert a.dtype == w.dtype and a.shape == w.shape
        assert np.array_equal(a, w, equal_nan=a.dtype.kind == "f")
        assert np.array_equal(np.signbit(a), np.signbit(w))


@pytest.mark.parametrize("dtype", [dt.float32, dt.int32])
def test_pads_added_into_regions_apart_are_one_step_of_the_same_values(dtype):
    """Only the pads added into regions apart (and read by nothing else) become one step;
    its values are the adds', bit for bit: -0.0 turned 0.0 as adding a zero does, NaN
    kept."""
    g, args = _stack_graph(dtype)
    steps = first_tier._padded_sums(list(g.nodes), keep=set(g.outputs))
    fused = [s for s in steps if isinstance(s, first_tier._PaddedSum)]
    assert len(fused) == 1 and len(fused[0].inputs) == 3
    assert len(steps) == len(g.nodes) - 4        # three pads and two adds became one step
    env = dict(zip(g.inputs, args))
    first_tier._Steps(steps).run(env)
    _same_bits([env[v] for v in g.outputs], evaluate(g, args))


def test_a_first_tier_kernel_run_whole_sums_its_pads_in_one_step(numpy_tier):
    # and writes each output as soon as it is made: the transposed stack goes into its
    # buffer, and its sum reads the buffer; the same bits as the graph's reference run
    g, args = _stack_graph(dt.float32)
    prog = compile_graph(g)
    for r in _refs(prog):
        r.blocks = None
    _same_bits(prog(*args), evaluate(g, args))
    assert any(isinstance(step[0].__self__, first_tier._PaddedSum)
               for r in _refs(prog) for kept in r._constants.values()
               for step in kept.steps.steps if hasattr(step[0], "__self__"))
    stored = {v for r in _refs(prog) if "stored" in r._constants
              for v in r._constants["stored"].stored}
    moved = g.outputs[0]
    assert moved in stored          # (written at once: the sum read it from its buffer)


def test_an_output_written_over_an_input_is_written_at_the_end(numpy_tier):
    # an output buffer that is an input's buffer (the plan reuses a dead one): the outputs
    # are written only once every value is made, as before
    b = GraphBuilder("over")
    x = b.add_input(Aval((6, 5), dt.float32), "x")
    with b:
        moved = prims.transpose(prims.exp(x), perm=(1, 0))
        total = prims.reduce_sum(prims.mul(moved, prims.transpose(x, perm=(1, 0))), dims=(0,))
    b.graph.outputs = [moved, total]
    prog = compile_graph(b.graph)
    ref, = _refs(prog)
    ref.blocks = None
    a = RNG.normal(size=(6, 5)).astype(np.float32)
    want = evaluate(b.graph, [a])
    buf, tot = a.copy(), np.empty(6, np.float32)
    over = {x: buf, moved: buf.reshape(5, 6), total: tot}
    spec = next(iter(prog.specs.values()))
    assert ref(*[over.get(arg.var, 0) for arg in spec.args]) == 0
    _same_bits([buf.reshape(5, 6), tot], want)
    assert "stored" not in ref._constants and "whole" in ref._constants


def _pointwise_ref(numpy_tier_graph_rows=40):
    b = GraphBuilder("pw")
    x = b.add_input(Aval((numpy_tier_graph_rows, 24), dt.float32), "x")
    with b:
        out = prims.add(prims.tanh(x), prims.full(shape=(numpy_tier_graph_rows, 24),
                                                   value=1.0, dtype=dt.float32))
    b.graph.outputs = [out]
    prog = compile_graph(b.graph)
    ref, = _refs(prog)
    assert ref.blocks is not None
    spec = next(iter(prog.specs.values()))
    return ref, [a.kind for a in spec.args]


def _call(ref, kinds, x, out):
    args = [x if k == "in" else out if k == "out" else 0 for k in kinds]
    assert ref(*args) == 0


def test_an_output_written_over_its_input_in_place(numpy_tier):
    ref, kinds = _pointwise_ref()
    x = RNG.normal(size=(40, 24)).astype(np.float32)
    want = np.tanh(x) + np.float32(1)
    _call(ref, kinds, x, x)              # the same buffer, the same rows: blocks are safe
    assert_close(x, want, rtol=1e-6, atol=0)


def test_an_output_overlapping_its_input_in_another_layout_runs_whole(numpy_tier,
                                                                      monkeypatch):
    ref, kinds = _pointwise_ref()
    buf = RNG.normal(size=(41 * 24,)).astype(np.float32)
    x, out = buf[:40 * 24].reshape(40, 24), buf[24:].reshape(40, 24)   # rows shifted by one
    want = np.tanh(x) + np.float32(1)
    calls = []
    monkeypatch.setattr(ref, "_run_whole", lambda args: calls.append(
        first_tier.ReferenceKernel._run_whole(ref, args)))
    _call(ref, kinds, x, out)
    assert calls, "the overlapping call did not run whole"
    assert_close(out, want, rtol=1e-6, atol=0)


@pytest.mark.parametrize("overlapping", [False, True])
def test_a_strided_input_is_checked_for_overlap_element_by_element(numpy_tier, monkeypatch,
                                                                   overlapping):
    """An input that is not one byte range (every other column of a wider buffer): where
    the output is a buffer of its own the kernel runs by rows; where the output shares
    bytes with it in another layout, whole."""
    ref, kinds = _pointwise_ref()
    buf = RNG.normal(size=(40, 48)).astype(np.float32)
    x = buf[:, ::2]
    want = np.tanh(x) + np.float32(1)
    out = buf.reshape(-1)[:40 * 24].reshape(40, 24) if overlapping else \
        np.empty((40, 24), np.float32)
    whole = []
    monkeypatch.setattr(ref, "_run_whole", lambda args: whole.append(
        first_tier.ReferenceKernel._run_whole(ref, args)))
    _call(ref, kinds, x, out)
    assert bool(whole) == overlapping
    assert_close(out, want, rtol=1e-6, atol=0)


def test_a_compiled_training_step_in_blocks_equals_eager(numpy_tier, monkeypatch):
    import aotgrad
    blocked = []
    run_blocks = first_tier.ReferenceKernel._run_blocks
    monkeypatch.setattr(first_tier.ReferenceKernel, "_run_blocks",
                        lambda self, args, rb: blocked.append(run_blocks(self, args, rb))
                        or blocked[-1])
    # (rows of 9 attention weights, unmasked)
    loss_fn, grads = attention_step(seq=9, width=12, hidden=20, classes=5, seed=0,
                                    masked=False)
    want = grads(loss_fn)
    got = grads(aotgrad.compile(loss_fn))
    assert any(blocked), "no kernel of the step ran in blocks"
    for g, w in zip(got, want):
        assert_close(g, w, rtol=1e-5, atol=1e-6)


def _constants_graph():
    """A kernel whose constants (a full, a shifted full, a signed zero) feed values of its
    input, and a scalar computed from an input (not a constant: made every call)."""
    b = GraphBuilder("consts")
    x = b.add_input(Aval((40, 24), dt.float32), "x")
    s = b.add_input(Aval((), dt.float32), "s")
    with b:
        two = prims.full(shape=(), value=2.0, dtype=dt.float32)
        c = prims.add(two, prims.full(shape=(), value=0.25, dtype=dt.float32))  # 2.25
        k = prims.mul(s, c)                                     # varies with s
        y = prims.add(prims.mul(x, prims.broadcast_in_dim(c, shape=(40, 24), dims=())),
                      prims.broadcast_in_dim(k, shape=(40, 24), dims=()))
        z = prims.mul(prims.full(shape=(40, 24), value=-0.0, dtype=dt.float32), x)
    b.graph.outputs = [y, z]
    return b.graph


@pytest.mark.parametrize("whole", [False, True])
def test_a_kernels_constants_are_made_once_and_its_inputs_each_call(numpy_tier, monkeypatch,
                                                                   whole):
    g = _constants_graph()
    prog = compile_graph(g)
    refs = _refs(prog)
    if whole:
        for r in refs:
            r.blocks = None
    made = []
    real = first_tier._evaluate
    monkeypatch.setattr(first_tier, "_evaluate",
                        lambda nodes, env, how=None: (made.extend(
                            n for n in nodes
                            if n.prim is prims.full and n.params["shape"] == ()),
                            real(nodes, env, how))[1])
    for s in (1.0, -3.0, 0.5):
        x = RNG.normal(size=(40, 24)).astype(np.float32)
        x[0, :3] = [0.0, -1.0, 1.0]
        args = [x, np.float32(s)]
        want = evaluate(g, args)
        got = prog(*args)
        for a, e in zip(got, want):
            assert_close(a, e, rtol=1e-6, atol=0)
            # -0.0 * 1.0 is -0.0 and -0.0 * -1.0 is 0.0: the signed zero was kept as such
            assert np.array_equal(np.signbit(np.asarray(a)), np.signbit(e))
    # the scalar fulls (and the sum of two of them) were made at the first call only
    assert made and len(made) == len(set(made))


def test_full_keeps_apart_values_that_compare_equal():
    f32 = dt.float32
    assert np.signbit(row_blocks._full(shape=(3,), value=-0.0, dtype=f32)).all()
    assert not np.signbit(row_blocks._full(shape=(3,), value=0.0, dtype=f32)).any()
    assert row_blocks._full(shape=(2,), value=True, dtype=dt.bool_).dtype == np.bool_
    assert row_blocks._full(shape=(2,), value=1, dtype=f32).dtype == np.float32
    nan = row_blocks._full(shape=(2, 2), value=float("nan"), dtype=f32)
    assert np.isnan(nan).all() and nan.shape == (2, 2)
    with pytest.raises(ValueError):
        row_blocks._full(shape=(2,), value=1.0, dtype=f32)[0] = 5.0    # read-only


@pytest.mark.parametrize("whole", [False, True])
def test_nan_and_inf_come_silently_as_in_eager(numpy_tier, whole):
    """log of a negative, 0/0, 1/0 and exp overflow give nan and inf without a warning
    (the impls PyTorch keeps silent run bare under one errstate per call), in blocks and
    whole, with the reference's values."""
    b = GraphBuilder("quiet")
    x = b.add_input(Aval((40, 24), dt.float32), "x")
    y = b.add_input(Aval((40, 24), dt.float32), "y")
    with b:
        out = [prims.log(x), prims.div(x, y), prims.exp(prims.mul(x, y)),
               prims.sqrt(prims.neg(prims.abs(x)))]
    b.graph.outputs = out
    prog = compile_graph(b.graph)
    if whole:
        for r in _refs(prog):
            r.blocks = None
    a = RNG.normal(size=(40, 24)).astype(np.float32) * 50
    c = RNG.normal(size=(40, 24)).astype(np.float32) * 50
    a[0, :3], c[0, :3] = [-1.0, 0.0, 1.0], [1.0, 0.0, 0.0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = [np.array(v) for v in prog(a, c)]
    with np.errstate(all="ignore"):
        want = evaluate(b.graph, [a, c])
    for g, w in zip(got, want):
        assert_close(g, w, rtol=1e-6, atol=0, equal_nan=True)
    assert np.isnan(got[0][0, 0]) and np.isnan(got[1][0, 1]) and np.isinf(got[1][0, 2])


def _after_rows_graph():
    """(6, 5, 8): a loss's mean (its sum over every axis divided by its count), a column sum
    scaled by a whole value, a max over the rows minus their sum, and a sum over the rows
    that is an output and read after the rows too: each runs after the rows are summed."""
    b = GraphBuilder("after rows")
    x = b.add_input(Aval((6, 5, 8), dt.float32), "x")
    y = b.add_input(Aval((8,), dt.float32), "y")
    shape = (6, 5, 8)
    with b:
        t = prims.add(x, prims.broadcast_in_dim(y, shape=shape, dims=(2,)))
        sq = prims.mul(t, t)
        mean = prims.div(prims.reduce_sum(sq, dims=(0, 1, 2)),
                         prims.full(shape=(), value=240.0, dtype=dt.float32))
        cols = prims.reduce_sum(t, dims=(0, 1))
        scaled = prims.mul(cols, y)
        spread = prims.sub(prims.reduce_max(t, dims=(0, 1)), cols)
    b.graph.outputs = [mean, cols, scaled, spread, sq]
    return b.graph


def _after_rows_inputs():
    x = RNG.normal(size=(6, 5, 8)).astype(np.float32)
    x[2, 3, :3] = [np.inf, -0.0, 1e-40]           # an inf column: its sums and spread too
    return [x, RNG.uniform(-1, 1, (8,)).astype(np.float32)]


def test_values_made_of_sums_over_the_rows_run_after_the_rows(numpy_tier):
    g, args = _after_rows_graph(), _after_rows_inputs()
    prog = compile_graph(g)
    blocked = [r for r in _refs(prog) if r.blocks is not None]
    # (the scheduler may leave the small nodes after a column sum to a kernel of their own)
    assert prims.div in {n.prim for r in blocked for n in r.blocks.after}
    got = [np.array(a) for a in prog(*args)]
    for r in _refs(prog):
        r.blocks = None
    whole = [np.array(a) for a in prog(*args)]
    for a, w, e in zip(got, whole, evaluate(g, args)):
        assert a.dtype == w.dtype == e.dtype
        assert_close(a, w, rtol=1e-6, atol=1e-6, equal_nan=True)
        assert_close(a, e, rtol=1e-6, atol=1e-6, equal_nan=True)


def test_a_value_of_the_rows_made_of_their_sum_runs_whole(numpy_tier):
    """x / sum(x) over every element: its rows need the sum of all of them first."""
    b = GraphBuilder("normalised")
    x = b.add_input(Aval((12, 6), dt.float32), "x")
    with b:
        e = prims.exp(x)
        total = prims.reduce_sum(e, dims=(0, 1))
        out = prims.div(e, prims.broadcast_in_dim(total, shape=(12, 6), dims=()))
    b.graph.outputs = [out, total]
    a = RNG.normal(size=(12, 6)).astype(np.float32)
    prog = compile_graph(b.graph)
    assert all(r.blocks is None and r.program is None for r in _refs(prog))
    for g, w in zip(prog(a), evaluate(b.graph, [a])):
        assert_close(g, w, rtol=1e-6, atol=1e-7)
