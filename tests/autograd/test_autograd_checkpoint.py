"""aotgrad.utils.checkpoint without PyTorch: recomputation counts, closed-form gradients,
the random state replayed for the recomputation, keyword arguments, nested checkpoints, and
a compiled function that checkpoints (same result as eager)."""
import warnings

import numpy as np
import pytest

import aotgrad as ag
from aotgrad.utils.checkpoint import checkpoint, checkpoint_sequential
from aotgrad.testing import assert_close


def _x(*v):
    return ag.tensor(list(v), dtype=ag.float64, requires_grad=True)


@pytest.mark.parametrize("reentrant", [True, False])
def test_recomputes_once_in_backward_with_closed_form_grads(reentrant):
    calls = []

    def block(t, w):
        calls.append(1)
        return (t * w).sin()

    x, w = _x(0.3, -1.2, 2.0), _x(1.5, 0.5, -0.7)
    y = checkpoint(block, x, w, use_reentrant=reentrant)
    assert len(calls) == 1
    y.sum().backward()
    assert len(calls) == 2
    c = np.cos(x.detach().numpy() * w.detach().numpy())
    assert_close(x.grad.numpy(), c * w.detach().numpy(), rtol=1e-7, atol=0, equal_nan=True)
    assert_close(w.grad.numpy(), c * x.detach().numpy(), rtol=1e-7, atol=0, equal_nan=True)


def test_non_reentrant_keeps_no_intermediates_and_serves_grad():
    packed = []

    def block(t):
        return t.exp().exp()

    x = _x(0.1, 0.2)
    # an outer pair of hooks sees nothing of what the checkpointed block saves
    with ag.autograd.graph.saved_tensors_hooks(lambda t: packed.append(1) or t, lambda t: t):
        y = checkpoint(block, x, use_reentrant=False)
    assert packed == []
    g, = ag.autograd.grad(y.sum(), x)
    e = np.exp(x.detach().numpy())
    assert_close(g.numpy(), np.exp(e) * e, rtol=1e-7, atol=0, equal_nan=True)


def test_random_state_replayed_for_the_recomputation():
    drop = ag.nn.Dropout(0.5)
    x = ag.ones(200, requires_grad=True)
    y = checkpoint(lambda t: drop(t) * 3, x, use_reentrant=False)
    y.sum().backward()
    kept = y.detach().numpy() != 0
    # the gradient is that of the forward's own mask (same random draws when recomputed)
    assert_close(x.grad.numpy(), np.where(kept, 6.0, 0.0), rtol=1e-7, atol=0, equal_nan=True,
                 check_dtype=False)


def test_kwargs_and_nesting():
    def inner(t):
        return t * t

    def outer(t, *, scale):
        return checkpoint(inner, t, use_reentrant=False) * scale

    x = _x(1., -2.)
    y = checkpoint(outer, x, scale=3.0, use_reentrant=False)
    y.sum().backward()
    assert_close(x.grad.numpy(), 6 * x.detach().numpy(), rtol=1e-7, atol=0, equal_nan=True)


def test_reentrant_rejects_kwargs_and_warns_without_tensor_needing_grad():
    with pytest.raises(ValueError, match="Unexpected keyword arguments: k"):
        checkpoint(lambda t, k: t, ag.ones(1), k=1, use_reentrant=True)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        out = checkpoint(lambda t: t * 2, ag.ones(2), use_reentrant=True)
    assert not out.requires_grad
    assert any("None of the inputs have requires_grad=True" in str(c.message) for c in w)


def test_use_reentrant_must_be_passed_explicitly_or_it_warns():
    with pytest.warns(UserWarning, match="use_reentrant parameter should be passed"):
        checkpoint(lambda t: t, _x(1.))


@pytest.mark.parametrize("reentrant", [True, False])
def test_checkpoint_sequential_matches_plain_run(reentrant):
    ag.manual_seed(0)
    model = ag.nn.Sequential(ag.nn.Linear(3, 5), ag.nn.Tanh(), ag.nn.Linear(5, 4),
                             ag.nn.Sigmoid(), ag.nn.Linear(4, 1))
    x = ag.randn(6, 3, requires_grad=True)
    ref = model(x).sum()
    ref_grads = ag.autograd.grad(ref, [x] + list(model.parameters()))
    out = checkpoint_sequential(model, 3, x, use_reentrant=reentrant)
    assert_close(out.sum().item(), ref.item(), rtol=1e-6, atol=0, equal_nan=True)
    out.sum().backward()
    for g, t in zip(ref_grads, [x] + list(model.parameters())):
        assert_close(t.grad.numpy(), g.numpy(), rtol=1e-5, atol=1e-6, equal_nan=True)


def test_compiled_function_that_checkpoints_matches_eager():
    lin = ag.nn.Linear(4, 3)

    def step(x):
        h = checkpoint(lambda t: lin(t).tanh(), x, use_reentrant=False)
        return (h * h).sum()

    x = ag.randn(5, 4)
    eager = step(x)
    eager.backward()
    eager_grads = [p.grad.numpy().copy() for p in lin.parameters()]
    for p in lin.parameters():
        p.grad = None
    compiled = ag.compile(step, backend="interpret")
    out = compiled(x)
    out.backward()
    assert_close(out.item(), eager.item(), rtol=1e-6, atol=0, equal_nan=True)
    for p, g in zip(lin.parameters(), eager_grads):
        assert_close(p.grad.numpy(), g, rtol=1e-5, atol=1e-6, equal_nan=True)


def test_reentrant_checkpoint_refuses_grad_and_backward_inputs():
    x = _x(0.5, 1.0)
    y = checkpoint(lambda t: t.exp(), x, use_reentrant=True).sum()
    with pytest.raises(RuntimeError, match="use_reentrant=True"):
        ag.autograd.grad(y, x, retain_graph=True)
    with pytest.raises(RuntimeError, match="use_reentrant=True"):
        y.backward(inputs=[x], retain_graph=True)
    y.backward()  # a plain backward is fine
    assert_close(x.grad.numpy(), np.exp(x.detach().numpy()), rtol=1e-7, atol=0, equal_nan=True)


def test_non_reentrant_retain_graph_and_double_backward():
    x = _x(0.2, -0.4)
    y = checkpoint(lambda t: t.sin(), x, use_reentrant=False).sum()
    y.backward(retain_graph=True)
    y.backward()
    assert_close(x.grad.numpy(), 2 * np.cos(x.detach().numpy()), rtol=1e-7, atol=0, equal_nan=True)
    y = checkpoint(lambda t: t.sin(), x, use_reentrant=False).sum()
    g, = ag.autograd.grad(y, x, create_graph=True)
    gg, = ag.autograd.grad(g.sum(), x)
    assert_close(gg.numpy(), -np.sin(x.detach().numpy()), rtol=1e-7, atol=0, equal_nan=True)


def test_set_multithreading_enabled_is_a_context_manager_and_a_function():
    with ag.autograd.set_multithreading_enabled(False):
        x = _x(1.0)
        (x * 2).backward()
    ag.autograd.set_multithreading_enabled(True)
    assert x.grad.item() == 2.0


def test_recomputation_that_saves_otherwise_raises():
    from aotgrad.utils.checkpoint import CheckpointError
    state = {"n": 0}

    def unstable(t):
        state["n"] += 1
        return t.exp() if state["n"] == 1 else (t * t).exp()   # one more saved tensor

    def reshaping(t):
        state["n"] += 1
        return (t if state["n"] == 1 else t[:1]).exp()   # a saved tensor of another shape

    for fn in (unstable, reshaping):
        state["n"] = 0
        y = checkpoint(fn, _x(0.5, 1.0), use_reentrant=False)
        with pytest.raises(CheckpointError):
            y.sum().backward()


def test_early_stop_and_debug_switches_leave_gradients_unchanged():
    from aotgrad.utils.checkpoint import set_checkpoint_debug_enabled, set_checkpoint_early_stop
    x = _x(0.1, 0.9)
    with set_checkpoint_early_stop(False), set_checkpoint_debug_enabled(True):
        y = checkpoint(lambda t: t.exp() * t, x, use_reentrant=False)
    y.sum().backward()
    e = np.exp(x.detach().numpy())
    assert_close(x.grad.numpy(), e * (x.detach().numpy() + 1), rtol=1e-7, atol=0, equal_nan=True)
