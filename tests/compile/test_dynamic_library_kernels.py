"""A symbolic program's library kernels (codegen.concat's slice copies, codegen.index_rows'
row takes) pick their serial or parallel form per call from the call's sizes, as a static
program of that size does (a symbolic size compared with a threshold outside a trace is
only structural: they ran serially at every size), and equal eager at both."""
import numpy as np

import aotgrad
import aotgrad.nn.functional as F
from aotgrad.codegen import concat, index_rows
from aotgrad.testing import assert_close

D = 64


def _driver(f, *args):
    prog = f.ir(*args)
    return "\n".join(prog.compiled_graph(w).plan.driver_source
                     for w in ("forward", "backward") if prog.compiled_graph(w) is not None)


def _grads(fn, w, *args):
    w = w.detach().clone().requires_grad_(True)
    loss = fn(w, *args)
    loss.backward()
    return loss.detach().numpy(), w.grad.numpy()


def test_embedding_rows_parallel_from_a_size_on():
    aotgrad.manual_seed(0)
    w = aotgrad.randn(50, D)

    def loss(w, i):
        out = F.embedding(i, w)
        return (out * out).sum()

    f = aotgrad.compile(loss, dynamic=True)
    large = index_rows.PARALLEL_MIN // D + 5
    for n in (6, large, 9):
        i = aotgrad.randint(0, 50, (n,))
        for got, want in zip(_grads(f, w, i), _grads(loss, w, i)):
            assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert f.stats.compiles == 1
    assert f" >= {index_rows.PARALLEL_MIN} else " in _driver(f, w.requires_grad_(True), i)


def test_split_gradient_copies_parallel_from_a_size_on():
    aotgrad.manual_seed(0)
    w = aotgrad.randn(8, 3 * D) * 0.1

    def loss(w, x):
        q, k, v = (x @ w).split(D, dim=1)
        return (q * k + v).sum()

    f = aotgrad.compile(loss, dynamic=True)
    large = concat.PARALLEL_MIN // D + 3
    for n in (5, large):
        x = aotgrad.randn(n, 8)
        for got, want in zip(_grads(f, w, x), _grads(loss, w, x)):
            assert_close(got, want, rtol=1e-4, atol=1e-3)
    assert f.stats.compiles == 1
    src = _driver(f, w.requires_grad_(True), x)
    assert f" >= {concat.PARALLEL_MIN} else " in src, src
