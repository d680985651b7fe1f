"""RMSprop, Adagrad, Adamax, NAdam, RAdam and LBFGS against torch.optim, step by step: same
initial parameters, the same gradient rule (a fixed random sequence plus a term in the current
parameters, so that a wrong update feeds back), float64 and float32; the state dicts' layout;
LBFGS with and without the strong-Wolfe line search."""
import numpy as np
import pytest

import aotgrad
from aotgrad.testing import assert_close

OPTIONS = {
    "RMSprop": [{}, dict(momentum=0.9), dict(centered=True), dict(momentum=0.5, centered=True,
                                                                 weight_decay=0.1),
                dict(alpha=0.3, centered=True, lr=0.05), dict(maximize=True, eps=1e-3)],
    "Adagrad": [{}, dict(lr_decay=0.1), dict(weight_decay=0.1, initial_accumulator_value=0.5),
                dict(maximize=True, eps=1e-3, lr=0.1)],
    "Adamax": [{}, dict(weight_decay=0.1), dict(maximize=True, betas=(0.3, 0.5), lr=0.05)],
    "NAdam": [{}, dict(weight_decay=0.1), dict(weight_decay=0.1, decoupled_weight_decay=True),
              dict(momentum_decay=0.1, betas=(0.7, 0.9)), dict(maximize=True, lr=0.05)],
    # b2 = 0.9: rho_t passes 5 at step 6 (the rectified branch); b2 = 0.5: never
    "RAdam": [{}, dict(weight_decay=0.1), dict(weight_decay=0.1, decoupled_weight_decay=True,
                                               lr=0.1),
              dict(betas=(0.9, 0.9), lr=0.05), dict(betas=(0.8, 0.5), maximize=True)],
}
CASES = [(name, kw) for name, kws in OPTIONS.items() for kw in kws]
TOL = {"float64": dict(rtol=1e-12, atol=1e-14), "float32": dict(rtol=2e-4, atol=2e-6)}


def _trajectory(lib, name, kwargs, dtype, steps=15, seed=0, groups=False):
    rng = np.random.default_rng(seed)
    p0 = [rng.standard_normal((3, 4)), rng.standard_normal(5)]
    fixed = [[rng.standard_normal(p.shape) for p in p0] for _ in range(steps)]
    ldt = getattr(lib, dtype)
    ps = [lib.tensor(p, dtype=ldt, requires_grad=True) for p in p0]
    params = [{"params": [ps[0]]}, {"params": [ps[1]], "lr": 0.02}] if groups else ps
    opt = getattr(lib.optim, name)(params, **kwargs)
    traj = []
    for k in range(steps):
        for p, a in zip(ps, fixed[k]):
            v = p.detach().numpy().astype(np.float64)
            p.grad = lib.tensor(a + 0.5 * v + 0.1 * v ** 3, dtype=ldt)
        opt.step()
        traj.append([p.detach().numpy().copy() for p in ps])
    return traj, opt


def _np(v):
    return v.detach().numpy() if hasattr(v, "detach") else np.asarray(v)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name,kwargs", CASES, ids=[f"{n}-{k}" for n, k in CASES])
def test_steps_match_torch(torch, name, kwargs, dtype):
    ours, o1 = _trajectory(aotgrad, name, kwargs, dtype)
    ref, o2 = _trajectory(torch, name, kwargs, dtype)
    for k, (a, b) in enumerate(zip(ours, ref)):
        for x, y in zip(a, b):
            assert x.dtype == y.dtype
            assert_close(x, y, **TOL[dtype], equal_nan=True, msg=f"step {k}: ")
    s1, s2 = o1.state_dict(), o2.state_dict()
    assert s1["param_groups"] == s2["param_groups"]
    assert list(s1["state"]) == list(s2["state"])
    for i in s2["state"]:
        assert list(s1["state"][i]) == list(s2["state"][i])
        for key, ref_v in s2["state"][i].items():
            v = s1["state"][i][key]
            assert str(v.dtype).split(".")[-1] == str(ref_v.dtype).split(".")[-1], key
            assert_close(_np(v), ref_v.numpy(), **TOL[dtype], equal_nan=True, msg=f"{key}: ")


@pytest.mark.parametrize("name", list(OPTIONS))
def test_param_groups_and_defaults_match_torch(torch, name):
    ours, o1 = _trajectory(aotgrad, name, {}, "float64", steps=4, groups=True)
    ref, o2 = _trajectory(torch, name, {}, "float64", steps=4, groups=True)
    assert_close(ours[-1][1], ref[-1][1], rtol=1e-12, atol=0, equal_nan=True)
    assert o1.state_dict()["param_groups"] == o2.state_dict()["param_groups"]
    assert o1.defaults == o2.defaults
    assert repr(o1) == repr(o2)


@pytest.mark.parametrize("name", list(OPTIONS))
def test_load_state_dict_from_torch_continues_like_torch(torch, name):
    """A state dict taken from torch's optimizer, converted tensor by tensor, loads into ours
    and continues as the same state dict loaded into a fresh torch optimizer (loading casts
    floating state but "step" to the parameter's dtype, in both)."""
    kw = OPTIONS[name][1]
    _, o2 = _trajectory(torch, name, kw, "float64", steps=3)
    sd = o2.state_dict()
    conv = {"param_groups": sd["param_groups"],
            "state": {i: {k: aotgrad.tensor(v.numpy()) for k, v in s.items()}
                      for i, s in sd["state"].items()}}
    values = [p.detach().numpy() for p in o2.param_groups[0]["params"]]
    ps1 = [aotgrad.tensor(v, requires_grad=True) for v in values]
    ps2 = [torch.tensor(v, requires_grad=True) for v in values]
    o1, o3 = getattr(aotgrad.optim, name)(ps1), getattr(torch.optim, name)(ps2)
    o1.load_state_dict(conv)
    o3.load_state_dict(sd)
    for _ in range(2):
        for p1, p2 in zip(ps1, ps2):
            gi = np.linspace(-1, 1, p1.numel()).reshape(p1.shape) + p1.detach().numpy()
            p1.grad, p2.grad = aotgrad.tensor(gi), torch.tensor(gi)
        o1.step()
        o3.step()
    for a, b in zip(ps1, ps2):
        assert_close(a.detach().numpy(), b.detach().numpy(), rtol=1e-12, atol=0, equal_nan=True)
    for i, s in o3.state_dict()["state"].items():
        for k, v in s.items():
            assert str(o1.state_dict()["state"][i][k].dtype).endswith(str(v.dtype)[6:]), k


@pytest.mark.parametrize("name", list(OPTIONS))
def test_constructor_errors_match_torch(torch, name):
    p = aotgrad.zeros(2, requires_grad=True)
    tp = torch.zeros(2, requires_grad=True)
    bad = [dict(lr=-1.0), dict(eps=-1.0), dict(weight_decay=-0.5)]
    if name in ("Adamax", "NAdam", "RAdam"):
        bad += [dict(betas=(1.0, 0.9)), dict(betas=(0.9, -0.1))]
    bad += {"RMSprop": [dict(momentum=-1.0), dict(alpha=-1.0)],
            "Adagrad": [dict(lr_decay=-1.0), dict(initial_accumulator_value=-1.0)],
            "NAdam": [dict(momentum_decay=-1.0)]}.get(name, [])
    for kw in bad:
        with pytest.raises(ValueError) as e1:
            getattr(aotgrad.optim, name)([p], **kw)
        with pytest.raises(ValueError) as e2:
            getattr(torch.optim, name)([tp], **kw)
        assert str(e1.value) == str(e2.value)


# ---- LBFGS ---------------------------------------------------------------------------------
LBFGS_OPTIONS = [{}, dict(line_search_fn="strong_wolfe"),
                 dict(history_size=2, max_iter=5, lr=0.5),
                 dict(line_search_fn="strong_wolfe", history_size=3, max_iter=7),
                 dict(max_iter=4, max_eval=6, tolerance_grad=1e-3)]


def _lbfgs_run(lib, kwargs, dtype, steps, seed=0):
    rng = np.random.default_rng(seed)
    ldt = getattr(lib, dtype)
    X = lib.tensor(rng.standard_normal((20, 3)), dtype=ldt)
    y = lib.tensor(rng.standard_normal(20), dtype=ldt)
    w = lib.tensor(rng.standard_normal(3), dtype=ldt, requires_grad=True)
    b = lib.tensor(rng.standard_normal(1), dtype=ldt, requires_grad=True)
    opt = lib.optim.LBFGS([w, b], **kwargs)

    def closure():
        opt.zero_grad()
        loss = (((X @ w + b).tanh() * 2 - y) ** 2).mean() + (w ** 4).sum() * 0.01
        loss.backward()
        return loss

    out = []
    for _ in range(steps):
        loss = opt.step(closure)
        out.append((loss.item(), w.detach().numpy().copy(), b.detach().numpy().copy()))
    return out, opt


@pytest.mark.parametrize("kwargs", LBFGS_OPTIONS, ids=str)
def test_lbfgs_matches_torch_float64(torch, kwargs):
    ours, o1 = _lbfgs_run(aotgrad, kwargs, "float64", steps=4)
    ref, o2 = _lbfgs_run(torch, kwargs, "float64", steps=4)
    for (l1, w1, b1), (l2, w2, b2) in zip(ours, ref):
        assert l1 == pytest.approx(l2, rel=1e-12)
        assert_close(w1, w2, rtol=1e-8, atol=1e-12, equal_nan=True)
        assert_close(b1, b2, rtol=1e-8, atol=1e-12, equal_nan=True)
    s1, s2 = o1.state_dict()["state"][0], o2.state_dict()["state"][0]
    assert sorted(s1) == sorted(s2)
    assert (s1["func_evals"], s1["n_iter"]) == (s2["func_evals"], s2["n_iter"])
    assert len(s1["old_dirs"]) == len(s2["old_dirs"])
    assert_close(s1["d"].numpy(), s2["d"].numpy(), rtol=1e-6, atol=1e-12, equal_nan=True)
    assert o1.state_dict()["param_groups"] == o2.state_dict()["param_groups"]


@pytest.mark.parametrize("kwargs", LBFGS_OPTIONS[:3], ids=str)
def test_lbfgs_matches_torch_float32(torch, kwargs):
    # two steps: further on, float32 rounding decides the tolerance-based stops
    ours, _ = _lbfgs_run(aotgrad, kwargs, "float32", steps=2)
    ref, _ = _lbfgs_run(torch, kwargs, "float32", steps=2)
    for (l1, w1, _), (l2, w2, _) in zip(ours, ref):
        assert w1.dtype == np.float32
        assert l1 == pytest.approx(l2, rel=1e-5)
        assert_close(w1, w2, rtol=1e-3, atol=1e-5, equal_nan=True)
