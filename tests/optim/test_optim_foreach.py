"""The multi-tensor step of SGD and Adam/AdamW (`foreach=None`, the default, and `fused=True`)
against the per-parameter step (`foreach=False`): equal bit for bit over several steps, in
float32 and float64, with every option; the state, the version counters and PyTorch's flag
check as the per-parameter path has them."""
import numpy as np
import pytest

import aotgrad as ag
from aotgrad import optim
from aotgrad.testing import assert_close

SHAPES = [(3, 4), (5,), (), (0, 2), (2, 3, 2)]

CASES = [
    ("SGD", dict(lr=0.1)),
    ("SGD", dict(lr=0.1, momentum=0.9)),
    ("SGD", dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01)),
    ("SGD", dict(lr=0.05, momentum=0.5, dampening=0.3, maximize=True)),
    ("Adam", dict(lr=1e-2)),
    ("Adam", dict(lr=1e-2, weight_decay=0.1, amsgrad=True)),
    ("Adam", dict(lr=3e-3, betas=(0.8, 0.9), eps=1e-6, maximize=True)),
    ("AdamW", dict(lr=1e-2)),
    ("AdamW", dict(lr=1e-2, weight_decay=0.3, amsgrad=True, maximize=True)),
    ("Adam", dict(lr=1e-2, weight_decay=0.05, decoupled_weight_decay=True)),
]


def _params(dtype, seed=0):
    rng = np.random.default_rng(seed)
    return [ag.tensor(rng.standard_normal(s), dtype=dtype, requires_grad=True) for s in SHAPES]


def _run(name, kw, dtype, steps=4, **flags):
    params = _params(dtype)
    opt = getattr(optim, name)(params, **kw, **flags)
    rng = np.random.default_rng(1)
    for step in range(steps):
        for i, p in enumerate(params):
            # one parameter has no gradient on the even steps; awkward values on one step
            if i == 1 and step % 2 == 0:
                p.grad = None
                continue
            g = rng.standard_normal(p.shape)
            if step == 2 and p.numel():
                g.reshape(-1)[0] = -0.0
            p.grad = ag.tensor(g, dtype=dtype)
        opt.step()
    return params, opt


def _bits(t):
    a = t.detach().numpy()
    return a.view(np.uint32 if a.dtype == np.float32 else np.uint64)


@pytest.mark.parametrize("dtype", [ag.float32, ag.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("name,kw", CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CASES)])
def test_multi_tensor_step_equals_the_per_parameter_step_bit_for_bit(name, kw, dtype):
    ours, opt = _run(name, kw, dtype)
    ref, ref_opt = _run(name, kw, dtype, foreach=False)
    for a, b in zip(ours, ref):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(_bits(a), _bits(b))
    sa, sb = opt.state_dict()["state"], ref_opt.state_dict()["state"]
    assert sa.keys() == sb.keys()
    for k in sa:
        assert list(sa[k]) == list(sb[k])        # the same keys in PyTorch's order
        for key in sa[k]:
            assert sa[k][key].dtype == sb[k][key].dtype
            np.testing.assert_array_equal(_bits(sa[k][key]), _bits(sb[k][key]))


@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW"])
def test_fused_takes_the_same_path(name):
    a, _ = _run(name, dict(lr=0.01), ag.float32, fused=True)
    b, _ = _run(name, dict(lr=0.01), ag.float32, foreach=False)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(_bits(x), _bits(y))


@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW"])
def test_foreach_and_fused_together_raise_as_pytorch(name):
    p = ag.zeros(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="`fused` and `foreach` cannot be `True` together"):
        getattr(optim, name)([p], lr=0.1, foreach=True, fused=True)


@pytest.mark.parametrize("name,kw", [("SGD", dict(lr=0.1, momentum=0.9)), ("Adam", {})])
def test_the_step_bumps_versions_so_a_stale_saved_tensor_is_caught(name, kw):
    p = ag.randn(3, requires_grad=True)
    opt = getattr(optim, name)([p], **kw)
    (p * p).sum().backward()
    y = (p * p).sum()                    # saves p for its backward
    v = p._version
    opt.step()
    assert p._version == v + 1
    state = opt.state[p]
    for key, t in state.items():
        if key != "step":
            assert t._version >= 0
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()


def test_a_tensor_learning_rate_and_mixed_dtypes_take_the_per_parameter_path():
    # the per-parameter path handles what the multi-tensor one does not; results agree with
    # a run that asks for it explicitly
    for kw in (dict(lr=ag.tensor(0.01)), dict(lr=0.01)):
        a = [ag.ones(2, requires_grad=True), ag.ones(3, dtype=ag.float64, requires_grad=True)]
        b = [t.detach().clone().requires_grad_() for t in a]
        for ps, flags in ((a, {}), (b, dict(foreach=False))):
            opt = optim.Adam(ps, **kw, **flags)
            for p in ps:
                p.grad = ag.full_like(p, 0.5)
            opt.step()
        for x, y in zip(a, b):
            np.testing.assert_array_equal(_bits(x), _bits(y))


def test_adamw_default_path_follows_pytorch_step_by_step(torch):
    rng = np.random.default_rng(0)
    init = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    ours = [ag.tensor(a, requires_grad=True) for a in init]
    theirs = [torch.tensor(a, requires_grad=True) for a in init]
    o1 = optim.AdamW(ours, lr=1e-2, weight_decay=0.1, amsgrad=True)
    o2 = torch.optim.AdamW(theirs, lr=1e-2, weight_decay=0.1, amsgrad=True, foreach=True)
    for _ in range(5):
        for a, b in zip(ours, theirs):
            g = rng.standard_normal(a.shape).astype(np.float32)
            a.grad, b.grad = ag.tensor(g), torch.tensor(g)
        o1.step()
        o2.step()
    for a, b in zip(ours, theirs):
        assert_close(a.detach().numpy(), b.detach().numpy(), rtol=1e-6, atol=1e-7, equal_nan=True)


@pytest.mark.parametrize("dtype", [ag.float32, ag.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("max_norm", [0.5, 1e3])
def test_clip_grad_norm_multi_tensor_equals_per_parameter(dtype, max_norm):
    def run(**flags):
        params = _params(dtype)
        rng = np.random.default_rng(2)
        for p in params:
            p.grad = ag.tensor(rng.standard_normal(p.shape) * 3, dtype=dtype)
        total = ag.nn.utils.clip_grad_norm_(params, max_norm, **flags)
        return total, params

    (t1, a), (t2, b) = run(), run(foreach=False)
    assert t1.dtype == t2.dtype and t1.shape == t2.shape
    np.testing.assert_array_equal(_bits(t1), _bits(t2))
    for x, y in zip(a, b):
        np.testing.assert_array_equal(_bits(x.grad), _bits(y.grad))


@pytest.mark.parametrize("foreach", [None, False])
def test_clip_grad_norm_nonfinite_on_both_paths(foreach):
    p = ag.ones(3, requires_grad=True)
    p.grad = ag.tensor([1.0, float("inf"), 2.0])
    with pytest.raises(RuntimeError, match="non-finite"):
        ag.nn.utils.clip_grad_norm_([p], 1.0, error_if_nonfinite=True, foreach=foreach)
    total = ag.nn.utils.clip_grad_norm_([p], 1.0, foreach=foreach)
    assert np.isinf(total.item())
