"""Kernels are cached by their structure (a module per kernel, named by its source): a
second trace whose kernels are unchanged compiles nothing."""
import pytest

import aotgrad
from aotgrad import nn
from aotgrad.codegen import cache
from aotgrad.testing import assert_close


@pytest.fixture
def cold(empty_cache, monkeypatch):
    cache.stats.reset()
    return empty_cache


def _mlp_step():
    aotgrad.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 3))
    opt = aotgrad.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def step(x, y):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss
    return step, model


def test_a_second_trace_of_the_same_program_compiles_nothing(cold, monkeypatch):
    monkeypatch.setenv("AOTGRAD_BACKGROUND_COMPILE", "0")
    x, y = aotgrad.randn(4, 8), aotgrad.tensor([0, 2, 1, 0])
    step, _ = _mlp_step()
    first = aotgrad.compile(step)
    l1 = first(x, y)
    assert cache.stats.compiled > 0 and cache.stats.loads["new"] > 0
    cache.stats.reset()
    # a new compiled function: traced and partitioned again, its kernels the same text
    step2, _ = _mlp_step()
    second = aotgrad.compile(step2)
    l2 = second(x, y)
    assert cache.stats.compiled == 0, cache.stats
    assert set(cache.stats.loads) == {"memory"}, cache.stats
    assert float(l1) == float(l2)


def test_a_retrace_for_optimizer_state_compiles_only_the_changed_kernels(cold, monkeypatch):
    monkeypatch.setenv("AOTGRAD_BACKGROUND_COMPILE", "0")
    x, y = aotgrad.randn(4, 8), aotgrad.tensor([0, 2, 1, 0])
    step, model = _mlp_step()
    compiled = aotgrad.compile(step)
    compiled(x, y)              # no momentum buffers yet
    cache.stats.reset()
    compiled(x, y)              # momentum buffers appeared: a second trace
    assert cache.stats.loads["memory"] > 0, cache.stats       # forward kernels reused
    assert cache.stats.compiled <= cache.stats.loads["new"], cache.stats
    eager_step, eager_model = _mlp_step()
    eager_step(x, y)
    eager_step(x, y)
    for p, q in zip(model.parameters(), eager_model.parameters()):
        assert_close(p.detach().numpy(), q.detach().numpy(), rtol=1e-5, atol=1e-6, equal_nan=True)
