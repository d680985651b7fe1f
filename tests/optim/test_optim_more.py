"""RMSprop, Adagrad, Adamax, NAdam, RAdam and LBFGS without PyTorch: the first steps worked
out by hand from the published update rules, maximize as descent on the negated gradient, the
state layout, a compiled training step against eager, and LBFGS on quadratics."""
import math
import warnings

import numpy as np
import pytest

import aotgrad
from aotgrad import optim
from aotgrad.testing import assert_close


def _one_param(value, grad, dtype=aotgrad.float64):
    p = aotgrad.tensor(value, dtype=dtype, requires_grad=True)
    p.grad = aotgrad.tensor(grad, dtype=dtype)
    return p


def _steps(opt_cls, grads, p0=1.0, dtype=aotgrad.float64, **kw):
    """The parameter after each step, for the given gradient sequence."""
    p = aotgrad.tensor([p0], dtype=dtype, requires_grad=True)
    opt = opt_cls([p], **kw)
    out = []
    for g in grads:
        p.grad = aotgrad.tensor([g], dtype=dtype)
        opt.step()
        out.append(p.item())
    return out, opt


def test_rmsprop_by_hand():
    lr, a, eps = 0.01, 0.9, 1e-8
    (p1, p2), _ = _steps(optim.RMSprop, [2.0, -1.0], lr=lr, alpha=a, eps=eps)
    v1 = (1 - a) * 4
    assert p1 == pytest.approx(1 - lr * 2 / (math.sqrt(v1) + eps), rel=1e-14)
    v2 = a * v1 + (1 - a) * 1
    assert p2 == pytest.approx(p1 + lr * 1 / (math.sqrt(v2) + eps), rel=1e-14)


def test_rmsprop_centered_momentum_by_hand():
    lr, a, eps, mu = 0.01, 0.9, 1e-8, 0.5
    (p1, p2), opt = _steps(optim.RMSprop, [2.0, -1.0], lr=lr, alpha=a, eps=eps, momentum=mu,
                           centered=True)
    v1, ga1 = (1 - a) * 4, (1 - a) * 2
    d1 = math.sqrt(v1 - ga1 ** 2) + eps
    b1 = 2 / d1
    assert p1 == pytest.approx(1 - lr * b1, rel=1e-14)
    v2, ga2 = a * v1 + (1 - a), a * ga1 - (1 - a)
    b2 = mu * b1 - 1 / (math.sqrt(v2 - ga2 ** 2) + eps)
    assert p2 == pytest.approx(p1 - lr * b2, rel=1e-14)
    state = opt.state_dict()["state"][0]
    assert list(state) == ["step", "square_avg", "momentum_buffer", "grad_avg"]
    assert state["step"].item() == 2 and state["step"].dtype == aotgrad.float32


def test_adagrad_by_hand_with_lr_decay_and_initial_accumulator():
    lr, decay, s0, eps = 0.1, 0.5, 0.25, 1e-10
    (p1, p2), opt = _steps(optim.Adagrad, [2.0, 1.0], lr=lr, lr_decay=decay,
                           initial_accumulator_value=s0, eps=eps)
    assert p1 == pytest.approx(1 - lr * 2 / (math.sqrt(s0 + 4) + eps), rel=1e-14)
    assert p2 == pytest.approx(p1 - lr / (1 + decay) * 1 / (math.sqrt(s0 + 5) + eps), rel=1e-14)


def test_adagrad_state_exists_before_the_first_step():
    p = aotgrad.zeros(3, requires_grad=True)
    opt = optim.Adagrad([p], initial_accumulator_value=0.5)
    state = opt.state_dict()["state"][0]
    assert state["step"].item() == 0 and state["sum"].tolist() == [0.5] * 3


def test_adamax_by_hand():
    lr, b1, b2, eps = 0.002, 0.9, 0.999, 1e-8
    (p1, p2), _ = _steps(optim.Adamax, [2.0, -3.0], lr=lr)
    m1, u1 = (1 - b1) * 2, 2 + eps
    assert p1 == pytest.approx(1 - lr / (1 - b1) * m1 / u1, rel=1e-14)
    m2, u2 = b1 * m1 + (1 - b1) * -3, max(b2 * u1, 3 + eps)
    assert p2 == pytest.approx(p1 - lr / (1 - b1 ** 2) * m2 / u2, rel=1e-14)


def test_nadam_first_step_by_hand():
    lr, b1, b2, eps, psi, g = 0.002, 0.9, 0.999, 1e-8, 4e-3, 2.0
    (p1,), opt = _steps(optim.NAdam, [g], lr=lr)
    mu1 = b1 * (1 - 0.5 * 0.96 ** psi)
    mu2 = b1 * (1 - 0.5 * 0.96 ** (2 * psi))
    prod = float(np.float32(mu1))  # PyTorch keeps the product as a float32 tensor
    m, v = (1 - b1) * g, (1 - b2) * g * g
    denom = math.sqrt(v / (1 - b2)) + eps
    expect = 1 - lr * (1 - mu1) / (1 - prod) * g / denom \
        - lr * mu2 / (1 - prod * mu2) * m / denom
    assert p1 == pytest.approx(expect, rel=1e-12)
    assert opt.state[opt.param_groups[0]["params"][0]]["mu_product"].dtype == aotgrad.float32


def test_nadam_decoupled_weight_decay_scales_the_parameter_first():
    kw = dict(lr=0.01, weight_decay=0.5)
    (a,), _ = _steps(optim.NAdam, [1.0], p0=2.0, decoupled_weight_decay=True, **kw)
    (b,), _ = _steps(optim.NAdam, [1.0], p0=2.0 * (1 - 0.01 * 0.5), lr=0.01)
    assert a == pytest.approx(b, rel=1e-14)


def test_radam_unrectified_then_rectified_by_hand():
    lr, b1, b2, eps = 0.01, 0.9, 0.9, 1e-8
    grads = [1.0, 2.0, 3.0, -1.0, 0.5, 2.0, 1.5]
    ps, _ = _steps(optim.RAdam, grads, lr=lr, betas=(b1, b2), eps=eps)
    p, m, v = 1.0, 0.0, 0.0
    rho_inf = 2 / (1 - b2) - 1
    rectified = []
    for t, g in enumerate(grads, 1):
        m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
        m_hat = m / (1 - b1 ** t)
        rho = rho_inf - 2 * t * b2 ** t / (1 - b2 ** t)
        rectified.append(rho > 5)
        if rho > 5:
            r = math.sqrt((rho - 4) * (rho - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho))
            p -= lr * m_hat * math.sqrt(1 - b2 ** t) / (math.sqrt(v) + eps) * r
        else:
            p -= lr * m_hat
        assert ps[t - 1] == pytest.approx(p, rel=1e-13)
    assert rectified == [False] * 5 + [True] * 2  # both branches were checked


@pytest.mark.parametrize("name", ["RMSprop", "Adagrad", "Adamax", "NAdam", "RAdam", "Adam",
                                  "SGD"])
def test_maximize_is_descent_on_the_negated_gradient(name):
    cls = getattr(optim, name)
    grads = [0.3, -1.2, 2.0, 0.7]
    p_max, _ = _steps(cls, grads, maximize=True, lr=0.05)
    p_neg, _ = _steps(cls, [-g for g in grads], lr=0.05)
    assert p_max == pytest.approx(p_neg, rel=1e-14)


@pytest.mark.parametrize("name", ["RMSprop", "Adagrad", "Adamax", "NAdam", "RAdam"])
def test_float32_stays_float32_and_foreach_differentiable_accepted(name):
    p = _one_param([1.0, -2.0], [0.5, 0.25], dtype=aotgrad.float32)
    opt = getattr(optim, name)([p], foreach=None, differentiable=False, maximize=False)
    for _ in range(3):
        opt.step()
    assert p.dtype == aotgrad.float32 and np.isfinite(p.detach().numpy()).all()
    for k, v in opt.state[p].items():
        if k not in ("step", "mu_product"):
            assert v.dtype == aotgrad.float32, k


@pytest.mark.parametrize("name", ["RMSprop", "Adagrad", "Adamax", "NAdam", "RAdam"])
def test_state_dict_round_trip_continues_identically(name):
    # float32: loading casts floating state (but "step") to the parameter's dtype, which
    # changes NAdam's float32 "mu_product" for a float64 parameter, as in PyTorch
    cls, f32 = getattr(optim, name), aotgrad.float32
    grads = [0.3, -1.2, 2.0, 0.7, -0.4]
    full, _ = _steps(cls, grads, lr=0.05, dtype=f32)
    part, opt = _steps(cls, grads[:2], lr=0.05, dtype=f32)
    p = aotgrad.tensor([part[-1]], dtype=f32, requires_grad=True)
    opt2 = cls([p], lr=0.05)
    opt2.load_state_dict(opt.state_dict())
    for g in grads[2:]:
        p.grad = aotgrad.tensor([g], dtype=f32)
        opt2.step()
    assert p.item() == full[-1]


def test_compiled_training_step_matches_eager_for_each_optimizer():
    import copy
    from aotgrad import nn, optim
    for name, kw in [("RMSprop", dict(momentum=0.9, centered=True)), ("Adagrad", {}),
                     ("Adamax", {}), ("NAdam", dict(weight_decay=0.1)),
                     ("RAdam", dict(betas=(0.9, 0.9)))]:
        aotgrad.manual_seed(0)
        m1 = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
        m2 = copy.deepcopy(m1)
        o1 = getattr(optim, name)(m1.parameters(), lr=0.01, **kw)
        o2 = getattr(optim, name)(m2.parameters(), lr=0.01, **kw)

        def make_step(m, o):
            def step(x, y):
                o.zero_grad()
                loss = ((m(x) - y) ** 2).mean()
                loss.backward()
                o.step()
                return loss
            return step
        eager, comp = make_step(m1, o1), aotgrad.compile(make_step(m2, o2), backend="interpret")
        x, y = aotgrad.randn(16, 4), aotgrad.randn(16, 1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for _ in range(7):  # RAdam with b2 = 0.9 switches branch at step 6
                assert comp(x, y).item() == pytest.approx(eager(x, y).item(), rel=1e-5), name
        for a, b in zip(m1.parameters(), m2.parameters()):
            assert_close(a.detach().numpy(), b.detach().numpy(), rtol=1e-5, atol=1e-6,
                         equal_nan=True, msg=name)


# ---- LBFGS ---------------------------------------------------------------------------------
def _quadratic(dtype=aotgrad.float64):
    A = np.diag([1.0, 3.0, 10.0])
    x = aotgrad.tensor([1.0, -2.0, 0.5], dtype=dtype, requires_grad=True)
    At = aotgrad.tensor(A, dtype=dtype)
    return x, At


def test_lbfgs_first_iteration_by_hand():
    x, A = _quadratic()
    opt = optim.LBFGS([x], lr=0.5, max_iter=1)
    calls = []

    def closure():
        opt.zero_grad()
        loss = 0.5 * (x * (A @ x)).sum()
        loss.backward()
        calls.append(loss.item())
        return loss

    x0 = x.detach().numpy().copy()
    loss = opt.step(closure)
    g = np.diag(A.numpy()) * x0
    t = min(1.0, 1.0 / np.abs(g).sum()) * 0.5
    assert_close(x.detach().numpy(), x0 - t * g, rtol=1e-15, atol=0, equal_nan=True)
    assert loss.item() == calls[0] and len(calls) == 1  # max_iter=1: no re-evaluation
    assert opt.state[x]["n_iter"] == 1 and opt.state[x]["func_evals"] == 1


@pytest.mark.parametrize("line_search_fn", [None, "strong_wolfe"])
def test_lbfgs_minimises_a_quadratic(line_search_fn):
    x, A = _quadratic()
    opt = optim.LBFGS([x], line_search_fn=line_search_fn, max_iter=50)

    def closure():
        opt.zero_grad()
        loss = 0.5 * (x * (A @ x)).sum()
        loss.backward()
        return loss

    for _ in range(3):
        opt.step(closure)
    assert np.abs(x.detach().numpy()).max() < 1e-6
    state = opt.state_dict()["state"][0]
    assert len(state["old_dirs"]) == len(state["ro"]) <= 100
    assert all(isinstance(v, aotgrad.Tensor) for v in state["old_stps"])


def test_lbfgs_history_size_bounds_the_pairs_and_state_round_trips():
    x, A = _quadratic()
    opt = optim.LBFGS([x], history_size=2, max_iter=6, lr=0.3)

    def closure():
        opt.zero_grad()
        loss = 0.5 * (x * (A @ x)).sum() + (x ** 4).sum()
        loss.backward()
        return loss

    opt.step(closure)
    assert len(opt.state[x]["old_dirs"]) == 2
    x2 = aotgrad.tensor(x.detach().numpy(), requires_grad=True)
    opt2 = optim.LBFGS([x2], history_size=2, max_iter=6, lr=0.3)
    opt2.load_state_dict(opt.state_dict())

    def closure2():
        opt2.zero_grad()
        loss = 0.5 * (x2 * (A @ x2)).sum() + (x2 ** 4).sum()
        loss.backward()
        return loss

    opt.step(closure)
    opt2.step(closure2)
    np.testing.assert_array_equal(x.detach().numpy(), x2.detach().numpy())


def test_lbfgs_rejects_groups_and_unknown_line_search():
    a, b = aotgrad.zeros(2, requires_grad=True), aotgrad.zeros(2, requires_grad=True)
    with pytest.raises(ValueError, match="per-parameter options"):
        optim.LBFGS([{"params": [a]}, {"params": [b]}])
    opt = optim.LBFGS([a], line_search_fn="armijo")

    def closure():
        opt.zero_grad()
        loss = ((a - 1) ** 2).sum()
        loss.backward()
        return loss

    with pytest.raises(RuntimeError, match="only 'strong_wolfe' is supported"):
        opt.step(closure)
