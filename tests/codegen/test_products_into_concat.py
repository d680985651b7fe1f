"""Attention's q, k and v gradients are products whose results, transposed back to (batch,
seq, heads, dim) and reshaped, are concatenated into the qkv gradient (split's VJP: a sum
of zero pads). Each product writes straight into its slice of the concatenation's buffer:
no copies, the same values."""
import numpy as np
import pytest

import aotgrad
from aotgrad.codegen import compile_graph
from aotgrad.codegen.steps import StepKind
from aotgrad.ir import Aval, GraphBuilder, evaluate, prims
from aotgrad.ir import dtypes as dt
from aotgrad.testing import assert_close

B, H, T, D = 2, 3, 8, 4
C = H * D


def _pad_last(x, lo, hi):
    return prims.pad(x, config=((0, 0, 0), (0, 0, 0), (lo, hi, 0)), value=0.0)


def _graph(reader="product"):
    """dq = ds @ k, dk = ds^T @ q, dv = p^T @ do (per batch and head), each transposed to
    (B, T, H, D), reshaped to (B, T, C) and padded into (B, T, 3C); the sum is read by a
    product and a column sum (a projection's weight and bias gradients), and, with
    reader="elementwise", by an elementwise square as well."""
    b = GraphBuilder("qkv_grad")
    ds = b.add_input(Aval((B, H, T, T), dt.float32), "ds")
    p = b.add_input(Aval((B, H, T, T), dt.float32), "p")
    q, k, do = (b.add_input(Aval((B, H, T, D), dt.float32), n) for n in ("q", "k", "do"))
    x = b.add_input(Aval((B, T, 5), dt.float32), "x")
    batch = ((0, 1), (0, 1))
    with b:
        dq = prims.dot_general(ds, k, contract=((3,), (2,)), batch=batch)
        dk = prims.dot_general(ds, q, contract=((2,), (2,)), batch=batch)
        dv = prims.dot_general(p, do, contract=((2,), (2,)), batch=batch)
        parts = [prims.reshape(prims.transpose(g, perm=(0, 2, 1, 3)), shape=(B, T, C))
                 for g in (dq, dk, dv)]
        s = prims.add(prims.add(_pad_last(parts[2], 2 * C, 0), _pad_last(parts[1], C, C)),
                      _pad_last(parts[0], 0, 2 * C))
        dw = prims.dot_general(s, x, contract=((0, 1), (0, 1)))     # (3C, 5)
        db = prims.reduce_sum(s, dims=(0, 1))
        outs = [dw, db]
        if reader == "elementwise":
            outs.append(prims.mul(s, s))
    b.graph.outputs = outs
    return b.graph


def _args(g):
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(tuple(v.shape)).astype(np.float32) for v in g.inputs]
    args[0][0, 0, 1] = 0.0       # a row of dq that is exactly zero
    args[1][1, 2, :, 3] = np.nan  # a NaN column of p: NaN in dv
    return args


def _into_steps(prog):
    return [st for st in prog.schedule.steps if st.kind == StepKind.DOT and st.into is not None]


def _routed(prog):
    return [st for st in prog.schedule.steps if st.route is not None]


def test_products_write_into_their_slices_of_the_concatenation():
    g = _graph()
    prog = compile_graph(g, name="qkv_grad")
    into = _into_steps(prog)
    assert len(into) == 3 and not _routed(prog), prog.report()
    assert sorted(st.into.low for st in into) == [0, C, 2 * C]
    assert {st.into.root for st in into} == {g.nodes[-2].inputs[0]}   # the sum dw reads
    args = _args(g)
    got, ref = prog(*args), evaluate(g, args)
    for a, r in zip(got, ref):
        assert a.dtype == np.float32
        assert_close(a, np.asarray(r), rtol=1e-5, atol=1e-5, equal_nan=True)
    assert np.isnan(got[1][2 * C:]).any() and not np.isnan(got[1][:2 * C]).any()


def test_negative_zero_parts_sum_like_the_copies():
    """A column of dq that is all -0.0 (ds negative, k's column zero): the copies made it
    +0.0; written in place it stays -0.0, and the column sum reading it is +0.0 as before."""
    g = _graph()
    prog = compile_graph(g, name="qkv_grad")
    args = _args(g)
    args[0] = -np.abs(args[0]) - 1
    args[3][..., 0] = 0.0
    got, ref = prog(*args), evaluate(g, args)
    cols = [h * D for h in range(H)]
    assert (np.asarray(ref[1])[cols] == 0).all()
    assert np.signbit(got[1]).tolist() == np.signbit(np.asarray(ref[1])).tolist()
    for a, r in zip(got, ref):
        assert_close(a, np.asarray(r), rtol=1e-5, atol=1e-5, equal_nan=True)


def test_a_reader_that_sees_the_sign_of_zero_keeps_the_copies():
    g = _graph(reader="elementwise")
    prog = compile_graph(g, name="qkv_grad")
    assert not _into_steps(prog) and _routed(prog), prog.report()
    args = _args(g)
    for a, r in zip(prog(*args), evaluate(g, args)):
        assert_close(a, np.asarray(r), rtol=1e-5, atol=1e-5, equal_nan=True)


@pytest.mark.slow
def test_attention_qkv_gradient_equals_eager(torch):
    """Causal self-attention over a qkv projection, compiled, against eager and PyTorch:
    the input, weight and bias gradients."""
    rng = np.random.default_rng(2)
    xa = rng.standard_normal((B, T, C)).astype(np.float32)
    wa = (rng.standard_normal((3 * C, C)) / np.sqrt(C)).astype(np.float32)
    ba = rng.standard_normal(3 * C).astype(np.float32)

    def attn(F, lib, x, w, bias):
        q, k, v = F.linear(x, w, bias).split(C, dim=2)
        q, k, v = (t.reshape(B, T, H, D).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).reshape(B, T, C)
        return (y * y).sum()

    results = []
    for lib, wrap in ((aotgrad, lambda f: f), (aotgrad, aotgrad.compile), (torch, lambda f: f)):
        ts = [lib.tensor(a, requires_grad=True) for a in (xa, wa, ba)]
        fn = wrap(lambda x, w, bias, lib=lib: attn(lib.nn.functional, lib, x, w, bias))
        fn(*ts).backward()
        results.append([t.grad.detach().numpy() if lib is torch else t.grad.numpy()
                        for t in ts])
    for got in results[1:]:
        for a, r in zip(got, results[0]):
            assert_close(a, r, rtol=2e-4, atol=2e-5)
