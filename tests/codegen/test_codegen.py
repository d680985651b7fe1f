"""codegen: compiled programs against the numpy reference (ir.evaluate)."""
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from aotgrad.ir import Aval, GraphBuilder, evaluate, prims
from aotgrad.ir import dtypes as dt
from aotgrad.ir.prims import PRIMS
from aotgrad.testing import assert_close

F32, F64 = dt.float32, dt.float64

pytestmark = pytest.mark.usefixtures("module_cache_dir")


def compile_graph(g, **kw):
    from aotgrad.codegen import compile_graph as cg
    return cg(g, **kw)


def build(fn, *avals, name="forward"):
    b = GraphBuilder(name)
    xs = [b.add_input(Aval(s, d), f"x{i}") for i, (s, d) in enumerate(avals)]
    with b:
        outs = fn(*xs)
    b.graph.outputs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    return b.graph


def full(shape, v, d=F32):
    return prims.full(shape=tuple(shape), value=v, dtype=d)


def bcast(x, shape, dims):
    return prims.broadcast_in_dim(x, shape=tuple(shape), dims=tuple(dims))


def rand(shape, d=F32, seed=0, lo=-2.0, hi=2.0):
    rng = np.random.default_rng(seed)
    if d is dt.bool_:
        return rng.random(shape) < 0.5
    if dt.is_integer(d):
        return rng.integers(-5, 6, shape).astype(d.np)
    return rng.uniform(lo, hi, shape).astype(d.np)


def check(g, arrays, rtol=None, atol=None, **kw):
    prog = compile_graph(g, **kw)
    got = prog(*arrays)
    ref = evaluate(g, arrays)
    assert len(got) == len(ref)
    for a, r in zip(got, ref):
        r = np.asarray(r)
        assert a.shape == r.shape, (a.shape, r.shape)
        assert a.dtype == r.dtype, (a.dtype, r.dtype)
        if r.dtype.kind == "f":
            tol = rtol if rtol is not None else (2e-5 if r.dtype == np.float32 else 1e-12)
            assert_close(a, r, rtol=tol, atol=atol if atol is not None else tol, equal_nan=True)
        else:
            np.testing.assert_array_equal(a, r)
    return prog


# --- every pointwise prim ---------------------------------------------------------------
UNARY_DOMAIN = {"log": (0.01, 5), "log1p": (-0.9, 5), "sqrt": (0.01, 5), "rsqrt": (0.01, 5),
                "reciprocal": (0.5, 3)}
UNARY_F = ["neg", "abs", "exp", "log", "log1p", "expm1", "sqrt", "rsqrt", "sin", "cos", "tanh",
           "logistic", "erf", "sign", "floor", "ceil", "reciprocal"]
BINARY_F = ["add", "sub", "mul", "div", "pow", "maximum", "minimum", "atan2"]
CMP = ["eq", "ne", "lt", "le", "gt", "ge"]


def test_every_pointwise_prim_has_a_template():
    """Every prim a kernel computes in its loop (pointwise and creation prims) has a
    template, or is named as run by its reference implementation; the table is keyed by
    the Prim object (a name would never be looked up) and holds no other prim (the other
    kinds are library, view or reduction steps of the scheduler)."""
    from aotgrad.codegen.templates import REFERENCE_POINTWISE, TEMPLATES
    from aotgrad.ir.core import Prim
    from aotgrad.ir.tags import Tag
    in_loop = (Tag.POINTWISE, Tag.CREATION)
    missing = [p.name for p in PRIMS.values() if p.kind in in_loop
               and p not in TEMPLATES and p not in REFERENCE_POINTWISE]
    assert not missing, missing
    keys = list(TEMPLATES) + list(REFERENCE_POINTWISE)
    assert all(isinstance(k, Prim) for k in keys), [k for k in keys if not isinstance(k, Prim)]
    assert all(k.kind in in_loop for k in keys), [k for k in keys if k.kind not in in_loop]


@pytest.fixture(scope="module")
def unary_prog():
    def fn(x):
        return [getattr(prims, n)(x) for n in UNARY_F]
    return fn


@pytest.mark.parametrize("d", [F32, F64])
def test_unary_prims(d):
    shape = (3, 37)
    outs = []
    b = GraphBuilder("u")
    x = b.add_input(Aval(shape, d), "x")
    xp = b.add_input(Aval(shape, d), "xp")
    with b:
        for n in UNARY_F:
            outs.append(getattr(prims, n)(xp if n in UNARY_DOMAIN else x))
    b.graph.outputs = outs
    xa = rand(shape, d, 1, -3, 3)
    xa[0, :4] = [0.0, -0.0, 0.5, -0.5]
    xpa = rand(shape, d, 2, 0.05, 4)
    check(b.graph, [xa, xpa], rtol=1e-5 if d is F32 else 1e-12)


@pytest.mark.parametrize("d", [F32, F64])
def test_binary_and_compare_prims(d):
    shape = (5, 33)
    b = GraphBuilder("b")
    x = b.add_input(Aval(shape, d), "x")
    y = b.add_input(Aval(shape, d), "y")
    with b:
        outs = [getattr(prims, n)(x, y) for n in BINARY_F + CMP]
        p = prims.gt(x, y)
        outs += [prims.where(p, x, y), prims.logical_not(p),
                 prims.logical_and(p, prims.lt(x, full(shape, 0.5, d))),
                 prims.logical_or(p, prims.lt(x, full(shape, 0.5, d))),
                 prims.convert_element_type(p, dtype=d),
                 prims.convert_element_type(x, dtype=dt.int32),
                 prims.pow(x, full(shape, 2.0, d)), prims.pow(y, full(shape, 0.5, d))]
    b.graph.outputs = outs
    xa, ya = rand(shape, d, 3, 0.1, 3), rand(shape, d, 4, 0.1, 3)
    ya[0, :3] = xa[0, :3]
    check(b.graph, [xa, ya], rtol=1e-5 if d is F32 else 1e-12)


def test_integer_and_bool_pointwise():
    shape = (4, 9)
    g = build(lambda a, b: [prims.add(a, b), prims.mul(a, b), prims.sub(a, b),
                            prims.maximum(a, b), prims.neg(a), prims.abs(a), prims.sign(a),
                            prims.eq(a, b), prims.convert_element_type(a, dtype=F32)],
              (shape, dt.int64), (shape, dt.int64))
    check(g, [rand(shape, dt.int64, 1), rand(shape, dt.int64, 2)])


def test_nan_inf_preserved():
    g = build(lambda x: [prims.exp(x), prims.tanh(x), prims.maximum(x, full((8,), 0.0)),
                         prims.reduce_max(x, dims=(0,)), prims.reduce_sum(x, dims=(0,))],
              ((8,), F32))
    xa = np.array([np.nan, 1, np.inf, -np.inf, 0, 2, -3, 4], np.float32)
    with np.errstate(all="ignore"):
        check(g, [xa])
    xb = np.array([1, 5, np.inf, 2, 0, 2, -3, 4], np.float32)
    check(g, [xb])


# --- layouts: broadcast / transpose / slice / rev / reshape -------------------------------
def test_broadcast_transpose_slice_rev():
    def fn(x, b, y):
        xb = prims.add(x, bcast(b, (6, 10), (1,)))                  # bias over rows
        yt = prims.transpose(y, perm=(1, 0))                         # (10,6) -> (6,10)
        s = prims.slice(x, start=(1, 2), limit=(5, 10), strides=(2, 3))
        r = prims.rev(x, dims=(1,))
        col = bcast(prims.reduce_sum(x, dims=(1,)), (6, 10), (0,))
        return [prims.mul(xb, yt), s, prims.add(r, col), prims.exp(yt)]
    g = build(fn, ((6, 10), F32), ((10,), F32), ((10, 6), F32))
    check(g, [rand((6, 10)), rand((10,), seed=1), rand((10, 6), seed=2)])


def test_reshape_unit_and_general():
    def fn(x):
        u = prims.reshape(prims.exp(x), shape=(4, 1, 6))
        gen = prims.reshape(prims.mul(x, x), shape=(6, 4))
        return [prims.add(u, u), prims.tanh(gen), prims.reshape(x, shape=(24,))]
    g = build(fn, ((4, 6), F32))
    check(g, [rand((4, 6))])


def test_scalar_graph_and_3d_broadcast():
    def fn(s, x):
        sb = bcast(s, (2, 3, 4), ())
        m = bcast(prims.reduce_max(x, dims=(2,)), (2, 3, 4), (0, 1))
        return [prims.mul(prims.sub(x, m), sb), prims.mul(s, s)]
    g = build(fn, ((), F32), ((2, 3, 4), F32))
    check(g, [np.array(1.5, np.float32), rand((2, 3, 4))])


def test_iota_and_full():
    def fn(x):
        io = prims.iota(shape=(5, 7), dim=1, dtype=F32)
        return [prims.add(x, io), prims.iota(shape=(3, 2), dim=0, dtype=dt.int64)]
    g = build(fn, ((5, 7), F32))
    check(g, [rand((5, 7))])


# --- reductions ---------------------------------------------------------------------------
@pytest.mark.parametrize("dims", [(0,), (1,), (2,), (1, 2), (0, 1), (0, 2), (0, 1, 2)])
def test_reductions_over_dims(dims):
    def fn(x):
        e = prims.exp(x)
        return [prims.reduce_sum(e, dims=dims), prims.reduce_max(x, dims=dims),
                prims.reduce_min(x, dims=dims), prims.reduce_prod(prims.mul(x, full((3, 5, 6),
                                                                                    0.5)),
                                                                  dims=dims)]
    g = build(fn, ((3, 5, 6), F32))
    check(g, [rand((3, 5, 6))])


def test_argmax_argmin_and_int_sum():
    def fn(x, i):
        return [prims.argmax(x, dim=1), prims.argmin(x, dim=0), prims.reduce_sum(i, dims=(1,)),
                prims.reduce_max(i, dims=(0,))]
    g = build(fn, ((7, 9), F32), ((7, 9), dt.int64))
    check(g, [rand((7, 9)), rand((7, 9), dt.int64)])


def test_large_sums_are_accurate():
    g = build(lambda x: [prims.reduce_sum(x, dims=(0,)), prims.reduce_sum(x, dims=(1,))],
              ((1000, 3000), F32))
    x = rand((1000, 3000), lo=0, hi=1)
    prog = compile_graph(g)
    a, b = prog(x)
    x64 = x.astype(np.float64)
    assert_close(a, x64.sum(0), rtol=1e-6, atol=0, equal_nan=True, check_dtype=False)
    assert_close(b, x64.sum(1), rtol=1e-6, atol=0, equal_nan=True, check_dtype=False)


# --- fused row patterns -------------------------------------------------------------------
def softmax_graph(R, C, d=F32, log=False):
    def fn(x):
        m = prims.reduce_max(x, dims=(1,))
        z = prims.sub(x, bcast(m, (R, C), (0,)))
        e = prims.exp(z)
        s = prims.reduce_sum(e, dims=(1,))
        if log:
            return prims.sub(z, bcast(prims.log(s), (R, C), (0,)))
        return prims.div(e, bcast(s, (R, C), (0,)))
    return build(fn, ((R, C), d))


def layernorm_graph(R, C, d=F32):
    def fn(x, gm, bt):
        mu = prims.div(prims.reduce_sum(x, dims=(1,)), full((R,), C, d))
        xc = prims.sub(x, bcast(mu, (R, C), (0,)))
        var = prims.div(prims.reduce_sum(prims.mul(xc, xc), dims=(1,)), full((R,), C, d))
        rstd = prims.rsqrt(prims.add(var, full((R,), 1e-5, d)))
        xh = prims.mul(xc, bcast(rstd, (R, C), (0,)))
        y = prims.add(prims.mul(xh, bcast(gm, (R, C), (1,))), bcast(bt, (R, C), (1,)))
        return [y, mu, rstd]
    return build(fn, ((R, C), d), ((C,), d), ((C,), d))


def layernorm_backward_graph(R, C, d=F32):
    def fn(dy, xh, rstd, gm):
        db = prims.reduce_sum(dy, dims=(0,))
        dg = prims.reduce_sum(prims.mul(dy, xh), dims=(0,))
        g = prims.mul(dy, bcast(gm, (R, C), (1,)))
        a = prims.div(prims.reduce_sum(g, dims=(1,)), full((R,), C, d))
        b = prims.div(prims.reduce_sum(prims.mul(g, xh), dims=(1,)), full((R,), C, d))
        dx = prims.mul(bcast(rstd, (R, C), (0,)),
                       prims.sub(prims.sub(g, bcast(a, (R, C), (0,))),
                                 prims.mul(xh, bcast(b, (R, C), (0,)))))
        return [dx, dg, db]
    return build(fn, ((R, C), d), ((R, C), d), ((R,), d), ((C,), d))


def cross_entropy_graph(N, C, d=F32):
    def fn(logits, labels):
        m = prims.reduce_max(logits, dims=(1,))
        z = prims.sub(logits, bcast(m, (N, C), (0,)))
        lse = prims.log(prims.reduce_sum(prims.exp(z), dims=(1,)))
        onehot = prims.convert_element_type(
            prims.eq(prims.iota(shape=(N, C), dim=1, dtype=dt.int64),
                     bcast(labels, (N, C), (0,))), dtype=d)
        picked = prims.reduce_sum(prims.mul(z, onehot), dims=(1,))
        loss = prims.div(prims.reduce_sum(prims.sub(lse, picked), dims=(0,)), full((), N, d))
        p = prims.exp(prims.sub(z, bcast(lse, (N, C), (0,))))
        grad = prims.div(prims.sub(p, onehot), full((N, C), N, d))
        return [loss, grad]
    return build(fn, ((N, C), d), ((N,), dt.int64))


@pytest.mark.parametrize("d", [F32, F64])
def test_softmax_and_log_softmax(d):
    x = rand((64, 130), d)
    prog = check(softmax_graph(64, 130, d), [x])
    assert len(prog.kernels()) == 1, prog.report()
    check(softmax_graph(64, 130, d, log=True), [x])


def test_layernorm_forward_backward():
    R, C = 48, 96
    x, gm, bt = rand((R, C)), rand((C,), seed=1), rand((C,), seed=2)
    prog = check(layernorm_graph(R, C), [x, gm, bt], rtol=1e-4, atol=1e-5)
    assert len(prog.kernels()) == 1, prog.report()
    dy, xh, rstd = rand((R, C), seed=3), rand((R, C), seed=4), rand((R,), seed=5, lo=0.5)
    prog = check(layernorm_backward_graph(R, C), [dy, xh, rstd, gm], rtol=1e-4, atol=1e-5)
    assert len(prog.kernels()) <= 2, prog.report()


def test_cross_entropy():
    N, C = 32, 10
    logits = rand((N, C), lo=-5, hi=5)
    labels = np.random.default_rng(0).integers(0, C, N).astype(np.int64)
    check(cross_entropy_graph(N, C), [logits, labels], rtol=1e-5, atol=1e-6)


# --- contractions and reference steps -------------------------------------------------------
def test_dot_general_chain_and_batched():
    def fn(x, w, b, q, k):
        h = prims.dot_general(x, w, contract=((1,), (1,)))                       # x @ w.T
        h = prims.tanh(prims.add(h, bcast(b, (8, 16), (1,))))
        o = prims.dot_general(h, w, contract=((1,), (0,)))                        # (8,12)
        s = prims.dot_general(q, k, contract=((2,), (2,)), batch=((0,), (0,)))    # (2,5,5)
        t = prims.dot_general(q, k, contract=((1,), (1,)), batch=((0,), (0,)))    # (2,4,4)
        return [o, prims.exp(s), t, h]
    g = build(fn, ((8, 12), F32), ((16, 12), F32), ((16,), F32), ((2, 5, 4), F32),
              ((2, 5, 4), F32))
    check(g, [rand((8, 12)), rand((16, 12), seed=1), rand((16,), seed=2),
              rand((2, 5, 4), seed=3), rand((2, 5, 4), seed=4)], rtol=1e-4, atol=1e-5)


def test_reference_steps_random_and_index():
    def fn(x, idx, seed):
        u = prims.uniform(seed, shape=(4, 6), dtype=F32)
        gth = prims.gather(prims.exp(x), idx, dim=1)
        sa = prims.scatter_add(x, idx, gth, dim=1)
        cat = prims.concatenate(x, prims.mul(x, x), dim=0)
        return [prims.add(u, x), gth, sa, prims.cumsum(x, dim=1), cat,
                prims.pad(x, config=((1, 0, 0), (0, 2, 1)), value=0.0)]
    g = build(fn, ((4, 6), F32), ((4, 6), dt.int64), ((), dt.int64))
    idx = np.random.default_rng(0).integers(0, 6, (4, 6)).astype(np.int64)
    prog = check(g, [rand((4, 6)), idx, np.array(7, np.int64)])
    assert "reference" in prog.report()


# --- programs, buffers, batch sizes, cache ---------------------------------------------------
def mlp_graph(B):
    def fn(x, w1, w2):
        h = prims.dot_general(x, w1, contract=((1,), (1,)))
        h = prims.maximum(h, full((B, 32), 0.0))
        o = prims.dot_general(h, w2, contract=((1,), (1,)))
        return [prims.reduce_sum(prims.mul(o, o), dims=(0, 1)), h]
    return build(fn, ((B, 16), F32), ((32, 16), F32), ((8, 32), F32))


def test_new_batch_size_reuses_kernels():
    p1 = check(mlp_graph(4), [rand((4, 16)), rand((32, 16), seed=1), rand((8, 32), seed=2)],
               rtol=1e-4)
    p2 = check(mlp_graph(9), [rand((9, 16)), rand((32, 16), seed=1), rand((8, 32), seed=2)],
               rtol=1e-4)
    assert p1.source == p2.source
    assert p2.cache_status == "memory"


def test_outputs_fresh_each_call_and_workspace_reused():
    g = build(lambda x: [prims.mul(prims.exp(prims.tanh(x)), x)], ((50, 50), F32))
    prog = compile_graph(g)
    x = rand((50, 50))
    a = prog(x)[0]
    b = prog(x * 2)[0]
    assert not np.shares_memory(a, b)
    assert_close(a, evaluate(g, [x])[0], rtol=1e-5, atol=0, equal_nan=True)
    with pytest.raises(ValueError):
        prog(rand((5, 5)))


def test_report_lists_kernels_refusals_buffers():
    prog = compile_graph(layernorm_backward_graph(16, 8))
    rep = prog.report()
    assert "kernel" in rep and "refused fusions" in rep and "buffers" in rep
    assert "njit" in prog.source or "_jit" in prog.source


def test_identical_kernels_compile_once():
    def fn(x, y):
        return [prims.tanh(prims.mul(x, x)), prims.tanh(prims.mul(y, y))]
    prog = compile_graph(build(fn, ((3, 40), F32), ((5, 7), F32)))
    names = {s.name for s in prog.specs.values()}
    assert len(prog.specs) == 2 and len(names) == 1


def test_cache_info_and_clear():
    from aotgrad.codegen import cache_clear, cache_info
    compile_graph(build(lambda x: [prims.sin(prims.exp(x))], ((3,), F32)))
    info = cache_info()
    assert info["modules"] >= 1 and info["bytes"] > 0
    assert cache_clear() > 0
    assert cache_info()["modules"] == 0


_CHILD = textwrap.dedent("""
    import numpy as np
    from aotgrad.ir import Aval, GraphBuilder, prims
    from aotgrad.ir import dtypes as dt
    from aotgrad.codegen import compile_graph
    b = GraphBuilder("f"); x = b.add_input(Aval((10, 20), dt.float32), "x")
    with b:
        m = prims.reduce_max(x, dims=(1,))
        y = prims.exp(prims.sub(x, prims.broadcast_in_dim(m, shape=(10, 20), dims=(0,))))
    b.graph.outputs = [y]
    p = compile_graph(b.graph)
    out = p(np.ones((10, 20), np.float32))[0]
    assert np.allclose(out, 1.0)
    print("STATUS", p.cache_status)
""")


def _run_child(env):
    r = subprocess.run([sys.executable, "-c", _CHILD], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout.split("STATUS")[-1].strip()


def test_cache_hit_in_second_process_and_corruption(tmp_path):
    env = dict(os.environ, AOTGRAD_CACHE_DIR=str(tmp_path))
    assert _run_child(env) == "new"
    assert _run_child(env) == "disk"
    pyc = list((tmp_path / "__pycache__").glob("*.nbi"))
    assert pyc, "numba did not write its cache next to the module"
    # corrupt numba's index and data files and the module text: rebuilt, never a crash
    for p in (tmp_path / "__pycache__").iterdir():
        p.write_bytes(b"garbage")
    assert _run_child(env) in ("disk", "rebuilt")
    for p in tmp_path.glob("aotgrad_gen_*.py"):
        p.write_text(p.read_text()[:200])
    assert _run_child(env) == "rebuilt"
    assert _run_child(env) == "disk"


# --- regressions ------------------------------------------------------------------------------
def test_reduction_of_a_reference_step_output():
    """The input of a reduction is produced by another step (a gather): the kernel must read
    it as an array, not try to recompute it (was a KeyError in the emitter)."""
    N, C = 32, 10

    def fn(x, idx):
        g = prims.gather(prims.exp(x), idx, dim=1)                  # (N, 1), a ref step
        s = prims.reduce_sum(g, dims=(0, 1))
        return [prims.neg(prims.div(s, full((), float(N)))), prims.reduce_max(g, dims=(1,))]
    g = build(fn, ((N, C), F32), ((N, 1), dt.int64))
    idx = np.random.default_rng(0).integers(0, C, (N, 1)).astype(np.int64)
    check(g, [rand((N, C)), idx], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape", [(4, 1), (3, 5), (2, 3, 4)])
def test_full_reduction_epilogue_uses_the_result(shape):
    """A reduction over every dim (rows kernel with no row dims) whose result feeds a
    pointwise epilogue: the epilogue must run after the loop (was 'variable not defined')."""
    n = int(np.prod(shape))

    def fn(x, y, b):   # the broadcast bias keeps the dims from collapsing into one
        d = prims.sub(prims.add(x, bcast(b, shape, (len(shape) - 1,))), y)
        s = prims.reduce_sum(prims.mul(d, d), dims=tuple(range(len(shape))))
        m = prims.div(s, full((), float(n)))
        return [m, prims.add(m, prims.reduce_max(x, dims=tuple(range(len(shape)))))]
    g = build(fn, (shape, F32), (shape, F32), (shape[-1:], F32))
    x, y, b = rand(shape), rand(shape, seed=1), rand(shape[-1:], seed=2)
    check(g, [x, y, b], rtol=1e-5, atol=1e-6)
    assert np.isclose(compile_graph(g)(x, y, b)[0], np.mean((x + b - y) ** 2), rtol=1e-5)


def test_keepdim_row_statistics_fuse_into_the_row_kernel():
    """Layer-norm forward that also returns mean and rstd as (R, 1) (saved for backward):
    the (R, 1) values are per-row outputs of the same single kernel."""
    R, C = 24, 40

    def fn(x):
        mu = prims.reshape(prims.div(prims.reduce_sum(x, dims=(1,)), full((R,), float(C))),
                           shape=(R, 1))
        xc = prims.sub(x, bcast(mu, (R, C), (0, 1)))
        var = prims.reshape(prims.div(prims.reduce_sum(prims.mul(xc, xc), dims=(1,)),
                                      full((R,), float(C))), shape=(R, 1))
        rstd = prims.rsqrt(prims.add(var, full((R, 1), 1e-5)))
        return [prims.mul(xc, bcast(rstd, (R, C), (0, 1))), mu, rstd]
    g = build(fn, ((R, C), F32))
    x = rand((R, C))
    prog = check(g, [x], rtol=1e-5, atol=1e-5)
    assert len(prog.kernels()) == 1, prog.report()
    y, mu, rstd = prog(x)
    assert_close(mu[:, 0], x.mean(1), rtol=1e-5, atol=1e-6, equal_nan=True)
    assert_close(rstd[:, 0], 1 / np.sqrt(x.var(1) + 1e-5), rtol=1e-4, atol=0, equal_nan=True)


def test_parallel_full_reduction_of_a_2d_expression():
    """sum/max over every dim of f(x, bias) (dims do not collapse; large enough for prange):
    per-row partials combined; a NaN anywhere reaches the max."""
    R, C = 300, 512

    def fn(x, b):
        y = prims.tanh(prims.add(x, bcast(b, (R, C), (1,))))
        return [prims.reduce_sum(prims.mul(y, y), dims=(0, 1)), prims.reduce_max(y, dims=(0, 1))]
    g = build(fn, ((R, C), F32), ((C,), F32))
    x, b = rand((R, C)), rand((C,), seed=1)
    prog = check(g, [x, b], rtol=1e-5, atol=1e-5)
    assert any(s.parallel for s in prog.specs.values()), prog.source
    y = np.tanh(x.astype(np.float64) + b)
    s, m = prog(x, b)
    assert_close(s, (y * y).sum(), rtol=1e-5, atol=0, equal_nan=True, check_dtype=False)
    assert_close(m, y.max(), rtol=1e-6, atol=0, equal_nan=True, check_dtype=False)
    x[R - 1, 3] = np.nan
    assert np.isnan(prog(x, b)[1])


def test_tanh_and_logistic_derivatives_keep_relative_accuracy_when_saturated():
    """The VJP rules write tanh' as 1 - t*t and logistic' as s*(1 - s), which cancel in float32
    where t, s saturate (relative error ~1e-3 at |x| = 6). The emitter computes them from the
    same exponential as t and s (tanh_d_f32, logistic_c_f32): a few ulp everywhere."""
    n = 4096

    def fn(x):
        one = full((n,), 1.0)
        t = prims.tanh(x)
        s = prims.logistic(x)
        return [prims.mul(t, prims.sub(one, prims.mul(t, t))),
                prims.mul(s, prims.sub(one, s))]
    g = build(fn, ((n,), F32))
    x = np.linspace(-9, 9, n).astype(np.float32)
    prog = compile_graph(g)
    assert re.search(r"\b_tanh_d_f32\d+_x = ", prog.source) and \
        re.search(r"\b_logistic_c_f32\d+_x = ", prog.source), prog.source
    dt_, ds = prog(x)
    x64 = x.astype(np.float64)
    t64, s64 = np.tanh(x64), 1 / (1 + np.exp(-x64))
    ref_t, ref_s = t64 * (1 - t64 * t64), s64 * (1 - s64)
    assert np.max(np.abs(dt_ - ref_t) / np.abs(ref_t)) < 2e-6
    assert np.max(np.abs(ds - ref_s) / np.abs(ref_s)) < 2e-6
    # the naive float32 formula is far off there (what the rewrite is for)
    t32 = np.tanh(x)
    assert np.max(np.abs(t32 * (1 - t32 * t32) - ref_t) / np.abs(ref_t)) > 1e-3


def ce_gather_graphs(N, C):
    """Cross-entropy as the tracer emits it: log-softmax, gather of the label column with an
    (N, 1) index, mean; backward: scatter_add of the upstream gradient into zeros."""
    def fwd(x, lab):
        m = prims.reduce_max(x, dims=(1,))
        z = prims.sub(x, bcast(m, (N, C), (0,)))
        lse = prims.add(prims.log(prims.reduce_sum(prims.exp(z), dims=(1,))), m)
        logp = prims.sub(x, bcast(prims.reshape(lse, shape=(N, 1)), (N, C), (0, 1)))
        picked = prims.gather(logp, prims.reshape(lab, shape=(N, 1)), dim=1)
        return prims.div(prims.neg(prims.reduce_sum(prims.reshape(picked, shape=(N,)),
                                                    dims=(0,))), full((), N))

    def bwd(x, lab, g):
        m = prims.reduce_max(x, dims=(1,))
        e = prims.exp(prims.sub(x, bcast(m, (N, C), (0,))))
        s = prims.reduce_sum(e, dims=(1,))
        src = prims.reshape(bcast(prims.div(prims.neg(g), full((), N)), (N,), ()), shape=(N, 1))
        d = prims.scatter_add(full((N, C), 0.0), prims.reshape(lab, shape=(N, 1)), src, dim=1)
        tot = prims.reduce_sum(d, dims=(1,))
        return prims.sub(d, prims.mul(bcast(prims.div(tot, s), (N, C), (0,)), e))
    return (build(fwd, ((N, C), F32), ((N,), dt.int64)),
            build(bwd, ((N, C), F32), ((N,), dt.int64), ((), F32), name="backward"))


def test_cross_entropy_gather_and_scatter_fuse_into_row_kernels():
    """The label gather is a per-row read inside the log-softmax row kernel (no (N, C)
    log-probabilities written); the scatter_add transpose is index arithmetic, so the whole
    backward is one kernel and one pass over the logits. Negative labels wrap like numpy;
    an out-of-range label raises IndexError naming the op."""
    N, C = 64, 37
    gf, gb = ce_gather_graphs(N, C)
    x = rand((N, C), lo=-4, hi=4)
    lab = np.random.default_rng(1).integers(-C, C, N).astype(np.int64)
    pf = check(gf, [x, lab], rtol=1e-5, atol=1e-6)
    assert not any(st.kind == "ref" for st in pf.schedule.steps), pf.report()
    assert all(o.shape != (N, C) for st in pf.kernels() for o in st.outputs), pf.report()
    g = np.float32(1.0)
    pb = check(gb, [x, lab, g], rtol=1e-5, atol=1e-6)
    assert len(pb.schedule.steps) == 1 and len(pb.kernels()) == 1, pb.report()
    # against the closed form: (softmax - onehot) / N
    x64 = x.astype(np.float64)
    p = np.exp(x64 - x64.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    p[np.arange(N), lab % C] -= 1
    assert_close(pb(x, lab, g)[0], p / N, rtol=1e-5, atol=1e-7, equal_nan=True, check_dtype=False)
    bad = lab.copy()
    bad[5] = C
    with pytest.raises(IndexError, match="gather"):
        pf(x, bad)
    with pytest.raises(IndexError, match="scatter_add"):
        pb(x, bad, g)


def test_tanh_alone_is_the_rational_and_next_to_its_derivative_shares_an_exponential():
    """A kernel that only needs tanh pastes the rational tanh_f32 (no exponential); one that
    also forms 1 - t*t (a tanh backward) pastes tanh_e_f32 and tanh_d_f32, which share one
    exponential and one division."""
    R, C = 16, 300
    x = rand((R, C), lo=-12, hi=12)
    ref = np.tanh(x.astype(np.float64))
    prog = check(build(lambda x: prims.tanh(x), ((R, C), F32)), [x], rtol=1e-6, atol=1e-7)
    body = "".join(prog.specs[k].body for k in prog.kernels())
    exp_reduction = "np.float32(1.4426950408889634)"     # x / ln2: one per pasted exp
    assert "tanh_f32" in body and "tanh_e_f32" not in body and exp_reduction not in body, body

    def pair(x):
        t = prims.tanh(x)
        return [t, prims.sub(full((R, C), 1.0), prims.mul(t, t))]
    prog = compile_graph(build(pair, ((R, C), F32)))   # (the reference's 1 - t*t cancels)
    body = "".join(prog.specs[k].body for k in prog.kernels())
    assert "tanh_e_f32" in body and "tanh_d_f32" in body, body
    assert body.count(exp_reduction) == 1 and body.count("np.float32(1.0) / (") == 1, body
    t, d = prog(x)
    assert_close(t, ref, rtol=5e-7, atol=1e-30, equal_nan=True, check_dtype=False)
    assert_close(d, 1 / np.cosh(x.astype(np.float64)) ** 2, rtol=5e-7, atol=0, equal_nan=True,
                 check_dtype=False)


def test_row_kernel_keeps_an_expensive_value_for_later_passes():
    """A tanh used by three column passes of one row kernel (mean, variance, output) is
    computed once per element: the first pass stores it in a row scratch buffer, later
    passes load it."""
    R, C = 16, 300

    def fn(x):
        y = prims.tanh(x)
        m = prims.div(prims.reduce_sum(y, dims=(1,)), full((R,), C))
        d = prims.sub(y, bcast(m, (R, C), (0,)))
        v = prims.div(prims.reduce_sum(prims.mul(d, d), dims=(1,)), full((R,), C))
        return prims.mul(d, bcast(prims.rsqrt(prims.add(v, full((R,), 1e-5))), (R, C), (0,)))
    g = build(fn, ((R, C), F32))
    x = rand((R, C), lo=-3, hi=3)
    prog = check(g, [x], rtol=1e-4, atol=1e-5)
    assert len(prog.kernels()) == 1, prog.report()
    # the helper's definition, and its statements pasted into the kernel once
    assert prog.source.count("tanh_f32(") == 1, prog.source
    assert len(re.findall(r"\b_tanh_f32\d+_x = ", prog.source)) == 1, prog.source
    assert "scr" in prog.source, prog.source
    y = np.tanh(x.astype(np.float64))
    d = y - y.mean(1, keepdims=True)
    assert_close(prog(x)[0], d / np.sqrt(d.var(1, keepdims=True) + 1e-5), rtol=1e-4, atol=1e-5,
                 equal_nan=True, check_dtype=False)


def test_identical_subexpressions_are_computed_once():
    """Backward graphs rebuild the same chain per use; the compiled program merges them."""
    def fn(x):
        a = prims.exp(prims.mul(x, x))
        b = prims.exp(prims.mul(x, x))
        return [prims.add(a, b), prims.mul(a, b)]
    g = build(fn, ((50, 40), F32))
    x = rand((50, 40), lo=-1, hi=1)
    prog = check(g, [x], rtol=1e-5, atol=1e-6)
    assert len(prog.scheduled_graph.nodes) == len(g.nodes) - 2
    assert len(re.findall(r"\b_exp_f32\d+_x = ", prog.source)) == 1, prog.source
    assert len(g.nodes) == 6     # the caller's graph is left as it was


def test_column_sums_ride_along_the_row_kernel():
    """Layer-norm backward: the bias/gain gradients (sums over rows) are computed in the same
    pass over dy as the per-row sums (float32 partials per block of rows, combined in
    float64): one kernel, accurate against float64 with several row blocks."""
    R, C = 300, 96
    dy, xh = rand((R, C), seed=3), rand((R, C), seed=4)
    rstd, gm = rand((R,), seed=5, lo=0.5), rand((C,), seed=1)
    prog = check(layernorm_backward_graph(R, C), [dy, xh, rstd, gm], rtol=1e-4, atol=1e-5)
    assert len(prog.kernels()) == 1, prog.report()
    assert "cpart" in prog.source, prog.source
    dx, dg, db = prog(dy, xh, rstd, gm)
    d64, x64 = dy.astype(np.float64), xh.astype(np.float64)
    assert_close(db, d64.sum(0), rtol=1e-5, atol=1e-5, equal_nan=True, check_dtype=False)
    assert_close(dg, (d64 * x64).sum(0), rtol=1e-5, atol=1e-5, equal_nan=True, check_dtype=False)


def test_column_sum_after_a_row_statistic_in_the_same_kernel():
    """A column sum of a value that needs the row's mean runs in the row kernel's second
    pass; a column sum of the input in its first."""
    R, C = 200, 50

    def fn(x):
        mu = prims.div(prims.reduce_sum(x, dims=(1,)), full((R,), C))
        xc = prims.sub(x, bcast(mu, (R, C), (0,)))
        y = prims.mul(xc, xc)
        return [y, prims.reduce_sum(y, dims=(0,)), prims.reduce_sum(x, dims=(0,))]
    x = rand((R, C))
    prog = check(build(fn, ((R, C), F32)), [x], rtol=1e-5, atol=1e-5)
    assert len(prog.kernels()) == 1, prog.report()
    x64 = x.astype(np.float64)
    y = (x64 - x64.mean(1, keepdims=True)) ** 2
    assert_close(prog(x)[1], y.sum(0), rtol=1e-5, atol=0, equal_nan=True, check_dtype=False)
