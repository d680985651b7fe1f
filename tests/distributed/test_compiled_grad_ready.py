"""A compiled backward hands a leaf's gradient to the leaf (its .grad, then its
post-accumulate-grad hooks) as soon as the program has computed it, where the leaf has such
hooks: what DDP(aotgrad.compile(model)) overlaps its all-reduces with. No MPI needed."""
import numpy as np
import pytest

import aotgrad
from aotgrad import nn
from aotgrad.testing import assert_close


def _mlp(seed=0, dtype=aotgrad.float64):
    aotgrad.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 8), nn.Tanh(),
                         nn.Linear(8, 3)).to(dtype)


def _twins(dtype=aotgrad.float64):
    model, ref = _mlp(0, dtype), _mlp(1, dtype)
    ref.load_state_dict(model.state_dict())
    return model, ref


@pytest.mark.parametrize("backend", ["interpret", "numba"])
def test_hooks_fire_while_the_compiled_backward_runs(backend):
    model, ref = _twins()
    compiled = aotgrad.compile(model, backend=backend)
    params = list(model.parameters())
    names = {id(p): n for n, p in model.named_parameters()}
    log = []
    for p in params:
        # (what each hook sees: which parameters hold a gradient at that moment)
        p.register_post_accumulate_grad_hook(
            lambda t: log.append((names[id(t)], [q.grad is not None for q in params])))
    x = aotgrad.randn(5, 4, dtype=aotgrad.float64)
    for step in range(2):
        log.clear()
        out = compiled(x)
        out.grad_fn.register_hook(lambda *_: log.append(("returned", None)))
        out.pow(2).sum().backward()
        ref(x).pow(2).sum().backward()
        order = [n for n, _ in log]
        # every hook before the program returned, the last layer's first
        assert order[-1] == "returned" and len(order) == len(params) + 1, order
        assert max(order.index("4.weight"), order.index("4.bias")) < \
            min(order.index("0.weight"), order.index("0.bias")), order
        if step == 0:   # the first layer had no gradient when the last layer's hooks ran
            assert not log[order.index("4.weight")][1][0], log
        for p, q in zip(params, ref.parameters()):   # (the second step accumulates)
            assert_close(p.grad.numpy(), q.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_without_hooks_the_program_runs_as_before():
    model, _ = _twins()
    compiled = aotgrad.compile(model, backend="numba")
    x = aotgrad.randn(5, 4, dtype=aotgrad.float64, requires_grad=True)
    out = compiled(x)
    out.grad_fn.register_hook(lambda *_: None)   # the general engine, no fast path
    out.sum().backward()
    plan = compiled.ir(x).compiled_graph("backward").plan
    assert not any(isinstance(key, tuple) for key in plan._runners), plan._runners


def test_a_leaf_with_a_second_path_gets_its_whole_gradient_once():
    # the last layer's weight is also read eagerly outside the compiled model: its hook
    # must fire once, with both contributions summed (after the program, as eagerly)
    model, ref = _twins()
    compiled = aotgrad.compile(model, backend="interpret")
    calls = {}
    for name, p in model.named_parameters():
        p.register_post_accumulate_grad_hook(
            lambda t, name=name: calls.__setitem__(name, calls.get(name, 0) + 1))
    x = aotgrad.randn(5, 4, dtype=aotgrad.float64)
    for m, call in ((model, compiled), (ref, ref)):
        (call(x).pow(2).sum() + m[4].weight.pow(2).sum()).backward()
    assert calls == {n: 1 for n, _ in model.named_parameters()}, calls
    for p, q in zip(model.parameters(), ref.parameters()):
        assert_close(p.grad.numpy(), q.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_tensor_hooks_run_before_the_early_accumulation():
    model, ref = _twins()
    compiled = aotgrad.compile(model, backend="interpret")
    seen = []
    for m in (model, ref):
        w = m[4].weight
        w.register_hook(lambda g: g * 3)
        w.register_post_accumulate_grad_hook(lambda t: seen.append(t.grad.numpy().copy()))
    x = aotgrad.randn(5, 4, dtype=aotgrad.float64)
    compiled(x).pow(2).sum().backward()
    ref(x).pow(2).sum().backward()
    assert_close(seen[0], seen[1], rtol=1e-12, atol=1e-12)
    for p, q in zip(model.parameters(), ref.parameters()):
        assert_close(p.grad.numpy(), q.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_autograd_grad_does_not_accumulate_nor_call_the_hooks():
    model, ref = _twins()
    compiled = aotgrad.compile(model, backend="interpret")
    calls = []
    for p in model.parameters():
        p.register_post_accumulate_grad_hook(lambda t: calls.append(t))
    x = aotgrad.randn(5, 4, dtype=aotgrad.float64)
    got = aotgrad.autograd.grad(compiled(x).pow(2).sum(), list(model.parameters()))
    want = aotgrad.autograd.grad(ref(x).pow(2).sum(), list(ref.parameters()))
    assert not calls and all(p.grad is None for p in model.parameters())
    for g, w in zip(got, want):
        assert_close(g.numpy(), w.numpy(), rtol=1e-12, atol=1e-12)


def test_float32_gradients_stay_float32_and_a_hook_error_propagates():
    model, ref = _twins(aotgrad.float32)
    compiled = aotgrad.compile(model, backend="numba")
    seen = []
    for p in model.parameters():
        p.register_post_accumulate_grad_hook(lambda t: seen.append(t.grad.dtype))
    x = aotgrad.randn(5, 4)
    compiled(x).pow(2).sum().backward()
    ref(x).pow(2).sum().backward()
    assert seen == [aotgrad.float32] * len(seen) and len(seen) == 6
    for p, q in zip(model.parameters(), ref.parameters()):
        assert_close(p.grad.numpy(), q.grad.numpy(), rtol=1e-5, atol=1e-6)

    def fail(t):
        raise ValueError("hook fails on purpose")
    model[4].bias.register_post_accumulate_grad_hook(fail)
    with pytest.raises(ValueError, match="hook fails on purpose"):
        compiled(x).pow(2).sum().backward()


def test_a_module_compiled_and_called_twice_hands_out_after_both_calls():
    # two compiled calls feed every parameter: neither call's gradient is the whole one,
    # so the hooks fire once each, with the sum, as eagerly
    model, ref = _twins()
    compiled = aotgrad.compile(model, backend="interpret")
    calls = {}
    for name, p in model.named_parameters():
        p.register_post_accumulate_grad_hook(
            lambda t, name=name: calls.__setitem__(name, calls.get(name, 0) + 1))
    x, z = aotgrad.randn(5, 4, dtype=aotgrad.float64), aotgrad.randn(5, 4, dtype=aotgrad.float64)
    (compiled(x) * compiled(z)).sum().backward()
    (ref(x) * ref(z)).sum().backward()
    assert calls == {n: 1 for n, _ in model.named_parameters()}, calls
    for p, q in zip(model.parameters(), ref.parameters()):
        assert_close(p.grad.numpy(), q.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_retain_graph_twice_and_an_output_without_gradient():
    class TwoOut(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(4, 3), nn.Linear(4, 3)

        def forward(self, x):
            return self.a(x), self.b(x)
    aotgrad.manual_seed(0)
    model = TwoOut().double()
    ref = TwoOut().double()
    ref.load_state_dict(model.state_dict())
    compiled = aotgrad.compile(model, backend="interpret")
    fired = []
    for name, p in model.named_parameters():
        p.register_post_accumulate_grad_hook(lambda t, name=name: fired.append(name))
    x = aotgrad.randn(5, 4, dtype=aotgrad.float64)
    loss = compiled(x)[0].pow(2).sum()      # b's output gets no gradient: b keeps no .grad
    loss.backward(retain_graph=True)
    loss.backward()
    want = ref(x)[0].pow(2).sum()
    want.backward(retain_graph=True)
    want.backward()
    assert sorted(fired) == sorted(["a.weight", "a.bias"] * 2), fired
    assert model.b.weight.grad is None and model.b.bias.grad is None
    for p, q in zip(model.a.parameters(), ref.a.parameters()):
        assert_close(p.grad.numpy(), q.grad.numpy(), rtol=1e-12, atol=1e-12)
