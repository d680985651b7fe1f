"""compile(dynamic=True) on the numba backend: one program with symbolic sizes (one set of
kernels, no per-size compile) serves every size, equal to eager in outputs and gradients."""
import logging

import numpy as np

import aotgrad
import aotgrad.nn.functional as F
from aotgrad import nn
from aotgrad.testing import assert_close

D = 8


class _Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(D)
        self.qkv = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln(x)).split(D, dim=2)
        att = (q @ k.transpose(-2, -1)) / (C ** 0.5)
        i = aotgrad.arange(T)
        att = att.masked_fill(i[None, :] > i[:, None], float("-inf")).softmax(-1)
        return x + self.proj(att @ v)


def _compare(model, loss, make, sizes, caplog):
    f = aotgrad.compile(loss, dynamic=True)
    with caplog.at_level(logging.INFO, logger="aotgrad"):
        for n in sizes:
            x, t = make(n)
            xc = x.detach().clone().requires_grad_(True)
            model.zero_grad()
            out = f(xc, t)
            out.backward()
            got = [p.grad.numpy().copy() for p in model.parameters()]
            xe = x.detach().clone().requires_grad_(True)
            model.zero_grad()
            ref = loss(xe, t)
            ref.backward()
            assert_close(out.detach().numpy(), ref.detach().numpy(), rtol=1e-5, atol=1e-6,
                         equal_nan=True)
            assert_close(xc.grad.numpy(), xe.grad.numpy(), rtol=1e-4, atol=1e-6, equal_nan=True)
            for g, p in zip(got, model.parameters()):
                assert_close(g, p.grad.numpy(), rtol=1e-4, atol=1e-6, equal_nan=True)
    assert f.stats.compiles == 1 and f.stats.eager_fallbacks == 0
    assert not [r for r in caplog.records if "compiled per size" in r.getMessage()]
    return f


def test_mlp_dynamic_batch_one_program(caplog):
    aotgrad.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.GELU(), nn.Linear(16, 3))

    def loss(x, t):
        return F.cross_entropy(model(x), t)

    def make(n):
        return aotgrad.randn(n, 6), aotgrad.randint(0, 3, (n,))
    _compare(model, loss, make, (8, 5, 17, 40), caplog)


def test_attention_dynamic_sequence_length_one_program(caplog):
    aotgrad.manual_seed(0)
    model = _Attention()

    def loss(x, t):
        return ((model(x) - t) ** 2).mean()

    def make(n):
        return aotgrad.randn(2, n, D), aotgrad.randn(2, n, D)
    _compare(model, loss, make, (5, 7, 3, 12), caplog)
