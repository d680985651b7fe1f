"""codegen with symbolic sizes: one compiled program (one set of kernels) serves every value
of its symbols, equal to the numpy reference at each size."""

import numpy as np
import pytest

from aotgrad.codegen import CompiledGraph, compile_graph, symbols_of
from aotgrad.ir import Aval, GraphBuilder, prims
from aotgrad.ir import dtypes as dt
from aotgrad.ir.core import evaluate
from aotgrad.testing import assert_close
from symbolic_graphs import build

F32, F64, I64 = dt.float32, dt.float64, dt.int64
SIZES = (3, 8, 17, 64)

pytestmark = pytest.mark.usefixtures("module_cache_dir")




def check(graph, *shapes, sizes=SIZES, dtype=np.float32, rtol=1e-5):
    prog = compile_graph(graph)
    assert symbols_of(graph) == ("s0",)
    assert isinstance(prog, CompiledGraph), prog.report()   # one program, not one per size
    rng = np.random.default_rng(0)
    for size in sizes:
        args = [rng.uniform(-2, 2, tuple(size if d == "n" else d for d in s)).astype(dtype)
                for s in shapes]
        got = prog(*args, (size,))
        ref = evaluate(graph, args, values={"s0": size})
        assert len(got) == len(ref)
        for g, r in zip(got, ref):
            assert g.shape == np.shape(r) and g.dtype == np.asarray(r).dtype
            assert_close(g, r, rtol=rtol, atol=1e-6, equal_nan=True)
    # one machine-code specialisation per compiled kernel: no size compiled a new one (a
    # size variant no call needed yet is not compiled: codegen.size_variants)
    fns = [fn for fn, _ in prog.plan.kernel_fns.values()] + \
        [fn for fn, _ in prog.plan.small_kernels.values()]
    for fn in fns:
        assert not hasattr(fn, "signatures") or len(fn.signatures) == 1
    return prog


def test_pointwise_rows_and_product():
    def f(n, x, w):
        y = prims.exp(x)
        return prims.reduce_sum(y, dims=(1,)), prims.dot_general(
            y, w, contract=((1,), (0,)), batch=((), ()))
    prog = check(build(f, ("n", 16), (16, 4)), ("n", 16), (16, 4))
    assert "s0" not in "".join(s.body for s in prog.specs.values())


def test_column_sums_and_broadcast_of_static_against_symbolic():
    def f(n, x, b):
        y = prims.mul(x, prims.broadcast_in_dim(b, shape=(n, 5), dims=(1,)))
        return prims.reduce_sum(y, dims=(0,)), prims.tanh(y)
    check(build(f, ("n", 5), (5,)), ("n", 5), (5,))


def test_mean_divisor_is_a_per_call_constant():
    def f(n, x):
        s = prims.reduce_sum(x, dims=(0,))
        d = prims.full(shape=(7,), value=n, dtype=F32)
        m = prims.div(s, d)
        c = prims.sub(x, prims.broadcast_in_dim(m, shape=(n, 7), dims=(1,)))
        return m, c
    check(build(f, ("n", 7)), ("n", 7))


def test_iota_and_causal_mask_with_symbolic_length():
    def f(n, x):
        i = prims.iota(shape=(n, n), dim=0, dtype=I64)
        j = prims.iota(shape=(n, n), dim=1, dtype=I64)
        keep = prims.ge(i, j)
        neg = prims.full(shape=(n, n), value=-1e9, dtype=F32)
        return prims.select(keep, x, neg) if hasattr(prims, "select") else \
            prims.where(keep, x, neg)
    check(build(f, ("n", "n")), ("n", "n"))


def test_slice_pad_and_concatenate_with_symbolic_bounds():
    def f(n, x):
        head = prims.slice(x, start=(1, 0), limit=(n, 3))            # [n-1, 3]
        padded = prims.pad(head, config=((0, 1, 0), (0, 0, 0)), value=0.5)  # [n, 3]
        joined = prims.concatenate(x, padded, dim=1)                   # [n, 6]
        return prims.mul(joined, joined), padded
    check(build(f, ("n", 3)), ("n", 3))


def test_batched_product_and_reshape():
    def f(n, a, b):
        p = prims.dot_general(a, b, contract=((2,), (1,)), batch=((0,), (0,)))  # [n, 4, 6]
        r = prims.reshape(p, shape=(n, 24))
        return prims.reduce_max(r, dims=(1,)), r
    check(build(f, ("n", 4, 5), ("n", 5, 6)), ("n", 4, 5), ("n", 5, 6))


def test_kernels_are_the_same_at_every_hint_and_served_from_memory():
    def f(n, x):
        return prims.reduce_sum(prims.mul(x, x), dims=(1,))
    first = compile_graph(build(f, ("n", 9), hint=8))
    again = compile_graph(build(f, ("n", 9), hint=40))
    assert [s.body for s in first.specs.values()] == [s.body for s in again.specs.values()]
    assert again.cache_status == "memory"


def test_static_graph_is_called_without_values():
    b = GraphBuilder("forward")
    x = b.add_input(Aval((4, 3), F32), "x")
    with b:
        b.graph.outputs = [prims.exp(x)]
    prog = compile_graph(b.graph)
    assert symbols_of(b.graph) == ()
    assert "_syms" not in prog.plan.source
    a = np.ones((4, 3), np.float32)
    assert_close(prog(a)[0], np.exp(a), rtol=1e-7, atol=0, equal_nan=True)


def test_profiled_events_at_the_call_sizes():
    def f(n, x, w):
        return prims.dot_general(prims.exp(x), w, contract=((1,), (0,)), batch=((), ()))
    prog = compile_graph(build(f, ("n", 16), (16, 4)))
    x, w = np.ones((5, 16), np.float32), np.ones((16, 4), np.float32)
    outs, events = prog.plan.profiled(x, w, (5,))
    assert_close(outs[0], np.exp(x) @ w, rtol=1e-6, atol=0, equal_nan=True)
    matmul = [ev for ev, _, _ in events if ev.name.startswith("matmul")]
    assert matmul and matmul[0].flops == 2 * 5 * 16 * 4
    assert all(type(ev.bytes) is int for ev, _, _ in events)


def test_pad_read_at_a_fixed_row_that_is_data_or_fill_depending_on_the_size():
    # row 4 of x padded by 8 rows is x's row when n > 4, else the fill
    def f(n, x):
        p = prims.pad(x, config=((0, 8, 0), (0, 0, 0)), value=0.5)
        return prims.exp(prims.slice(p, start=(4, 0), limit=(5, 3)))
    check(build(f, ("n", 3)), ("n", 3), sizes=(3, 4, 5, 8))


def test_a_kernel_that_needs_a_size_in_its_text_is_compiled_per_size(monkeypatch):
    from aotgrad.codegen import size_variants
    from aotgrad.codegen.index import SymbolicSizeInKernel
    from aotgrad.ir.symbolic import is_static_shape
    emit = size_variants.emit_kernel

    def refusing(scheduler, kt, helpers, parallel=None):
        if not is_static_shape(kt.domain):
            raise SymbolicSizeInKernel("test: this kernel takes no symbolic size")
        return emit(scheduler, kt, helpers, parallel)
    monkeypatch.setattr(size_variants, "emit_kernel", refusing)

    def f(n, x):
        return prims.reduce_sum(prims.exp(x), dims=(1,))
    g = build(f, ("n", 3))
    prog = compile_graph(g)
    assert not isinstance(prog, CompiledGraph)
    assert "compiled per size" in prog.report()
    for size in (3, 8, 5, 3):
        x = np.arange(size * 3, dtype=np.float32).reshape(size, 3) / 10
        assert_close(prog(x, (size,))[0], evaluate(g, [x], values={"s0": size})[0], rtol=1e-6,
                     atol=0, equal_nan=True)
        assert_close(prog.plan.runner(0)(x, (size,))[0], evaluate(g, [x], values={"s0": size})[0],
                     rtol=1e-6, atol=0, equal_nan=True)
    assert sorted(prog.plan.programs) == [(3,), (5,), (8,)]
