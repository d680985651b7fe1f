"""A symbolic program (dynamic=True) takes the generated straight-line call and the fast
`loss.backward()`, not the general call and engine, and still equals eager over sizes."""
import numpy as np
import pytest

import aotgrad
from aotgrad import nn
from aotgrad.testing import assert_close


def _programs(f):
    return [p for entry in f.cache.values() for p in (entry if isinstance(entry, list) else [entry])]


def _count_fast_backwards(plan):
    """Wrap plan.fast_backward (already made) and the fused call's fast backward
    (compiler/fused_call.py) to count the backwards they served."""
    served = []

    def counting(inner):
        def counted(t, retain_graph):
            ok = inner(t, retain_graph)
            served.append(ok)
            return ok
        return counted
    plan.fast_backward = counting(plan.fast_backward)
    plan.fused_backward = counting(plan.fused_backward)
    return served


@pytest.mark.parametrize("backend", ["interpret", "numba"])
def test_symbolic_mlp_takes_the_generated_call_and_fast_backward(backend):
    aotgrad.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 3))

    @aotgrad.compile(backend=backend, dynamic=True)
    def loss_fn(x, t):
        return nn.functional.cross_entropy(model(x), t)

    served = None
    for n in (4, 7, 2, 9, 7):
        x = aotgrad.randn(n, 6, requires_grad=True)
        t = aotgrad.randint(0, 3, (n,))
        model.zero_grad()
        out = loss_fn(x, t)
        out.backward()
        got = [x.grad.numpy().copy()] + [p.grad.numpy().copy() for p in model.parameters()]
        if served is None:  # (the fast backward is made on the first backward)
            (prog,) = _programs(loss_fn)
            plan = prog.call_plan()
            assert plan.call is not None and "straight-line" in str(plan) \
                and "symbolic sizes" in str(plan)
            served = _count_fast_backwards(plan)
        model.zero_grad()
        xe = x.detach().clone().requires_grad_(True)
        ref = nn.functional.cross_entropy(model(xe), t)
        ref.backward()
        want = [xe.grad.numpy()] + [p.grad.numpy() for p in model.parameters()]
        assert_close(out.detach().numpy(), ref.detach().numpy(), rtol=1e-5, atol=1e-6,
                     equal_nan=True)
        for a, b in zip(got, want):
            assert a.shape == b.shape and a.dtype == b.dtype
            assert_close(a, b, rtol=1e-5, atol=1e-6, equal_nan=True)
    assert loss_fn.stats.compiles == 1
    # the call specialised to the guard key (symbolic dims any size) serves the calls
    assert loss_fn._specialised is not None and loss_fn._specialised.program is prog
    assert "values = (" in loss_fn._specialised.source  # the sizes read once, inline
    assert served == [True] * 4  # every later backward took the fast path


def test_symbolic_program_with_two_outputs_and_no_grad():
    """Several differentiable outputs (implicit grads per output shapes), and no_grad calls
    (the inference program with the symbol values)."""
    w = aotgrad.randn(4, 3, requires_grad=True)

    @aotgrad.compile(backend="interpret", dynamic=True)
    def f(x):
        y = x @ w
        return y.tanh(), (y * y).sum()

    for n in (3, 5, 8):
        x = aotgrad.randn(n, 4, requires_grad=True)
        a, s = f(x)
        s.backward()
        xe = x.detach().clone().requires_grad_(True)
        we = w.detach().clone().requires_grad_(True)
        ye = xe @ we
        (ye * ye).sum().backward()
        assert_close(a.detach().numpy(), ye.tanh().detach().numpy(), rtol=1e-5, atol=0,
                     equal_nan=True)
        assert_close(x.grad.numpy(), xe.grad.numpy(), rtol=1e-5, atol=1e-6, equal_nan=True)
        assert_close(w.grad.numpy(), we.grad.numpy(), rtol=1e-5, atol=1e-6, equal_nan=True)
        w.grad = None
        x2 = aotgrad.randn(n, 4, requires_grad=True)
        a2, _ = f(x2)
        a2.sum().backward()  # a non-scalar output's gradient: the general engine
        xe2 = x2.detach().clone().requires_grad_(True)
        (xe2 @ w).tanh().sum().backward()
        assert_close(x2.grad.numpy(), xe2.grad.numpy(), rtol=1e-5, atol=1e-6, equal_nan=True)
        w.grad = None
        with aotgrad.no_grad():
            a3, s3 = f(x)
        assert not a3.requires_grad
        assert_close(s3.numpy(), s.detach().numpy(), rtol=1e-5, atol=0, equal_nan=True)
    progs = _programs(f)  # one with gradients, one under no_grad
    assert len(progs) == 2 and all(p.call_plan().call is not None for p in progs)
    assert f.stats.compiles == 2

