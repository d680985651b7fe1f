"""The engine's reentrant backward (a backward started inside a node's backward) to any depth,
and `Variable._execution_engine.queue_callback` (callbacks that run when a pass ends)."""
import threading
import warnings

import pytest

import aotgrad as ag
from aotgrad.runtime.backward_reentrant import MAX_REENTRANT_DEPTH


def _chain(T, levels, seen):
    """A custom Function whose backward runs a nested backward through itself, `levels`
    deep; `seen` gets (is_grad_enabled, thread) at every level."""
    class Down(T.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            with T.enable_grad():
                ctx.x = T.autograd.Variable(x.detach(), requires_grad=True) - 1
            return ctx.x.detach()

        @staticmethod
        def backward(ctx, g):
            seen.append((T.is_grad_enabled(), threading.get_ident()))
            if ctx.x < 0:
                return g
            with T.enable_grad():
                Down.apply(ctx.x).sum().backward()
            return 2 * g
    return Down


@pytest.mark.parametrize("levels", [5, 3 * MAX_REENTRANT_DEPTH + 7])
def test_deep_reentrant_backward_has_no_depth_limit(levels):
    seen = []
    x = ag.tensor(float(levels), requires_grad=True)
    _chain(ag, levels, seen).apply(x).sum().backward()
    assert len(seen) == levels + 1
    assert x.grad.item() == 2.0  # the outer level's own gradient, untouched by the nested
    assert all(enabled is False for enabled, _ in seen)  # each pass runs without grad mode
    threads = {ident for _, ident in seen}
    assert len(threads) == 1 + levels // MAX_REENTRANT_DEPTH


def test_nested_pass_on_a_new_stack_keeps_the_callers_state():
    """Past the depth limit the nested pass runs on another thread: the saved-tensor hooks,
    anomaly mode and grad mode of the caller still apply there, and its errors arrive."""
    depth = MAX_REENTRANT_DEPTH + 3
    packed, modes = [], []

    class Nest(ag.autograd.Function):
        @staticmethod
        def forward(ctx, x, n):
            ctx.n = n
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            modes.append((ag.is_anomaly_enabled(), ag.is_grad_enabled()))
            if ctx.n == 0:
                raise ValueError("bottom reached")
            with ag.enable_grad():
                y = ag.tensor([1.0, 2.0], requires_grad=True)
                (Nest.apply(y, ctx.n - 1) * y).sum().backward()
            return g, None

    x = ag.tensor([1.0, 2.0], requires_grad=True)
    with ag.autograd.graph.saved_tensors_hooks(lambda t: packed.append(1) or t, lambda t: t):
        with ag.autograd.detect_anomaly():
            out = Nest.apply(x, depth).sum()
            with pytest.raises(ValueError, match="bottom reached"), \
                    warnings.catch_warnings():
                warnings.simplefilter("ignore")  # anomaly mode's report at every level
                out.backward()
    assert len(modes) == depth + 1
    assert all(m == (True, False) for m in modes)
    assert len(packed) == 2 * depth  # (y * out) saves both operands at every nested level


def test_reentrant_backward_runs_before_older_nodes(torch):
    """The nested passes of the newer branch finish before the older branch's node runs."""
    def order(T):
        events = []

        class Plain(T.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x.clone()

            @staticmethod
            def backward(ctx, g):
                events.append("plain")
                return g

        class Again(T.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                with T.enable_grad():
                    ctx.x = T.autograd.Variable(x.detach(), requires_grad=True) - 1
                return ctx.x.detach()

            @staticmethod
            def backward(ctx, g):
                events.append(f"again {ctx.x.item():g}")
                if ctx.x < 0:
                    return g
                with T.enable_grad():
                    Again.apply(ctx.x).backward()
                return g
        (Plain.apply(T.tensor(6.0, requires_grad=True)) *
         Again.apply(T.tensor(4.0, requires_grad=True))).backward()
        return events
    ours = order(ag)
    assert ours == [f"again {v}" for v in (3, 2, 1, 0, -1)] + ["plain"]
    assert ours == order(torch)


def _identity_queueing(T, queue):
    class Queue(T.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            queue()
            return g
    return Queue


def test_queued_callbacks_run_after_every_node_in_order():
    events = []
    engine = ag.autograd.Variable._execution_engine
    x = ag.tensor([1.0, 2.0], requires_grad=True)

    def second():
        events.append(("second", x.grad.tolist()))

    def first():
        events.append(("first", x.grad.tolist()))
        engine.queue_callback(second)  # queued by a callback: runs in the same pass

    def queue():
        events.append("node")
        engine.queue_callback(first)
    (_identity_queueing(ag, queue).apply(x) * 3).sum().backward()
    # the leaf's .grad is written before the callbacks run
    assert events == ["node", ("first", [3.0, 3.0]), ("second", [3.0, 3.0])]


@pytest.mark.parametrize("how", ["backward", "grad", "one node"])
def test_queued_callback_runs_once_per_pass(how):
    calls = []
    engine = ag.autograd.Variable._execution_engine
    Queue = _identity_queueing(ag, lambda: engine.queue_callback(lambda: calls.append(1)))
    x = ag.tensor([1.0, 2.0], requires_grad=True)
    for _ in range(2):
        if how == "grad":
            ag.autograd.grad(Queue.apply(x).sum(), x)
        elif how == "one node":  # the node feeds the leaf directly
            Queue.apply(x).backward(ag.ones(2))
        else:
            Queue.apply(x).sum().backward()
    assert calls == [1, 1]


def test_queue_callback_outside_backward_raises():
    with pytest.raises(RuntimeError, match="only be installed during backward pass"):
        ag.autograd.Variable._execution_engine.queue_callback(lambda: None)


def test_callback_of_a_nested_pass_runs_when_that_pass_ends():
    events = []
    engine = ag.autograd.Variable._execution_engine

    class Outer(ag.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            engine.queue_callback(lambda: events.append("outer done"))
            with ag.enable_grad():
                y = ag.tensor(1.0, requires_grad=True)
                inner = _identity_queueing(
                    ag, lambda: engine.queue_callback(lambda: events.append("inner done")))
                inner.apply(y).backward()
            events.append("inner returned")
            return g
    Outer.apply(ag.tensor(2.0, requires_grad=True)).backward()
    assert events == ["inner done", "inner returned", "outer done"]


def test_is_checkpoint_valid():
    engine = ag.autograd.Variable._execution_engine
    seen = []
    Probe = _identity_queueing(ag, lambda: seen.append(engine.is_checkpoint_valid()))
    x = ag.tensor([1.0], requires_grad=True)
    Probe.apply(x).sum().backward()
    ag.autograd.grad(Probe.apply(x).sum(), x)
    assert seen == [True, False] and engine.is_checkpoint_valid()
