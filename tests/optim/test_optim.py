"""Optimizers and lr schedulers: closed forms, behaviour, and PyTorch step for step."""
import math

import numpy as np
import pytest

import aotgrad
from aotgrad import nn, optim
from aotgrad.testing import assert_close


def _quad_problem(seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((6, 4)).astype(np.float32),
            rng.standard_normal((6, 3)).astype(np.float32),
            rng.standard_normal((3, 4)).astype(np.float32),
            rng.standard_normal(3).astype(np.float32))


def _run_ours(make_opt, steps, groups=False):
    x, y, w0, b0 = _quad_problem()
    model = nn.Linear(4, 3)
    model.load_state_dict({"weight": w0, "bias": b0})
    params = [{"params": [model.weight]}, {"params": [model.bias], "lr": 0.05}] if groups \
        else model.parameters()
    opt = make_opt(optim, params)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = ((model(aotgrad.tensor(x)) - aotgrad.tensor(y)) ** 2).mean()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return model, opt, losses


def _run_torch(torch, make_opt, steps, groups=False):
    x, y, w0, b0 = _quad_problem()
    model = torch.nn.Linear(4, 3)
    with torch.no_grad():
        model.weight.copy_(torch.tensor(w0))
        model.bias.copy_(torch.tensor(b0))
    params = [{"params": [model.weight]}, {"params": [model.bias], "lr": 0.05}] if groups \
        else model.parameters()
    opt = make_opt(torch.optim, params)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = ((model(torch.tensor(x)) - torch.tensor(y)) ** 2).mean()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return model, opt, losses


OPTIMIZERS = {
    "sgd": lambda o, p: o.SGD(p, lr=0.1),
    "sgd_momentum": lambda o, p: o.SGD(p, lr=0.1, momentum=0.9),
    "sgd_dampening_wd": lambda o, p: o.SGD(p, lr=0.1, momentum=0.8, dampening=0.3,
                                           weight_decay=0.01),
    "sgd_nesterov": lambda o, p: o.SGD(p, lr=0.05, momentum=0.9, nesterov=True),
    "sgd_maximize": lambda o, p: o.SGD(p, lr=0.01, momentum=0.5, maximize=True),
    "adam": lambda o, p: o.Adam(p, lr=0.01),
    "adam_wd_betas": lambda o, p: o.Adam(p, lr=0.02, betas=(0.8, 0.99), weight_decay=0.1),
    "adam_amsgrad": lambda o, p: o.Adam(p, lr=0.01, amsgrad=True),
    "adam_maximize": lambda o, p: o.Adam(p, lr=0.01, maximize=True),
    "adamw": lambda o, p: o.AdamW(p, lr=0.01),
    "adamw_amsgrad": lambda o, p: o.AdamW(p, lr=0.01, weight_decay=0.1, amsgrad=True),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_optimizer_matches_torch(torch, name):
    ours, _, lo = _run_ours(OPTIMIZERS[name], 25)
    theirs, _, lt = _run_torch(torch, OPTIMIZERS[name], 25)
    assert_close(lo, lt, rtol=1e-5, atol=1e-6, equal_nan=True)
    assert_close(ours.weight.detach().numpy(), theirs.weight.detach().numpy(), rtol=1e-5, atol=1e-6,
                 equal_nan=True)
    assert_close(ours.bias.detach().numpy(), theirs.bias.detach().numpy(), rtol=1e-5, atol=1e-6,
                 equal_nan=True)


def test_param_groups_match_torch(torch):
    make = lambda o, p: o.SGD(p, lr=0.1, momentum=0.9)  # noqa: E731
    ours, opt, lo = _run_ours(make, 10, groups=True)
    theirs, _, lt = _run_torch(torch, make, 10, groups=True)
    assert_close(lo, lt, rtol=1e-5, atol=0, equal_nan=True)
    assert_close(ours.bias.detach().numpy(), theirs.bias.detach().numpy(), rtol=1e-5, atol=1e-6,
                 equal_nan=True)
    assert [g["lr"] for g in opt.param_groups] == [0.1, 0.05]


def test_sgd_closed_form():
    p = nn.Parameter(aotgrad.tensor([1.0, -2.0]))
    opt = optim.SGD([p], lr=0.5, momentum=0.9)
    for _ in range(2):
        opt.zero_grad()
        (p * aotgrad.tensor([1.0, 3.0])).sum().backward()  # grad = [1, 3], constant
        opt.step()
    # step 1: buf = g, p -= 0.5 g; step 2: buf = 0.9 g + g, p -= 0.5 * 1.9 g
    assert_close(p.detach().numpy(), [1 - 0.5 * 2.9, -2 - 1.5 * 2.9], rtol=1e-6, atol=0,
                 equal_nan=True)
    assert "momentum_buffer" in opt.state[p]


def test_adam_first_step_closed_form():
    """After one step Adam moves every coordinate by lr * g / (|g| + eps') ~ lr * sign(g)."""
    p = nn.Parameter(aotgrad.tensor([1.0, -2.0, 3.0]))
    opt = optim.Adam([p], lr=0.1)
    (p * aotgrad.tensor([2.0, -0.5, 1e-3])).sum().backward()
    opt.step()
    assert_close(p.detach().numpy(), [0.9, -1.9, 2.9], rtol=1e-5, atol=0, equal_nan=True)
    assert float(opt.state[p]["step"]) == 1.0
    # AdamW decays the weight before the update, by lr * wd
    q = nn.Parameter(aotgrad.tensor([2.0]))
    opt = optim.AdamW([q], lr=0.1, weight_decay=0.5)
    (q * 0.0 + q * 1.0).sum().backward()
    opt.step()
    assert_close(q.detach().numpy(), [2.0 * (1 - 0.05) - 0.1], rtol=1e-5, atol=0, equal_nan=True)


def test_zero_grad_and_skips_params_without_grad():
    a, b = nn.Parameter(aotgrad.ones(2)), nn.Parameter(aotgrad.ones(2))
    opt = optim.SGD([a, b], lr=1.0)
    (a * 2).sum().backward()
    opt.step()
    np.testing.assert_array_equal(a.detach().numpy(), [-1, -1])
    np.testing.assert_array_equal(b.detach().numpy(), [1, 1])  # no grad: untouched
    opt.zero_grad(set_to_none=False)
    np.testing.assert_array_equal(a.grad.numpy(), [0, 0])
    opt.zero_grad()
    assert a.grad is None


def test_step_closure_reevaluates_loss():
    p = nn.Parameter(aotgrad.tensor([3.0]))
    opt = optim.SGD([p], lr=0.25)

    def closure():
        opt.zero_grad()
        loss = (p * p).sum()
        loss.backward()
        return loss
    loss = opt.step(closure)
    assert float(loss) == 9.0 and float(p) == pytest.approx(1.5)


def test_state_dict_roundtrip_continues_identically():
    def make():
        model = nn.Linear(4, 3)
        model.load_state_dict({"weight": _quad_problem()[2], "bias": _quad_problem()[3]})
        return model, optim.Adam(model.parameters(), lr=0.05)

    x, y = (aotgrad.tensor(a) for a in _quad_problem()[:2])

    def train(model, opt, n):
        for _ in range(n):
            opt.zero_grad()
            ((model(x) - y) ** 2).mean().backward()
            opt.step()

    m1, o1 = make()
    train(m1, o1, 5)
    sd = o1.state_dict()
    assert sorted(sd["state"]) == [0, 1] and sd["param_groups"][0]["params"] == [0, 1]
    assert set(sd["state"][0]) == {"step", "exp_avg", "exp_avg_sq"}
    m2, o2 = make()
    m2.load_state_dict(m1.state_dict())
    o2.load_state_dict(sd)
    assert o2.state[m2.weight]["exp_avg"] is not o1.state[m1.weight]["exp_avg"]  # deep copy
    train(m1, o1, 5)
    train(m2, o2, 5)
    np.testing.assert_array_equal(m1.weight.detach().numpy(), m2.weight.detach().numpy())
    bad = optim.Adam([nn.Parameter(aotgrad.ones(1))])
    with pytest.raises(ValueError, match="doesn't match the size"):
        bad.load_state_dict(sd)


def test_optimizer_errors_and_repr():
    p = nn.Parameter(aotgrad.ones(2))
    with pytest.raises(ValueError, match="Invalid learning rate: -1"):
        optim.SGD([p], lr=-1)
    with pytest.raises(ValueError, match="Nesterov momentum requires a momentum and zero "
                                         "dampening"):
        optim.SGD([p], lr=0.1, nesterov=True)
    with pytest.raises(ValueError, match="Invalid beta parameter at index 1"):
        optim.Adam([p], betas=(0.9, 1.0))
    with pytest.raises(ValueError, match="empty parameter list"):
        optim.SGD([], lr=0.1)
    with pytest.raises(TypeError, match="iterable of Tensors or dicts"):
        optim.SGD(p, lr=0.1)
    opt = optim.SGD([p], lr=0.1)
    with pytest.raises(ValueError, match="more than one parameter group"):
        opt.add_param_group({"params": [p]})
    q = nn.Parameter(aotgrad.ones(1))
    opt.add_param_group({"params": q, "momentum": 0.5})
    assert opt.param_groups[1]["lr"] == 0.1 and opt.param_groups[1]["momentum"] == 0.5
    assert repr(opt).startswith("SGD (\nParameter Group 0\n    dampening: 0\n    "
                                "differentiable: False\n    foreach: None\n    fused: None\n"
                                "    lr: 0.1")


def test_lr_schedulers_closed_forms():
    p = nn.Parameter(aotgrad.ones(1))
    opt = optim.SGD([p], lr=1.0)
    s = optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
    lrs = []
    for _ in range(7):
        lrs.append(s.get_last_lr()[0])
        opt.step()
        s.step()
    assert lrs == [1, 1, 1, 0.5, 0.5, 0.5, 0.25]
    opt = optim.SGD([p], lr=1.0)
    s = optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10, eta_min=0.1)
    got = []
    for _ in range(11):
        got.append(opt.param_groups[0]["lr"])
        s.step()
    ref = [0.1 + 0.9 * (1 + math.cos(math.pi * e / 10)) / 2 for e in range(11)]
    assert_close(got, ref, rtol=1e-12, atol=0, equal_nan=True)


SCHEDULERS = {
    "step": lambda m, o: m.StepLR(o, step_size=3, gamma=0.3),
    "cosine": lambda m, o: m.CosineAnnealingLR(o, T_max=7, eta_min=0.01),
    "multistep": lambda m, o: m.MultiStepLR(o, milestones=[2, 5, 5], gamma=0.5),
    "exponential": lambda m, o: m.ExponentialLR(o, gamma=0.9),
    "lambda": lambda m, o: m.LambdaLR(o, lambda e: 1 / (e + 1)),
}


@pytest.mark.parametrize("name", sorted(SCHEDULERS))
def test_lr_schedulers_match_torch(torch, name):
    ours_opt = optim.SGD([nn.Parameter(aotgrad.ones(1))], lr=0.5)
    tp = torch.nn.Parameter(torch.ones(1))
    theirs_opt = torch.optim.SGD([tp], lr=0.5)
    s_o = SCHEDULERS[name](optim.lr_scheduler, ours_opt)
    s_t = SCHEDULERS[name](torch.optim.lr_scheduler, theirs_opt)
    for _ in range(20):  # past T_max: the cosine schedule turns back up, like PyTorch's
        assert s_o.get_last_lr() == pytest.approx(s_t.get_last_lr(), rel=1e-12)
        ours_opt.step(), theirs_opt.step()
        s_o.step(), s_t.step()
