"""The per-call path of compiled functions: the generated program driver, gradients handed to
.grad without a copy (and only when nothing else shares them), the one-node backward fast
path against the general engine."""
import numpy as np
import pytest

import aotgrad as ag
from aotgrad.codegen import compile_graph
from aotgrad.ir import Aval, GraphBuilder, prims
from aotgrad.ir import dtypes as dt
from aotgrad.ir.core import evaluate
from aotgrad.runtime import engine


def _mlp(x, w1, b1, w2, b2, y):
    return ((ag.tanh(x @ w1 + b1) @ w2 + b2 - y) ** 2).mean()


def _mlp_args(seed=0):
    ag.manual_seed(seed)
    return (ag.randn(4, 8), ag.randn(8, 16, requires_grad=True), ag.randn(16, requires_grad=True),
            ag.randn(16, 1, requires_grad=True), ag.randn(1, requires_grad=True), ag.randn(4, 1))


@pytest.fixture(scope="module")
def mlp_compiled():
    return ag.compile(_mlp)


def _grads(fn, args):
    for a in args:
        a.grad = None
    fn(*args).backward()
    return [None if a.grad is None else a.grad.numpy().copy() for a in args]


def test_repeated_steps_match_eager_and_do_not_share_grad_buffers(mlp_compiled):
    args = _mlp_args()
    ref = _grads(_mlp, args)
    seen = []
    for _ in range(3):
        got = _grads(mlp_compiled, args)
        for g, r in zip(got, ref):
            if r is not None:
                np.testing.assert_allclose(g, r, rtol=2e-5, atol=1e-6)
        seen.append([a.grad for a in args if a.grad is not None])
    arrays = [t._value for step in seen for t in step]
    for i, a in enumerate(arrays):  # every step's grads are their own arrays
        for b in arrays[i + 1:]:
            assert not np.shares_memory(a, b)


def test_accumulation_across_calls(mlp_compiled):
    args = _mlp_args(1)
    once = _grads(mlp_compiled, args)
    mlp_compiled(*args).backward()  # no zeroing: adds into the existing .grad
    for a, g in zip(args, once):
        if g is not None:
            np.testing.assert_allclose(a.grad.numpy(), 2 * g, rtol=1e-5, atol=1e-6)


def test_grads_of_two_inputs_that_share_one_array_are_separate():
    """The backward returns the same gradient for a and b (b's is a reshape of a's): the two
    .grad tensors must not share memory, or accumulating into one would change the other."""
    @ag.compile
    def f(a, b):
        return (a + b.reshape(6)).sum()
    a, b = ag.randn(6, requires_grad=True), ag.randn(2, 3, requires_grad=True)
    f(a, b).backward()
    bw = f.ir(a, b)._kernels["backward"].plan
    assert bw.owned_outputs == [False, False]  # the second output is a view of the first
    f(a, b).backward()
    np.testing.assert_allclose(a.grad.numpy(), np.full(6, 2.0, np.float32))
    np.testing.assert_allclose(b.grad.numpy(), np.full((2, 3), 2.0, np.float32))
    assert not np.shares_memory(a.grad.numpy(), b.grad.numpy())


def test_leaf_hooks_and_retain_grad_take_the_general_path(mlp_compiled):
    args = _mlp_args(2)
    ref = _grads(_mlp, args)
    calls = []
    h = args[1].register_hook(lambda g: calls.append(g.shape) or g * 2)
    try:
        got = _grads(mlp_compiled, args)
    finally:
        h.remove()
    assert calls == [(8, 16)]
    np.testing.assert_allclose(got[1], 2 * ref[1], rtol=2e-5, atol=1e-6)
    np.testing.assert_allclose(got[2], ref[2], rtol=2e-5, atol=1e-6)


def test_one_node_fast_path_is_taken_and_refuses_hooks():
    x, w = ag.randn(3, requires_grad=True), ag.randn(3, requires_grad=True)
    loss = (x * w).sum()
    assert not engine._one_node_backward(loss, ag.ones(()), False)  # SumBackward -> Mul: 2 nodes
    y = x * w
    g = ag.ones(3)
    assert engine._one_node_backward(y, g, True)  # Mul feeds two plain leaves
    np.testing.assert_allclose(x.grad.numpy(), w.detach().numpy())
    y.grad_fn.register_hook(lambda gi, go: None)
    assert not engine._one_node_backward(y, g, True)
    z = x * x  # the same leaf twice: its two grads must be summed by the general loop
    assert not engine._one_node_backward(z, g, True)


def test_non_contiguous_and_read_only_gradients_reach_the_backward(mlp_compiled):
    @ag.compile
    def f(x, w):
        return ag.tanh(x @ w)
    x, w = ag.randn(5, 4, requires_grad=True), ag.randn(4, 6, requires_grad=True)
    gt = np.asarray(np.random.default_rng(0).standard_normal((6, 5)), np.float32)
    gout = ag.from_numpy(gt).t()                       # strided
    gro = np.broadcast_to(np.float32(0.5), (5, 6))     # read-only
    for g in (gout, ag.from_numpy(gro)):
        x.grad = w.grad = None
        f(x, w).backward(g)
        xe, we = x.detach().requires_grad_(), w.detach().requires_grad_()
        ag.tanh(xe @ we).backward(g)
        np.testing.assert_allclose(x.grad.numpy(), xe.grad.numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(w.grad.numpy(), we.grad.numpy(), rtol=1e-5, atol=1e-6)


def _graph():
    b = GraphBuilder("g")
    x = b.add_input(Aval((6, 5), dt.float32), "x")
    w = b.add_input(Aval((5, 3), dt.float32), "w")
    with b:
        h = prims.tanh(prims.dot_general(x, w, contract=((1,), (0,))))
        s = prims.reduce_sum(prims.mul(h, h), dims=(1,))
    b.graph.outputs = [h, s, x]
    return b.graph


def test_driver_source_is_straight_line_and_step_times_match_the_schedule():
    g = _graph()
    prog = compile_graph(g)
    rng = np.random.default_rng(0)
    args = [rng.standard_normal((6, 5)).astype(np.float32),
            rng.standard_normal((5, 3)).astype(np.float32)]
    src = prog.plan.source
    assert src.startswith("def program(") and "_mm(" in src and "for " not in src
    outs, times = prog.plan.step_times(*args)
    assert len(times) == len(prog.schedule.steps) and all(t >= 0 for t in times)
    for o, r in zip(outs, evaluate(g, args)):
        np.testing.assert_allclose(o, r, rtol=1e-5, atol=1e-6)
    assert outs[2] is args[0]  # an input returned as an output is passed through
    # owned: the freshly allocated outputs, never the pass-through input
    assert prog.plan.owned_outputs == [True, True, False]


def test_trusted_runner_skips_checks_only_on_the_trusted_prefix():
    g = _graph()
    plan = compile_graph(g).plan.prepared()
    run = plan.runner(trusted=1)
    x = np.ones((6, 5), np.float32)
    w_strided = np.ones((3, 5), np.float32).T          # checked: normalised, still right
    np.testing.assert_allclose(run(x, w_strided)[0], evaluate(g, [x, w_strided])[0], rtol=1e-6)
    with pytest.raises(ValueError, match="shape"):
        run(x, np.ones((4, 3), np.float32))
    src = plan._driver(plan._fixed, trusted=1)[0]
    assert "type(v0)" not in src and "type(v1)" in src


def test_numba_dump_writes_the_drivers(tmp_path, mlp_compiled):
    cf = ag.compile(_mlp, dump=str(tmp_path))
    args = _mlp_args(3)
    cf(*args).backward()
    d = tmp_path / cf.ir(*args).name
    for which in ("forward", "backward"):
        src = (d / f"{which}_driver.py").read_text()
        assert src.startswith("def program(") and "_mm(" in src
    assert "kernel" in (d / "schedule.txt").read_text()
