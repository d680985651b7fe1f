"""float16 / bfloat16 (eager only) and CPU autocast, against closed forms and PyTorch."""
import warnings

import numpy as np
import pytest

import aotgrad as ag
from aotgrad import nn
from aotgrad.testing import assert_close

LOW = ["float16", "bfloat16"]


def test_dtypes_and_conversions():
    assert ag.half is ag.float16 and ag.float16.is_floating_point and ag.bfloat16.is_floating_point
    assert ag.float16.itemsize == ag.bfloat16.itemsize == 2
    x = ag.tensor([1.5, -2.25, 3.0])
    h, b = x.half(), x.bfloat16()
    assert h.dtype is ag.float16 and b.dtype is ag.bfloat16
    assert h.tolist() == b.tolist() == [1.5, -2.25, 3.0]      # exactly representable
    assert h.type() == "torch.HalfTensor" and b.type() == "torch.BFloat16Tensor"
    assert x.to(ag.bfloat16).float().dtype is ag.float32
    assert "dtype=aotgrad.bfloat16" in repr(b) and "1.5000" in repr(b)
    assert isinstance(h, ag.HalfTensor) and ag.BFloat16Tensor([1, 2]).dtype is ag.bfloat16
    assert ag.zeros(2, dtype=ag.float16).dtype is ag.float16
    assert ag.randn(3, dtype=ag.bfloat16).dtype is ag.bfloat16
    assert ag.rand(3, dtype=ag.float16).dtype is ag.float16
    # bfloat16 keeps float32's range, float16 does not
    assert ag.tensor([1e10]).bfloat16().isfinite().item()
    assert ag.tensor([1e10]).half().isinf().item()
    # rounding: 1 + 2^-9 is not a bfloat16 (8 significant bits) but is a float16 (11)
    assert ag.tensor([1 + 2 ** -9]).bfloat16().item() == 1.0
    assert ag.tensor([1 + 2 ** -9]).half().item() == 1 + 2 ** -9
    assert f"{ag.tensor(2.5).half():.2f}" == "2.50"


def test_promotion():
    h, b = ag.ones(2, dtype=ag.float16), ag.ones(2, dtype=ag.bfloat16)
    assert (h + b).dtype is ag.float32
    assert (h + ag.ones(2)).dtype is ag.float32 and (b * 2.5).dtype is ag.bfloat16
    assert (h + ag.ones(2, dtype=ag.int64)).dtype is ag.float16
    assert (h + ag.ones(2, dtype=ag.float64)).dtype is ag.float64


def test_reductions_accumulate_in_float32():
    # 4096 ones: float16 accumulation would stop at 2048 (1 + 2048 is not a float16)
    x = ag.ones(4096, dtype=ag.float16)
    assert x.sum().item() == 4096. and x.cumsum(0)[-1].item() == 4096.
    y = ag.ones(512, dtype=ag.bfloat16)           # bfloat16 accumulation stops at 256
    assert y.sum().item() == 512. and y.mean().item() == 1.
    a = ag.ones(1, 1024, dtype=ag.bfloat16)
    assert (a @ a.mT).item() == 1024.


def test_gradients_flow_in_low_precision():
    w = ag.tensor([0.5, -1.0, 2.0], requires_grad=True)
    (w.bfloat16() * 3).sum().backward()
    assert w.grad.dtype is ag.float32 and w.grad.tolist() == [3., 3., 3.]
    h = ag.tensor([1., 2.], dtype=ag.float16, requires_grad=True)
    (h * h).sum().backward()
    assert h.grad.dtype is ag.float16 and h.grad.tolist() == [2., 4.]


@pytest.mark.parametrize("dtype", LOW)
def test_ops_match_torch(torch, dtype):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((4, 5)).astype(np.float32)
    b = rng.standard_normal((5, 3)).astype(np.float32)
    exprs = {
        "add": lambda M, x, y: x + x * 0.5, "exp": lambda M, x, y: (x / 2).exp(),
        "tanh": lambda M, x, y: x.tanh(), "sigmoid": lambda M, x, y: x.sigmoid(),
        "sum": lambda M, x, y: x.sum(1), "mean": lambda M, x, y: x.mean(),
        "softmax": lambda M, x, y: x.softmax(-1), "matmul": lambda M, x, y: x @ y,
        "max": lambda M, x, y: x.amax(0), "sqrt": lambda M, x, y: x.abs().sqrt(),
        "gelu": lambda M, x, y: M.nn.functional.gelu(x),
        "layer_norm": lambda M, x, y: M.nn.functional.layer_norm(x, (5,)),
    }
    for name, f in exprs.items():
        outs = []
        for M in (ag, torch):
            d = getattr(M, dtype)
            x, y = M.tensor(a).to(d), M.tensor(b).to(d)
            out = f(M, x, y)
            assert str(out.dtype).split(".")[-1] == dtype, name
            outs.append(out.float().numpy())
        tol = 1e-2 if dtype == "bfloat16" else 2e-3
        assert_close(outs[0], outs[1], rtol=tol, atol=tol, equal_nan=True, msg=name)


def test_autocast_dtypes_and_grads():
    m = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    x, t = ag.randn(16, 4), ag.randn(16, 1)
    with ag.autocast(device_type="cpu", dtype=ag.bfloat16):
        assert ag.is_autocast_enabled() and ag.get_autocast_dtype("cpu") is ag.bfloat16
        h = m[0](x)
        out = m(x)
        loss = nn.functional.mse_loss(out, t)
        d = x.double() @ x.double().mT          # float64 is left alone, as in PyTorch
        with ag.autocast("cpu", enabled=False):
            plain = m(x)
    assert not ag.is_autocast_enabled()
    assert h.dtype is ag.bfloat16 and out.dtype is ag.bfloat16 and loss.dtype is ag.float32
    assert d.dtype is ag.float64 and plain.dtype is ag.float32
    loss.backward()
    assert all(p.grad.dtype is ag.float32 for p in m.parameters())
    with pytest.raises(AssertionError, match="CUDA"):
        ag.autocast("cuda")
    with pytest.raises(RuntimeError, match="bfloat16"):
        ag.autocast("cpu", dtype=ag.float64)

    @ag.autocast("cpu", dtype=ag.float16)
    def f(a):
        return a @ a.mT

    assert f(x).dtype is ag.float16


@pytest.mark.parametrize("dtype", LOW)
def test_autocast_training_step_matches_torch(torch, dtype):
    rng = np.random.default_rng(1)
    w1, b1 = rng.standard_normal((8, 4)) * 0.5, rng.standard_normal(8) * 0.1
    w2, b2 = rng.standard_normal((1, 8)) * 0.5, rng.standard_normal(1) * 0.1
    x, t = rng.standard_normal((32, 4)), rng.standard_normal((32, 1))
    res = {}
    for M in (ag, torch):
        model = M.nn.Sequential(M.nn.Linear(4, 8), M.nn.Tanh(), M.nn.Linear(8, 1))
        with M.no_grad():
            for p, v in zip(model.parameters(), (w1, b1, w2, b2)):
                p.copy_(M.tensor(v.astype(np.float32)))
        with M.autocast(device_type="cpu", dtype=getattr(M, dtype)):
            out = model(M.tensor(x.astype(np.float32)))
            loss = M.nn.functional.mse_loss(out, M.tensor(t.astype(np.float32)))
        loss.backward()
        res[M.__name__] = ([str(out.dtype).split(".")[-1], str(loss.dtype).split(".")[-1]],
                           [out.float().detach().numpy(), loss.detach().numpy()] +
                           [p.grad.numpy() for p in model.parameters()])
    assert res["aotgrad"][0] == res["torch"][0]
    tol = 3e-2 if dtype == "bfloat16" else 5e-3
    for a, b in zip(res["aotgrad"][1], res["torch"][1]):
        assert_close(a, b, rtol=tol, atol=tol, equal_nan=True)


def test_module_half_and_bfloat16():
    m = nn.Linear(3, 2)
    w = m.weight
    m.half()
    assert m.weight is w and w.dtype is ag.float16 and m(ag.ones(1, 3).half()).dtype is ag.float16
    m.bfloat16()
    assert m.weight.dtype is ag.bfloat16
    m.float()
    assert m.weight.dtype is ag.float32


def _scaler_run(M, xs):
    w = M.tensor([1.0, -2.0, 0.5], requires_grad=True)
    opt = M.optim.SGD([w], lr=0.1)
    scaler = M.amp.GradScaler("cpu", init_scale=8.0, growth_interval=2)
    scales, results = [], []
    for x in xs:
        opt.zero_grad()
        loss = (w * M.tensor(x)).sum()
        scaler.scale(loss).backward()
        results.append(scaler.step(opt) is not None or True)
        scaler.update()
        scales.append(scaler.get_scale())
    return scales, w.detach().numpy(), scaler.state_dict()


def test_grad_scaler_matches_torch(torch):
    xs = [[1., 2., 3.], [0.5, float("inf"), 1.], [1., 1., 1.], [2., 0., 1.], [1., 3., 1.],
          [float("nan"), 1., 1.], [1., 1., 2.]]
    ours, theirs = _scaler_run(ag, xs), _scaler_run(torch, xs)
    assert ours[0] == theirs[0]
    assert_close(ours[1], theirs[1], rtol=1e-6, atol=0, equal_nan=True)
    assert ours[2] == theirs[2]


def test_grad_scaler_closed_form():
    w = ag.tensor([1.0], requires_grad=True)
    opt = ag.optim.SGD([w], lr=1.0)
    s = ag.amp.GradScaler(init_scale=4.0, growth_interval=1)
    (s.scale(w * 3)).sum().backward()
    assert w.grad.item() == 12.0
    s.unscale_(opt)
    assert w.grad.item() == 3.0
    with pytest.raises(RuntimeError, match="already been called"):
        s.unscale_(opt)
    s.step(opt)
    s.update()
    assert w.item() == -2.0 and s.get_scale() == 8.0
    off = ag.amp.GradScaler(enabled=False)
    assert off.scale(w) is w and off.get_scale() == 1.0 and off.state_dict() == {}
