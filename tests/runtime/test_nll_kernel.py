"""cross_entropy's and nll_loss's second node on its numpy kernel (eager_kernels.nll_forward,
nll_backward): equal to the prims' values and gradients (its reference) with weight,
ignore_index, label smoothing and every reduction, on awkward shapes (a 1-D input, size 1,
zero rows, spatial targets, non-contiguous logits), float32 and float64; a double backward
through the reference; PyTorch's values, gradients and node names where installed."""
import numpy as np
import pytest

import aotgrad as ag
from aotgrad.runtime import eager_kernels
from aotgrad.testing import assert_close

F = ag.nn.functional
SHAPES = [(4, 5), (1, 1), (5,), (0, 3), (3, 4, 2), (2, 3, 2, 2)]


def _case(shape, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape) * 3
    c = shape[0] if len(shape) == 1 else shape[1]
    tshape = () if len(shape) == 1 else shape[:1] + shape[2:]
    t = rng.integers(0, c, tshape)
    if t.size > 1:
        t.reshape(-1)[0] = -1           # an ignored target
    return x, t, rng.random(c)


def _loss(M, x, t, w, kw, dtype, prims=False, monkeypatch=None, create_graph=False):
    xt = M.tensor(x.astype(dtype), requires_grad=True)
    ww = None if w is None else M.tensor(w.astype(dtype))
    with monkeypatch.context() as m:
        if prims:
            m.setattr(eager_kernels, "run", lambda *a, **k: None)
        y = M.nn.functional.cross_entropy(xt, M.tensor(t), ww, ignore_index=-1, **kw)
        g = M.tensor(np.full(tuple(y.shape), 1.5, dtype))
        gx, = M.autograd.grad(y, [xt], g, create_graph=create_graph)
        if not create_graph:
            return y, gx
        gg, = M.autograd.grad((gx * gx * xt).sum(), [xt])
        return y, gx, gg


def _close(a, b, dtype, tol=None):
    a, b = a.detach().numpy(), b.detach().numpy()
    assert a.dtype == b.dtype and a.shape == b.shape
    tol = tol or ((2e-6, 2e-6) if dtype == np.float32 else (1e-12, 1e-13))
    assert_close(a, b, rtol=tol[0], atol=tol[1], equal_nan=True)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_kernel_equals_the_prims(shape, dtype, monkeypatch):
    x, t, w = _case(shape)
    for weight in (None, w):
        for reduction in ("mean", "sum", "none"):
            for ls in (0.0, 0.2):
                kw = dict(reduction=reduction, label_smoothing=ls)
                y, gx = _loss(ag, x, t, weight, kw, dtype, monkeypatch=monkeypatch)
                y_ref, gx_ref = _loss(ag, x, t, weight, kw, dtype, prims=True,
                                      monkeypatch=monkeypatch)
                _close(y, y_ref, dtype)
                _close(gx, gx_ref, dtype)


def test_node_is_the_kernel_and_non_contiguous_logits(monkeypatch):
    x, t, w = _case((6, 4))
    leaf = ag.tensor(np.ascontiguousarray(x.T, np.float32), requires_grad=True)
    xt = leaf.t()                                   # logits of a transposed view
    assert not xt._value.flags.c_contiguous
    y = F.cross_entropy(xt, ag.tensor(t), ignore_index=-1)
    assert type(y.grad_fn) is eager_kernels.KernelBackward
    assert y.grad_fn.name() == "NllLossBackward0"
    gx, = ag.autograd.grad(y, [leaf])
    y_ref, gx_ref = _loss(ag, x, t, None, {}, np.float32, prims=True, monkeypatch=monkeypatch)
    _close(y, y_ref, np.float32)
    _close(gx.t() * 1.5, gx_ref, np.float32)     # (_loss: a cotangent of 1.5)


def test_all_targets_ignored_is_nan_with_zero_gradient():
    x = ag.randn(3, 4, requires_grad=True)
    y = F.cross_entropy(x, ag.tensor([-100, -100, -100]))
    y.backward()
    assert np.isnan(float(y)) and np.array_equal(x.grad.numpy(), np.zeros((3, 4), np.float32))


@pytest.mark.parametrize("ls", [0.0, 0.3])
def test_double_backward_runs_the_reference(ls, monkeypatch):
    x, t, w = _case((3, 4, 2))
    kw = dict(reduction="sum", label_smoothing=ls)
    got = _loss(ag, x, t, w, kw, np.float64, monkeypatch=monkeypatch, create_graph=True)
    ref = _loss(ag, x, t, w, kw, np.float64, prims=True, monkeypatch=monkeypatch,
                create_graph=True)
    for a, b in zip(got, ref):
        _close(a, b, np.float64)


@pytest.mark.parametrize("shape", [(4, 5), (5,), (3, 4, 2)], ids=str)
@pytest.mark.parametrize("ls", [0.0, 0.1])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_as_torch(torch, shape, ls, reduction, monkeypatch):
    x, t, w = _case(shape, seed=1)
    kw = dict(reduction=reduction, label_smoothing=ls)
    y, gx = _loss(ag, x, t, w, kw, np.float64, monkeypatch=monkeypatch)
    yt, gxt = _loss(torch, x, t, w, kw, np.float64, monkeypatch=monkeypatch)
    assert_close(y.detach().numpy(), yt.detach().numpy(), rtol=1e-12, atol=1e-13)
    assert_close(gx.numpy(), gxt.numpy(), rtol=1e-12, atol=1e-13)
    if ls == 0.0 and not (len(shape) > 2 and reduction == "none"):
        # (PyTorch's spatial unreduced loss ends in a view of its kernel's output)
        assert y.grad_fn.name() == yt.grad_fn.name()


def test_nll_loss_spatial_node_and_a_weight_that_requires_grad_keeps_the_prims():
    logp = F.log_softmax(ag.randn(2, 3, 4, requires_grad=True), 1)
    t = ag.tensor([[0, 1, 2, 1], [2, 2, 0, 1]])
    assert F.nll_loss(logp, t).grad_fn.name() == "NllLoss2DBackward0"
    w = ag.rand(3, requires_grad=True)
    assert type(F.nll_loss(logp, t, w).grad_fn) is not eager_kernels.KernelBackward
