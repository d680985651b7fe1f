"""A row kernel keeps a value that depends on a reduction of an earlier pass (a softmax's
exp(x - max): the pass that sums it and the pass that divides it both need it) in its row
scratch buffer: computed once per element, equal to the reference, NaN and -inf rows kept."""
import re

import numpy as np

from aotgrad.ir import Aval, GraphBuilder, evaluate, prims
from aotgrad.ir import dtypes as dt
from aotgrad.testing import assert_close

F32 = dt.float32


def _softmax_graph(R, C):
    """softmax(where(keep, x, -inf)) along dim 1, as a causal attention row."""
    b = GraphBuilder("forward")
    x = b.add_input(Aval((R, C), F32), "x")
    keep = b.add_input(Aval((R, C), dt.bool_), "keep")
    with b:
        s = prims.where(keep, x, prims.full(shape=(R, C), value=-np.inf, dtype=F32))
        m = prims.reduce_max(s, dims=(1,))
        e = prims.exp(prims.sub(s, prims.broadcast_in_dim(m, shape=(R, C), dims=(0,))))
        z = prims.reduce_sum(e, dims=(1,))
        out = prims.div(e, prims.broadcast_in_dim(z, shape=(R, C), dims=(0,)))
    b.graph.outputs = [out]
    return b.graph


def _inputs(R, C):
    rng = np.random.default_rng(3)
    x = rng.uniform(-6, 6, (R, C)).astype(np.float32)
    x[2, 5] = np.nan                 # a NaN row stays NaN
    x[4, :] = np.float32(80.0)       # large, equal logits
    keep = np.tril(np.ones((R, C), bool), k=C - R)
    keep[6, :] = False               # a row masked whole: -inf everywhere, NaN as in eager
    return [x, keep]


def test_softmax_exp_is_computed_once_per_element():
    from aotgrad.codegen import compile_graph
    R, C = 12, 160
    g = _softmax_graph(R, C)
    arrays = _inputs(R, C)
    prog = compile_graph(g)
    body = "".join(prog.specs[k].body for k in prog.kernels())
    assert len(prog.kernels()) == 1, prog.report()
    # the exponential's statements appear in one pass only, its value kept in scratch
    assert len(re.findall(r"\b_exp_f32\d*_x = ", body)) == 1, body
    assert "scr" in body, body
    got = prog(*arrays)[0]
    ref = np.asarray(evaluate(g, arrays)[0])
    assert got.dtype == np.float32
    assert_close(got, ref, rtol=2e-6, atol=1e-7, equal_nan=True)
    assert np.isnan(got[2]).all() and np.isnan(got[6]).all()
