"""Non-reentrant checkpoint's recomputation, as PyTorch's: early stop (the function stops
once every saved tensor is rebuilt; `early_stop=` and `set_checkpoint_early_stop`), the
determinism check, the very argument tensors given to the recomputation, the autocast
state of the forward, a backward inside the checkpointed function, and nested checkpoints
(against closed forms and plain autograd)."""
import math

import pytest

import aotgrad as ag
from aotgrad.utils.checkpoint import (CheckpointError, checkpoint, set_checkpoint_early_stop)


def _counting():
    calls = [0]

    def clone(x):
        calls[0] += 1
        return x.clone()

    def fn(x):  # sin saves x, cos saves sin(x); the clone after them saves nothing
        return clone(x.sin().cos())
    return fn, calls


@pytest.mark.parametrize("outer,arg,runs", [
    (None, {}, 1), (None, {"early_stop": False}, 2), (None, {"early_stop": True}, 1),
    (False, {}, 2), (True, {}, 1),
    (False, {"early_stop": True}, 2),   # the context manager wins over the argument
    (True, {"early_stop": False}, 1),
])
def test_early_stop_skips_the_rest_of_the_function(outer, arg, runs):
    fn, calls = _counting()
    a = ag.tensor(1.0, requires_grad=True)
    if outer is None:
        out = checkpoint(fn, a, use_reentrant=False, **arg)
    else:
        with set_checkpoint_early_stop(outer):
            out = checkpoint(fn, a, use_reentrant=False, **arg)
    out.backward()
    assert calls[0] == runs
    assert a.grad.item() == pytest.approx(-math.sin(math.sin(1.0)) * math.cos(1.0))


def test_innermost_early_stop_setting_applies():
    fn, calls = _counting()
    a = ag.tensor(1.0, requires_grad=True)
    with set_checkpoint_early_stop(False):
        with set_checkpoint_early_stop(True):
            out = checkpoint(fn, a, use_reentrant=False, early_stop=False)
    out.backward()
    assert calls[0] == 1


def _changing(first, then):
    runs = [0]

    def fn(x):
        runs[0] += 1
        return first(x) if runs[0] == 1 else then(x)
    return fn


def _three(x):
    return x.sin().exp().sin()


def _two(x):
    return x.sin().exp()


@pytest.mark.parametrize("early_stop", [True, False])
def test_determinism_check(early_stop):
    a = ag.randn(1, requires_grad=True)

    def run(fn):
        checkpoint(fn, a, use_reentrant=False, early_stop=early_stop).backward()
    with pytest.raises(CheckpointError, match="A different number of tensors was saved"):
        run(_changing(_three, _two))
    if early_stop:  # the recomputation stops before the extra saved tensor
        run(_changing(_two, _three))
    else:
        with pytest.raises(CheckpointError, match="more tensors during recomputation"):
            run(_changing(_two, _three))
    with pytest.raises(CheckpointError, match="tensors have different metadata"):
        run(_changing(_two, lambda x: x.sin() * ag.tensor([1.0, 2.0])))
    # the same shapes saved by another op (exp's result, then mul's operand): caught too
    with pytest.raises(CheckpointError, match="by mul"):
        run(_changing(lambda x: x.exp(), lambda x: (x * x).exp()))


def test_recomputation_gets_the_argument_tensors_themselves():
    seen = []

    class Keep(ag.autograd.Function):
        @staticmethod
        def forward(ctx, x, y):
            ctx.save_for_backward(y)
            return x * 1

        @staticmethod
        def backward(ctx, g):
            seen.append(ctx.saved_tensors[0])
            return g, None
    a, b = ag.tensor(1.0, requires_grad=True), ag.tensor(1.0)
    checkpoint(Keep.apply, a, b, use_reentrant=False).backward()
    assert seen[0] is b and a.grad.item() == 1.0


@pytest.mark.parametrize("reentrant", [True, False])
@pytest.mark.parametrize("enabled", [True, False])
def test_recomputation_runs_under_the_forward_autocast(reentrant, enabled):
    dtypes = []

    def fn(x, y):
        h = ag.mm(x, y)
        dtypes.append(h.dtype)  # (early stop ends the recomputation in the next mm)
        return ag.mm(h, y).float()
    x, y = (ag.randn(3, 3, requires_grad=True) for _ in range(2))
    with ag.autocast(device_type="cpu", dtype=ag.bfloat16, enabled=enabled):
        loss = checkpoint(fn, x, y, use_reentrant=reentrant).sum()
    loss.backward()
    expected = ag.bfloat16 if enabled else ag.float32
    assert dtypes == [expected, expected] and x.grad.dtype is ag.float32


def _grad(fn):
    def g(x):
        with ag.enable_grad():
            (d,) = ag.autograd.grad(fn(x), (x,), create_graph=True)
        return d
    return g


def _ck(fn):
    return lambda x: checkpoint(fn, x, use_reentrant=False)


def _with_inner_backward(x):
    a = x.sin().exp().sin()
    ag.autograd.grad(a, x)  # a backward inside the checkpointed function
    return x.sin()


@pytest.mark.parametrize("early_stop", [True, False])
@pytest.mark.parametrize("fn", [_three, _with_inner_backward])
def test_nested_checkpoints_and_grads_match_plain_autograd(early_stop, fn):
    with set_checkpoint_early_stop(early_stop):
        x = ag.tensor(0.7, requires_grad=True)
        cases = [(fn, [_ck(fn), _ck(_ck(fn))]),
                 (_grad(fn), [_grad(_ck(fn)), _grad(_ck(_ck(fn)))]),
                 (_grad(_grad(fn)), [_grad(_ck(_grad(fn))), _ck(_grad(_grad(_ck(fn))))])]
        for expected_fn, variants in cases:
            expected = expected_fn(x).item()
            for variant in variants:
                assert variant(x).item() == pytest.approx(expected, rel=1e-6)
