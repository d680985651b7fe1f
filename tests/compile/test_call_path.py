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
from aotgrad.compiler.guards import MISS
from aotgrad.runtime import engine
from aotgrad.testing import assert_close


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
                assert_close(g, r, rtol=2e-5, atol=1e-5, equal_nan=True)
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
            assert_close(a.grad.numpy(), 2 * g, rtol=1e-5, atol=1e-6, equal_nan=True)


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
    assert_close(a.grad.numpy(), np.full(6, 2.0, np.float32), rtol=1e-7, atol=0, equal_nan=True)
    assert_close(b.grad.numpy(), np.full((2, 3), 2.0, np.float32), rtol=1e-7, atol=0,
                 equal_nan=True)
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
    assert_close(got[1], 2 * ref[1], rtol=2e-5, atol=1e-5, equal_nan=True)
    assert_close(got[2], ref[2], rtol=2e-5, atol=1e-5, equal_nan=True)


def test_one_node_fast_path_is_taken_and_refuses_hooks():
    x, w = ag.randn(3, requires_grad=True), ag.randn(3, requires_grad=True)
    loss = (x * w).sum()
    assert not engine._one_node_backward(loss, ag.ones(()), False)  # SumBackward -> Mul: 2 nodes
    y = x * w
    g = ag.ones(3)
    assert engine._one_node_backward(y, g, True)  # Mul feeds two plain leaves
    assert_close(x.grad.numpy(), w.detach().numpy(), rtol=1e-7, atol=0, equal_nan=True)
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
        assert_close(x.grad.numpy(), xe.grad.numpy(), rtol=1e-5, atol=1e-6, equal_nan=True)
        assert_close(w.grad.numpy(), we.grad.numpy(), rtol=1e-5, atol=1e-6, equal_nan=True)


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
        assert_close(o, r, rtol=1e-5, atol=1e-6, equal_nan=True)
    assert outs[2] is args[0]  # an input returned as an output is passed through
    # owned: the freshly allocated outputs, never the pass-through input
    assert prog.plan.owned_outputs == [True, True, False]


def test_trusted_runner_skips_checks_only_on_the_trusted_prefix():
    g = _graph()
    plan = compile_graph(g).plan.prepared()
    run = plan.runner(trusted=1)
    x = np.ones((6, 5), np.float32)
    w_strided = np.ones((3, 5), np.float32).T          # checked: normalised, still right
    assert_close(run(x, w_strided)[0], evaluate(g, [x, w_strided])[0], rtol=1e-6, atol=0,
                 equal_nan=True)
    with pytest.raises(ValueError, match="shape"):
        run(x, np.ones((4, 3), np.float32))
    src = plan._driver(plan.fixed_views, trusted=1)[0]
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


# ---- the specialised call path (compiler.call: make_call, _CallBackward, specialise) ----
def _w5(x, y, w1, b1, w2, b2):
    F = ag.nn.functional
    return F.mse_loss(F.linear(F.relu(F.linear(x, w1, b1)), w2, b2), y)


def _w5_args(seed=0, dtype=None):
    ag.manual_seed(seed)
    x, y = ag.randn(4, 8), ag.randn(4, 1)
    ps = [ag.randn(16, 8), ag.randn(16), ag.randn(1, 16), ag.randn(1)]
    if dtype is not None:
        x, y, ps = x.to(dtype), y.to(dtype), [p.to(dtype) for p in ps]
    return (x, y) + tuple(p.requires_grad_() for p in ps)


@pytest.fixture(scope="module")
def w5_compiled():
    return ag.compile(_w5)


def _eager_grads(fn, args, **backward):
    leaves = [a.detach().requires_grad_(a.requires_grad) for a in args]
    fn(*leaves).backward(**backward)
    return [None if a.grad is None else a.grad.numpy() for a in leaves]


def test_plain_backward_runs_without_accumulate_grad_nodes_and_matches_eager_and_torch(
        w5_compiled, torch):
    args = _w5_args(4)
    ref = _eager_grads(_w5, args)
    tw = [torch.tensor(a.detach().numpy(), requires_grad=a.requires_grad) for a in args]
    F = torch.nn.functional
    F.mse_loss(F.linear(F.relu(F.linear(tw[0], tw[2], tw[3])), tw[4], tw[5]), tw[1]).backward()
    for step in range(3):
        for a in args:
            a.grad = None
        loss = w5_compiled(*args)
        node = loss.grad_fn
        assert type(node).__name__ == "_CallBackward" and node.name() == "CompiledFunctionBackward"
        loss.backward()
        assert "next_functions" not in node.__dict__  # no edge was made
        assert all(a._accumulator is None for a in args)
        for a, r, t in zip(args, ref, tw):
            if r is None:
                assert a.grad is None
                continue
            assert_close(a.grad.numpy(), r, rtol=2e-5, atol=1e-5, equal_nan=True)
            assert_close(a.grad.numpy(), t.grad.numpy(), rtol=2e-5, atol=1e-5, equal_nan=True)
            assert a.grad.dtype is ag.float32 and a.grad.grad_fn is None
            assert not a.grad.requires_grad


def test_next_functions_are_made_on_demand_and_are_the_leaves_accumulators(w5_compiled):
    args = _w5_args(5)
    loss = w5_compiled(*args)
    edges = loss.grad_fn.next_functions
    assert [n.variable for n, _ in edges] == list(args[2:]) and all(nr == 0 for _, nr in edges)
    assert all(n.name() == "AccumulateGrad" for n, _ in edges)
    assert edges[0][0] is (args[2] * 2).grad_fn.next_functions[0][0]  # one node per leaf
    loss.backward()  # through the general engine now (the edges exist): same result
    ref = _eager_grads(_w5, args)
    for a, r in zip(args[2:], ref[2:]):
        assert_close(a.grad.numpy(), r, rtol=2e-5, atol=1e-5, equal_nan=True)


def _run_twice_expect(cf, fn, args, check):
    """cf(*args).backward() with grads zeroed; gradients as eager; then check()."""
    ref = _eager_grads(fn, args)
    for a in args:
        a.grad = None
    cf(*args).backward()
    for a, r in zip(args, ref):
        if r is not None:
            assert_close(a.grad.numpy(), r, rtol=2e-5, atol=1e-5, equal_nan=True)
    check()


def test_hooks_of_every_kind_send_backward_to_the_general_engine(w5_compiled):
    args = _w5_args(6)
    calls = []
    # a post-accumulate hook on a leaf
    h = args[3].register_post_accumulate_grad_hook(lambda t: calls.append(("post", t.shape)))
    _run_twice_expect(w5_compiled, _w5, args, lambda: calls == [("post", (16,))] or
                      pytest.fail(str(calls)))
    h.remove()
    # a prehook on a leaf's AccumulateGrad node, reached through another graph
    calls.clear()
    acc = (args[4] * 1).grad_fn.next_functions[0][0]
    h = acc.register_prehook(lambda g: calls.append("pre") or None)
    _run_twice_expect(w5_compiled, _w5, args, lambda: calls == ["pre"] or pytest.fail(str(calls)))
    h.remove()
    # hooks on the loss: register_hook, retain_grad, a node hook
    calls.clear()
    loss = w5_compiled(*args)
    loss.register_hook(lambda g: calls.append("tensor") or g * 3)
    loss.retain_grad()
    loss.grad_fn.register_hook(lambda gi, go: calls.append("node") or None)
    for a in args:
        a.grad = None
    loss.backward()
    assert calls == ["tensor", "node"]
    assert loss.grad.item() == 3.0  # retain_grad sees the hooked gradient (as in PyTorch)
    ref = _eager_grads(_w5, args)
    assert_close(args[2].grad.numpy(), 3 * ref[2], rtol=2e-5, atol=1e-5, equal_nan=True)


def test_retain_graph_second_backward_and_freed_graph(w5_compiled):
    args = _w5_args(7)
    ref = _eager_grads(_w5, args)
    for a in args:
        a.grad = None
    loss = w5_compiled(*args)
    loss.backward(retain_graph=True)
    loss.backward()
    for a, r in zip(args[2:], ref[2:]):
        assert_close(a.grad.numpy(), 2 * r, rtol=2e-5, atol=1e-5, equal_nan=True)
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        loss.backward()


def test_input_modified_in_place_before_backward_raises(w5_compiled):
    args = _w5_args(8)
    loss = w5_compiled(*args)
    with ag.no_grad():
        args[4].mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


def test_autograd_grad_anomaly_and_create_graph_on_the_fast_node(w5_compiled):
    args = _w5_args(9)
    ref = _eager_grads(_w5, args)
    for a in args:
        a.grad = None
    gs = ag.autograd.grad(w5_compiled(*args), args[2:])
    for g, r in zip(gs, ref[2:]):
        assert_close(g.numpy(), r, rtol=2e-5, atol=1e-5, equal_nan=True)
    assert all(a.grad is None for a in args)  # grad() leaves .grad alone
    loss = w5_compiled(*args)
    with ag.autograd.set_detect_anomaly(True):
        loss.backward()
    assert_close(args[2].grad.numpy(), ref[2], rtol=2e-5, atol=1e-5, equal_nan=True)
    g, = ag.autograd.grad(w5_compiled(*args), args[5], create_graph=True)
    assert g.requires_grad and g.grad_fn is not None


def test_one_tensor_passed_twice_gets_the_sum_of_both_gradients():
    def f(a, b):
        return (a * b.exp()).sum()
    cf = ag.compile(f, backend="interpret")
    w = ag.randn(5, requires_grad=True)
    cf(w, w).backward()
    cf(w, w).backward()  # accumulated into the existing .grad
    we = w.detach().requires_grad_()
    f(we, we).backward()
    assert_close(w.grad.numpy(), 2 * we.grad.numpy(), rtol=1e-6, atol=0, equal_nan=True)


def test_non_leaf_input_uses_the_general_node():
    cf = ag.compile(lambda h, w: (h * w).tanh().sum(), backend="interpret")
    a, w = ag.randn(4, requires_grad=True), ag.randn(4, requires_grad=True)
    for _ in range(2):  # the first call traces; the second takes the specialised call
        loss = cf(a * 2, w)
        assert type(loss.grad_fn).__name__ == "CompiledBackward"
        loss.backward()
    assert "node = new_node(Node)" in cf._specialised.source  # inlined, but not for this call
    ae, we = a.detach().requires_grad_(), w.detach().requires_grad_()
    ((ae * 2) * we).tanh().sum().backward()
    assert_close(a.grad.numpy(), 2 * ae.grad.numpy(), rtol=1e-6, atol=0, equal_nan=True)
    assert_close(w.grad.numpy(), 2 * we.grad.numpy(), rtol=1e-6, atol=0, equal_nan=True)


def test_two_differentiable_outputs_each_backward_with_its_implicit_gradient():
    def f(x, w):
        h = (x * w).tanh()
        return h.sum(), (h * h).mean()
    cf = ag.compile(f)
    x, w = ag.randn(3, 4), ag.randn(3, 4, requires_grad=True)
    for _ in range(2):
        w.grad = None
        a, b = cf(x, w)
        assert a.grad_fn is b.grad_fn and (a.output_nr, b.output_nr) == (0, 1)
        b.backward(retain_graph=True)
        a.backward()
    we = w.detach().requires_grad_()
    ae, be = f(x, we)
    (ae + be).backward()
    assert_close(w.grad.numpy(), we.grad.numpy(), rtol=1e-5, atol=1e-7, equal_nan=True)


def test_forward_only_calls_compile_no_backward_and_avals_match_the_tensors():
    cf = ag.compile(lambda x, w: (x @ w).relu().sum())
    x, w = ag.randn(2, 3), ag.randn(3, 5, requires_grad=True)
    cf(x, w)
    cf(x, w)
    prog = cf.ir(x, w)
    assert "forward" in prog._runners and "backward" not in prog._runners
    assert [(a.shape, a.dtype) for a in prog.call_plan().avals[0]] == [(w._value.shape, w.dtype)]
    assert [(a.shape, a.dtype) for a in prog.call_plan().avals[1]] == [((), ag.float32)]
    cf(x, w).backward()
    assert "backward" in prog._runners
    we = w.detach().requires_grad_()
    (x @ we).relu().sum().backward()
    assert_close(w.grad.numpy(), we.grad.numpy(), rtol=1e-6, atol=0, equal_nan=True)


def test_guard_catches_shape_dtype_requires_grad_and_grad_mode_changes(w5_compiled):
    cf = ag.compile(_w5)
    args = _w5_args(10)
    cf(*args).backward()
    assert cf.n_traces == 1 and cf._specialised is not None
    cf(*args).backward()
    assert cf.n_traces == 1
    cases = [
        ((ag.randn(3, 8), ag.randn(3, 1)) + args[2:], "shape"),
        (_w5_args(10, dtype=ag.float64), "dtype"),
        (args[:2] + (args[2].detach(),) + args[3:], "requires_grad"),
    ]
    for new, what in cases:
        n = cf.n_traces
        loss = cf(*new)
        assert cf.n_traces == n + 1, what
        ref = _eager_grads(_w5, new)
        for a in new:
            a.grad = None
        loss.backward()
        for a, r in zip(new, ref):
            if r is not None:
                assert_close(a.grad.numpy(), r, rtol=2e-5, atol=1e-5, equal_nan=True)
        assert loss.dtype is new[0].dtype
    with ag.no_grad():
        out = cf(*args)
    assert out.grad_fn is None and not out.requires_grad
    assert out.item() == pytest.approx(_w5(*args).item(), rel=1e-5)


def test_non_contiguous_input_misses_the_guard_but_not_the_cache(w5_compiled):
    args = _w5_args(11)
    w5_compiled(*args)
    n = w5_compiled.n_traces
    xt = ag.from_numpy(np.ascontiguousarray(args[0].numpy().T)).t()  # a (4, 8) strided view
    assert not xt.numpy().flags.c_contiguous
    new = (xt,) + args[1:]
    assert w5_compiled._specialised(new) is MISS
    ref = _eager_grads(_w5, new)
    for a in new:
        a.grad = None
    w5_compiled(*new).backward()
    assert w5_compiled.n_traces == n
    for a, r in zip(new[2:], ref[2:]):
        assert_close(a.grad.numpy(), r, rtol=2e-5, atol=1e-5, equal_nan=True)


def test_implicit_gradient_passed_through_is_copied_not_shared():
    cf = ag.compile(lambda x: x.reshape(()))  # the backward returns its input gradient
    x = ag.randn((), requires_grad=True)
    cf(x).backward()
    assert cf.ir(x)._kernels["backward"].plan.owned_outputs == [False]
    assert float(x.grad) == 1.0
    x.grad.add_(5)  # must not write into the array the next call feeds the backward
    x.grad = None
    cf(x).backward()
    assert float(x.grad) == 1.0
    cf(x).backward()
    assert float(x.grad) == 2.0


def test_closed_over_tensor_is_lifted_and_its_grad_accumulates():
    w = ag.randn(3, 4, requires_grad=True)
    cf = ag.compile(lambda x: (x @ w).tanh().sum(), backend="interpret")
    x = ag.randn(2, 3)
    for _ in range(2):
        cf(x).backward()
    we = w.detach().requires_grad_()
    (x @ we).tanh().sum().backward()
    assert_close(w.grad.numpy(), 2 * we.grad.numpy(), rtol=1e-6, atol=0, equal_nan=True)
    w.requires_grad_(False)
    out = cf(x)
    assert not out.requires_grad and cf.n_traces == 2


def test_nonscalar_output_backward_without_gradient_keeps_the_error(w5_compiled):
    cf = ag.compile(lambda x: x * 2, backend="interpret")
    x = ag.randn(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="implicitly created only for scalar outputs"):
        cf(x).backward()
    cf(x).backward(ag.ones(3))
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 2.0, 2.0])
