"""codegen: pad (the VJP of slice) fused as index arithmetic, transposes folded into
contractions, masked row max/softmax rows (-inf entries) against numpy and eager."""
import re

import numba
import numpy as np
import pytest

import aotgrad as ag
from aotgrad.ir import evaluate, passes, prims
from aotgrad.ir import dtypes as dt
from aotgrad.testing import assert_close
from symbolic_graphs import static

F32, F64 = dt.float32, dt.float64

pytestmark = pytest.mark.usefixtures("module_cache_dir")


def rand(shape, seed=0, d=np.float32):
    return np.random.default_rng(seed).uniform(-2, 2, shape).astype(d)


def run(g, arrays, rtol=2e-6):
    from aotgrad.codegen import compile_graph
    prog = compile_graph(g)
    got = prog(*arrays)
    ref = evaluate(g, arrays)
    for a, r in zip(got, ref):
        r = np.asarray(r)
        assert a.shape == r.shape and a.dtype == r.dtype
        assert_close(a, r, rtol=rtol, atol=rtol, equal_nan=True)
    return prog


def kinds(prog):
    return [st.kind for st in prog.schedule.steps]


# --- pad ------------------------------------------------------------------------------------
def test_sum_of_pads_is_one_kernel_without_reference_steps():
    # the VJP of splitting the last dim in three: pad each piece back, add
    def fn(a, b, c):
        pa = prims.pad(a, config=((0, 0, 0), (0, 8, 0)), value=0.0)
        pb = prims.pad(b, config=((0, 0, 0), (4, 4, 0)), value=0.0)
        pc = prims.pad(c, config=((0, 0, 0), (8, 0, 0)), value=0.0)
        return prims.add(prims.add(pa, pb), pc)
    arrs = [rand((5, 4), i) for i in range(3)]
    prog = run(static(fn, ((5, 4), F32), ((5, 4), F32), ((5, 4), F32)), arrs)
    assert kinds(prog) == ["kernel"]
    got = prog(*arrs)[0]
    np.testing.assert_array_equal(got, np.concatenate(arrs, axis=1))


def test_pad_along_an_outer_dim_with_fill_value_and_a_transposed_input():
    # padded dim is an outer loop dim (its range check sits outside the inner loop); the
    # padded value is read through a transpose; a nonzero fill value
    def fn(x):
        t = prims.transpose(x, perm=(1, 0, 2))                       # (4, 3, 6)
        p = prims.pad(t, config=((2, 1, 0), (0, 0, 0), (1, 0, 0)), value=-1.5)
        return prims.mul(p, p)                                        # (7, 3, 7)
    x = rand((3, 4, 6))
    prog = run(static(fn, ((3, 4, 6), F32)), [x])
    assert kinds(prog) == ["kernel"]
    want = np.pad(x.transpose(1, 0, 2), ((2, 1), (0, 0), (1, 0)), constant_values=-1.5) ** 2
    assert_close(prog(x)[0], want, rtol=1e-6, atol=0, equal_nan=True)


def test_pad_of_a_slice_and_of_a_rev_clamps_in_the_sources_coordinates():
    def fn(x):
        s = prims.slice(x, start=(1, 2), limit=(4, 7), strides=(1, 2))   # (3, 3)
        p = prims.pad(s, config=((1, 2, 0), (2, 0, 0)), value=0.0)       # (6, 5)
        r = prims.rev(x, dims=(0,))                                      # (5, 8)
        q = prims.pad(prims.slice(r, start=(0, 0), limit=(5, 5)),
                      config=((1, 0, 0), (0, 0, 0)), value=0.0)          # (6, 5)
        return prims.add(p, q)
    x = rand((5, 8), 3)
    prog = run(static(fn, ((5, 8), F32)), [x])
    assert "ref" not in kinds(prog)


def test_pad_with_interior_padding_stays_a_reference_step():
    def fn(x):
        return prims.mul(prims.pad(x, config=((1, 1, 1),), value=0.0), prims.full(
            shape=(9,), value=2.0, dtype=F32))
    x = rand((4,))
    prog = run(static(fn, ((4,), F32)), [x])
    assert "ref" in kinds(prog)


def test_qkv_split_backward_has_no_reference_steps_and_matches_eager():
    rng = np.random.default_rng(0)
    xv = rng.standard_normal((2, 5, 12)).astype(np.float32)

    def f(x):
        q, k, v = x.reshape(2, 5, 3, 2, 2).permute(2, 0, 3, 1, 4).unbind(0)
        s = (q @ k.transpose(-1, -2)).softmax(-1)
        return ((s @ v) ** 2).sum()
    x = ag.tensor(xv, requires_grad=True)
    cf = ag.compile(f)
    cf(x).backward()
    xe = ag.tensor(xv, requires_grad=True)
    f(xe).backward()
    assert_close(x.grad.numpy(), xe.grad.numpy(), rtol=1e-5, atol=1e-6, equal_nan=True)
    prog = next(iter(cf.cache.values()))
    report = prog.schedule_report()
    assert "reference (numpy impl)" not in report, report


@pytest.mark.parametrize("width,with_sum", [(64, False), (64, True), (5000, True)])
def test_a_split_of_the_last_dim_is_read_through_row_views_at_its_offsets(width, with_sum):
    """q, k and v out of one row (attention's split of its product, chunk, unbind): each
    piece is read through a view of the row that starts at its offset, not at `j + n`, an
    index wrapped around if negative that keeps the inner loop from being vectorised;
    the values are numpy's, with a bias split the same way, with and without a row sum of
    the pieces (rows longer than a slice of the inner loop at width 5000), and NaN, -0.0
    and inf in them."""
    def fn(x, b):
        y = prims.add(x, prims.broadcast_in_dim(b, shape=(6, 3 * width), dims=(1,)))
        q, k, v = (prims.slice(y, start=(0, i * width), limit=(6, (i + 1) * width))
                   for i in range(3))
        t = prims.add(prims.mul(q, k), v)
        return (t, prims.reduce_sum(t, dims=(1,))) if with_sum else t
    x, b = rand((6, 3 * width)), rand((3 * width,), 1)
    x[0, :3] = (np.nan, -0.0, np.inf)
    x[1, width:width + 2] = (-np.inf, -0.0)
    prog = run(static(fn, ((6, 3 * width), F32), ((3 * width,), F32)), [x, b], rtol=1e-5)
    assert kinds(prog) == ["kernel"]
    assert not re.search(r"j\)? \+ n\d+\)", prog.source), prog.source
    y = x + b
    q, k, v = y[:, :width], y[:, width:2 * width], y[:, 2 * width:]
    np.testing.assert_array_equal(prog(x, b)[0], q * k + v)


# --- transposes around dot_general ----------------------------------------------------------
def _prims_of(g):
    return [n.prim.name for n in g.nodes]


def test_double_transpose_folds_away():
    def fn(x):
        t = prims.transpose(prims.transpose(x, perm=(0, 2, 1)), perm=(0, 2, 1))
        return prims.mul(t, t)
    g = static(fn, ((2, 3, 4), F32))
    h = passes.optimize(g)
    assert _prims_of(h) == ["mul"]
    x = rand((2, 3, 4))
    np.testing.assert_array_equal(evaluate(h, [x])[0], evaluate(g, [x])[0])


def test_transpose_of_a_dot_becomes_the_swapped_dot():
    # (a^T b)^T per batch, as in attention's dV: the transpose swaps the free dims
    def fn(a, b):
        d = prims.dot_general(a, b, contract=((1,), (1,)), batch=((0,), (0,)))   # (2, 4, 5)
        return prims.transpose(d, perm=(0, 2, 1))
    g = static(fn, ((2, 3, 4), F32), ((2, 3, 5), F32))
    h = passes.optimize(g)
    assert _prims_of(h) == ["dot_general"]
    assert h.nodes[0].inputs[0] is g.inputs[1]
    a, b = rand((2, 3, 4), 1), rand((2, 3, 5), 2)
    assert_close(evaluate(h, [a, b])[0], evaluate(g, [a, b])[0], rtol=1e-6, atol=0, equal_nan=True)
    run(h, [a, b])


def test_transpose_of_a_dot_with_another_use_is_kept():
    def fn(a, b):
        d = prims.dot_general(a, b, contract=((1,), (0,)))
        return [prims.transpose(d, perm=(1, 0)), prims.mul(d, d)]
    g = static(fn, ((3, 4), F32), ((4, 5), F32))
    h = passes.optimize(g)
    assert _prims_of(h).count("dot_general") == 1 and "transpose" in _prims_of(h)


def test_operand_transpose_is_absorbed_only_when_free_dims_keep_their_order():
    def fn(x, y, z):
        kt = prims.transpose(y, perm=(0, 2, 1))                           # (2, 4, 3)
        s = prims.dot_general(x, kt, contract=((2,), (1,)), batch=((0,), (0,)))  # (2,5,3)
        zt = prims.transpose(z, perm=(1, 0, 2))                           # (3, 2, 4)
        u = prims.dot_general(zt, x, contract=((2,), (2,)), batch=((1,), (0,)))  # (2,3,5)
        return [s, u]
    g = static(fn, ((2, 5, 4), F32), ((2, 3, 4), F32), ((2, 3, 4), F32))
    h = passes.optimize(g)
    dots = [n for n in h.nodes if n.prim.name == "dot_general"]
    assert dots[0].inputs[1] is g.inputs[1]          # y^T absorbed into the contraction
    assert dots[1].inputs[0] is g.inputs[2]          # one free dim: order kept trivially
    assert "transpose" not in _prims_of(h)
    arrs = [rand((2, 5, 4), 1), rand((2, 3, 4), 2), rand((2, 3, 4), 3)]
    for a, r in zip(evaluate(h, arrs), evaluate(g, arrs)):
        assert_close(a, r, rtol=1e-6, atol=0, equal_nan=True)
    prog = run(h, arrs, rtol=1e-5)
    assert [st.kind for st in prog.schedule.steps] == ["dot", "dot"]


def test_operand_transpose_reordering_free_dims_is_not_absorbed():
    def fn(x, w):
        xt = prims.transpose(x, perm=(1, 0, 2))                            # (3, 2, 4)
        return prims.dot_general(xt, w, contract=((2,), (0,)))             # (3, 2, 5)
    g = static(fn, ((2, 3, 4), F32), ((4, 5), F32))
    h = passes.optimize(g)
    assert "transpose" in _prims_of(h)
    arrs = [rand((2, 3, 4), 1), rand((4, 5), 2)]
    run(h, arrs, rtol=1e-5)


# --- rows holding -inf (causal masks) -------------------------------------------------------
@pytest.mark.parametrize("d", [F32, F64])
def test_masked_row_max_and_softmax(d):
    n = 37

    def fn(x, m):
        xm = prims.where(m, x, prims.full(shape=(6, n), value=-np.inf, dtype=d))
        mx = prims.reduce_max(xm, dims=(1,))
        e = prims.exp(prims.sub(xm, prims.broadcast_in_dim(mx, shape=(6, n), dims=(0,))))
        s = prims.reduce_sum(e, dims=(1,))
        return [mx, prims.div(e, prims.broadcast_in_dim(s, shape=(6, n), dims=(0,)))]
    x = rand((6, n), 4, d.np)
    x[2, 5] = np.nan            # a NaN where the mask keeps it: that row's max is NaN
    x[3, 6] = np.nan            # a NaN the mask hides
    m = np.tril(np.ones((6, n), bool), 3)
    m[3, 6] = False
    g = static(fn, ((6, n), d), ((6, n), dt.bool_))
    from aotgrad.codegen import compile_graph
    got_max, got_p = compile_graph(g)(x, m)
    want_max = np.where(m, x, -np.inf).max(axis=1)
    np.testing.assert_array_equal(np.isnan(got_max), [False, False, True, False, False, False])
    ok = ~np.isnan(want_max)
    np.testing.assert_array_equal(got_max[ok], want_max[ok])
    e = np.exp(np.where(m, x, -np.inf) - want_max[:, None])
    want_p = e / e.sum(1, keepdims=True)
    assert_close(got_p[ok], want_p[ok], rtol=1e-6, atol=1e-7, equal_nan=True)
    assert (got_p[ok] >= 0).all() and (got_p[ok][~m[ok]] == 0).all()


# --- dot operands read as strided views ------------------------------------------------------
def test_sliced_and_transposed_dot_operands_are_views_not_copies():
    # q, k, v: slices of one projection, heads split by reshape + transpose (as in attention)
    def fn(x, w):
        qkv = prims.dot_general(x, w, contract=((2,), (1,)))                  # (2, 5, 24)
        r = prims.transpose(prims.reshape(qkv, shape=(2, 5, 3, 2, 4)), perm=(2, 0, 3, 1, 4))
        q, k, v = (prims.reshape(prims.slice(r, start=(i, 0, 0, 0, 0), limit=(i + 1, 2, 2, 5, 4)),
                                 shape=(2, 2, 5, 4)) for i in range(3))
        s = prims.dot_general(q, k, contract=((3,), (3,)), batch=((0, 1), (0, 1)))  # (2,2,5,5)
        e = prims.exp(s)
        return [prims.dot_general(e, v, contract=((3,), (2,)), batch=((0, 1), (0, 1)))]
    g = static(fn, ((2, 5, 6), F32), ((24, 6), F32))
    arrs = [rand((2, 5, 6), 1), rand((24, 6), 2) * 0.3]
    prog = run(g, arrs, rtol=1e-5)
    views = [st for st in prog.schedule.steps if getattr(st, "view_expr", None)]
    assert len(views) == 3
    kernels = [st for st in prog.schedule.steps if st.kind == "kernel"]
    assert len(kernels) == 1 and [v.name for v in kernels[0].outputs] == \
        [g.nodes[-2].outputs[0].name]          # only exp(s) is written by a kernel


def test_a_view_that_is_also_a_graph_output_is_materialised():
    def fn(x, w):
        t = prims.transpose(x, perm=(1, 0))
        return [t, prims.dot_general(t, w, contract=((1,), (0,)))]
    g = static(fn, ((4, 3), F32), ((4, 2), F32))
    prog = run(g, [rand((4, 3), 1), rand((4, 2), 2)], rtol=1e-5)
    out = prog(rand((4, 3), 1), rand((4, 2), 2))[0]
    assert out.flags.c_contiguous


# --- column sums, sibling kernels -----------------------------------------------------------
@pytest.mark.parametrize("rows,cols,form", [(1000, 600, "r1 = "), (100, 2000, "cw = ")])
def test_column_sum_in_float32_blocks_is_accurate_and_shares_the_pass(rows, cols, form):
    # 1000 rows (not a multiple of the 64-row flush), 600 columns: one range of rows per
    # thread; 100 rows (fewer than 64 per thread) of 2000 columns: column chunks. The
    # elementwise sibling y reads the same inputs and joins the column kernel
    def fn(g, x, w):
        t = prims.tanh(x)
        gt = prims.mul(g, t)
        cs = prims.reduce_sum(gt, dims=(0,))
        y = prims.mul(t, t)
        return [cs, prims.dot_general(y, w, contract=((1,), (0,)))]
    g_ = rand((rows, cols), 1) + 3.0
    x = rand((rows, cols), 2)
    w = rand((cols, 3), 3)
    graph = static(fn, ((rows, cols), F32), ((rows, cols), F32), ((cols, 3), F32))
    prog = run(graph, [g_, x, w], rtol=2e-5)
    kern = [st for st in prog.schedule.steps if st.kind == "kernel"]
    assert len(kern) == 1 and kern[0].ktype == "cols"
    if numba.config.NUMBA_NUM_THREADS == 2:
        assert form in prog.specs[kern[0]].body
    cs = prog(g_, x, w)[0]
    want = (g_.astype(np.float64) * np.tanh(x.astype(np.float64))).sum(0)
    assert_close(cs, want, rtol=2e-6, atol=1e-4, equal_nan=True, check_dtype=False)


def test_column_sums_over_leading_dims_ride_along_a_3d_row_kernel():
    # layer-norm-backward-like: per-row sums over the last dim of (4, 6, 40) and the bias and
    # gamma gradients summed over the two leading dims, in one kernel
    def fn(g, x, w):
        gw = prims.mul(g, prims.broadcast_in_dim(w, shape=(4, 6, 40), dims=(2,)))
        rs = prims.reduce_sum(prims.mul(gw, x), dims=(2,))
        dx = prims.sub(gw, prims.broadcast_in_dim(rs, shape=(4, 6, 40), dims=(0, 1)))
        return [dx, prims.reduce_sum(g, dims=(0, 1)), prims.reduce_sum(prims.mul(g, x),
                                                                       dims=(0, 1))]
    arrs = [rand((4, 6, 40), 1), rand((4, 6, 40), 2), rand((40,), 3)]
    prog = run(static(fn, ((4, 6, 40), F32), ((4, 6, 40), F32), ((40,), F32)), arrs,
               rtol=1e-5)
    kern = [st for st in prog.schedule.steps if st.kind == "kernel"]
    assert len(kern) == 1 and kern[0].ktype == "rows" and len(kern[0].col_reds) == 2


def test_a_column_sum_of_a_regrouping_reshape_moves_above_it():
    """reduce_sum(reshape(x, (b, t, 768)), (0, 1)) of x (b, t, 3, 4, 64) becomes
    reshape(reduce_sum(x, (0, 1)), (768,)); a reshape of the leading (summed) dims does not."""
    def fn(x):
        y = prims.reshape(x, shape=(2, 5, 24))
        return [prims.reduce_sum(y, dims=(0, 1)),
                prims.reduce_sum(prims.reshape(x, shape=(10, 24)), dims=(0,))]
    g = static(fn, ((2, 5, 3, 2, 4), F32))
    opt = passes.optimize(g)
    reds = [n for n in opt.nodes if n.prim.name == "reduce_sum"]
    assert [n.inputs[0].shape for n in reds] == [(2, 5, 3, 2, 4), (10, 24)]
    x = rand((2, 5, 3, 2, 4))
    for a, r in zip(evaluate(opt, [x]), evaluate(g, [x])):
        assert a.shape == r.shape
        assert_close(a, r, rtol=1e-6, atol=1e-6, equal_nan=True)


def test_qkv_gradient_assembly_and_its_bias_gradient_are_one_parallel_kernel():
    """The pads that put q, k and v's gradients back into one (b, t, 3, h, dh) value and the
    column sum over (b, t) for the qkv bias: one kernel, blocks of rows in prange with a
    partial per block, the float32 partials summed in float64 (1000 rows: not a multiple of
    the 64-row block)."""
    b, t, h, dh = 8, 125, 4, 32

    def fn(dq, dk, dv):
        parts = [prims.pad(prims.reshape(d, shape=(1, b, h, t, dh)), value=0.0,
                           config=((i, 2 - i, 0),) + ((0, 0, 0),) * 4)
                 for i, d in enumerate((dq, dk, dv))]
        g = prims.transpose(prims.add(prims.add(parts[0], parts[1]), parts[2]),
                            perm=(1, 3, 0, 2, 4))
        g2 = prims.reshape(g, shape=(b, t, 3 * h * dh))
        return [g2, prims.reduce_sum(g2, dims=(0, 1))]
    shape = (b, h, t, dh)
    graph = passes.optimize(static(fn, (shape, F32), (shape, F32), (shape, F32)))
    arrs = [rand(shape, i) + 1.5 for i in range(3)]
    prog = run(graph, arrs, rtol=1e-5)
    kern = [st for st in prog.schedule.steps if st.kind == "kernel"]
    assert len(kern) == 1 and kern[0].ktype == "cols", prog.schedule_report()
    src = prog.specs[kern[0]].body
    spec = prog.specs[kern[0]]
    assert spec.parts and "for rblk in range((nrb) * part // nparts" in src, src
    assert "np.float32" in src, src
    g2, bias = prog(*arrs)
    want = np.concatenate([a.astype(np.float64).transpose(0, 2, 1, 3).sum(axis=(0, 1))
                           .reshape(-1) for a in arrs])
    assert_close(bias, want, rtol=2e-6, atol=1e-4, equal_nan=True, check_dtype=False)


@pytest.mark.parametrize("b,h,t,dh", [(2, 2, 5, 4), (2, 4, 128, 64)])
def test_a_product_transposed_back_is_written_straight_into_the_transposed_layout(b, h, t, dh):
    """(p @ v) of shape (b, h, t, dh), transposed to (b, t, h, dh) and merged for the next
    product: the first product writes into the transposed buffer (strided rows), no kernel
    copies it. Small sizes run np.matmul into the transposed view, large ones BLAS."""
    def fn(p, v, w):
        o = prims.dot_general(p, v, contract=((3,), (2,)), batch=((0, 1), (0, 1)))
        ot = prims.transpose(o, perm=(0, 2, 1, 3))
        return [ot, prims.dot_general(prims.reshape(ot, shape=(b * t, h * dh)), w,
                                      contract=((1,), (0,)))]
    graph = static(fn, ((b, h, t, t), F32), ((b, h, t, dh), F32), ((h * dh, 3), F32))
    arrs = [rand((b, h, t, t), 1), rand((b, h, t, dh), 2), rand((h * dh, 3), 3)]
    prog = run(graph, arrs, rtol=2e-4)
    assert kinds(prog).count("kernel") == 0, prog.report()
    assert any(st.out_view is not None for st in prog.schedule.steps), prog.report()
    if b * h * t * t * dh >= (1 << 18):
        assert "written into" in prog.report(), prog.report()
    got = prog(*arrs)[0]
    want = np.einsum("bhts,bhsd->bthd", arrs[0].astype(np.float64), arrs[1])
    assert_close(got, want, rtol=1e-4, atol=1e-4, equal_nan=True, check_dtype=False)
