"""Dynamic shapes on models: compiled == eager (outputs and every gradient) over sequences
of sizes, each served by one compile (cf.stats): a CNN with a dynamic batch, a transformer
block with a dynamic sequence length (causal mask from arange, positions sliced to T), and
a whole compiled training step (forward + backward + Adam) with a smaller last batch."""
import numpy as np
import pytest

import aotgrad
import aotgrad.nn.functional as F
from aotgrad import nn
from aotgrad.testing import assert_close

D = 8


class _Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(D)
        self.qkv = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)
        self.pos = nn.Parameter(aotgrad.randn(16, D))

    def forward(self, x):
        B, T, C = x.shape
        h = self.ln(x + self.pos[:T])
        q, k, v = self.qkv(h).split(D, dim=2)
        att = (q @ k.transpose(-2, -1)) / (C ** 0.5)
        i = aotgrad.arange(T)
        att = att.masked_fill(i[None, :] > i[:, None], float("-inf")).softmax(-1)
        return x + self.proj(att @ v)


def _cnn():
    return nn.Sequential(nn.Conv2d(1, 3, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(3 * 4 * 4, 5))


def _compare(model, loss, make, sizes, dynamic, backend):
    f = aotgrad.compile(loss, backend=backend, dynamic=dynamic)
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
    return f


@pytest.mark.parametrize("backend", ["interpret", "numba"])
def test_cnn_dynamic_batch_one_compile(backend):
    aotgrad.manual_seed(0)
    model = _cnn()

    def loss(x, t):
        return F.cross_entropy(model(x), t)

    def make(n):
        return aotgrad.randn(n, 1, 8, 8), aotgrad.randint(0, 5, (n,))

    x = aotgrad.randn(4, 1, 8, 8)
    aotgrad.mark_dynamic(x, 0)
    f = _compare(model, loss, make, (4, 3, 6, 2), dynamic=True, backend=backend)
    assert f.stats.compiles == 1 and f.stats.cache_hits == 3


@pytest.mark.parametrize("backend", ["interpret", "numba"])
def test_transformer_block_dynamic_sequence_length_one_compile(backend):
    aotgrad.manual_seed(0)
    model = _Block()

    def loss(x, t):
        return ((model(x) - t) ** 2).mean()

    def make(n):
        return aotgrad.randn(2, n, D), aotgrad.randn(2, n, D)

    f = _compare(model, loss, make, (5, 7, 3, 9, 12), dynamic=True, backend=backend)
    assert f.stats.compiles == 1
    text = aotgrad.explain(f, *make(5))
    assert "s1 = x.size(1)" in text


def test_transformer_block_longer_than_positions_raises_as_eagerly():
    aotgrad.manual_seed(0)
    model = _Block()
    f = aotgrad.compile(lambda x: model(x).sum(), backend="interpret", dynamic=True)
    f(aotgrad.randn(2, 5, D))
    with pytest.raises(RuntimeError):
        model(aotgrad.randn(2, 17, D)).sum()  # eagerly: positions has 16 rows
    with pytest.raises(RuntimeError):
        f(aotgrad.randn(2, 17, D))  # the guard T <= 16 fails: traced again, raising


def _training(dynamic, backend="interpret"):
    def make():
        aotgrad.manual_seed(0)
        m = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))
        return m, aotgrad.optim.Adam(m.parameters(), lr=1e-2)

    def step_of(m, o):
        def step(x, t):
            o.zero_grad()
            loss = F.cross_entropy(m(x), t)
            loss.backward()
            o.step()
            return loss
        return step

    (mc, oc), (me, oe) = make(), make()
    step_c = aotgrad.compile(step_of(mc, oc), backend=backend, dynamic=dynamic)
    step_e = step_of(me, oe)
    aotgrad.manual_seed(1)
    return mc, me, step_c, step_e


@pytest.mark.parametrize("dynamic,backend", [(True, "interpret"), (None, "interpret"),
                                             (True, "numba")])
def test_training_step_with_a_smaller_last_batch(dynamic, backend):
    mc, me, step_c, step_e = _training(dynamic, backend)
    epoch = [8, 8, 8, 5]
    for n in epoch + epoch:
        x, t = aotgrad.randn(n, 6), aotgrad.randint(0, 3, (n,))
        lc, le = step_c(x, t), step_e(x, t)
        assert_close(float(lc), float(le), rtol=1e-5, atol=0, equal_nan=True)
        for a, b in zip(mc.parameters(), me.parameters()):
            assert_close(a.detach().numpy(), b.detach().numpy(), rtol=1e-5, atol=1e-6,
                         equal_nan=True)
    # the first step creates Adam's state (a trace that is not cached), then: dynamic=True
    # one program for both sizes; None: the static one, then one with the batch symbolic
    assert step_c.stats.compiles == (2 if dynamic else 3)
    assert step_c.stats.eager_fallbacks == 0
