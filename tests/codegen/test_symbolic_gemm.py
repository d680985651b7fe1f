"""Products with symbolic sizes run on the BLAS schedule (gemm_threads / gemm_serial, row or
column slabs) with arguments worked out per call, equal to numpy at every size."""
import functools

import numpy as np
import pytest

from aotgrad.codegen import CompiledGraph, blas, compile_graph
from aotgrad.codegen.gemm_plan import SymbolicGemm
from aotgrad.ir import prims
from aotgrad.ir import dtypes as dt
from aotgrad.ir.core import evaluate
from aotgrad.testing import assert_close
from symbolic_graphs import build as _build

build = functools.partial(_build, hint=64)   # (products large enough for the slabs)

pytestmark = [pytest.mark.skipif(not blas.available(), reason="no BLAS for gemm_threads"),
              pytest.mark.usefixtures("module_cache_dir")]


def run_sizes(graph, shapes, sizes, dtype=np.float32):
    prog = compile_graph(graph)
    assert isinstance(prog, CompiledGraph), prog.report()
    rng = np.random.default_rng(0)
    for size in sizes:
        args = [rng.uniform(-1, 1, tuple(size if d == "n" else d for d in s)).astype(dtype)
                for s in shapes]
        for _ in range(2):   # the second call is served from the per-size cache
            got = prog(*args, (size,))
            ref = evaluate(graph, args, values={"s0": size})
            for g, r in zip(got, ref):
                assert g.dtype == np.asarray(r).dtype and g.shape == np.shape(r)
                assert_close(g, r, rtol=2e-4, atol=2e-4, equal_nan=True)
    plans = [v for v in prog.plan.bound_kernels[-1][0].values() if isinstance(v, SymbolicGemm)]
    return prog, plans


def kinds(plan):
    """size -> 'matmul' | 'serial' | 'parallel' for the sizes a plan has served."""
    out = {}
    for values, args in plan._cache.items():
        out[values[0]] = "matmul" if args is None else "serial" if args[0] else "parallel"
    return out


def test_rows_product_serial_parallel_and_matmul_by_size():
    def f(n, x, w):
        return prims.dot_general(prims.exp(x), w, contract=((1,), (0,)), batch=((), ()))
    shapes = (("n", 256), (256, 256))
    # 3 rows: below SPLIT_MIN (np.matmul); 8: serial gemm; 100: over the threads
    prog, plans = run_sizes(build(f, *shapes), shapes, (3, 8, 100))
    assert len(plans) == 1
    k = kinds(plans[0])
    assert k[3] == "matmul" and k[8] == "serial" and k[100] == "parallel"


def test_transposed_operand_and_float64():
    def f(n, x, w):   # x^T @ w over the symbolic dim: the weight-gradient form
        return prims.dot_general(x, w, contract=((0,), (0,)), batch=((), ()))
    shapes = (("n", 128), ("n", 160))
    _, plans = run_sizes(build(f, *shapes, dtype=dt.float64), shapes, (5, 33, 300),
                         dtype=np.float64)
    assert plans and "parallel" in kinds(plans[0]).values()


def test_batched_heads_product():
    def f(n, q, k):   # a stack of (n x 32) @ (32 x n) products, one per head
        return prims.dot_general(q, k, contract=((2,), (2,)), batch=((0,), (0,)))
    shapes = ((4, "n", 32), (4, "n", 32))
    _, plans = run_sizes(build(f, *shapes), shapes, (7, 64, 200))
    assert plans and {"serial", "parallel"} <= set(kinds(plans[0]).values())


def _child(prog, args, q):
    try:
        q.put(prog(*args)[0])
    except BaseException as e:
        q.put(repr(e))


def test_a_forked_child_runs_a_symbolic_product():
    """The per-call gemm runs on the child's own threads, as the static one does."""
    import multiprocessing as mp
    if "fork" not in mp.get_all_start_methods():
        pytest.skip("no fork here")

    def f(n, x, w):
        return prims.dot_general(x, w, contract=((1,), (0,)), batch=((), ()))
    shapes = (("n", 256), (256, 256))
    prog, plans = run_sizes(build(f, *shapes), shapes, (100,))
    assert kinds(plans[0])[100] == "parallel"
    rng = np.random.default_rng(2)
    args = [rng.uniform(-1, 1, (100, 256)).astype(np.float32),
            rng.uniform(-1, 1, (256, 256)).astype(np.float32), (100,)]
    want = prog(*args)[0]
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_child, args=(prog, args, q))
    p.start()
    got = q.get(timeout=120)
    p.join(60)
    assert p.exitcode == 0
    np.testing.assert_array_equal(got, want)
