"""Whole-slice gathers and scatter-adds (embeddings and their gradients) run as
codegen.index_rows kernels over the 1-D index: the same values as eager (the scatter's sums
bit for bit, as np.add.at adds in the same order), the broadcast index never materialised,
numpy's IndexError for an index out of range."""
import numpy as np
import pytest

import aotgrad
import aotgrad.nn.functional as F
from aotgrad.codegen import compile_graph
from aotgrad.codegen.scheduler import StepKind
from aotgrad.ir import Aval, GraphBuilder, evaluate, prims
from aotgrad.ir import dtypes as dt
from aotgrad.testing import assert_close


def _loss(w, i):
    out = F.embedding(i, w)
    return (out * out).sum()


@pytest.mark.parametrize("shape", [(6,), (4, 5)])
def test_embedding_forward_backward_equals_eager(shape):
    rng = np.random.default_rng(0)
    wa = rng.standard_normal((7, 5)).astype(np.float32)
    # repeated rows: their gradients add up, in index order
    i = aotgrad.tensor(rng.integers(0, 7, shape))
    grads, losses = [], []
    compiled = aotgrad.compile(_loss)
    for fn in (_loss, compiled):
        w = aotgrad.tensor(wa, requires_grad=True)
        loss = fn(w, i)
        loss.backward()
        losses.append(loss.item())
        grads.append(w.grad.numpy())
    np.testing.assert_array_equal(grads[1], grads[0])
    assert_close(losses[1], losses[0], rtol=1e-6, atol=0, equal_nan=True)
    # the program ran the gather and the scatter as slice kernels over the 1-D index
    report = compiled.ir(w, i).schedule_report()
    routed = [line for line in report.splitlines() if "codegen.index_rows kernel" in line]
    assert sorted(line.split(": ")[1].split()[0] for line in routed) == \
        ["gather", "scatter_add"], report


def _graph(kind, x_shape, k, dim, part=None, dtype=dt.float32):
    """gather(x, broadcast(i), dim) or scatter_add(x, broadcast(i), src, dim) over a 1-D i
    (`part`: the index's extent outside dim, for a gather of part of each slice)."""
    full = tuple(part or (tuple(x_shape[:dim]) + (k,) + tuple(x_shape[dim + 1:])))
    b = GraphBuilder(kind)
    x = b.add_input(Aval(tuple(x_shape), dtype), "x")
    i = b.add_input(Aval((k,), dt.int64), "i")
    src = b.add_input(Aval(full, dtype), "src") if kind == "scatter_add" else None
    with b:
        bi = prims.broadcast_in_dim(i, shape=full, dims=(dim,))
        out = prims.gather(x, bi, dim=dim) if kind == "gather" else \
            prims.scatter_add(x, bi, src, dim=dim)
    b.graph.outputs = [out]
    return b.graph


@pytest.mark.parametrize("dim", [0, 1, 2])
@pytest.mark.parametrize("kind", ["gather", "scatter_add"])
def test_slice_kernels_match_reference(kind, dim):
    rng = np.random.default_rng(dim)
    x_shape = (3, 4, 5)
    k = 7
    g = _graph(kind, x_shape, k, dim)
    x = rng.standard_normal(x_shape).astype(np.float32)
    i = rng.integers(-x_shape[dim], x_shape[dim], k)    # negative indices wrap, as in numpy
    args = [x, i]
    if kind == "scatter_add":
        full = x_shape[:dim] + (k,) + x_shape[dim + 1:]
        args.append(rng.standard_normal(full).astype(np.float32))
    prog = compile_graph(g, name=kind)
    ref = evaluate(g, args)[0]
    np.testing.assert_array_equal(prog(*args)[0], ref)
    routed = [st for st in prog.schedule.steps
              if st.kind == StepKind.REFERENCE and st.route is not None]
    assert len(routed) == 1
    # the broadcast index is not stored: the step reads the 1-D index
    assert routed[0].inputs[1] is g.inputs[1]


@pytest.mark.parametrize("kind", ["gather", "scatter_add"])
def test_index_out_of_range_raises(kind):
    g = _graph(kind, (4, 3), 2, 0)
    args = [np.zeros((4, 3), np.float32), np.array([1, 4])]
    if kind == "scatter_add":
        args.append(np.ones((2, 3), np.float32))
    prog = compile_graph(g, name=kind)
    with pytest.raises(IndexError, match=r"index 4 is out of bounds for axis 0 with size 4"):
        prog(*args)


def test_partial_gather_stays_reference():
    """A gather whose index covers part of each slice is not a whole-slice take."""
    g = _graph("gather", (4, 3), 2, 0, part=(2, 2))
    prog = compile_graph(g, name="partial")
    assert all(st.route is None for st in prog.schedule.steps)
    xs, ix = np.arange(12, dtype=np.float32).reshape(4, 3), np.array([3, 1])
    np.testing.assert_array_equal(prog(xs, ix)[0], evaluate(g, [xs, ix])[0])


@pytest.mark.parametrize("kind", ["gather", "scatter_add"])
def test_bisection_replays_the_slice_steps(kind):
    from aotgrad.testing import bisect_compiled_graph
    g = _graph(kind, (5, 3), 4, 0)
    rng = np.random.default_rng(1)
    args = [rng.standard_normal((5, 3)).astype(np.float32), np.array([4, 0, 4, 2])]
    if kind == "scatter_add":
        args.append(rng.standard_normal((4, 3)).astype(np.float32))
    report = bisect_compiled_graph(compile_graph(g, name=kind), args)
    step, = [r for r in report.steps if r.description.startswith(kind)]
    assert not step.replay_error and not step.diverges


def test_bool_scatter_stays_reference_and_int_scatter_is_routed():
    for dtype, routed in ((dt.bool_, False), (dt.int32, True)):
        g = _graph("scatter_add", (4, 3), 3, 0, dtype=dtype)
        prog = compile_graph(g, name="scatter")
        assert any(st.route is not None for st in prog.schedule.steps) == routed
        rng = np.random.default_rng(0)
        args = [rng.integers(0, 2, (4, 3)).astype(dtype.np), np.array([1, 1, 3]),
                rng.integers(0, 2, (3, 3)).astype(dtype.np)]
        np.testing.assert_array_equal(prog(*args)[0], evaluate(g, args)[0])


def _axis_graph(kind, x_shape, dim, m, dtype=dt.float32):
    """argmax(x, dim), or gather(x, idx, dim) / scatter_add(x, idx, src, dim) with an index
    of x's shape outside dim and m along it."""
    full = tuple(x_shape[:dim]) + (m,) + tuple(x_shape[dim + 1:])
    b = GraphBuilder(kind)
    x = b.add_input(Aval(tuple(x_shape), dtype), "x")
    if kind != "argmax":
        i = b.add_input(Aval(full, dt.int64), "i")
    src = b.add_input(Aval(full, dtype), "src") if kind == "scatter_add" else None
    with b:
        out = prims.argmax(x, dim=dim) if kind == "argmax" else \
            prims.gather(x, i, dim=dim) if kind == "gather" else \
            prims.scatter_add(x, i, src, dim=dim)
    b.graph.outputs = [out]
    return b.graph


def _axis_routed(prog):
    return [st for st in prog.schedule.steps
            if st.route is not None and "one axis" in st.route.describe()]


@pytest.mark.parametrize("dtype", [dt.float32, dt.float64, dt.int32])
@pytest.mark.parametrize("dim", [0, 1, 2])
@pytest.mark.parametrize("kind", ["argmax", "gather", "scatter_add"])
def test_axis_kernels_match_reference(kind, dim, dtype):
    """The same values as numpy's impls: argmax's first largest value with a NaN counting
    as the largest (ties, signed zeros, infinities), negative indices wrapping, the scatter's
    sums in np.add.at's order (bit for bit)."""
    rng = np.random.default_rng(10 * dim + len(kind))
    x_shape, m = (3, 4, 5), 6
    if dtype is dt.int32:
        x = rng.integers(-3, 3, x_shape).astype(np.int32)     # many ties
    else:
        x = rng.choice(np.array([0.0, -0.0, 1.5, -2.0, np.inf, -np.inf, np.nan, 1.5]),
                       x_shape).astype(dtype.np)
        x[0] = np.nan        # a slice all NaN
        x[1] = -np.inf
    g = _axis_graph(kind, x_shape, dim, m, dtype)
    args = [x]
    full = x_shape[:dim] + (m,) + x_shape[dim + 1:]
    if kind != "argmax":
        args.append(rng.integers(-x_shape[dim], x_shape[dim], full))
    if kind == "scatter_add":
        args.append(rng.standard_normal(full).astype(dtype.np) if dtype is not dt.int32
                    else rng.integers(-9, 9, full).astype(np.int32))
    prog = compile_graph(g, name=kind)
    # (an argmax over the last dim is a generated row reduction)
    assert len(_axis_routed(prog)) == (kind != "argmax" or dim != 2), prog.report()
    np.testing.assert_array_equal(prog(*args)[0], evaluate(g, args)[0])


@pytest.mark.parametrize("kind", ["gather", "scatter_add"])
def test_axis_index_out_of_range_raises(kind):
    g = _axis_graph(kind, (2, 4), 1, 3)
    args = [np.zeros((2, 4), np.float32), np.array([[1, 0, 3], [2, -5, 0]])]
    if kind == "scatter_add":
        args.append(np.ones((2, 3), np.float32))
    prog = compile_graph(g, name=kind)
    with pytest.raises(IndexError, match=r"index -5 is out of bounds for axis 1 with size 4"):
        prog(*args)


def test_bool_axis_scatter_and_partial_gather_stay_reference():
    assert not _axis_routed(compile_graph(_axis_graph("scatter_add", (3, 4), 1, 2,
                                                      dt.bool_)))
    b = GraphBuilder("part")
    x = b.add_input(Aval((4, 3), dt.float32), "x")
    i = b.add_input(Aval((2, 2), dt.int64), "i")
    with b:
        out = prims.gather(x, i, dim=0)    # PyTorch's index smaller than x outside dim
    b.graph.outputs = [out]
    prog = compile_graph(b.graph)
    assert not _axis_routed(prog)
    xs, ix = np.arange(12, dtype=np.float32).reshape(4, 3), np.array([[3, 1], [0, 2]])
    np.testing.assert_array_equal(prog(xs, ix)[0], evaluate(b.graph, [xs, ix])[0])


def test_max_pool_compiled_equals_eager_with_ties_and_nan():
    """A max pool (its window choice an argmax and a gather, its gradient a scatter-add)
    compiled equals eager, forward and backward: ties go to the first element of the
    window, a NaN wins its window."""
    def loss(x):
        return (F.max_pool2d(x, 2) * aotgrad.arange(16.0).reshape(1, 1, 4, 4)).sum()
    xa = np.round(np.random.default_rng(4).standard_normal((2, 3, 8, 8)), 0).astype(np.float32)
    xa[0, 0, :2, :2] = np.nan
    xa[1, 2] = 1.0                       # every window a tie
    grads, outs = [], []
    compiled = aotgrad.compile(loss)
    for fn in (loss, compiled):
        x = aotgrad.tensor(xa, requires_grad=True)
        out = fn(x)
        out.backward()
        outs.append(out.item())
        grads.append(x.grad.numpy())
    np.testing.assert_array_equal(grads[1], grads[0])
    assert_close(outs[1], outs[0], rtol=0, atol=0, equal_nan=True)
    report = compiled.ir(aotgrad.tensor(xa, requires_grad=True)).schedule_report()
    assert "one axis" in report, report
