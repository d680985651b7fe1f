"""Conformance against PyTorch, continued: losses, optimizers, lr schedulers,
autograd.functional, gradcheck, autograd.Function, anomaly mode and the profiler: values,
gradients, names, orders, messages and signatures compared. Every test takes the `torch`
fixture, so the file skips where PyTorch is not installed."""
import itertools

import numpy as np
import pytest

import aotgrad
import aotgrad.autograd.functional as AF
import aotgrad.nn.functional as F
from aotgrad import nn, optim

from torch_compare import close, error_text, normal, same_text, to_numpy
from aotgrad.testing import assert_close

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")


# ---- losses ----------------------------------------------------------------------------------
def _loss_case(torch, fn_name, arrays, grad_idx, **kw):
    fo, ft = getattr(F, fn_name), getattr(torch.nn.functional, fn_name)
    conv = lambda v, lib: lib.tensor(v) if isinstance(v, np.ndarray) else v  # noqa: E731
    xo = [aotgrad.tensor(a, requires_grad=i in grad_idx) for i, a in enumerate(arrays)]
    xt = [torch.tensor(a, requires_grad=i in grad_idx) for i, a in enumerate(arrays)]
    yo = fo(*xo, **{k: conv(v, aotgrad) for k, v in kw.items()})
    yt = ft(*xt, **{k: conv(v, torch) for k, v in kw.items()})
    close(yo, yt, f"{fn_name} value", atol=1e-5)
    g = normal(*yt.shape, seed=5)
    (yo * aotgrad.tensor(g)).sum().backward()
    (yt * torch.tensor(g)).sum().backward()
    for i in grad_idx:
        close(xo[i].grad, xt[i].grad, f"{fn_name} grad {i}", atol=1e-5)


REDUCTIONS = ["mean", "sum", "none"]
_C = 5


def _class_data(shape, seed=0):
    rng = np.random.default_rng(seed)
    x = normal(*shape, seed=seed)
    tshape = shape[:1] + shape[2:] if len(shape) > 1 else ()
    t = rng.integers(0, _C, size=tshape).astype(np.int64)
    if t.size > 2:
        t.flat[0], t.flat[1] = 2, 2
    w = (rng.random(_C) + 0.5).astype(np.float32)
    return x, t, w


@pytest.mark.parametrize("shape", [(4, _C), (_C,), (3, _C, 2, 3)])
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("smoothing,use_w,ignore", list(itertools.product(
    [0.0, 0.2], [False, True], [-100, 2])))
def test_cross_entropy_and_nll(torch, shape, reduction, smoothing, use_w, ignore):
    x, t, w = _class_data(shape)
    kw = dict(reduction=reduction, ignore_index=ignore)
    if use_w:
        kw["weight"] = w
    _loss_case(torch, "cross_entropy", [x, t], (0,), label_smoothing=smoothing, **kw)
    if smoothing == 0.0:
        _loss_case(torch, "nll_loss", [x, t], (0,), **kw)


@pytest.mark.parametrize("shape", [(4, _C), (3, _C, 2)])
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("smoothing,use_w", list(itertools.product([0.0, 0.3], [False, True])))
def test_cross_entropy_probability_targets(torch, shape, reduction, smoothing, use_w):
    x, _, w = _class_data(shape)
    p = np.abs(normal(*shape, seed=3))
    p = (p / p.sum(axis=1, keepdims=True)).astype(np.float32)
    kw = dict(reduction=reduction, label_smoothing=smoothing)
    if use_w:
        kw["weight"] = w
    _loss_case(torch, "cross_entropy", [x, p], (0, 1), **kw)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_all_targets_ignored(torch, reduction):
    x = normal(3, _C)
    t = np.full(3, -100, dtype=np.int64)
    _loss_case(torch, "nll_loss", [x, t], (0,), reduction=reduction)
    _loss_case(torch, "cross_entropy", [x, t], (0,), reduction=reduction, label_smoothing=0.1)


@pytest.mark.parametrize("shape", [(4, 3), ()])
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_regression_and_binary_losses(torch, shape, reduction):
    a, b = normal(*shape, seed=1), normal(*shape, seed=2)
    w = np.abs(normal(*shape, seed=3)) if shape else None
    kw = dict(reduction=reduction)
    _loss_case(torch, "mse_loss", [a, b], (0, 1), **kw)
    _loss_case(torch, "l1_loss", [a, b], (0, 1), **kw)
    for beta in (1.0, 0.5, 0.0):
        _loss_case(torch, "smooth_l1_loss", [a, b], (0, 1), beta=beta, **kw)
    for delta in (1.0, 0.3, 2.0):
        _loss_case(torch, "huber_loss", [a, b], (0, 1), delta=delta, **kw)
    prob = (1 / (1 + np.exp(-a))).astype(np.float32)
    tgt = (np.random.default_rng(4).random(shape) > 0.5).astype(np.float32)
    extra = {} if w is None else {"weight": w}
    _loss_case(torch, "binary_cross_entropy", [prob, tgt], (0,), **kw, **extra)
    _loss_case(torch, "binary_cross_entropy_with_logits", [a * 5, prob], (0, 1), **kw, **extra)
    if shape:
        _loss_case(torch, "binary_cross_entropy_with_logits", [a * 5, tgt], (0, 1), **kw,
                   pos_weight=np.abs(normal(shape[-1], seed=6)))
    for log_target in (False, True):
        _loss_case(torch, "kl_div", [a, b if log_target else np.abs(b)], (0, 1),
                   log_target=log_target, **kw)
    if shape:
        _loss_case(torch, "kl_div", [a, np.abs(b)], (0, 1), reduction="batchmean")


def test_loss_modules_state_and_legacy_reduction(vs_torch):
    def f(lib, n):
        return ([list(n.CrossEntropyLoss(weight=lib.ones(3)).state_dict()),
                 list(n.BCEWithLogitsLoss(pos_weight=lib.ones(3)).state_dict()),
                 list(n.NLLLoss().state_dict())],
                [n.MSELoss(size_average=False).reduction, n.MSELoss(reduce=False).reduction,
                 n.L1Loss(size_average=True, reduce=True).reduction,
                 n.CrossEntropyLoss(size_average=False, reduce=False).reduction])
    ours, theirs = vs_torch.both(f)
    assert ours == theirs


@pytest.mark.parametrize("loss", ["mse_loss", "huber_loss", "kl_div"])
def test_bad_reduction_message_names_the_op_once(loss):
    with pytest.raises(ValueError) as e:
        getattr(F, loss)(aotgrad.ones(2), aotgrad.ones(2), reduction="bogus")
    assert str(e.value).startswith(f"{loss}: bogus is not a valid value for reduction")


def test_binary_cross_entropy_gradient_at_saturated_inputs(torch):
    x = np.array([0.0, 1.0, 0.5, 1e-30, 1.0], dtype=np.float32)
    t = np.array([0.0, 1.0, 1.0, 1.0, 0.3], dtype=np.float32)
    _loss_case(torch, "binary_cross_entropy", [x, t], (0,), reduction="none")


@pytest.mark.parametrize("reduction", ["none", "mean"])
def test_binary_cross_entropy_first_and_second_derivatives(torch, reduction):
    x = np.array([0.0, 1.0, 0.5, 1e-30, 1.0, 0.2, 0.9], dtype=np.float32)
    t = np.array([0.0, 1.0, 1.0, 1.0, 0.3, 0.7, 0.0], dtype=np.float32)
    w = np.array([1.0, 2.0, 0.5, 1.0, 3.0, 1.5, 0.25], dtype=np.float32)
    res = []
    for lib in (aotgrad, torch):
        xs, ts = lib.tensor(x, requires_grad=True), lib.tensor(t, requires_grad=True)
        loss = lib.nn.functional.binary_cross_entropy(xs, ts, weight=lib.tensor(w),
                                                      reduction=reduction)
        gx, gt = lib.autograd.grad(loss.sum(), [xs, ts], create_graph=True)
        hxx, hxt = lib.autograd.grad(gx.sum(), [xs, ts])
        res.append([v.detach().numpy() for v in (loss, gx, gt, hxx, hxt)])
    # d/dt is PyTorch's -logit(x) everywhere, infinite at x = 0 or 1
    for name, a, b in zip(["loss", "d/dx", "d/dt", "d2/dx2", "d2/dxdt"], *res):
        close(a, b, f"binary_cross_entropy {name}", atol=1e-5)
    # the forward is the clamped logs whatever the input's requires_grad
    plain = F.binary_cross_entropy(aotgrad.tensor(x), aotgrad.tensor(t), reduction="none")
    ref = -(t * np.maximum(np.log(np.where(x > 0, x, 1)), -100) * (x > 0)
            + t * -100 * (x == 0)
            + (1 - t) * np.maximum(np.log(np.where(x < 1, 1 - x, 1)), -100) * (x < 1)
            + (1 - t) * -100 * (x == 1))
    assert_close(plain.numpy(), ref, rtol=1e-6, atol=0, equal_nan=True)


def test_binary_cross_entropy_gradient_compiled_matches_eager():
    x0 = np.array([0.0, 1.0, 0.5, 1e-30, 0.25], dtype=np.float32)
    t = aotgrad.tensor([0.0, 1.0, 1.0, 1.0, 0.5])
    f = lambda x: F.binary_cross_entropy(x, t, reduction="sum")   # noqa: E731
    grads = []
    for fn in (f, aotgrad.compile(f)):
        x = aotgrad.tensor(x0, requires_grad=True)
        fn(x).backward()
        grads.append(x.grad.numpy())
    d = np.array([0.0, 1.0, 1.0, 1.0, 0.5], dtype=np.float32)
    expected = (x0 - d) / np.maximum(x0 * (1 - x0), np.float32(1e-12))   # closed form
    assert_close(grads[0], expected, rtol=1e-6, atol=0, equal_nan=True)
    assert_close(grads[1], expected, rtol=1e-6, atol=0, equal_nan=True)


# ---- optimizers ------------------------------------------------------------------------------
def _sgd_cases():
    out = {}
    for mom, damp, nest, wd, mx in itertools.product([0, 0.9], [0, 0.3], [False, True],
                                                     [0, 0.1], [False, True]):
        if nest and (mom == 0 or damp != 0):
            continue
        out[f"sgd-m{mom}-d{damp}-n{int(nest)}-wd{wd}-max{int(mx)}"] = \
            ("SGD", dict(lr=0.05, momentum=mom, dampening=damp, nesterov=nest,
                         weight_decay=wd, maximize=mx))
    for cls, ams, wd, mx in itertools.product(["Adam", "AdamW"], [False, True], [0, 0.1],
                                              [False, True]):
        out[f"{cls}-ams{int(ams)}-wd{wd}-max{int(mx)}"] = \
            (cls, dict(lr=0.05, amsgrad=ams, weight_decay=wd, maximize=mx))
    out["Adam-betas-eps"] = ("Adam", dict(lr=0.1, betas=(0.5, 0.6), eps=1e-3))
    out["Adam-decoupled"] = ("Adam", dict(lr=0.1, weight_decay=0.2, decoupled_weight_decay=True))
    out["SGD-defaults"] = ("SGD", dict())
    out["Adam-defaults"] = ("Adam", dict())
    out["AdamW-defaults"] = ("AdamW", dict())
    return out


OPTIM_CASES = _sgd_cases()
_W, _B, _X = normal(3, 4, seed=1), normal(3, seed=2), normal(5, 4, seed=3)


def _optimize(lib, n, o, cls, kw, steps=5, skip_bias_every=0, opt=None, params=None):
    if params is None:
        params = [n.Parameter(lib.tensor(_W.copy())), n.Parameter(lib.tensor(_B.copy()))]
    w, b = params
    opt = opt or getattr(o, cls)([{"params": [w]}, {"params": [b], "lr": 0.02}]
                                 if kw.get("lr") else [w, b], **kw)
    for i in range(steps):
        opt.zero_grad()
        y = lib.tensor(_X) @ w.T + (b if not (skip_bias_every and i % skip_bias_every) else 0)
        (y.tanh() ** 2).sum().backward()
        opt.step()
    return params, opt


@pytest.mark.parametrize("name", sorted(OPTIM_CASES))
def test_optimizer_five_steps(torch, name):
    cls, kw = OPTIM_CASES[name]
    (wo, bo), oo = _optimize(aotgrad, nn, optim, cls, kw, skip_bias_every=3)
    (wt, bt), ot = _optimize(torch, torch.nn, torch.optim, cls, kw, skip_bias_every=3)
    close(wo, wt, "weight", atol=1e-6, rtol=1e-5)
    close(bo, bt, "bias", atol=1e-6, rtol=1e-5)
    so, st = oo.state_dict(), ot.state_dict()
    assert so["param_groups"] == st["param_groups"]
    assert {k: sorted(v) for k, v in so["state"].items()} == \
        {k: sorted(v) for k, v in st["state"].items()}
    for k, state in st["state"].items():
        for key, val in state.items():
            close(so["state"][k][key], val, f"state {k}.{key}", atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("name", ["SGD-defaults", "sgd-m0.9-d0-n1-wd0.1-max0",
                                  "Adam-ams1-wd0.1-max0", "AdamW-ams0-wd0.1-max1"])
def test_optimizer_state_dict_round_trip(torch, name):
    """Save after 3 steps, load into a fresh optimizer over copies, 3 more steps: the same
    parameters as PyTorch running 6 steps."""
    cls, kw = OPTIM_CASES[name]
    (wo, bo), oo = _optimize(aotgrad, nn, optim, cls, kw, steps=3)
    params = [nn.Parameter(wo.detach().clone()), nn.Parameter(bo.detach().clone())]
    fresh = getattr(optim, cls)([{"params": [params[0]]}, {"params": [params[1]]}]
                                if kw.get("lr") else params, **kw)
    fresh.load_state_dict(oo.state_dict())
    assert fresh.state_dict()["param_groups"] == oo.state_dict()["param_groups"]
    (wo, bo), _ = _optimize(aotgrad, nn, optim, cls, kw, steps=3, opt=fresh, params=params)
    (wt, bt), _ = _optimize(torch, torch.nn, torch.optim, cls, kw, steps=6)
    close(wo, wt, "weight", atol=1e-6, rtol=1e-5)
    close(bo, bt, "bias", atol=1e-6, rtol=1e-5)


def test_param_groups_add_param_group_and_zero_grad(torch, vs_torch):
    def f(lib, n):
        o = optim if lib is aotgrad else torch.optim
        a, b = n.Parameter(lib.ones(2)), n.Parameter(lib.ones(1))
        opt = o.SGD([a], lr=0.1)
        opt.add_param_group({"params": b, "momentum": 0.5})
        (a.sum() + b.sum()).backward()
        opt.zero_grad()
        grads = [a.grad, b.grad]
        (a.sum() * 2).backward()
        opt.zero_grad(set_to_none=False)
        errs = [error_text(lambda: opt.add_param_group({"params": [a]})),
                error_text(lambda: o.SGD([], lr=0.1)), error_text(lambda: o.SGD([a], lr=-1)),
                error_text(lambda: o.Adam([a], betas=(0.9, 1.0))),
                error_text(lambda: o.SGD([a], nesterov=True))]
        return ([{k: v for k, v in g.items() if k != "params"} for g in opt.param_groups],
                grads, to_numpy(a.grad).tolist(), b.grad, errs, repr(opt))
    ours, theirs = vs_torch.both(f)
    assert ours[:4] == theirs[:4]
    assert all(same_text(x, y) for x, y in zip(ours[4], theirs[4])), (ours[4], theirs[4])
    assert ours[5] == theirs[5]


# ---- lr schedulers ---------------------------------------------------------------------------
SCHEDULERS = {
    "step": lambda S, o, **k: S.StepLR(o, 3, 0.3, **k),
    "step1": lambda S, o, **k: S.StepLR(o, 1, **k),
    "multistep": lambda S, o, **k: S.MultiStepLR(o, [2, 5, 5, 9], 0.5, **k),
    "exponential": lambda S, o, **k: S.ExponentialLR(o, 0.9, **k),
    "cosine": lambda S, o, **k: S.CosineAnnealingLR(o, 7, 0.01, **k),
    "cosine_T1": lambda S, o, **k: S.CosineAnnealingLR(o, 1, **k),
    "cosine_T20": lambda S, o, **k: S.CosineAnnealingLR(o, 20, **k),
    "lambda": lambda S, o, **k: S.LambdaLR(o, lambda e: 0.95 ** e, **k),
    "lambda_list": lambda S, o, **k: S.LambdaLR(o, [lambda e: 1 / (e + 1), lambda e: e], **k),
}


def _sched_opt(lib, n):
    o = optim if lib is aotgrad else __import__("torch").optim
    opt = o.SGD([{"params": [n.Parameter(lib.ones(1))]},
                 {"params": [n.Parameter(lib.ones(1))], "lr": 0.3}], lr=0.5, momentum=0.9)
    return opt, o.lr_scheduler


@pytest.mark.parametrize("name", sorted(SCHEDULERS))
def test_lr_scheduler_sequences(vs_torch, name):
    def f(lib, n):
        opt, S = _sched_opt(lib, n)
        s = SCHEDULERS[name](S, opt)
        seq = []
        for _ in range(20):
            seq.append(s.get_last_lr())
            opt.step()
            s.step()
        seq.append([g["lr"] for g in opt.param_groups])
        # resume: a fresh optimizer and scheduler loaded from state dicts
        opt2, S2 = _sched_opt(lib, n)
        opt2.load_state_dict(opt.state_dict())
        s2 = SCHEDULERS[name](S2, opt2)
        s2.load_state_dict(s.state_dict())
        for _ in range(5):
            opt2.step()
            s2.step()
            seq.append(s2.get_last_lr())
        # constructed with last_epoch=k (initial_lr present): the lr is not moved ahead
        opt3, S3 = _sched_opt(lib, n)
        for g in opt3.param_groups:
            g["initial_lr"] = g["lr"]
        s3 = SCHEDULERS[name](S3, opt3, last_epoch=4)
        for _ in range(6):
            seq.append(s3.get_last_lr())
            opt3.step()
            s3.step()
        return seq
    ours, theirs = vs_torch.both(f)
    assert_close(ours, theirs, rtol=1e-12, atol=0, equal_nan=True)


@pytest.mark.parametrize("name", ["step", "multistep", "exponential", "cosine"])
def test_lr_scheduler_step_with_epoch_uses_closed_form(vs_torch, name):
    def f(lib, n):
        opt, S = _sched_opt(lib, n)
        s = SCHEDULERS[name](S, opt)
        out = []
        for e in (3, 7, 2, 10):
            s.step(e)
            out.append(s.get_last_lr())
        return out
    ours, theirs = vs_torch.both(f)
    assert_close(ours, theirs, rtol=1e-12, atol=0, equal_nan=True)


def test_chained_schedulers(vs_torch):
    def f(lib, n):
        opt, S = _sched_opt(lib, n)
        s1, s2 = S.StepLR(opt, 2, 0.5), S.ExponentialLR(opt, 0.9)
        out = []
        for _ in range(10):
            opt.step()
            s1.step()
            s2.step()
            out.append(s1.get_last_lr() + s2.get_last_lr())
        return out
    ours, theirs = vs_torch.both(f)
    assert_close(ours, theirs, rtol=1e-12, atol=0, equal_nan=True)


# ---- autograd.functional ---------------------------------------------------------------------
_x0, _y0 = np.random.default_rng(1).standard_normal(3), np.random.default_rng(2).standard_normal(
    (2, 3))
_v3, _v2 = np.random.default_rng(3).standard_normal(3), np.random.default_rng(4).standard_normal(2)


def _D(lib, a, rg=False):
    return lib.tensor(np.asarray(a, dtype=np.float64), requires_grad=rg)


FUNCTIONAL_CASES = {
    "jacobian_exp": lambda lib, M, **k: M.jacobian(lambda x: x.exp() * 2, _D(lib, _x0), **k),
    "jacobian_tuple": lambda lib, M, **k: M.jacobian(lambda x, y: (x * y).sum(-1),
                                                     (_D(lib, _x0), _D(lib, _y0)), **k),
    "jacobian_two_outputs": lambda lib, M, **k: M.jacobian(
        lambda x, y: (x.sin(), (x * y).sum()), (_D(lib, _x0), _D(lib, _y0)), **k),
    "jacobian_detached": lambda lib, M, **k: M.jacobian(lambda x: x.detach() * 2,
                                                        _D(lib, _x0), **k),
    "jacobian_requires_grad_input": lambda lib, M, **k: M.jacobian(
        lambda x: x.exp(), _D(lib, _x0, True), **k),
    "hessian_cubic": lambda lib, M, **k: M.hessian(lambda x: (x ** 3).sum(), _D(lib, _y0), **k),
    "hessian_tuple": lambda lib, M, **k: M.hessian(lambda x, y: (x * x * y).sum(),
                                                   (_D(lib, _x0), _D(lib, _y0[0])), **k),
    "hessian_linear": lambda lib, M, **k: M.hessian(lambda x: x.sum() * 2, _D(lib, _x0), **k),
    "vjp": lambda lib, M, **k: M.vjp(lambda x: x.exp() * 2, _D(lib, _x0), _D(lib, _v3), **k),
    "vjp_scalar_no_v": lambda lib, M, **k: M.vjp(lambda x: (x ** 3).sum(), _D(lib, _x0), **k),
    "vjp_tuple": lambda lib, M, **k: M.vjp(lambda x, y: (x * y).sum(-1),
                                           (_D(lib, _x0), _D(lib, _y0)), _D(lib, _v2), **k),
    "vjp_detached": lambda lib, M, **k: M.vjp(lambda x: x.detach() * 2, _D(lib, _x0),
                                              _D(lib, _v3), **k),
    "jvp": lambda lib, M, **k: M.jvp(lambda x: x.exp() * 2, _D(lib, _x0), _D(lib, _v3), **k),
    "jvp_tuple": lambda lib, M, **k: M.jvp(lambda x, y: (x * y).sum(-1),
                                           (_D(lib, _x0), _D(lib, _y0)),
                                           (_D(lib, _v3), _D(lib, _y0)), **k),
    "jvp_constant": lambda lib, M, **k: M.jvp(lambda x: x * 0 + 1, _D(lib, _x0), _D(lib, _v3),
                                              **k),
    "hvp": lambda lib, M, **k: M.hvp(lambda x: (x ** 3).sum(), _D(lib, _x0), _D(lib, _v3), **k),
    "vhp": lambda lib, M, **k: M.vhp(lambda x: (x ** 3).sum(), _D(lib, _x0), _D(lib, _v3), **k),
    "hvp_linear": lambda lib, M, **k: M.hvp(lambda x: x.sum(), _D(lib, _x0), _D(lib, _v3), **k),
    "vhp_linear": lambda lib, M, **k: M.vhp(lambda x: x.sum(), _D(lib, _x0), _D(lib, _v3), **k),
    "hvp_tuple": lambda lib, M, **k: M.hvp(lambda x, y: (x * x * y).sum(),
                                           (_D(lib, _x0), _D(lib, _y0[0])),
                                           (_D(lib, _v3), _D(lib, _v3)), **k),
}


def _flat(r):
    if isinstance(r, (tuple, list)):
        return [x for el in r for x in _flat(el)]
    return [(tuple(r.shape), bool(r.requires_grad), np.round(to_numpy(r), 10).tolist())]


@pytest.mark.parametrize("name", sorted(FUNCTIONAL_CASES))
@pytest.mark.parametrize("create_graph,strict", list(itertools.product([False, True],
                                                                        [False, True])))
def test_autograd_functional(torch, name, create_graph, strict):
    def f(lib, M):
        out = []
        err = error_text(lambda: out.append(_flat(FUNCTIONAL_CASES[name](
            lib, M, create_graph=create_graph, strict=strict))))
        return err, out
    (eo, ro), (et, rt) = f(aotgrad, AF), f(torch, torch.autograd.functional)
    assert (eo is None) == (et is None), (eo, et)
    if eo is not None:
        assert same_text(eo, et), (eo, et)
        return
    assert [(s, g) for s, g, _ in ro[0]] == [(s, g) for s, g, _ in rt[0]]
    for (_, _, a), (_, _, b) in zip(ro[0], rt[0]):
        assert_close(a, b, rtol=1e-9, atol=1e-12, equal_nan=True)


@pytest.mark.parametrize("call", [
    lambda lib, M: M.vjp(lambda x: x * 2, _D(lib, _x0)),
    lambda lib, M: M.jvp(lambda x: x * 2, [_D(lib, _x0)], _D(lib, _v3)),
    lambda lib, M: M.jacobian(lambda x: 1.0, _D(lib, _x0)),
    lambda lib, M: M.jacobian(lambda x: [x * 2], _D(lib, _x0)),
    lambda lib, M: M.hessian(lambda x: x * 2, _D(lib, _x0)),
    lambda lib, M: M.hvp(lambda x: (x ** 3).sum(), _D(lib, _x0)),
])
def test_autograd_functional_errors(torch, call):
    eo = error_text(lambda: call(aotgrad, AF))
    et = error_text(lambda: call(torch, torch.autograd.functional))
    assert eo is not None and same_text(eo, et), (eo, et)


# ---- gradcheck, Function, anomaly, profiler --------------------------------------------------
def test_gradcheck_and_gradgradcheck(vs_torch):
    def f(lib, n):
        ag = lib.autograd
        x = _D(lib, [1.0, 2.0], True)

        class Cube(ag.Function):
            @staticmethod
            def forward(ctx, a, k):
                ctx.save_for_backward(a)
                ctx.k = k
                return a ** 3 * k

            @staticmethod
            def backward(ctx, g):
                a, = ctx.saved_tensors
                return g * 3 * a * a * ctx.k, None
        return (ag.gradcheck(lambda a: (a * a).sin(), (x,)),
                ag.gradgradcheck(lambda a: a * a * a, (x,)),
                ag.gradcheck(lambda a: Cube.apply(a, 2.0), (x,)),
                ag.gradgradcheck(lambda a: Cube.apply(a, 2.0), (x,)),
                ag.gradcheck(lambda a: (a * 2, a.argmax()), x),
                ag.gradcheck(lambda a: a.detach() * a, (x,), raise_exception=False),
                error_text(lambda: ag.gradcheck(lambda a: a.detach() * a, (x,))).split("\n")[0],
                error_text(lambda: ag.gradcheck(lambda a: a * 2, (_D(lib, [1.0]),))))
    ours, theirs = vs_torch.both(f)
    assert ours[:6] == theirs[:6]
    assert ours[6].startswith("GradcheckError: Jacobian mismatch for output 0 with respect to "
                              "input 0") and ours[6] == theirs[6]
    assert same_text(ours[7], theirs[7])


def test_function_ctx_features(vs_torch):
    def f(lib, n):
        ag, log = lib.autograd, []

        class Needs(ag.Function):
            @staticmethod
            def forward(ctx, a, b, c):
                log.append(ctx.needs_input_grad)
                return a * b

            @staticmethod
            def backward(ctx, g):
                log.append(ctx.needs_input_grad)
                return g, g, None
        Needs.apply(_D(lib, [1.0], True), _D(lib, [2.0]), 3).sum().backward()

        class Dirty(ag.Function):
            @staticmethod
            def forward(ctx, a):
                a.mul_(2)
                ctx.mark_dirty(a)
                return a

            @staticmethod
            def backward(ctx, g):
                return g * 2
        x = _D(lib, [1.0, 2.0], True)
        y = x.clone()
        z = Dirty.apply(y)
        z.sum().backward()
        log += [z is y, x.grad.tolist(), error_text(lambda: Dirty.apply(_D(lib, [1.0], True)))]

        class NonDiff(ag.Function):
            @staticmethod
            def forward(ctx, a):
                y = a * 2
                ctx.mark_non_differentiable(y)
                return y, a * 3

            @staticmethod
            def backward(ctx, g1, g2):
                log.append(None if g1 is None else g1.tolist())
                return g2 * 3
        y1, y2 = NonDiff.apply(x)
        y2.sum().backward()
        log.append((y1.requires_grad, y2.requires_grad))

        class Mat(ag.Function):
            @staticmethod
            def forward(ctx, a, mat):
                ctx.set_materialize_grads(mat)
                return a * 2, a * 3

            @staticmethod
            def backward(ctx, g1, g2):
                log.append((g1 is None, None if g1 is None else g1.tolist()))
                return g2 * 3, None
        Mat.apply(x, True)[1].sum().backward()
        Mat.apply(x, False)[1].sum().backward()

        class Once(ag.Function):
            @staticmethod
            def forward(ctx, a):
                ctx.save_for_backward(a)
                return a ** 2

            @staticmethod
            @ag.function.once_differentiable
            def backward(ctx, g):
                a, = ctx.saved_tensors
                return g * 2 * a
        g, = ag.grad(Once.apply(x).sum(), x, create_graph=True)
        log += [g.requires_grad, g.tolist(), error_text(lambda: g.sum().backward())]
        g2, = ag.grad(Once.apply(x).sum(), x)
        log.append(g2.requires_grad)

        class Saved(ag.Function):
            @staticmethod
            def forward(ctx, a):
                ctx.save_for_backward(a)
                return a * 2

            @staticmethod
            def backward(ctx, g):
                a, = ctx.saved_tensors
                return g * a
        out = Saved.apply(x)
        out.sum().backward()
        log.append(error_text(lambda: out.sum().backward()) is not None)
        xc = x.clone()
        out = Saved.apply(xc)
        with lib.no_grad():
            xc.add_(1)
        log.append(error_text(lambda: out.sum().backward()).split(":")[0])

        class WrongCount(ag.Function):
            @staticmethod
            def forward(ctx, a, b):
                return a * b

            @staticmethod
            def backward(ctx, g):
                return g
        log.append(error_text(lambda: WrongCount.apply(x, x).sum().backward()))

        class MyFn(ag.Function):
            @staticmethod
            def forward(ctx, a):
                return a * 2

            @staticmethod
            def backward(ctx, g):
                return g * 2
        log.append((MyFn.apply(x).grad_fn.name(), type(MyFn.apply(x).grad_fn).__name__))
        return log
    ours, theirs = vs_torch.both(f)
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        assert a == b or (isinstance(a, str) and same_text(a, b)), (a, b)


def test_anomaly_mode(vs_torch):
    def f(lib, n):
        ag = lib.autograd
        with ag.detect_anomaly(check_nan=False):
            flags = (lib.is_grad_enabled(), lib.is_anomaly_enabled(),
                     lib.is_anomaly_check_nan_enabled())
        ag.set_detect_anomaly(True)
        on = lib.is_anomaly_enabled()
        ag.set_detect_anomaly(False)
        x = _D(lib, [0.0, 1.0], True)

        def nan_backward():
            with ag.detect_anomaly():
                (x.sqrt() * 0).sum().backward()
        return flags, on, lib.is_anomaly_enabled(), error_text(nan_backward)
    ours, theirs = vs_torch.both(f)
    assert ours[:3] == theirs[:3]
    assert same_text(ours[3], theirs[3])


def test_profiler_key_averages_api(vs_torch):
    def f(lib, n):
        prof_mod = lib.autograd.profiler
        x = lib.ones(3, requires_grad=True)
        with prof_mod.profile() as prof:
            with prof_mod.record_function("step"):
                y = (x * 2).tanh().sum()
            y.backward()
        ka = prof.key_averages()
        step = [e for e in ka if e.key == "step"][0]
        attrs = ("key", "count", "cpu_time", "cpu_time_total", "self_cpu_time_total",
                 "cpu_time_str", "cpu_time_total_str", "self_cpu_time_total_str")
        table = ka.table(sort_by="self_cpu_time_total", row_limit=2).split("\n")
        return (type(ka).__name__, type(step).__name__, step.count,
                [a for a in attrs if hasattr(step, a)],
                step.cpu_time_total >= step.self_cpu_time_total > 0,
                step.cpu_time_total_str.endswith(("us", "ms", "s")),
                table[1].split(), len([r for r in table if r.strip() and "-" * 10 not in r
                                       and "Name" not in r and "Self CPU time" not in r]),
                table[-2].startswith("Self CPU time total:"),
                type(prof.function_events).__name__)
    ours, theirs = vs_torch.both(f)
    assert ours == theirs


def test_clip_grad_and_vector_utils(vs_torch):
    grads = [normal(3, 4, seed=1), normal(5, seed=2)]

    def f(lib):
        n, out = lib.nn, []
        for norm_type in (2.0, 1.0, float("inf"), 3):
            ps = [n.Parameter(lib.zeros(g.shape)) for g in grads]
            for p, g in zip(ps, grads):
                p.grad = lib.tensor(g)
            total = n.utils.clip_grad_norm_(ps, 1.5, norm_type)
            out.append((total, ps[0].grad))
        ps = [n.Parameter(lib.tensor(g)) for g in grads]
        for p, g in zip(ps, grads):
            p.grad = lib.tensor(g)
        n.utils.clip_grad_value_(ps, 0.5)
        vec = n.utils.parameters_to_vector(ps)
        n.utils.vector_to_parameters(vec * 2, ps)
        out += [ps[1].grad, tuple(vec.shape), vec.requires_grad, ps[1]]
        return out
    vs_torch.same(f)
