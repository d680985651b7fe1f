"""Every program takes the one generated call (compiler/call.py): each feature that once sent
a call to a hand-written general path (seeds, in-place writes to arguments and to lifted
tensors, .grad writes and clears, escapes, retain_grad on arguments, non-tensor outputs,
copied outputs, returned written arguments, profiling, anomaly mode) is a block of that
call, and the compiled function equals eager on both backends."""
import warnings

import numpy as np
import pytest

import aotgrad as ag
from aotgrad import nn
from aotgrad.compiler.call import CallBlock
from aotgrad.runtime.compiled_backward import _CallBackward
from aotgrad.runtime.tensor import Tensor
from aotgrad.testing import assert_close
from aotgrad.tracer.pytree import flatten

BACKENDS = ["interpret", "numba"]


def _programs(cf):
    return [p for e in cf.cache.values() for p in (e if isinstance(e, list) else [e])]


def _observe(fn, args, state, calls):
    """Per call: the outputs (arrays and non-tensor values), the gradients of the leaves
    and the values of `state` after a backward of the differentiable outputs."""
    seen = []
    leaves = [a for a in flatten((args, state))[0] if isinstance(a, Tensor) and
              a.requires_grad and a.grad_fn is None]
    for c in range(calls):
        ag.manual_seed(c)
        out = fn(*args)
        flat = flatten(out)[0]
        diff = [o for o in flat if isinstance(o, Tensor) and o.requires_grad]
        if diff:
            ag.autograd.backward(diff, [ag.ones_like(o) for o in diff])
        seen.append(([o._value.copy() if isinstance(o, Tensor) else o for o in flat],
                     [None if t.grad is None else t.grad._value.copy() for t in leaves],
                     [t._value.copy() for t in state]))
    return seen


def _compare(case, backend, calls=3):
    """Eager against compiled for `case()` -> (fn, args, state), fresh for each side; the
    compiled function's programs; no graph break on either side (recompiles are allowed:
    a .grad set since the trace is a state guard)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ag.manual_seed(123)
        fn, args, state = case()
        want = _observe(fn, args, state, calls)
        ag.manual_seed(123)
        fn, args, state = case()
        cf = ag.compile(fn, backend=backend)
        got = _observe(cf, args, state, calls)
    eager_runs = [str(w.message) for w in caught if "eagerly" in str(w.message)]
    assert not eager_runs and cf.stats.eager_fallbacks == 0, eager_runs
    for c, (g, w) in enumerate(zip(got, want)):
        for what, a, b in zip(("outputs", "grads", "state"), g, w):
            assert len(a) == len(b), (c, what)
            for x, y in zip(a, b):
                if isinstance(y, np.ndarray) or y is None:
                    assert (x is None) == (y is None), (c, what)
                    if y is not None:
                        assert x.dtype == y.dtype, (c, what)
                        assert_close(x, y, rtol=1e-5, atol=1e-6, equal_nan=True,
                                     msg=f"call {c}: {what}")
                else:
                    assert x == y, (c, what)
    return cf


def _seeds():
    w = ag.randn(4, 3, requires_grad=True)
    return (lambda x: (nn.functional.dropout(x @ w, 0.5, True) * 2).sum()), \
        (ag.randn(5, 4),), [w]


def _write_arg():
    w = ag.randn(3, requires_grad=True)

    def f(x, buf):
        buf.mul_(0.5).add_(x * 2)  # a running statistic, written in place
        return (x * w).sin().sum()
    return f, (ag.randn(3), ag.zeros(3)), [w]


def _write_lifted():
    w = ag.randn(3, requires_grad=True)
    buf = ag.zeros(3)

    def f(x):
        buf.mul_(0.9).add_(x.detach())
        return (x * w).exp().sum()
    return f, (ag.randn(3),), [w, buf]


def _grad_writes():
    w = ag.randn(3, 4, requires_grad=True)

    def step(x):  # a whole training step: .grad cleared, then written by backward()
        w.grad = None
        loss = (x @ w).square().mean()
        loss.backward()
        return loss.detach()
    return step, (ag.randn(5, 3),), [w]


def _grad_clears():
    w = ag.randn(3, requires_grad=True)
    w.grad = ag.ones(3)

    def f(x):
        w.grad = None
        return x * 2
    return f, (ag.randn(3),), [w]


def _arg_grad_writes():
    def f(x, w):
        w.grad = None  # (a program traced with w.grad unset writes it, not accumulates)
        (x * w).sum().backward()
        return w.grad * 1
    return f, (ag.randn(3), ag.randn(3, requires_grad=True)), []


def _escapes():
    store = {}

    def f(x):
        if "m" not in store:
            store["m"] = ag.zeros_like(x)  # state made on the first call (lazily)
        store["m"].mul_(0.5).add_(x)
        return store["m"] * 2
    return f, (ag.randn(3),), []


def _constant_outputs():
    w = ag.randn(3, requires_grad=True)
    return (lambda x: ((x * w).sum(), 3, "tag", None)), (ag.randn(3),), [w]


def _copied_outputs():
    w = ag.randn(3, requires_grad=True)
    return (lambda x: (x.clone(), (x * w).sum())), (ag.randn(3),), [w]


def _returned_written_arg():
    w = ag.randn(3, requires_grad=True)

    def f(x):
        x.add_(1)
        return x, (x * w).sum()
    return f, (ag.randn(3),), [w]


CASES = {
    "seeds": (_seeds, CallBlock.SEEDS),
    "write_arg": (_write_arg, CallBlock.WRITE_BACK),
    "write_lifted": (_write_lifted, CallBlock.WRITE_BACK),
    "grad_writes": (_grad_writes, CallBlock.GRAD_WRITES),
    "grad_clears": (_grad_clears, CallBlock.GRAD_CLEARS),
    "arg_grad_writes": (_arg_grad_writes, CallBlock.GRAD_WRITES),
    "escapes": (_escapes, CallBlock.ESCAPES),
    "constant_outputs": (_constant_outputs, CallBlock.CONSTANT_OUTPUTS),
    "copied_outputs": (_copied_outputs, CallBlock.COPIED_OUTPUTS),
    "returned_written_arg": (_returned_written_arg, CallBlock.RETURNED_ARGS),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_each_former_general_path_feature_is_a_block_of_the_one_call(name, backend):
    case, block = CASES[name]
    if name == "seeds" and backend == "numba":
        pytest.skip("the numba backend draws its own random stream (not eager's)")
    cf = _compare(case, backend)
    # the program of the first call (traced in that state, compiled, not run; one with
    # state made inside is not cached), and those the compiled function cached
    ag.manual_seed(123)
    fn, args, _ = case()
    first = ag.compile(fn, backend=backend).ir(*args)
    for prog in [first] + _programs(cf):
        plan = prog.call_plan()
        assert plan.call is not None and "def call(" in plan.source
        assert str(plan).startswith(f"call plan of {prog.name}: straight-line call")
    plan = first.call_plan()
    assert block in plan.blocks, (block, plan.blocks)
    assert block.value in str(plan)


def test_seeds_on_numba_draw_a_fresh_mask_per_call_and_the_gradient_follows_it():
    ag.manual_seed(0)
    w = ag.randn(6, 4, requires_grad=True)
    x = ag.randn(3, 6)  # x.T has full column rank: the mask is recovered from the gradient
    cf = ag.compile(lambda x: (nn.functional.dropout(x @ w, 0.5, True) * 2).sum())
    masks = []
    for c in range(4):
        w.grad = None
        ag.manual_seed(c)
        out = cf(x)
        out.backward()
        # d/dw sum(4 * mask * (x @ w)) = x.T @ (4 * mask): the mask the output used
        m = np.linalg.lstsq(x.numpy().T, w.grad.numpy(), rcond=None)[0] / 4
        assert_close(m, np.round(m), rtol=0, atol=1e-4)
        m = np.round(m)
        assert set(np.unique(m)) <= {0.0, 1.0}
        assert_close(out.item(), float((4 * m * (x.numpy() @ w.detach().numpy())).sum()),
                     rtol=1e-4, atol=1e-4)
        masks.append(m)
    assert not all(np.array_equal(masks[0], m) for m in masks[1:])
    (prog,) = _programs(cf)
    assert CallBlock.SEEDS in prog.call_plan().blocks


def test_retain_grad_on_an_argument_reaches_the_callers_tensor():
    w = ag.randn(3, requires_grad=True)

    def f(h, v):
        h.retain_grad()
        return (h * v).sum()
    cf = ag.compile(f, backend="interpret")
    v = ag.randn(3)
    for _ in range(2):
        h = w * 2
        cf(h, v).backward()
        assert_close(h.grad.numpy(), v.numpy(), rtol=1e-6, atol=0)
    assert cf.stats.eager_fallbacks == 0
    (prog,) = _programs(cf)
    assert CallBlock.RETAINED_ARGS in prog.call_plan().blocks
    assert ".retain_grad()" in prog.call_plan().source


@pytest.mark.parametrize("backend", BACKENDS)
def test_profiling_and_anomaly_are_lines_of_the_same_call(backend):
    w = ag.randn(4, 3, requires_grad=True)

    def f(x):
        return (x @ w).tanh().sum()
    cf = ag.compile(f, backend=backend)
    x = ag.randn(5, 4)
    cf(x).backward()
    w.grad = None
    with ag.autograd.profiler.profile() as prof:
        out = cf(x)
        out.backward()
    names = [e.name for e in prof.function_events]
    prog, = _programs(cf)
    assert any(n.endswith(".forward") for n in names) and any(n.endswith(".backward")
                                                               for n in names)
    we = w.detach().requires_grad_()
    (x @ we).tanh().sum().backward()
    assert_close(w.grad.numpy(), we.grad.numpy(), rtol=1e-5, atol=1e-6)
    assert_close(out.item(), (x @ we).tanh().sum().item(), rtol=1e-5, atol=1e-6)
    assert type(out.grad_fn).__name__ == "CompiledBackward"  # a full node while checking
    src = prog.call_plan().source
    assert "prog.run_checked('forward'" in src and src.count("def call(") == 1
    # anomaly mode: the same call, its NaN check names the op
    cf2 = ag.compile(lambda x: (x.log() * 0).sum(), backend=backend)
    z = ag.zeros(3)
    cf2(ag.ones(3))
    with ag.autograd.detect_anomaly():
        with pytest.raises(RuntimeError, match="nan values"):
            cf2(z)
    with ag.autograd.detect_anomaly():
        w.grad = None
        cf(x).backward()
    assert_close(w.grad.numpy(), we.grad.numpy(), rtol=1e-5, atol=1e-6)


def _w5(x, y, w1, b1, w2, b2):
    F = nn.functional
    return F.mse_loss(F.linear(F.relu(F.linear(x, w1, b1)), w2, b2), y)


def _w5_args(n):
    ag.manual_seed(n)
    return [ag.randn(n, 8), ag.randn(n, 1)] + [p.requires_grad_() for p in (
        ag.randn(16, 8), ag.randn(16), ag.randn(1, 16), ag.randn(1))]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_symbolic_program_gets_the_inline_call_as_a_static_one_does(backend):
    static = ag.compile(_w5, backend=backend, dynamic=False)
    sym = ag.compile(_w5, backend=backend, dynamic=True)
    for n in (4, 6, 3):
        args = _w5_args(n)
        for cf in (static, sym):
            for a in args:
                a.grad = None
            loss = cf(*args)
            loss.backward()
            assert type(loss.grad_fn).__name__ == "_CallBackward"
            got = [a.grad.numpy().copy() for a in args[2:]]
            eager = [a.detach().requires_grad_(a.requires_grad) for a in args]
            _w5(*eager).backward()
            for g, e in zip(got, eager[2:]):
                assert_close(g, e.grad.numpy(), rtol=1e-5, atol=1e-6)
            assert_close(loss.item(), _w5(*eager).item(), rtol=1e-6, atol=1e-7)
            src = cf._specialised.source
            assert "node = new_node(Node)" in src and "prog(args, True" in src  # inline
    assert sym.stats.compiles == 1 and static.stats.compiles == 3
    (prog,) = _programs(sym)
    plan = prog.call_plan()
    assert plan.inline is not None and "inline per guard key" in str(plan)
    src = sym._specialised.source
    assert "avals_at(values)" in src and "values = (s0, " in src and "return MISS" in src
    # the nodes' avals: made once per set of sizes, and those of the call
    loss = sym(*_w5_args(5))
    assert [a.shape for a in loss.grad_fn._in_avals] == [(16, 8), (16,), (1, 16), (1,)]
    assert plan.avals_at(plan_values(prog, 5)) is plan.avals_at(plan_values(prog, 5))


def plan_values(prog, n):
    return prog.binding.values(_w5_args(n))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dynamic", [False, True])
def test_a_loss_of_a_modules_parameters_gets_the_inline_call(backend, dynamic):
    """Parameters reached through a closure are lifted inputs: the inline call reads them,
    and its node's leaves and replayed inputs are theirs."""
    ag.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 3))
    cf = ag.compile(lambda x, t: nn.functional.cross_entropy(model(x), t), backend=backend,
                    dynamic=dynamic)
    for n in (4, 4, 7, 7):
        x, t = ag.randn(n, 6, requires_grad=True), ag.randint(0, 3, (n,))
        model.zero_grad()
        loss = cf(x, t)
        loss.backward()
        # (the inline node; from the third call on, the fused call's subclass of it)
        assert isinstance(loss.grad_fn, _CallBackward)
        got = [x.grad.numpy().copy()] + [p.grad.numpy().copy() for p in model.parameters()]
        model.zero_grad()
        xe = x.detach().requires_grad_()
        ref = nn.functional.cross_entropy(model(xe), t)
        ref.backward()
        assert_close(loss.item(), ref.item(), rtol=1e-6, atol=1e-7)
        for g, e in zip(got, [xe.grad] + [p.grad for p in model.parameters()]):
            assert_close(g, e.numpy(), rtol=1e-5, atol=1e-6)
    assert cf.stats.compiles == (1 if dynamic else 2)
    src = cf._specialised.source
    assert "node = new_node(Node)" in src and "._value, " in src  # lifted read inline
    for prog in _programs(cf):
        assert prog.call_plan().inline is not None
        assert CallBlock.LIFTED in prog.call_plan().blocks


def test_each_guard_relation_is_checked_once_and_means_what_the_guards_mean():
    from aotgrad.compiler.dynamic import guard_conditions
    sym = ag.compile(_w5, backend="interpret", dynamic=True)
    sym(*_w5_args(4))
    (prog,) = _programs(sym)
    guards, names = prog.binding.env.guards, prog.binding.names
    conds = guard_conditions(guards)
    assert len(conds) < len(guards)  # the trace records s1 == s4 as `!=` False and `==` True
    rng = np.random.default_rng(0)
    for _ in range(300):
        vals = dict(zip(names, rng.integers(2, 5, len(names)).tolist()))
        want = all(g.check(vals) for g in guards)
        assert all(eval(c, {}, dict(vals)) for c in conds) == want, vals
