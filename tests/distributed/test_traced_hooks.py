"""A post-accumulate-grad hook that records into the trace (`records_into_trace = True`, as
DDP's does) runs while a compiled step's backward is traced, and its effect becomes part of
the program; any other hook still breaks the graph. No MPI needed."""
import warnings

import numpy as np

import aotgrad
from aotgrad import nn
from aotgrad.runtime.grad_accumulation import note_grad_write
from aotgrad.testing import assert_close


class DoubleGrad:
    """Doubles the parameter's gradient, eagerly or, traced, as steps of the program."""
    records_into_trace = True

    def __init__(self):
        self.calls = 0

    def __call__(self, p):
        self.calls += 1
        with aotgrad.no_grad():
            g = p.grad * 2
        note_grad_write(p)
        p._grad = g


def _model_and_step(hook_factory):
    aotgrad.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 2)).double()
    hooks = [hook_factory() for _ in model.parameters()]
    for p, h in zip(model.parameters(), hooks):
        p.register_post_accumulate_grad_hook(h)
    opt = aotgrad.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def step(x):
        opt.zero_grad()
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        return loss
    return model, hooks, step


def test_a_recording_hook_becomes_part_of_the_compiled_step():
    ref, _, ref_step = _model_and_step(DoubleGrad)
    mine, hooks, step = _model_and_step(DoubleGrad)
    compiled = aotgrad.compile(step, backend="interpret")
    rng = np.random.default_rng(0)
    for _ in range(3):
        x = aotgrad.tensor(rng.standard_normal((5, 4)))
        ref_step(x)
        with warnings.catch_warnings():
            warnings.simplefilter("error")   # no graph break
            compiled(x)
    assert compiled.eager_calls == 0
    # traced once or twice (the optimizer's momentum appears after the first step), then
    # cached: the hooks ran at trace time only
    assert all(h.calls == compiled.n_traces for h in hooks), [h.calls for h in hooks]
    for p, q in zip(ref.parameters(), mine.parameters()):
        assert_close(q.detach().numpy(), p.detach().numpy(), rtol=1e-12, atol=1e-12, equal_nan=True)


def test_an_ordinary_hook_still_breaks_the_graph():
    def plain():
        return lambda p: None
    _, _, step = _model_and_step(plain)
    compiled = aotgrad.compile(step, backend="interpret")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled(aotgrad.randn(5, 4, dtype=aotgrad.float64))
    assert compiled.eager_calls == 1
    assert any("post-accumulate-grad hook" in str(w.message) for w in caught)
