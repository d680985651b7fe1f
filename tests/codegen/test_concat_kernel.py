"""Concatenations traced as sums of zero pads (split's gradient: attention's q/k/v gradients
into the qkv gradient) run as slice copies (codegen.concat): the same values as the sum,
-0.0 and NaN included, and the pads are never computed."""
import numpy as np
import pytest

import aotgrad
from aotgrad.codegen import compile_graph
from aotgrad.codegen.scheduler import StepKind
from aotgrad.ir import Aval, GraphBuilder, evaluate, prims
from aotgrad.ir import dtypes as dt
from aotgrad.testing import assert_close


def _pad(x, dim, lo, hi, nd, fill=0.0):
    cfg = tuple((lo, hi, 0) if d == dim else (0, 0, 0) for d in range(nd))
    return prims.pad(x, config=cfg, value=fill)


def _concat_graph(sizes, dim, rest=(3, 4), order=None, extra_reader=False, product=True):
    """add(...add(pad(x0), pad(x1))..., pad(xn)) over parts of `sizes` along dim, read by a
    product (as a projection's gradient is) unless product=False."""
    total = sum(sizes)
    b = GraphBuilder("concat")
    shapes = [rest[:dim] + (s,) + rest[dim:] for s in sizes]
    xs = [b.add_input(Aval(s, dt.float32), f"x{i}") for i, s in enumerate(shapes)]
    nd = len(shapes[0])
    last = total if dim == nd - 1 else shapes[0][-1]
    w = b.add_input(Aval((last, 2), dt.float32), "w")
    offs = np.cumsum((0,) + tuple(sizes))
    with b:
        pads = [_pad(x, dim, int(offs[i]), int(total - offs[i + 1]), nd)
                for i, x in enumerate(xs)]
        order = order or list(range(len(pads)))
        acc = pads[order[0]]
        for i in order[1:]:
            acc = prims.add(acc, pads[i])
        outs = [acc, prims.reduce_sum(acc, dims=tuple(d for d in range(nd) if d != dim))]
        if product:
            outs.append(prims.dot_general(acc, w, contract=((nd - 1,), (0,))))
        if extra_reader:
            outs.append(prims.mul(pads[0], pads[0]))
    b.graph.outputs = outs
    return b.graph


def _routed(prog):
    return [st for st in prog.schedule.steps
            if st.kind == StepKind.REFERENCE and st.route is not None]


@pytest.mark.parametrize("dim,sizes,order", [(2, (4, 2, 3), [2, 1, 0]), (0, (2, 5), None),
                                             (1, (1, 1, 6), [1, 0, 2])])
def test_concat_of_pads_matches_reference(dim, sizes, order):
    g = _concat_graph(sizes, dim, order=order)
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(tuple(v.shape)).astype(np.float32) for v in g.inputs]
    args[0].flat[0] = -0.0          # the sum turns it into +0.0
    args[-1].flat[1] = np.nan
    args[-1].flat[2] = -np.inf
    prog = compile_graph(g, name="concat")
    got, ref = prog(*args), evaluate(g, args)
    np.testing.assert_array_equal(got[0], ref[0])
    # the column sums read the copies (summed in another order: rounding only)
    assert_close(got[1], ref[1], rtol=1e-5, atol=1e-6, equal_nan=True)
    assert np.signbit(got[0]).tolist() == np.signbit(ref[0]).tolist()
    st, = _routed(prog)
    assert st.inputs == list(g.inputs[:-1])   # reads the parts; the pads are not computed


@pytest.mark.parametrize("kw", [dict(extra_reader=True), dict(product=False)])
def test_pad_read_elsewhere_or_no_product_is_not_routed(kw):
    g = _concat_graph((2, 3), 0, **kw)
    prog = compile_graph(g, name="concat")
    assert not _routed(prog)
    args = [np.ones(tuple(v.shape), np.float32) for v in g.inputs]
    for a, r in zip(prog(*args), evaluate(g, args)):
        assert_close(a, r, rtol=1e-6, atol=0, equal_nan=True)


def test_negative_zero_fill_is_not_routed():
    """Pads filled with -0.0 keep a part's -0.0 in the sum: no + 0.0 copies for them."""
    b = GraphBuilder("negzero")
    x = b.add_input(Aval((3, 2), dt.float32), "x")
    y = b.add_input(Aval((3, 2), dt.float32), "y")
    w = b.add_input(Aval((4, 2), dt.float32), "w")
    with b:
        s = prims.add(_pad(x, 1, 0, 2, 2, -0.0), _pad(y, 1, 2, 0, 2, -0.0))
        out = prims.dot_general(s, w, contract=((1,), (0,)))
    b.graph.outputs = [s, out]
    prog = compile_graph(b.graph, name="negzero")
    assert not _routed(prog)
    args = [np.full((3, 2), -0.0, np.float32), np.ones((3, 2), np.float32),
            np.ones((4, 2), np.float32)]
    got, ref = prog(*args)[0], evaluate(b.graph, args)[0]
    assert np.signbit(got).tolist() == np.signbit(ref).tolist()


def test_overlapping_pads_are_not_a_concat():
    b = GraphBuilder("overlap")
    x = b.add_input(Aval((3, 4), dt.float32), "x")
    y = b.add_input(Aval((3, 4), dt.float32), "y")
    w = b.add_input(Aval((6, 2), dt.float32), "w")
    with b:
        s = prims.add(_pad(x, 1, 0, 2, 2), _pad(y, 1, 1, 1, 2))
        out = prims.dot_general(s, w, contract=((1,), (0,)))
    b.graph.outputs = [out]
    prog = compile_graph(b.graph, name="overlap")
    assert not _routed(prog)


def test_split_backward_equals_eager():
    """The attention pattern: a projection split in three, each part used, the gradient
    flowing back through split's pads."""
    rng = np.random.default_rng(1)
    xa = rng.standard_normal((2, 5, 12)).astype(np.float32)

    def f(x):
        q, k, v = x.split(4, dim=2)
        return ((q * k).sum(-1, keepdim=True) * v).sum() + (x * x).sum()
    grads = []
    for fn in (f, aotgrad.compile(f)):
        x = aotgrad.tensor(xa, requires_grad=True)
        fn(x).backward()
        grads.append(x.grad.numpy())
    assert_close(grads[1], grads[0], rtol=1e-5, atol=1e-6, equal_nan=True)


def test_bisection_replays_the_routed_steps():
    """compare_with_eager's kernel bisection replays a concatenation's and an index step's
    library kernels on their own, against the reference prims."""
    from aotgrad.testing import bisect_compiled_graph
    g = _concat_graph((4, 2, 3), 2)
    rng = np.random.default_rng(3)
    args = [rng.standard_normal(tuple(v.shape)).astype(np.float32) for v in g.inputs]
    prog = compile_graph(g, name="concat")
    report = bisect_compiled_graph(prog, args)
    routed = [r for r in report.steps if r.description.startswith("add ->")]
    assert routed and not routed[0].replay_error and not routed[0].diverges
    assert report.first is None, str(report)
