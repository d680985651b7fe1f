"""Dynamic shapes: the API (dynamic=, mark_dynamic/mark_static, cf.stats, explain), the
policy (which dims become symbols), guards on the relations a trace relied on, and
compiled == eager over sequences of sizes for a small MLP (interpret backend)."""
import itertools
import logging

import numpy as np
import pytest

import aotgrad
from aotgrad import nn
from aotgrad.testing import assert_close


def _mlp():
    aotgrad.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 3))


def _check_grads(model, f, x, t):
    """compiled f(x) and its gradients (x and every parameter) == eager."""
    model.zero_grad()
    xc = x.detach().clone().requires_grad_(True)
    out = f(xc, t)
    out.backward()
    grads_c = [p.grad.numpy().copy() for p in model.parameters()]
    model.zero_grad()
    xe = x.detach().clone().requires_grad_(True)
    ref = nn.functional.cross_entropy(model(xe), t)
    ref.backward()
    assert_close(out.detach().numpy(), ref.detach().numpy(), rtol=1e-5, atol=1e-6, equal_nan=True)
    assert_close(xc.grad.numpy(), xe.grad.numpy(), rtol=1e-5, atol=1e-6, equal_nan=True)
    for gc, p in zip(grads_c, model.parameters()):
        assert_close(gc, p.grad.numpy(), rtol=1e-5, atol=1e-6, equal_nan=True)


@pytest.mark.parametrize("dynamic,backend", [(True, "interpret"), (None, "interpret"),
                                             (True, "numba")])
def test_mlp_one_compile_serves_every_batch(dynamic, backend):
    model = _mlp()

    @aotgrad.compile(backend=backend, dynamic=dynamic)
    def loss_fn(x, t):
        return nn.functional.cross_entropy(model(x), t)

    for n in (4, 7, 2, 9, 7):
        x = aotgrad.randn(n, 6)
        t = aotgrad.randint(0, 3, (n,))
        _check_grads(model, loss_fn, x, t)
    # dynamic=True: one trace; None: a static one, then one with the batch dim symbolic
    assert loss_fn.stats.compiles == (1 if dynamic else 2)
    assert loss_fn.stats.eager_fallbacks == 0 and loss_fn.stats.cache_hits >= 3


def test_ir_prints_symbols():
    lin = nn.Linear(4, 3)
    f = aotgrad.compile(lambda x: lin(x).sum(), backend="interpret", dynamic=True)
    prog = f.ir(aotgrad.randn(5, 4))
    # (dim 1 met the weight's 4: pinned by its guard)
    assert "x0: f32[s0,4]" in str(prog.inference) and "f32[s0,3]" in str(prog.inference)


def test_automatic_dynamic_makes_exactly_the_changed_dim_symbolic(caplog):
    @aotgrad.compile(backend="interpret")
    def f(x, y):
        return (x * 2).sum(0) + y

    with caplog.at_level(logging.INFO, logger="aotgrad.compiler"):
        f(aotgrad.randn(3, 4), aotgrad.randn(4))
        f(aotgrad.randn(5, 4), aotgrad.randn(4))
    assert f.stats.compiles == 2
    prog = f.ir(aotgrad.randn(6, 4), aotgrad.randn(4))
    assert [tuple(map(str, v.shape)) for v in prog.inference.inputs] == [("s0", "4"), ("4",)]
    assert sum("automatic dynamic" in r.getMessage() for r in caplog.records) == 1
    for n in (6, 8, 2):
        x, y = aotgrad.randn(n, 4), aotgrad.randn(4)
        assert_close(f(x, y).numpy(), ((x * 2).sum(0) + y).numpy(), rtol=1e-6, atol=0,
                     equal_nan=True)
    assert f.stats.compiles == 2
    text = aotgrad.explain(f, aotgrad.randn(3, 4), aotgrad.randn(4))
    assert "automatic dynamic" in text and "x: dim 0" in text and "compiles=2" in text


def test_dynamic_false_specialises_and_warns():
    f = aotgrad.compile(lambda x: x.sin().sum(), backend="interpret", dynamic=False)
    f(aotgrad.randn(3))
    with pytest.warns(UserWarning, match="recompiling because"):
        f(aotgrad.randn(4))
    assert f.stats.compiles == 2 and f.stats.traces == 2


def test_mark_dynamic_and_mark_static():
    f = aotgrad.compile(lambda x: (x * x).sum(1), backend="interpret")
    x = aotgrad.randn(3, 5)
    aotgrad.mark_dynamic(x, 0)
    prog = f.ir(x)
    assert tuple(map(str, prog.inference.inputs[0].shape)) == ("s0", "5")
    assert aotgrad.compiler.mark_dynamic is aotgrad.mark_dynamic

    g = aotgrad.compile(lambda x: (x * x).sum(1), backend="interpret", dynamic=True)
    y = aotgrad.randn(3, 5)
    aotgrad.mark_static(y, [1])
    prog = g.ir(y)
    assert tuple(map(str, prog.inference.inputs[0].shape)) == ("s0", "5")
    with pytest.raises(IndexError, match="mark_dynamic"):
        aotgrad.mark_dynamic(y, 2)


def test_guard_on_a_size_branch_recompiles_instead_of_reusing():
    @aotgrad.compile(backend="interpret", dynamic=True)
    def f(x):
        if x.shape[0] % 2 == 0:  # a decision on a size: a guard
            return x * 2
        return x * 3

    for n, k in ((4, 2), (6, 2), (5, 3), (8, 2), (7, 3)):
        x = aotgrad.randn(n)
        assert_close(f(x).numpy(), x.numpy() * k, rtol=1e-6, atol=0, equal_nan=True)
    assert f.stats.compiles == 2 and f.stats.guard_failures >= 1
    assert "shape guards" in aotgrad.explain(f, aotgrad.randn(4))


def test_reshape_relation_is_a_guard():
    f = aotgrad.compile(lambda x: x.reshape(-1, 4).sum(1), backend="interpret", dynamic=True)
    for n in (8, 12, 20):
        x = aotgrad.randn(n)
        assert_close(f(x).numpy(), x.numpy().reshape(-1, 4).sum(1), rtol=1e-5, atol=0,
                     equal_nan=True)
    assert f.stats.compiles == 1
    with pytest.raises(RuntimeError, match="invalid for input of size 6"):
        f(aotgrad.randn(6))  # violates s0 % 4 == 0: traced again, raising as eagerly


def test_int_of_a_size_specialises_and_explain_says_so():
    @aotgrad.compile(backend="interpret", dynamic=True)
    def f(x):
        return x.sum() * int(x.shape[0])

    x = aotgrad.randn(3)
    assert float(f(x)) == pytest.approx(float(x.sum()) * 3, rel=1e-6)
    assert "specialised: s0 == 3" in aotgrad.explain(f, x)
    y = aotgrad.randn(4)
    assert float(f(y)) == pytest.approx(float(y.sum()) * 4, rel=1e-6)
    assert f.stats.compiles == 2


def test_dtype_and_requires_grad_changes_still_recompile():
    f = aotgrad.compile(lambda x: (x * x).sum(), backend="interpret", dynamic=True)
    f(aotgrad.randn(3))
    f(aotgrad.randn(5))
    assert f.stats.compiles == 1
    f(aotgrad.randn(3, dtype=aotgrad.float64))
    assert f.stats.compiles == 2
    x = aotgrad.randn(4, requires_grad=True)
    f(x).backward()
    assert f.stats.compiles == 3
    assert_close(x.grad.numpy(), 2 * x.detach().numpy(), rtol=1e-6, atol=0, equal_nan=True)


def test_sizes_0_and_1_are_static():
    f = aotgrad.compile(lambda x: x.exp().sum(0), backend="interpret", dynamic=True)
    for n in (1, 3, 1, 4):
        x = aotgrad.randn(n, 2)
        assert_close(f(x).numpy(), np.exp(x.numpy()).sum(0), rtol=1e-6, atol=0, equal_nan=True)
    assert f.stats.compiles == 2


def test_bad_dynamic_value():
    with pytest.raises(ValueError, match="dynamic"):
        aotgrad.compile(lambda x: x, dynamic="yes")


def test_data_dependent_shapes_still_break_the_graph():
    f = aotgrad.compile(lambda x: x[x > 0].sum(), backend="interpret", dynamic=True)
    x = aotgrad.randn(6)
    with pytest.warns(UserWarning, match="graph break"):
        out = f(x)
    assert float(out) == pytest.approx(float(x.numpy()[x.numpy() > 0].sum()), rel=1e-6)
    assert f.stats.eager_fallbacks == 1


def test_cat_stack_split_with_symbolic_sizes():
    @aotgrad.compile(backend="interpret", dynamic=True)
    def f(x, y):
        z = aotgrad.cat([x, y], 0)             # s0 + s2 rows
        a, b = z.split([x.shape[0], y.shape[0]], 0)
        return aotgrad.stack([a.sum(0), b.sum(0)]).sum() + z.mean()

    for n, m in ((3, 4), (5, 2), (6, 7)):
        x, y = aotgrad.randn(n, 3), aotgrad.randn(m, 3)
        z = np.concatenate([x.numpy(), y.numpy()])
        want = x.numpy().sum() + y.numpy().sum() + z.mean()
        assert float(f(x, y)) == pytest.approx(float(want), rel=1e-5)
    assert f.stats.compiles == 1


def test_double_backward_through_a_symbolic_program():
    f = aotgrad.compile(lambda x: (x.sin() * x).mean(), backend="interpret", dynamic=True)
    for n in (5, 8):
        x = aotgrad.randn(n, requires_grad=True)
        g, = aotgrad.autograd.grad(f(x), x, create_graph=True)
        gg, = aotgrad.autograd.grad(g.sum(), x)
        xe = x.detach().clone().requires_grad_(True)
        ge, = aotgrad.autograd.grad((xe.sin() * xe).mean(), xe, create_graph=True)
        gge, = aotgrad.autograd.grad(ge.sum(), xe)
        assert_close(g.detach().numpy(), ge.detach().numpy(), rtol=1e-5, atol=0, equal_nan=True)
        assert_close(gg.numpy(), gge.numpy(), rtol=1e-5, atol=0, equal_nan=True)
    assert f.stats.compiles == 1


def test_stats_count_a_state_guard_failure():
    scale = [2.0]
    f = aotgrad.compile(lambda x: x * scale[0], backend="interpret")
    x = aotgrad.ones(3)
    f(x)
    f(x)
    scale[0] = 3.0
    with pytest.warns(UserWarning, match="recompiling"):
        assert float(f(x).sum()) == 9.0
    s = f.stats
    assert (s.traces, s.compiles, s.cache_hits, s.guard_failures) == (2, 2, 1, 1)


def test_anomaly_mode_names_the_nan_of_a_symbolic_program():
    f = aotgrad.compile(lambda x: (x.log() * 2).sum(), backend="interpret", dynamic=True)
    f(aotgrad.rand(4, requires_grad=True) + 1)
    x = aotgrad.tensor([1.0, -1.0, 2.0, 3.0, 4.0], requires_grad=True)
    with aotgrad.autograd.detect_anomaly():
        with pytest.raises(RuntimeError, match="nan values.*log"):
            f(x)
    assert f.stats.compiles == 1


def test_explain_names_a_dim_pinned_by_a_weight_and_guards_read_as_what_held():
    lin = nn.Linear(4, 3)
    f = aotgrad.compile(lambda x: lin(x).sum(), backend="interpret", dynamic=True)
    f(aotgrad.randn(5, 4))
    f(aotgrad.randn(6, 4))
    text = aotgrad.explain(f, aotgrad.randn(7, 4))
    # x's dim 1 met the weight's 4: static in the program, and explain says why
    assert "specialised: s1 == 4 (a shape decision of the trace relied on it; " \
           "s1 = x.size(1))" in text
    assert "stats: traces=1, compiles=1, cache_hits=" in text
    guards = text.split("shape guards (a call that breaks one traces again):\n")[1]
    guards = [line.strip() for line in
              itertools.takewhile(lambda line: line.startswith("  "), guards.splitlines())]
    assert guards and all(eval(g, {"s0": 5, "s1": 4}) for g in guards)   # held when traced
    assert len(set(guards)) == len(guards)     # `s1 != 4` False and `s1 == 4` True: one guard
