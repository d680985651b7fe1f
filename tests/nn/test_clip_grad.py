"""clip_grad_norm_ and clip_grad_value_: the default path (foreach=None, and True) equals the
per-parameter one (foreach=False) bit for bit, for norm types 2, 1, inf, -inf, 0 and other
p, mixed float32/float64 gradients, zero-size and non-contiguous gradients, NaN and
infinite values, an empty list; and PyTorch's totals and clipped gradients where installed."""
import math

import numpy as np
import pytest

import aotgrad as ag

NORMS = [2.0, 1.0, math.inf, -math.inf, 0.0, 3.0, 0.5]
SHAPES = [(3, 4), (5,), (), (0, 2), (2, 3, 2)]


def _grads(dtypes, seed=0, special=False):
    rng = np.random.default_rng(seed)
    out = []
    for i, (s, d) in enumerate(zip(SHAPES, dtypes)):
        g = rng.standard_normal(s) * 3
        if special and g.size:
            g.reshape(-1)[0] = 0.0
            if i == 0:
                g[1, 1] = -0.0
        out.append(g.astype(d))
    return out


def _params(M, grads, transposed=False):
    ps = []
    for g in grads:
        p = M.zeros(g.shape, dtype=getattr(M, np.dtype(g.dtype).name), requires_grad=True)
        if transposed and g.ndim == 2:      # a gradient whose buffer is transposed
            p.grad = M.tensor(np.ascontiguousarray(g.T)).t()
        else:
            p.grad = M.tensor(g)
        ps.append(p)
    return ps


def _bits(t):
    a = np.ascontiguousarray(t.detach().numpy())
    return a.view(np.int32 if a.dtype == np.float32 else np.int64)


MIXED = [np.float32, np.float64, np.float32, np.float64, np.float32]


@pytest.mark.parametrize("dtypes", [[np.float32] * 5, [np.float64] * 5, MIXED],
                         ids=["f32", "f64", "mixed"])
@pytest.mark.parametrize("norm_type", NORMS, ids=str)
@pytest.mark.parametrize("max_norm", [0.5, 1e4])
def test_paths_equal_bit_for_bit(dtypes, norm_type, max_norm):
    runs = []
    for foreach in (None, True, False):
        ps = _params(ag, _grads(dtypes, special=True), transposed=foreach is False)
        total = ag.nn.utils.clip_grad_norm_(ps, max_norm, norm_type, foreach=foreach)
        runs.append((total, [p.grad for p in ps]))
    (t0, g0), *others = runs
    for t1, g1 in others:
        assert t1.dtype == t0.dtype and tuple(t1.shape) == ()
        np.testing.assert_array_equal(_bits(t0), _bits(t1))
        for a, b in zip(g0, g1):
            assert a.dtype == b.dtype
            np.testing.assert_array_equal(_bits(a), _bits(b))


@pytest.mark.parametrize("norm_type", [2.0, 1.0, math.inf, 0.0, 3.0], ids=str)
@pytest.mark.parametrize("dtypes", [[np.float32] * 5, MIXED], ids=["f32", "mixed"])
def test_as_torch(torch, norm_type, dtypes):
    grads = _grads(dtypes, seed=1)[:3] + _grads(dtypes, seed=1)[4:]   # (torch: no empty inf)
    out = []
    for M in (ag, torch):
        ps = _params(M, grads)
        total = M.nn.utils.clip_grad_norm_(ps, 0.7, norm_type)
        out.append((total, [p.grad for p in ps]))
    (ta, ga), (tt, gt) = out
    tol = dict(rtol=2e-6, atol=1e-6)
    np.testing.assert_allclose(ta.numpy(), tt.numpy(), **tol)
    assert ta.numpy().dtype == tt.numpy().dtype
    for a, b in zip(ga, gt):
        np.testing.assert_allclose(a.numpy(), b.numpy(), **tol)


@pytest.mark.parametrize("foreach", [None, False])
@pytest.mark.parametrize("bad", [math.inf, math.nan])
def test_nonfinite(foreach, bad):
    ps = _params(ag, [np.array([1.0, bad, 2.0], np.float32), np.ones(2, np.float32)])
    with pytest.raises(RuntimeError, match="non-finite"):
        ag.nn.utils.clip_grad_norm_(ps, 1.0, error_if_nonfinite=True, foreach=foreach)
    total = ag.nn.utils.clip_grad_norm_(ps, 1.0, foreach=foreach)
    assert math.isinf(total.item()) if bad == math.inf else math.isnan(total.item())


def test_no_gradients_gives_zero():
    p = ag.zeros(3, requires_grad=True)
    for foreach in (None, False):
        total = ag.nn.utils.clip_grad_norm_([p], 1.0, foreach=foreach)
        assert total.item() == 0.0 and tuple(total.shape) == ()
        assert ag.nn.utils.clip_grad_norm_([], 1.0, foreach=foreach).item() == 0.0


@pytest.mark.parametrize("clip", [0.5, 0.0, math.inf])
def test_clip_grad_value_paths_equal_with_mixed_dtypes(clip):
    runs = []
    for foreach in (None, False):
        grads = _grads(MIXED, special=True)
        grads[0][0, 0] = np.nan
        grads[1][0] = -np.inf
        ps = _params(ag, grads)
        ag.nn.utils.clip_grad_value_(ps, clip, foreach=foreach)
        runs.append([p.grad for p in ps])
    for a, b in zip(*runs):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(_bits(a), _bits(b))
