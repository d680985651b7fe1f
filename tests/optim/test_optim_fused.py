"""The fused optimizer step (the default, and fused=True): each parameter's update is one
kernel generated from the per-parameter step's own tensor ops (optim.adam.adam_update,
optim.sgd.sgd_update). Equal bit for bit to the per-parameter path and to the numpy
multi-tensor path (foreach=True) over several steps, with param groups and a state_dict()
round trip in the middle, and close to PyTorch's step by step."""
import numpy as np
import pytest

import aotgrad as ag
from aotgrad import optim
from aotgrad.runtime.kernel_library import library

# (3, 25000): longer than FlatKernel.CHUNK, run chunk by chunk with a short last chunk
SHAPES = [(3, 4), (5,), (), (0, 2), (2, 3, 2), (70,), (3, 25000)]

CASES = [
    ("SGD", dict(lr=0.1)),
    ("SGD", dict(lr=0.1, momentum=0.9)),
    ("SGD", dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01)),
    ("SGD", dict(lr=0.05, momentum=0.5, dampening=0.3, maximize=True, weight_decay=0.1)),
    ("Adam", dict(lr=1e-2)),
    ("Adam", dict(lr=1e-2, weight_decay=0.1, amsgrad=True)),
    ("Adam", dict(lr=3e-3, betas=(0.8, 0.9), eps=1e-6, maximize=True)),
    ("AdamW", dict(lr=1e-2)),
    ("AdamW", dict(lr=1e-2, weight_decay=0.3, amsgrad=True, maximize=True)),
    ("RMSprop", dict(lr=1e-2)),
    ("RMSprop", dict(lr=1e-2, alpha=0.9, momentum=0.9, weight_decay=0.1)),
    ("RMSprop", dict(lr=3e-3, centered=True, maximize=True, eps=1e-6)),
    # 1 - alpha >= 0.5: the centered average's lerp takes its other formula
    ("RMSprop", dict(lr=3e-3, alpha=0.3, centered=True, momentum=0.5, weight_decay=0.01)),
    ("Adagrad", dict(lr=1e-1)),
    ("Adagrad", dict(lr=5e-2, lr_decay=0.1, weight_decay=0.1, initial_accumulator_value=0.3)),
    ("Adagrad", dict(lr=5e-2, lr_decay=1e-3, eps=1e-6, maximize=True)),
    ("Adamax", dict(lr=2e-2)),
    ("Adamax", dict(lr=1e-2, betas=(0.3, 0.9), weight_decay=0.1, maximize=True)),
    ("NAdam", dict(lr=1e-2)),
    ("NAdam", dict(lr=1e-2, weight_decay=0.1, momentum_decay=0.01, maximize=True)),
    ("NAdam", dict(lr=1e-2, betas=(0.4, 0.95), weight_decay=0.1, decoupled_weight_decay=True)),
    ("RAdam", dict(lr=1e-2)),
    ("RAdam", dict(lr=1e-2, betas=(0.4, 0.9), weight_decay=0.1, maximize=True)),
    # betas[1] = 0.6: rho_inf = 4, never rectified
    ("RAdam", dict(lr=1e-2, betas=(0.9, 0.6))),
    ("RAdam", dict(lr=1e-2, weight_decay=0.1, decoupled_weight_decay=True)),
]

# the optimizers whose PyTorch constructor takes `fused` (the others take the fused path by
# default, with foreach=None)
HAS_FUSED_FLAG = {"SGD", "Adam", "AdamW", "Adagrad"}


@pytest.fixture(autouse=True)
def _kernels_compiled_first(monkeypatch):
    monkeypatch.setenv("AOTGRAD_EAGER_KERNELS", "wait")


def _grads(step, dtype):
    rng = np.random.default_rng(100 + step)
    out = []
    for i, s in enumerate(SHAPES):
        g = rng.standard_normal(s).astype(dtype)
        if step == 2 and g.size:
            g.reshape(-1)[0] = -0.0
        out.append(None if (i == 1 and step % 2 == 0) else g)
    return out


# RAdam's rectified step begins at step 6 (rho_t > 5): run past it
STEPS = {"RAdam": 7}


def _run(M, name, kw, dtype, **flags):
    """Parameters and states after 5 steps (STEPS) in two param groups (the second with its own
    lr), the optimizer rebuilt from its state_dict() after step 2."""
    rng = np.random.default_rng(0)
    ps = [M.tensor(rng.standard_normal(s).astype(dtype), requires_grad=True) for s in SHAPES]

    def make():
        return getattr(M.optim, name)([{"params": ps[:3]},
                                       {"params": ps[3:], "lr": kw["lr"] * 0.5}], **kw, **flags)
    opt = make()
    for step in range(STEPS.get(name, 5)):
        for p, g in zip(ps, _grads(step, dtype)):
            p.grad = None if g is None else M.tensor(g)
        opt.step()
        if step == 2:
            sd = opt.state_dict()
            opt = make()
            opt.load_state_dict(sd)
    return ps, opt


def _bits(a):
    a = np.asarray(a)
    return a.view(np.uint32 if a.dtype == np.float32 else np.uint64)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("name,kw", CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CASES)])
def test_fused_equals_the_per_parameter_and_foreach_paths_bit_for_bit(name, kw, dtype):
    fused, opt = _run(ag, name, kw, dtype)
    assert any(k[0] == name.lower().rstrip("w") and k[1] == np.dtype(dtype).name
               for k in library.info()), "the fused kernel did not run"
    for flags in (dict(foreach=False), dict(foreach=True)):
        ref, ref_opt = _run(ag, name, kw, dtype, **flags)
        for a, b in zip(fused, ref):
            np.testing.assert_array_equal(_bits(a.detach().numpy()), _bits(b.detach().numpy()))
        sa, sb = opt.state_dict()["state"], ref_opt.state_dict()["state"]
        assert sa.keys() == sb.keys()
        for k in sa:
            assert list(sa[k]) == list(sb[k])
            for key in sa[k]:
                np.testing.assert_array_equal(_bits(sa[k][key].numpy()),
                                              _bits(sb[k][key].numpy()))


@pytest.mark.parametrize("name,kw", CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CASES)])
def test_fused_step_follows_pytorch(torch, name, kw):
    ours, _ = _run(ag, name, kw, np.float32,
                   **(dict(fused=True) if name in HAS_FUSED_FLAG else {}))
    theirs, _ = _run(torch, name, kw, np.float32)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-6, atol=1e-6)


def test_fused_step_bumps_versions_and_keeps_buffers():
    p = ag.randn(4, requires_grad=True)
    opt = optim.AdamW([p], lr=0.1)
    p.grad = ag.randn(4)
    buf = p._value
    opt.step()
    v = p._version
    p.grad = ag.randn(4)
    opt.step()
    assert p._value is buf and p._version > v     # updated in place, as an in-place op


def test_fused_and_foreach_true_together_raise():
    with pytest.raises(RuntimeError, match="`fused` and `foreach` cannot be `True`"):
        optim.SGD([ag.randn(2, requires_grad=True)], lr=0.1, fused=True, foreach=True)


@pytest.mark.parametrize("clip", [0.7, 0.0, np.inf])
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_clip_grad_value_multi_tensor_equals_per_parameter_bit_for_bit(clip, dtype):
    def run(**flags):
        rng = np.random.default_rng(3)
        params = []
        for s in SHAPES:
            g = (rng.standard_normal(s) * 2).astype(dtype)
            if g.size > 4:
                g.reshape(-1)[:5] = [np.nan, -0.0, np.inf, 0.0, -np.inf]
            params.append(ag.ones(s, dtype=ag.float32 if dtype == np.float32 else ag.float64,
                                  requires_grad=True))
            params[-1].grad = ag.tensor(g)
        ag.nn.utils.clip_grad_value_(params, clip, **flags)
        return [p.grad.numpy() for p in params]

    for a, b in zip(run(foreach=True), run(foreach=False)):
        np.testing.assert_array_equal(_bits(a), _bits(b))
        assert np.all(np.isnan(a) | (np.abs(a) <= clip))


def test_fused_kernels_are_the_range_loop_variant():
    # the library runs a kernel chunk by chunk, below the prange variant's threshold: the
    # kernel it holds is the serial one, whether just compiled or loaded from the disk cache
    p = ag.randn(5, requires_grad=True)
    opt = optim.RAdam([p], lr=0.1)
    p.grad = ag.randn(5)
    opt.step()
    library.clear()              # (forgotten in memory: loaded from the disk cache again)
    opt.step()
    kernels = [k for key, k in library._table.items() if key[0] == "radam" and k is not None]
    assert kernels
    for k in kernels:
        assert not getattr(k.compiled.fn, "targetoptions", {}).get("parallel")
