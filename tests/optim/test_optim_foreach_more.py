"""The multi-tensor step of RMSprop, Adagrad, Adamax, NAdam and RAdam (`foreach=None`, the
default) against their per-parameter step (`foreach=False`): equal bit for bit over several
steps in float32 and float64, with weight decay, maximize, two parameter groups and a
state_dict round trip in the middle; and against PyTorch's foreach optimizers step by step.
Also zero_grad(set_to_none=False) and clip_grad_value_ on both paths."""
import numpy as np
import pytest

import aotgrad as ag
from aotgrad import optim
from aotgrad.testing import assert_close

SHAPES = [(3, 4), (5,), (), (0, 2), (2, 3, 2)]

CASES = [
    ("RMSprop", dict(lr=1e-2)),
    ("RMSprop", dict(lr=1e-2, alpha=0.9, momentum=0.8, centered=True, weight_decay=0.1)),
    ("RMSprop", dict(lr=1e-2, momentum=0.5, maximize=True)),
    ("RMSprop", dict(lr=1e-2, alpha=0.0, weight_decay=0.1)),
    ("Adagrad", dict(lr=0.1)),
    ("Adagrad", dict(lr=0.1, lr_decay=0.05, weight_decay=0.1, initial_accumulator_value=0.3,
                     maximize=True)),
    ("Adamax", dict(lr=2e-2)),
    ("Adamax", dict(lr=2e-2, betas=(0.6, 0.8), weight_decay=0.2, maximize=True)),
    ("NAdam", dict(lr=2e-2)),
    ("NAdam", dict(lr=2e-2, weight_decay=0.1, momentum_decay=0.01, maximize=True)),
    ("NAdam", dict(lr=2e-2, weight_decay=0.1, decoupled_weight_decay=True, betas=(0.3, 0.0))),
    ("RAdam", dict(lr=1e-2)),
    ("RAdam", dict(lr=1e-2, betas=(0.9, 0.5), weight_decay=0.1, maximize=True)),
    ("RAdam", dict(lr=1e-2, betas=(0.7, 0.6), weight_decay=0.1, decoupled_weight_decay=True)),
]
IDS = [f"{n}-{i}" for i, (n, _) in enumerate(CASES)]


def _grads(rng, params, step, dtype):
    """Seeded gradients (numpy arrays of `dtype`); one parameter gets none on the even
    steps, one entry is -0.0."""
    out = []
    for i, p in enumerate(params):
        if i == 1 and step % 2 == 0:
            out.append(None)
            continue
        g = rng.standard_normal(tuple(p.shape))
        if step == 2 and g.size:
            g.reshape(-1)[0] = -0.0
        out.append(g.astype(dtype.np))
    return out


def _run(name, kw, dtype, steps=5, **flags):
    rng = np.random.default_rng(0)
    params = [ag.tensor(rng.standard_normal(s), dtype=dtype, requires_grad=True)
              for s in SHAPES]
    groups = [dict(params=params[:2]), dict(params=params[2:], lr=kw["lr"] / 2)]
    make = lambda: getattr(optim, name)(groups, **kw, **flags)  # noqa: E731
    opt = make()
    grng = np.random.default_rng(1)
    for step in range(steps):
        for p, g in zip(params, _grads(grng, params, step, dtype)):
            p.grad = None if g is None else ag.tensor(g)
        opt.step()
        if step == 2:           # a state_dict round trip into a new optimizer
            sd = opt.state_dict()
            opt = make()
            opt.load_state_dict(sd)
    return params, opt


def _bits(t):
    a = t.detach().numpy()
    return a.view(np.uint32 if a.dtype == np.float32 else np.uint64)


@pytest.mark.parametrize("dtype", [ag.float32, ag.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("name,kw", CASES, ids=IDS)
def test_multi_tensor_step_equals_the_per_parameter_step_bit_for_bit(name, kw, dtype):
    ours, opt = _run(name, kw, dtype)
    ref, ref_opt = _run(name, kw, dtype, foreach=False)
    for a, b in zip(ours, ref):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(_bits(a), _bits(b))
    sa, sb = opt.state_dict()["state"], ref_opt.state_dict()["state"]
    assert sa.keys() == sb.keys()
    for k in sa:
        assert list(sa[k]) == list(sb[k])
        for key in sa[k]:
            assert sa[k][key].dtype == sb[k][key].dtype
            np.testing.assert_array_equal(_bits(sa[k][key]), _bits(sb[k][key]))


@pytest.mark.parametrize("name,kw", CASES, ids=IDS)
def test_default_path_follows_pytorch_step_by_step(name, kw, torch):
    rng = np.random.default_rng(0)
    init = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    ours = [ag.tensor(a, requires_grad=True) for a in init]
    theirs = [torch.tensor(a, requires_grad=True) for a in init]
    o1 = getattr(optim, name)([dict(params=ours[:2]), dict(params=ours[2:], lr=kw["lr"] / 2)],
                              **kw)
    o2 = getattr(torch.optim, name)([dict(params=theirs[:2]),
                                     dict(params=theirs[2:], lr=kw["lr"] / 2)],
                                    **kw, foreach=True)
    grng = np.random.default_rng(1)
    for step in range(6):
        grads = _grads(grng, ours, step, ag.float32)
        for a, b, g in zip(ours, theirs, grads):
            a.grad = None if g is None else ag.tensor(g)
            b.grad = None if g is None else torch.tensor(g)
        o1.step()
        o2.step()
        for a, b in zip(ours, theirs):
            assert_close(a.detach().numpy(), b.detach().numpy(), rtol=2e-5, atol=2e-6,
                         equal_nan=True)


@pytest.mark.parametrize("name", ["RMSprop", "Adagrad", "Adamax", "NAdam", "RAdam"])
def test_a_tensor_learning_rate_or_differentiable_takes_the_per_parameter_path(name):
    for kw in (dict(lr=ag.tensor(0.01)), dict(lr=0.01, differentiable=True)):
        a = [ag.ones(2, requires_grad=True), ag.ones(3, requires_grad=True)]
        b = [t.detach().clone().requires_grad_() for t in a]
        for ps, flags in ((a, {}), (b, dict(foreach=False))):
            opt = getattr(optim, name)(ps, **kw, **flags)
            for _ in range(2):
                for p in ps:
                    p.grad = ag.full_like(p, 0.5)
                opt.step()
        for x, y in zip(a, b):
            np.testing.assert_array_equal(_bits(x), _bits(y))


@pytest.mark.parametrize("name", ["RMSprop", "Adagrad", "Adamax", "NAdam", "RAdam"])
def test_the_step_bumps_versions_so_a_stale_saved_tensor_is_caught(name):
    p = ag.randn(3, requires_grad=True)
    opt = getattr(optim, name)([p])
    (p * p).sum().backward()
    y = (p * p).sum()                    # saves p for its backward
    v = p._version
    opt.step()
    assert p._version == v + 1
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()


def test_adagrad_foreach_and_fused_together_raise_as_pytorch():
    with pytest.raises(RuntimeError, match="`fused` and `foreach` cannot be `True` together"):
        optim.Adagrad([ag.zeros(2, requires_grad=True)], foreach=True, fused=True)


@pytest.mark.parametrize("foreach", [None, False])
def test_zero_grad_in_place_keeps_the_gradient_tensor(foreach):
    ps = [ag.ones(s, requires_grad=True) for s in [(2, 3), (4,), ()]]
    opt = optim.SGD(ps, lr=0.1, foreach=foreach)
    for p in ps:
        (p * 3).sum().backward()
    grads = [p.grad for p in ps]
    versions = [g._version for g in grads]
    opt.zero_grad(set_to_none=False)
    for p, g, v in zip(ps, grads, versions):
        assert p.grad is not None and p.grad._value is g._value   # the same storage
        np.testing.assert_array_equal(p.grad.numpy(), np.zeros(p.shape, np.float32))
        assert p.grad._version > v
    opt.zero_grad()
    assert all(p.grad is None for p in ps)


@pytest.mark.parametrize("dtype", [ag.float32, ag.float64], ids=["f32", "f64"])
def test_clip_grad_value_multi_tensor_equals_per_parameter(dtype):
    def run(**flags):
        rng = np.random.default_rng(3)
        params = [ag.ones(s, dtype=dtype, requires_grad=True) for s in SHAPES]
        for p in params:
            g = rng.standard_normal(p.shape) * 2
            if g.size > 2:
                g.reshape(-1)[:3] = [np.nan, -0.0, np.inf]
            p.grad = ag.tensor(g, dtype=dtype)
        ag.nn.utils.clip_grad_value_(params, 0.7, **flags)
        return params

    for x, y in zip(run(), run(foreach=False)):
        np.testing.assert_array_equal(_bits(x.grad), _bits(y.grad))


def test_clip_grad_value_follows_pytorch(torch):
    rng = np.random.default_rng(4)
    gs = [rng.standard_normal(s).astype(np.float32) * 2 for s in SHAPES]
    ours = [ag.zeros(s, requires_grad=True) for s in SHAPES]
    theirs = [torch.zeros(s, requires_grad=True) for s in SHAPES]
    for a, b, g in zip(ours, theirs, gs):
        a.grad, b.grad = ag.tensor(g), torch.tensor(g)
    ag.nn.utils.clip_grad_value_(ours, 0.5)
    torch.nn.utils.clip_grad_value_(theirs, 0.5, foreach=True)
    for a, b in zip(ours, theirs):
        np.testing.assert_array_equal(a.grad.numpy(), b.grad.numpy())
