"""The rest of torch.optim.lr_scheduler against PyTorch: lr sequences step by step, state
dicts, reprs and errors."""
import inspect
import math
import pickle

import numpy as np
import pytest

import aotgrad
from aotgrad import nn, optim
from aotgrad.testing import assert_close

LS = optim.lr_scheduler


# ---- lr schedulers ----------------------------------------------------------------------------
def _opts(lib, kind="sgd", groups=2):
    """Two parameter groups with different lrs (SGD with momentum, or Adam)."""
    if lib is aotgrad:
        ps = [nn.Parameter(aotgrad.ones(1)) for _ in range(groups)]
        o = optim
    else:
        ps = [lib.nn.Parameter(lib.ones(1)) for _ in range(groups)]
        o = lib.optim
    gs = [{"params": [p], "lr": 0.1 * (i + 1)} for i, p in enumerate(ps)]
    if kind == "adam":
        return o.Adam(gs, lr=0.1)
    return o.SGD(gs, lr=0.1, momentum=0.9)


class _Half:
    """A callable object: its state is saved by LambdaLR/MultiplicativeLR's state_dict."""

    def __init__(self):
        self.k = 0.5

    def __call__(self, e):
        return self.k ** (e % 3)


SCHEDULES = {
    "LambdaLR": lambda S, o: S.LambdaLR(o, [lambda e: 0.9 ** e, lambda e: 1 / (1 + e)]),
    "MultiplicativeLR": lambda S, o: S.MultiplicativeLR(o, lambda e: 0.95 if e % 2 else 0.99),
    "ConstantLR": lambda S, o: S.ConstantLR(o, factor=0.25, total_iters=7),
    "LinearLR": lambda S, o: S.LinearLR(o, start_factor=0.2, end_factor=0.9, total_iters=13),
    "LinearLR_default": lambda S, o: S.LinearLR(o),
    "PolynomialLR": lambda S, o: S.PolynomialLR(o, total_iters=17, power=2.5),
    "PolynomialLR_default": lambda S, o: S.PolynomialLR(o),
    "CosineAnnealingWarmRestarts": lambda S, o: S.CosineAnnealingWarmRestarts(o, 5, 2, 0.001),
    "CosineAnnealingWarmRestarts_1": lambda S, o: S.CosineAnnealingWarmRestarts(o, 7),
    "CyclicLR_triangular": lambda S, o: S.CyclicLR(o, 0.01, [0.1, 0.2], step_size_up=6,
                                                   step_size_down=3),
    "CyclicLR_triangular2": lambda S, o: S.CyclicLR(o, [0.01, 0.02], 0.1, step_size_up=4,
                                                    mode="triangular2", base_momentum=0.7),
    "CyclicLR_exp_range": lambda S, o: S.CyclicLR(o, 0.01, 0.1, step_size_up=5,
                                                  mode="exp_range", gamma=0.97),
    "CyclicLR_scale_fn": lambda S, o: S.CyclicLR(o, 0.01, 0.1, step_size_up=3,
                                                 scale_fn=lambda x: 1 / (1 + x),
                                                 scale_mode="iterations",
                                                 cycle_momentum=False),
    "OneCycleLR": lambda S, o: S.OneCycleLR(o, max_lr=[0.5, 1.0], total_steps=60),
    "OneCycleLR_linear3": lambda S, o: S.OneCycleLR(o, max_lr=0.4, epochs=6, steps_per_epoch=10,
                                                    pct_start=0.25, anneal_strategy="linear",
                                                    three_phase=True, div_factor=10.0),
    "SequentialLR": lambda S, o: S.SequentialLR(
        o, [S.LinearLR(o, 0.1, total_iters=5), S.ExponentialLR(o, 0.9),
            S.CosineAnnealingLR(o, T_max=8)], milestones=[5, 20]),
    "SequentialLR_constant": lambda S, o: S.SequentialLR(
        o, [S.ConstantLR(o, 0.5, total_iters=3), S.PolynomialLR(o, 10, 2.0)], [8]),
    "ChainedScheduler": lambda S, o: S.ChainedScheduler(
        [S.ConstantLR(o, 0.1, total_iters=4), S.ExponentialLR(o, 0.9),
         S.MultiplicativeLR(o, lambda e: 0.99)]),
    "ChainedScheduler_warmup_cosine": lambda S, o: S.ChainedScheduler(
        [S.LinearLR(o, 0.5, total_iters=6), S.CosineAnnealingLR(o, T_max=11)], optimizer=o),
}


def _momenta(opt):
    return [g.get("momentum", g.get("betas", (None,))[0]) for g in opt.param_groups]


def _run(lib, name, kind, steps=59):
    S = optim.lr_scheduler if lib is aotgrad else lib.optim.lr_scheduler
    opt = _opts(lib, kind)
    s = SCHEDULES[name](S, opt)
    seq = []
    for _ in range(steps):
        seq.append(list(s.get_last_lr()) + [g["lr"] for g in opt.param_groups] + _momenta(opt))
        opt.step()
        s.step()
    seq.append(list(s.get_last_lr()) + [g["lr"] for g in opt.param_groups] + _momenta(opt))
    return seq


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("kind", ["sgd", "adam"])
@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_scheduler_sequence_matches_torch(torch, name, kind):
    """Every lr (get_last_lr and the groups' lr) and momentum/beta1, step by step."""
    ours, theirs = _run(aotgrad, name, kind), _run(torch, name, kind)
    assert_close(np.array(ours, float), np.array(theirs, float), rtol=1e-12, atol=1e-15,
                 equal_nan=True)


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_scheduler_state_dict_resume(torch, name):
    """Stop after k steps, save, build a new scheduler over a new optimizer, load both states,
    go on: the rest of the sequence is the uninterrupted one (and torch's)."""
    def run(lib):
        S = optim.lr_scheduler if lib is aotgrad else lib.optim.lr_scheduler
        opt = _opts(lib)
        s = SCHEDULES[name](S, opt)
        for _ in range(11):
            opt.step()
            s.step()
        sd_s, sd_o = pickle.loads(pickle.dumps(_picklable(s.state_dict()))), opt.state_dict()
        opt2 = _opts(lib)
        s2 = SCHEDULES[name](S, opt2)
        opt2.load_state_dict(sd_o)
        s2.load_state_dict(sd_s)
        a, b = [], []
        for _ in range(20):
            opt.step(), opt2.step()
            s.step(), s2.step()
            a.append(s.get_last_lr() + [g["lr"] for g in opt.param_groups])
            b.append(s2.get_last_lr() + [g["lr"] for g in opt2.param_groups])
        return a, b
    (a, b), (ta, _) = run(aotgrad), run(torch)
    assert_close(a, b, rtol=1e-12, atol=0, equal_nan=True)
    assert_close(a, ta, rtol=1e-12, atol=0, equal_nan=True)


def _picklable(sd):
    """Drop what pickle cannot take (lambdas a user passed in) the way a checkpoint would."""
    out = {}
    for k, v in sd.items():
        if k == "_schedulers":
            out[k] = [_picklable(c) for c in v]
        elif k == "_scale_fn_custom" or callable(v) and getattr(v, "__name__", "") == "<lambda>":
            out[k] = None
        else:
            out[k] = v
    return out


def test_lambda_state_dict_keeps_callable_objects(torch):
    for lib in (aotgrad, torch):
        S = optim.lr_scheduler if lib is aotgrad else lib.optim.lr_scheduler
        for cls in (S.LambdaLR, S.MultiplicativeLR):
            opt = _opts(lib)
            f = _Half()
            s = cls(opt, [f, lambda e: 1.0])
            f.k = 0.25
            sd = s.state_dict()
            assert sd["lr_lambdas"] == [{"k": 0.25}, None]
            g = _Half()
            s2 = cls(_opts(lib), [g, lambda e: 1.0])
            s2.load_state_dict(sd)
            assert g.k == 0.25 and "lr_lambdas" in sd


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("name", ["ConstantLR", "LinearLR", "PolynomialLR", "LambdaLR",
                                  "CosineAnnealingWarmRestarts"])
def test_step_with_epoch_matches_torch(torch, name):
    def run(lib):
        S = optim.lr_scheduler if lib is aotgrad else lib.optim.lr_scheduler
        opt = _opts(lib)
        s = SCHEDULES[name](S, opt)
        out = []
        for e in (3, 9, 2, 20, 1, 40):
            s.step(e)
            out.append(s.get_last_lr())
        return out
    assert_close(run(aotgrad), run(torch), rtol=1e-12, atol=0, equal_nan=True)


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("last_epoch", [3, 12])
@pytest.mark.parametrize("name", ["LinearLR", "PolynomialLR", "ConstantLR", "MultiplicativeLR",
                                  "CosineAnnealingWarmRestarts", "CyclicLR_triangular",
                                  "OneCycleLR"])
def test_resume_with_last_epoch_matches_torch(torch, name, last_epoch):
    def run(lib):
        S = optim.lr_scheduler if lib is aotgrad else lib.optim.lr_scheduler
        opt = _opts(lib)
        SCHEDULES[name](S, opt)  # sets initial_lr (and max_lr/min_lr)
        make = SCHEDULES[name]
        s = _with_last_epoch(make, S, opt, last_epoch)
        out = []
        for _ in range(15):
            out.append(s.get_last_lr() + _momenta(opt))
            opt.step()
            s.step()
        return out
    assert_close(np.array(run(aotgrad), float), np.array(run(torch), float), rtol=1e-12, atol=0,
                 equal_nan=True)


def _with_last_epoch(make, S, opt, last_epoch):
    class Wrap:
        def __getattr__(self, n):
            cls = getattr(S, n)
            return lambda *a, **k: cls(*a, **k, last_epoch=last_epoch)
    return make(Wrap(), opt)


def test_scheduler_closed_forms():
    def lrs(make, n, lr=1.0, **opt_kw):
        opt = optim.SGD([nn.Parameter(aotgrad.ones(1))], lr=lr, momentum=0.9)
        s = make(opt)
        out = []
        for _ in range(n):
            out.append(s.get_last_lr()[0])
            s.step()
        return np.array(out)
    e = np.arange(30)
    assert_close(lrs(lambda o: LS.LinearLR(o, 0.2, 0.8, 10), 30),
                 0.2 + 0.6 * np.minimum(e, 10) / 10, rtol=1e-12, atol=0, equal_nan=True)
    assert_close(lrs(lambda o: LS.PolynomialLR(o, 12, 1.5), 30),
                 (1 - np.minimum(e, 12) / 12) ** 1.5, rtol=1e-12, atol=1e-15, equal_nan=True)
    assert_close(lrs(lambda o: LS.ConstantLR(o, 0.3, 6), 30), np.where(e < 6, 0.3, 1.0), rtol=1e-12,
                 atol=0, equal_nan=True)
    assert_close(lrs(lambda o: LS.MultiplicativeLR(o, lambda k: 0.9), 30), 0.9 ** e, rtol=1e-12,
                 atol=0, equal_nan=True)
    assert_close(lrs(lambda o: LS.CosineAnnealingWarmRestarts(o, 4, 2, 0.1), 28),
                 [0.1 + 0.9 * (1 + math.cos(math.pi * tc / ti)) / 2 for tc, ti in
                  [(k, 4) for k in range(4)] + [(k, 8) for k in range(8)] +
                  [(k, 16) for k in range(16)]], rtol=1e-12, atol=0, equal_nan=True)
    # triangle wave between 0.1 and 0.5, 4 steps up and 4 down
    tri = 0.1 + 0.4 * (1 - np.abs((e % 8) / 4 - 1))
    assert_close(lrs(lambda o: LS.CyclicLR(o, 0.1, 0.5, 4), 30), tri, rtol=1e-12, atol=0,
                 equal_nan=True)
    # 1cycle: starts at max/div, reaches max at step pct*total - 1, ends at initial/final_div
    oc = lrs(lambda o: LS.OneCycleLR(o, 2.0, total_steps=40, pct_start=0.5), 40)
    assert oc[0] == pytest.approx(2.0 / 25) and oc.max() == pytest.approx(2.0)
    assert int(np.argmax(oc)) == 19 and oc[-1] == pytest.approx(2.0 / 25 / 1e4)
    assert np.all(np.diff(oc[:20]) > 0) and np.all(np.diff(oc[19:]) < 0)


def test_onecycle_and_cyclic_momentum_closed_forms():
    opt = optim.SGD([nn.Parameter(aotgrad.ones(1))], lr=1.0, momentum=0.5)
    s = LS.CyclicLR(opt, 0.1, 0.5, 4, base_momentum=0.8, max_momentum=0.9)
    ms = []
    for _ in range(9):
        ms.append(opt.param_groups[0]["momentum"])
        s.step()
    frac = 1 - np.abs((np.arange(9) % 8) / 4 - 1)
    assert_close(ms, 0.9 - 0.1 * frac, rtol=1e-12, atol=0, equal_nan=True)
    adam = optim.Adam([nn.Parameter(aotgrad.ones(1))], betas=(0.5, 0.99))
    LS.OneCycleLR(adam, 0.1, total_steps=10)
    assert adam.param_groups[0]["betas"] == (0.95, 0.99)


def test_onecycle_step_past_total_raises():
    opt = optim.SGD([nn.Parameter(aotgrad.ones(1))], lr=1.0, momentum=0.9)
    s = LS.OneCycleLR(opt, 1.0, total_steps=5)
    for _ in range(5):
        s.step()
    with pytest.raises(ValueError, match="Tried to step 6 times. The specified number of total "
                                         "steps is 5"):
        s.step()


def test_scheduler_constructor_errors(torch):
    def both(fn):
        kinds = []
        for lib in (aotgrad, torch):
            S = optim.lr_scheduler if lib is aotgrad else lib.optim.lr_scheduler
            try:
                fn(S, _opts(lib))
                kinds.append(None)
            except Exception as e:  # noqa: BLE001  (compare the exception types)
                kinds.append(type(e))
        return kinds
    cases = [
        lambda S, o: S.ConstantLR(o, factor=1.5),
        lambda S, o: S.LinearLR(o, start_factor=0.0),
        lambda S, o: S.LinearLR(o, end_factor=1.5),
        lambda S, o: S.MultiplicativeLR(o, 0.9),
        lambda S, o: S.LambdaLR(o, [lambda e: 1.0]),
        lambda S, o: S.CosineAnnealingWarmRestarts(o, 0),
        lambda S, o: S.CosineAnnealingWarmRestarts(o, 3, T_mult=1.5),
        lambda S, o: S.CyclicLR(o, 0.1, 0.2, mode="bad"),
        lambda S, o: S.CyclicLR(o, [0.1], 0.2),
        lambda S, o: S.OneCycleLR(o, 0.1),
        lambda S, o: S.OneCycleLR(o, 0.1, total_steps=0),
        lambda S, o: S.OneCycleLR(o, 0.1, total_steps=10, pct_start=1),
        lambda S, o: S.OneCycleLR(o, 0.1, total_steps=10, anneal_strategy="exp"),
        lambda S, o: S.SequentialLR(o, [], []),
        lambda S, o: S.SequentialLR(o, [S.ConstantLR(o)], [3]),
        lambda S, o: S.SequentialLR(o, [S.ReduceLROnPlateau(o), S.ConstantLR(o)], [3]),
        lambda S, o: S.ChainedScheduler([]),
        lambda S, o: S.ReduceLROnPlateau(o, factor=1.0),
        lambda S, o: S.ReduceLROnPlateau(o, mode="mid"),
        lambda S, o: S.ReduceLROnPlateau(o, threshold_mode="x"),
        lambda S, o: S.ReduceLROnPlateau(o, min_lr=[0.1]),
        lambda S, o: S.StepLR("not an optimizer", 3),
    ]
    for i, c in enumerate(cases):
        ko, kt = both(c)
        assert ko is kt and ko is not None, (i, ko, kt)
    with pytest.raises(ValueError, match="momentum or beta1"):
        LS.CyclicLR(_no_defaults_opt(), 0.1, 0.2)
    with pytest.raises(ValueError, match="momentum or beta1"):
        LS.OneCycleLR(_no_defaults_opt(), 0.1, total_steps=10)
    with pytest.raises(ValueError, match="different from"):
        o1, o2 = _opts(aotgrad), _opts(aotgrad)
        LS.ChainedScheduler([LS.ConstantLR(o1), LS.ConstantLR(o2)])


def _no_defaults_opt():
    opt = optim.SGD([nn.Parameter(aotgrad.ones(1))], lr=0.1)
    del opt.defaults["momentum"]
    return opt


PLATEAU = {
    "min_rel": dict(),
    "max_abs": dict(mode="max", threshold=0.05, threshold_mode="abs", patience=2),
    "cooldown": dict(factor=0.5, patience=1, cooldown=3, min_lr=[0.02, 0.05]),
    "eps": dict(factor=0.5, patience=0, min_lr=0.049, eps=1e-3),
}


@pytest.mark.parametrize("name", sorted(PLATEAU))
def test_reduce_lr_on_plateau_matches_torch(torch, name):
    rng = np.random.default_rng(11)
    metrics = np.concatenate([np.linspace(1, 0.5, 8), 0.5 + 0.01 * rng.standard_normal(40),
                              np.linspace(0.5, 0.2, 6), 0.2 + 0.001 * rng.standard_normal(30)])
    if PLATEAU[name].get("mode") == "max":
        metrics = -metrics

    def run(lib):
        S = optim.lr_scheduler if lib is aotgrad else lib.optim.lr_scheduler
        opt = _opts(lib)
        s = S.ReduceLROnPlateau(opt, **PLATEAU[name])
        out = []
        for i, m in enumerate(metrics):
            opt.step()
            s.step(lib.tensor(m) if i % 2 else float(m))  # a 0-d tensor or a float
            out.append(s.get_last_lr() + [s.num_bad_epochs, s.cooldown_counter, s.last_epoch])
            if i == 40:  # state dict round trip in the middle
                sd = pickle.loads(pickle.dumps(s.state_dict()))
                s = S.ReduceLROnPlateau(opt, **PLATEAU[name])
                s.load_state_dict(sd)
        return out
    ours, theirs = run(aotgrad), run(torch)
    assert_close(np.array(ours, float), np.array(theirs, float), rtol=1e-12, atol=0, equal_nan=True)
    assert min(r[0] for r in ours) < 0.1  # the lr did go down


def test_reduce_lr_on_plateau_closed_form():
    opt = optim.SGD([nn.Parameter(aotgrad.ones(1))], lr=1.0)
    s = LS.ReduceLROnPlateau(opt, factor=0.5, patience=2, min_lr=0.1)
    got = []
    for m in [5, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4]:
        s.step(m)
        got.append(s.get_last_lr()[0])
    # no improvement after epoch 2: a halving every patience + 1 = 3 epochs, floored at 0.1
    assert got == [1, 1, 1, 1, 0.5, 0.5, 0.5, 0.25, 0.25, 0.25, 0.125, 0.125, 0.125]
    for m in [4] * 6:
        s.step(m)
    assert s.get_last_lr()[0] == 0.1


def test_scheduler_exports_match_torch(torch):
    assert sorted(LS.__all__) == sorted(torch.optim.lr_scheduler.__all__)
    for n in LS.__all__:
        po = [(p.name, p.default) for p in inspect.signature(getattr(LS, n).__init__).parameters
              .values()]
        pt = [(p.name, p.default) for p in inspect.signature(
            getattr(torch.optim.lr_scheduler, n).__init__).parameters.values()]
        assert po == pt, n
