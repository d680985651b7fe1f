"""The fused forward+backward variant of a compiled loss (compiler/fused_call.py): once the
calls' outputs are backpropagated at once, a call runs one program for the loss and its
gradients; `.grad` then equals eager's, and every other use of such an output (explicit
seeds, create_graph, hooks, retain_grad, autograd.grad, in-place writes) gives what the split
path gives and sends the program back to it."""
import numpy as np
import pytest

import aotgrad as ag
from aotgrad.compiler.fused_call import FUSED_AFTER, FUSED_MIN_GAIN, FusedChoice, estimated_gain
from aotgrad.testing import assert_close

TOL = dict(rtol=2e-5, atol=1e-5, equal_nan=True)


def _loss(x, w):
    return (ag.tanh(1.5 * x @ w + 0.5) * ag.sigmoid(x @ w) + 0.1 * ag.exp(-x * x).sum()).sum()


def _pointwise(x, w):
    """A loss whose compiled programs are few kernels (the numba tests compile it)."""
    return (ag.tanh(1.5 * x + 0.5) * ag.sigmoid(x) + 0.1 * ag.exp(-x * x)).sum() + \
        (w * ag.tanh(w)).sum()


def _loss_for(backend):
    return _loss if backend == "interpret" else _pointwise


def _args(seed=0, dtype=ag.float32):
    ag.manual_seed(seed)
    return (ag.randn(6, 5, dtype=dtype, requires_grad=True),
            ag.randn(5, 3, dtype=dtype, requires_grad=True))


def _choose_fused(f, *args):
    """Skip the timing trial of a numba program (its choice depends on the machine): the
    fused variant runs once the streak allows it. Call after the first call."""
    f.ir(*args).call_plan().fused_choice = FusedChoice.FUSED


def _fused(out):
    return type(out.grad_fn).__name__ == "_FusedBackward"


def _eager_grads(fn, args, seed=None, times=1):
    copies = [a.detach().clone().requires_grad_(a.requires_grad) for a in args]
    for _ in range(times):
        fn(*copies).backward(seed)
    return [None if c.grad is None else c.grad.numpy() for c in copies]


def _warm(f, args, leaves=None, calls=FUSED_AFTER + 1):
    """Calls backpropagated at once, grads cleared after each, until the next call is fused."""
    for _ in range(calls):
        f(*args).backward()
        for a in leaves or args:
            a.grad = None


@pytest.mark.parametrize("backend", ["interpret", "numba"])
def test_steps_equal_eager_and_switch_after_the_streak(backend):
    loss = _loss_for(backend)
    f = ag.compile(loss, backend=backend)
    args = _args()
    ref = _eager_grads(loss, args)
    kinds = []
    for step in range(FUSED_AFTER + 4):
        for a in args:
            a.grad = None
        out = f(*args)
        if step == 0:
            _choose_fused(f, *args)
        kinds.append(_fused(out))
        assert_close(out.item(), loss(*args).item(), rtol=1e-5, atol=1e-5)
        out.backward()
        for a, r in zip(args, ref):
            assert_close(a.grad.numpy(), r, **TOL)
    # the first call (traced, through the full lookup) is not counted; then FUSED_AFTER
    # calls backpropagated at once, then fused calls
    assert kinds == [False] * (FUSED_AFTER + 1) + [True] * 3
    # accumulation into an existing .grad, and a .grad that owns its array
    out = f(*args)
    assert _fused(out)
    out.backward()
    for a, r in zip(args, ref):
        assert_close(a.grad.numpy(), 2 * r, **TOL)
    grads = [a.grad.numpy() for a in args]
    out = f(*args)
    out.backward()
    for a, g in zip(args, grads):
        assert a.grad.numpy() is g    # accumulated in place, as eagerly
    for a in args:
        a.grad = None
    f(*args).backward()
    f(*args).backward()
    assert not np.shares_memory(args[0].grad.numpy(), args[1].grad.numpy())


def test_float64_grads_equal_finite_differences():
    f = ag.compile(_loss, backend="interpret")
    args = _args(1, ag.float64)
    _warm(f, args)
    out = f(*args)
    assert _fused(out)
    out.backward()
    x, w = (a.detach().numpy().copy() for a in args)
    eps = 1e-6
    for arr, grad in ((x, args[0].grad.numpy()), (w, args[1].grad.numpy())):
        for idx in [(0, 0), (2, 1), (4, 2)]:
            old = arr[idx]
            arr[idx] = old + eps
            hi = _loss(ag.tensor(x), ag.tensor(w)).item()
            arr[idx] = old - eps
            lo = _loss(ag.tensor(x), ag.tensor(w)).item()
            arr[idx] = old
            assert abs((hi - lo) / (2 * eps) - grad[idx]) < 1e-5


@pytest.mark.parametrize("seed", [2.0, "tensor0d", "tensor1"])
def test_explicit_seed_gives_the_split_answer_and_drops_back(seed):
    f = ag.compile(_loss, backend="interpret")
    args = _args(2)
    _warm(f, args)
    out = f(*args)
    assert _fused(out)
    g = {2.0: ag.tensor(2.0), "tensor0d": ag.tensor(-3.0), "tensor1": ag.tensor(0.5)}[seed]
    out.backward(g)
    for a, r in zip(args, _eager_grads(_loss, args, g)):
        assert_close(a.grad.numpy(), r, **TOL)
    assert not _fused(f(*args))   # back to the split path


def test_create_graph_on_a_fused_output_is_differentiable():
    f = ag.compile(_loss, backend="interpret")
    args = _args(3)
    _warm(f, args)
    out = f(*args)
    assert _fused(out)
    gx, gw = ag.autograd.grad(out, args, create_graph=True)
    ex = [a.detach().clone().requires_grad_() for a in args]
    rx, rw = ag.autograd.grad(_loss(*ex), ex, create_graph=True)
    assert_close(gx.detach().numpy(), rx.detach().numpy(), **TOL)
    (gx.square().sum() + gw.sum()).backward()
    (rx.square().sum() + rw.sum()).backward()
    for a, e in zip(args, ex):
        assert_close(a.grad.numpy(), e.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_hooks_on_an_input_and_retain_grad_on_the_output():
    f = ag.compile(_loss, backend="interpret")
    args = _args(4)
    _warm(f, args)
    out = f(*args)
    assert _fused(out)
    seen = []
    h = args[0].register_hook(lambda g: seen.append(g.numpy().copy()) or g * 2)
    out.retain_grad()
    out.backward()
    h.remove()
    ref = _eager_grads(_loss, args)
    assert_close(seen[0], ref[0], **TOL)
    assert_close(args[0].grad.numpy(), 2 * ref[0], **TOL)
    assert_close(args[1].grad.numpy(), ref[1], **TOL)
    assert out.grad.item() == 1.0
    # (the general path at the implicit gradient hands out the stored gradients: the
    # program stays fused)
    assert _fused(f(*args))


def test_retain_graph_hands_the_gradients_out_twice_then_frees_them():
    f = ag.compile(_pointwise, backend="numba")
    args = _args(5)
    f(*args)
    _choose_fused(f, *args)
    _warm(f, args)
    out = f(*args)
    assert _fused(out)
    out.backward(retain_graph=True)
    first = [a.grad.numpy().copy() for a in args]
    out.backward()
    for a, r, g in zip(args, _eager_grads(_pointwise, args, times=2), first):
        assert_close(a.grad.numpy(), r, **TOL)
        assert_close(a.grad.numpy(), 2 * g, rtol=1e-6, atol=0)
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        out.backward()


def test_autograd_grad_leaves_dot_grad_alone():
    f = ag.compile(_loss, backend="interpret")
    args = _args(6)
    _warm(f, args)
    out = f(*args)
    assert _fused(out)
    (gw,) = ag.autograd.grad(out, [args[1]])
    assert args[0].grad is None and args[1].grad is None
    assert_close(gw.numpy(), _eager_grads(_loss, args)[1], **TOL)


def test_input_modified_in_place_before_backward_raises_as_eagerly():
    f = ag.compile(_loss, backend="interpret")
    args = _args(7)
    _warm(f, args)
    out = f(*args)
    assert _fused(out)
    with ag.no_grad():
        args[0].mul_(2)
    eager = _args(7)
    e_out = _loss(*eager)
    with ag.no_grad():
        eager[0].mul_(2)
    with pytest.raises(RuntimeError) as e_err:
        e_out.backward()
    with pytest.raises(RuntimeError, match="modified by an inplace operation") as err:
        out.backward()
    assert "modified by an inplace operation" in str(e_err.value)
    assert args[0].grad is None


def test_an_output_never_backpropagated_drops_back_and_a_late_backward_is_right():
    f = ag.compile(_loss, backend="interpret")
    args = _args(8)
    _warm(f, args)
    kept = f(*args)
    assert _fused(kept)
    assert not _fused(f(*args))     # the fused output above was not backpropagated
    kept.backward()                 # later: still its own gradients
    for a, r in zip(args, _eager_grads(_loss, args)):
        assert_close(a.grad.numpy(), r, **TOL)
    with ag.no_grad():              # inference calls run the inference program
        assert f(*args).grad_fn is None


def test_programs_that_do_not_qualify():
    two = ag.compile(lambda x: (x.sin().sum(), x.cos().sum()), backend="interpret")
    vec = ag.compile(lambda x: x.sin() * 2, backend="interpret")
    x = ag.randn(5, requires_grad=True)
    for _ in range(FUSED_AFTER + 2):
        a, b = two(x)
        a.backward()
        vec(x).sum().backward()
    assert not two.ir(x).call_plan().fused_possible
    assert not vec.ir(x).call_plan().fused_possible
    assert type(vec(x).grad_fn).__name__ != "_FusedBackward"


def test_lifted_parameters_and_printed_stages(tmp_path):
    w = ag.randn(5, 3, requires_grad=True)

    def loss(x):
        return (x @ w).relu().square().mean()
    f = ag.compile(loss, backend="interpret")
    x = ag.randn(6, 5)
    _warm(f, (x,), (x, w))
    out = f(x)
    assert _fused(out)
    out.backward()
    ref = _eager_grads(lambda x_, w_: (x_ @ w_).relu().square().mean(), (x, w))
    assert_close(w.grad.numpy(), ref[1], **TOL)
    assert x.grad is None
    text = str(f.ir(x))
    assert "fused forward+backward" in text and "def fused(" in text
    assert "fused forward+backward ops:" in str(ag.explain(f, x))
    f.ir(x).dump(str(tmp_path))
    assert "def fused(" in (tmp_path / "fused.py").read_text()


@pytest.mark.parametrize("backend", ["interpret", "numba"])
def test_symbolic_sizes(backend):
    def loss(x):
        return (ag.tanh(x) * x).sum()
    f = ag.compile(loss, backend=backend, dynamic=True)
    for i, n in enumerate((7, 11, 7, 13, 11, 11, 7)):
        x = ag.randn(n, 3, requires_grad=True)
        if i == 0:
            f(x)
            _choose_fused(f, x)
        for _ in range(FUSED_AFTER + 2):
            x.grad = None
            f(x).backward()
        assert _fused(f(x))
        x.grad = None
        f(x).backward()
        assert_close(x.grad.numpy(), _eager_grads(loss, (x,))[0], **TOL)
    assert f.n_traces == 1


def test_nan_and_inf_inputs_as_eagerly():
    f = ag.compile(_pointwise, backend="numba")
    args = _args(9)
    with ag.no_grad():
        args[0][0, 0] = float("nan")
        args[0][1, 2] = float("inf")
        args[0][3, 1] = -float("inf")
    f(*args)
    _choose_fused(f, *args)
    _warm(f, args)
    out = f(*args)
    assert _fused(out)
    out.backward()
    ref = _eager_grads(_pointwise, args)
    assert_close(out.item(), _pointwise(*args).item(), equal_nan=True)
    for a, r in zip(args, ref):
        assert_close(a.grad.numpy(), r, **TOL)


def test_matches_torch(torch):
    f = ag.compile(_loss, backend="interpret")
    args = _args(10)
    _warm(f, args)
    out = f(*args)
    assert _fused(out)
    out.backward()
    tx, tw = (torch.tensor(a.detach().numpy(), requires_grad=True) for a in args)
    (torch.tanh(1.5 * tx @ tw + 0.5) * torch.sigmoid(tx @ tw)
     + 0.1 * torch.exp(-tx * tx).sum()).sum().backward()
    assert_close(args[0].grad.numpy(), tx.grad.numpy(), **TOL)
    assert_close(args[1].grad.numpy(), tw.grad.numpy(), **TOL)


def test_the_timing_trial_decides_once_and_either_answer_is_eager_s():
    f = ag.compile(_pointwise, backend="numba")
    ag.manual_seed(11)
    # (large enough that the estimate sends the fused program to the trial)
    args = (ag.randn(256, 256, requires_grad=True), ag.randn(5, 3, requires_grad=True))
    ref = _eager_grads(_pointwise, args)
    _warm(f, args, calls=FUSED_AFTER + 3)
    plan = f.ir(*args).call_plan()
    assert plan.estimated_gain >= FUSED_MIN_GAIN
    assert plan.fused_choice is not FusedChoice.UNDECIDED
    t_split, t_fused = plan.trial_seconds
    assert 0 < t_split and 0 < t_fused
    assert "trial: split" in str(plan)
    out = f(*args)
    assert _fused(out) == (plan.fused_choice is FusedChoice.FUSED)
    out.backward()
    for a, r in zip(args, ref):
        assert_close(a.grad.numpy(), r, **TOL)


def test_a_program_of_products_keeps_its_split_programs_without_compiling_the_fused_one():
    """Fusing saves the saved values' round trip and shared pointwise work: little of a
    program that is mostly a matrix product, whose fused program is then never compiled."""
    def loss(x, w):
        return ag.relu(x @ w).sum()
    ag.manual_seed(14)
    args = (ag.randn(64, 1024, requires_grad=True), ag.randn(1024, 1024, requires_grad=True))
    f = ag.compile(loss, backend="numba")
    _warm(f, args, calls=FUSED_AFTER + 2)
    prog = f.ir(*args)
    plan = prog.call_plan()
    assert plan.fused_choice is FusedChoice.SPLIT, str(plan)
    assert plan.estimated_gain < FUSED_MIN_GAIN and "not compiled" in str(plan)
    assert "fused" not in prog._runners and plan.trial_seconds is None
    out = f(*args)
    assert not _fused(out)
    out.backward()
    for a, r in zip(args, _eager_grads(loss, args)):
        assert_close(a.grad.numpy(), r, rtol=1e-4, atol=1e-3)


def test_the_estimate_favours_fusing_a_pointwise_loss():
    def loss(x):
        return (ag.tanh(x) * ag.exp(-x * x)).sum()
    x = ag.randn(512, 512, requires_grad=True)
    f = ag.compile(loss, backend="numba")
    f(x).backward()
    assert estimated_gain(f.ir(x)) >= FUSED_MIN_GAIN


def test_a_fused_program_that_fails_to_compile_warns_and_keeps_the_split_path(monkeypatch):
    f = ag.compile(_loss, backend="interpret")
    args = _args(12)
    f(*args)
    prog = f.ir(*args)
    inner = prog.compiled_graph

    def failing(which):
        if which == "fused":
            raise NotImplementedError("no kernel for this")
        return inner(which)
    monkeypatch.setattr(prog, "compiled_graph", failing)
    with pytest.warns(UserWarning, match="fused forward\\+backward program failed to compile"):
        _warm(f, args, calls=FUSED_AFTER + 2)
    plan = prog.call_plan()
    assert plan.fused_choice is FusedChoice.SPLIT and "no kernel for this" in str(plan)
    out = f(*args)
    assert not _fused(out)
    out.backward()
    for a, r in zip(args, _eager_grads(_loss, args)):
        assert_close(a.grad.numpy(), r, **TOL)


def test_no_fused_program_is_built_while_the_split_kernels_run_on_the_first_tier(machine_tier):
    """The split programs' compiles go first, also those held back until their first tier
    has cost as much as they would (codegen.rent): the fused program's schedule and
    codegen, as long as theirs together, stalled a call of a long unrolled loop for
    seconds while its split kernels still ran on the first tier."""
    def loss(x):        # (a loss the estimate says is worth fusing)
        return (ag.tanh(x) * ag.exp(-x * x)).sum()
    ag.manual_seed(15)
    args = (ag.randn(512, 512, requires_grad=True),)
    f = ag.compile(loss, backend="numba")
    _warm(f, args, calls=FUSED_AFTER + 3)
    prog = f.ir(*args)
    assert prog.compiled_graph("forward").first_tier and prog.compiled_graph("backward").first_tier
    assert estimated_gain(prog) >= FUSED_MIN_GAIN
    assert "_fused" not in prog.__dict__ and "fused" not in prog._runners
    out = f(*args)
    assert not _fused(out)
    out.backward()
    for a, r in zip(args, _eager_grads(loss, args)):
        assert_close(a.grad.numpy(), r, **TOL)


def test_nothing_fused_is_built_before_the_streak():
    f = ag.compile(_loss, backend="interpret")
    args = _args(13)
    _warm(f, args, calls=FUSED_AFTER)   # the first call is not counted: one short
    prog = f.ir(*args)
    assert "fused" not in prog._runners and "_fused" not in prog.__dict__
    assert not _fused(f(*args))
    f(*args)      # the output above was never backpropagated: the streak starts again
    assert prog.call_plan().streak == 0


@pytest.mark.parametrize("backend", ["interpret", "numba"])
def test_the_profiler_sees_the_fused_call_as_one_event_and_it_stays_fused(backend):
    from aotgrad.autograd import profiler
    loss = _loss_for(backend)
    f = ag.compile(loss, backend=backend)
    args = _args(14)
    f(*args)
    _choose_fused(f, *args)
    _warm(f, args, calls=FUSED_AFTER + 2)    # (the last one fused: chosen)
    with profiler.profile() as prof:
        for _ in range(2):
            for a in args:
                a.grad = None
            out = f(*args)
            assert _fused(out)
            out.backward()
    names = [e.name for e in prof.events()]
    prog = f.ir(*args)
    assert names.count(f"{prog.name}.fused") == 2
    assert f"{prog.name}.forward" not in names and f"{prog.name}.backward" not in names
    for a, r in zip(args, _eager_grads(loss, args)):
        assert_close(a.grad.numpy(), r, **TOL)
