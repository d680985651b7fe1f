"""float16/bfloat16 compiled: kernels compute in float32 and the program stores its results
in the 16-bit dtype; compiled equals eager within the dtype's tolerance, with no graph
break (fullgraph=True), forward, gradients and a CPU autocast training loop."""
import numpy as np
import pytest

import aotgrad as ag
from aotgrad import nn
from aotgrad.testing import assert_close

LOW = ("bfloat16", "float16")
# the numba compiles of both dtypes cost the default suite ~1 min: bfloat16's under -m slow
LOW_NUMBA = (pytest.param("bfloat16", marks=pytest.mark.slow), "float16")
TOL = {"bfloat16": 2e-2, "float16": 3e-3}   # a few units in the last place, relative


def _close(a, b, dtype):
    assert a.dtype is b.dtype
    assert_close(a.float().detach().numpy(), b.float().detach().numpy(), rtol=TOL[dtype],
                 atol=TOL[dtype], equal_nan=True)


@pytest.mark.parametrize("dtype, backend", [(d, "interpret") for d in LOW] + [
    pytest.param("bfloat16", "numba", marks=pytest.mark.slow), ("float16", "numba")])
def test_forward_and_gradients(dtype, backend):
    d = getattr(ag, dtype)

    def f(x, w, b):
        h = ag.tanh(x @ w + b)
        return (h * h).sum(dim=1).mean(), h.float().softmax(-1)

    ag.manual_seed(0)
    vals = [ag.randn(6, 5), ag.randn(5, 4) * 0.5, ag.randn(4) * 0.1]
    eager = [v.to(d).requires_grad_() for v in vals]
    comp = [v.to(d).requires_grad_() for v in vals]
    e = f(*eager)
    c = ag.compile(f, backend=backend, fullgraph=True)(*comp)
    for a, b in zip(e, c):
        _close(a, b, dtype)
    e[0].backward()
    c[0].backward()
    for a, b in zip(eager, comp):
        _close(a.grad, b.grad, dtype)


@pytest.mark.parametrize("dtype", LOW_NUMBA)
def test_autocast_training_loop_compiled(dtype):
    d = getattr(ag, dtype)
    ag.manual_seed(1)
    x, t = ag.randn(32, 4), ag.randn(32, 1)
    runs = {}
    for mode in ("eager", "compiled"):
        ag.manual_seed(2)
        model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
        opt = ag.optim.SGD(model.parameters(), lr=0.1)

        def step(x, t):
            opt.zero_grad()
            with ag.autocast(device_type="cpu", dtype=d):
                out = model(x)
                loss = nn.functional.mse_loss(out, t)
            loss.backward()
            opt.step()
            return loss, out

        run = step if mode == "eager" else ag.compile(step, fullgraph=True)
        runs[mode] = [run(x, t) for _ in range(4)], [p.detach() for p in model.parameters()]
    for (le, oe), (lc, oc) in zip(runs["eager"][0], runs["compiled"][0]):
        assert le.dtype is lc.dtype is ag.float32 and oe.dtype is oc.dtype is d
        _close(le, lc, dtype)
        _close(oe, oc, dtype)
    for a, b in zip(runs["eager"][1], runs["compiled"][1]):
        _close(a, b, dtype)
