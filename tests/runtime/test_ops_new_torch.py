"""The ops added for real PyTorch model code (einsum, the addmm family, addcmul/addcdiv,
lerp, cumulative ops, hyperbolic and inverse trigonometric functions, logaddexp, cdist,
aotgrad.special): one table of rows `R(name, fn, *specs)`, `fn(M, *inputs)` written once
for M = aotgrad and M = torch.

Each row is checked: gradients against central finite differences in float64 (no torch
needed), float32 in -> float32 out, compiled (interpret backend) == eager, and forward and
gradients against PyTorch in float64 and float32 where torch is installed.
"""
import math
import zlib

import numpy as np
import pytest

import aotgrad as ag
from aotgrad.testing.compare import compare_with_eager
from aotgrad.testing import assert_close


class X:
    """A float input requiring grad. dom: n normal, p (0.5, 2), u (-0.9, 0.9), g (1.2, 3),
    c (0.1, 0.9), z normal with some exact zeros, d distinct values, w wide normal (x 6)."""

    def __init__(self, *shape, dom="n"):
        self.shape, self.dom = shape, dom

    def sample(self, rng):
        n = int(np.prod(self.shape))
        lo_hi = {"p": (0.5, 2.0), "u": (-0.9, 0.9), "g": (1.2, 3.0), "c": (0.1, 0.9)}
        if self.dom in lo_hi:
            v = rng.uniform(*lo_hi[self.dom], n)
        elif self.dom == "d":
            v = (rng.permutation(n) - n / 2) * 0.37 + rng.uniform(-0.05, 0.05, n)
        else:
            v = rng.standard_normal(n) * (6 if self.dom == "w" else 1)
            if self.dom == "z":
                v[rng.permutation(n)[:max(1, n // 5)]] = 0.0
        return v.reshape(self.shape)


class K:
    """A constant float tensor (no grad)."""

    def __init__(self, value):
        self.value = np.asarray(value, dtype=np.float64)

    def sample(self, rng):
        return self.value


def R(name, fn, *specs, grad=True, tol32=2e-5, tol64=1e-9):
    """grad=False: PyTorch has no gradient for the op (ours is still checked against finite
    differences)."""
    return pytest.param(fn, specs, dict(grad=grad, tol32=tol32, tol64=tol64), id=name)


def _inplace(method, *extra):
    def fn(M, a, *rest):
        y = a * 1
        getattr(y, method)(*rest, *extra)
        return y
    return fn


OPS = [
    # ---- einsum ----
    R("einsum_mm", lambda M, a, b: M.einsum("ij,jk->ik", a, b), X(2, 3), X(3, 4)),
    R("einsum_implicit", lambda M, a, b: M.einsum("bA,Ab", a, b), X(2, 3), X(3, 2)),
    R("einsum_batch_ellipsis", lambda M, a, b: M.einsum("...ij,...jk->...ik", a, b),
      X(2, 1, 3, 4), X(5, 4, 2)),
    R("einsum_diag", lambda M, a: M.einsum("ii->i", a), X(3, 3)),
    R("einsum_trace", lambda M, a: M.einsum("ii", a), X(3, 3)),
    R("einsum_repeated_in_three", lambda M, a: M.einsum("iij->j", a), X(3, 3, 2)),
    R("einsum_three_operands", lambda M, a, b, c: M.einsum("abc,cd,db->a", a, b, c),
      X(2, 3, 4), X(4, 5), X(5, 3)),
    R("einsum_batch_kept", lambda M, a, b, c: M.einsum("ijk,ikl,ilm->jm", a, b, c),
      X(2, 3, 4), X(2, 4, 5), X(2, 5, 3)),
    R("einsum_broadcast_size1", lambda M, a, b: M.einsum("ij,jk->ik", a, b), X(2, 1), X(3, 4)),
    R("einsum_outer", lambda M, a, b: M.einsum("i,j->ij", a, b), X(3), X(4)),
    R("einsum_hadamard_transposed", lambda M, a, b: M.einsum("ij,ji->ij", a, b),
      X(2, 3), X(3, 2)),
    R("einsum_sum_ellipsis", lambda M, a: M.einsum("...ij->ij", a), X(4, 2, 3)),
    R("einsum_attention", lambda M, q, k: M.einsum("bhqd,bhkd->bhqk", q, k),
      X(2, 2, 3, 4), X(2, 2, 5, 4)),
    R("einsum_sublist", lambda M, a, b: M.einsum(a, [0, 1], b, [1, 2], [0, 2]),
      X(2, 3), X(3, 4)),
    R("einsum_operand_list", lambda M, a, b: M.einsum("ij,j", [a, b]), X(2, 3), X(3)),
    # ---- addmm family ----
    R("addmm", lambda M, i, a, b: M.addmm(i, a, b), X(4), X(3, 2), X(2, 4)),
    R("addmm_beta_alpha", lambda M, i, a, b: M.addmm(i, a, b, beta=0.5, alpha=-2),
      X(3, 4), X(3, 2), X(2, 4)),
    R("addmm_beta0", lambda M, i, a, b: M.addmm(i, a, b, beta=0), X(3, 1), X(3, 2), X(2, 4)),
    R("addmm_method", lambda M, i, a, b: i.addmm(a, b, alpha=3), X(3, 4), X(3, 2), X(2, 4)),
    R("addmm_", _inplace("addmm_"), X(3, 4), X(3, 2), X(2, 4)),
    R("addmv", lambda M, i, a, v: M.addmv(i, a, v, beta=2), X(3), X(3, 2), X(2)),
    R("addr", lambda M, i, a, b: M.addr(i, a, b, alpha=0.5), X(3, 4), X(3), X(4)),
    R("addbmm", lambda M, i, a, b: M.addbmm(i, a, b, beta=0.5), X(3, 4), X(2, 3, 5),
      X(2, 5, 4)),
    R("baddbmm", lambda M, i, a, b: M.baddbmm(i, a, b, alpha=0.25), X(1, 4), X(2, 3, 5),
      X(2, 5, 4)),
    R("baddbmm_", _inplace("baddbmm_"), X(2, 3, 4), X(2, 3, 5), X(2, 5, 4)),
    R("addcmul", lambda M, i, a, b: M.addcmul(i, a, b, value=0.5), X(3, 1), X(4), X(3, 4)),
    R("addcmul_", _inplace("addcmul_"), X(3, 4), X(3, 4), X(4)),
    R("addcdiv", lambda M, i, a, b: M.addcdiv(i, a, b, value=-2), X(3, 4), X(4), X(3, 4, dom="p")),
    R("addcdiv_", _inplace("addcdiv_"), X(3, 4), X(3, 4), X(3, 4, dom="p")),
    R("lerp_small_weight", lambda M, a, b: M.lerp(a, b, 0.3), X(3, 4), X(4)),
    R("lerp_large_weight", lambda M, a, b: M.lerp(a, b, 0.75), X(3, 4), X(3, 4)),
    R("lerp_tensor_weight", lambda M, a, b, w: M.lerp(a, b, w), X(3, 4), X(3, 4),
      X(3, 4, dom="u")),
    R("lerp_weight_beyond", lambda M, a, b, w: a.lerp(b, w * 2), X(3, 4), X(3, 4),
      X(4, dom="u")),
    R("lerp_", _inplace("lerp_"), X(3, 4), X(3, 4), X(3, 4, dom="c")),
    # ---- cumulative ----
    R("cumprod", lambda M, x: M.cumprod(x, 1), X(3, 7, dom="p")),
    R("cumprod_zeros", lambda M, x: M.cumprod(x, 1), X(4, 9, dom="z")),
    R("cumprod_dim0_zeros", lambda M, x: x.cumprod(0), X(9, 3, dom="z")),
    R("cumprod_", _inplace("cumprod_", 1), X(3, 5, dom="z")),
    R("cummax", lambda M, x: tuple(M.cummax(x, 1)), X(3, 8, dom="d")),
    R("cummin", lambda M, x: tuple(x.cummin(0)), X(8, 3, dom="d")),
    R("logcumsumexp", lambda M, x: M.logcumsumexp(x, 1), X(3, 8, dom="w")),
    R("logcumsumexp_dim0", lambda M, x: x.logcumsumexp(0), X(6, 2)),
    # ---- hyperbolic, inverse trigonometric, logaddexp ----
    R("sinh", lambda M, x: M.sinh(x), X(3, 4)),
    R("cosh", lambda M, x: x.cosh(), X(3, 4)),
    R("asinh", lambda M, x: M.asinh(x), X(3, 4, dom="w")),
    R("acosh", lambda M, x: M.arccosh(x), X(3, 4, dom="g")),
    R("atanh", lambda M, x: M.atanh(x), X(3, 4, dom="u")),
    R("asin", lambda M, x: M.arcsin(x), X(3, 4, dom="u")),
    R("acos", lambda M, x: x.acos(), X(3, 4, dom="u")),
    R("atan", lambda M, x: M.atan(x), X(3, 4, dom="w")),
    R("arctan2", lambda M, y, x: M.arctan2(y, x), X(3, 4), X(4)),
    R("sinh_", _inplace("sinh_"), X(3, 4)),
    R("logaddexp", lambda M, a, b: M.logaddexp(a, b), X(3, 4, dom="w"), X(4, dom="w")),
    R("logaddexp2", lambda M, a, b: M.logaddexp2(a, b), X(3, 4, dom="w"), X(3, 4, dom="w")),
    # ---- cdist ----
    R("cdist_p2", lambda M, a, b: M.cdist(a, b), X(4, 3), X(5, 3)),
    R("cdist_p2_mm", lambda M, a, b: M.cdist(a, b), X(30, 3), X(4, 3), tol32=1e-4),
    R("cdist_p2_mm_forced", lambda M, a, b: M.cdist(a, b, compute_mode="use_mm_for_euclid_dist"),
      X(2, 4, 3), X(2, 5, 3), tol32=1e-4),
    R("cdist_p1_batch", lambda M, a, b: M.cdist(a, b, p=1), X(2, 4, 3), X(1, 5, 3)),
    R("cdist_p3", lambda M, a, b: M.cdist(a, b, p=3), X(4, 3), X(5, 3)),
    R("cdist_pinf", lambda M, a, b: M.cdist(a, b, p=math.inf), X(4, 3), X(5, 3)),
    # ---- special ----
    R("erfc", lambda M, x: M.special.erfc(x), X(3, 4, dom="w")),
    R("erfcx", lambda M, x: M.special.erfcx(x * 2), X(3, 4)),
    R("erfcx_asymptotic", lambda M, x: M.special.erfcx(x * 4 + 14), X(3, 4, dom="p")),
    R("erfinv", lambda M, x: M.special.erfinv(x), X(3, 4, dom="u")),
    R("erfinv_method", lambda M, x: x.erfinv(), X(3, 4, dom="u")),
    R("gammaln", lambda M, x: M.special.gammaln(x), X(3, 4, dom="w")),
    R("lgamma_method", lambda M, x: x.lgamma(), X(3, 4, dom="p")),
    R("digamma", lambda M, x: M.special.digamma(x), X(3, 4, dom="w"), tol64=1e-7),
    R("psi", lambda M, x: M.special.psi(x), X(3, 4, dom="p"), tol64=1e-7),
    R("polygamma1", lambda M, x: M.special.polygamma(1, x), X(3, 4, dom="p"), tol64=1e-7),
    R("polygamma2_method", lambda M, x: x.polygamma(2), X(3, 4, dom="g"), tol64=1e-7),
    R("expit", lambda M, x: M.special.expit(x), X(3, 4)),
    R("logit", lambda M, x: M.special.logit(x), X(3, 4, dom="c")),
    R("logit_eps", lambda M, x: M.logit(x * 1.2 - 0.1, eps=0.05), X(3, 4, dom="c")),
    R("xlogy", lambda M, a, b: M.special.xlogy(a, b), X(3, 4), X(4, dom="p")),
    R("xlogy_top", lambda M, a, b: M.xlogy(a, b), X(3, 4), X(3, 4, dom="p")),
    R("xlog1py", lambda M, a, b: M.special.xlog1py(a, b), X(3, 4), X(3, 4, dom="u")),
    R("ndtr", lambda M, x: M.special.ndtr(x), X(3, 4, dom="w")),
    R("log_ndtr", lambda M, x: M.special.log_ndtr(x * 5), X(3, 4, dom="w"), tol32=1e-3),
    R("ndtri", lambda M, x: M.special.ndtri(x * 0.5 + 0.5), X(3, 4, dom="u")),
    R("i0", lambda M, x: M.special.i0(x), X(3, 4, dom="w")),
    R("i0_method", lambda M, x: x.i0(), X(3, 4)),
    R("i0e", lambda M, x: M.special.i0e(x), X(3, 4, dom="w")),
    R("i1", lambda M, x: M.special.i1(x * 3), X(3, 4)),
    R("i1e", lambda M, x: M.special.i1e(x * 5), X(3, 4, dom="w")),
    R("multigammaln", lambda M, x: M.special.multigammaln(x + 1, 3), X(3, 4, dom="p")),
    R("mvlgamma_method", lambda M, x: x.mvlgamma(2) + M.mvlgamma(x, 1), X(3, 4, dom="g")),
    R("modified_bessel_i0_i1",
      lambda M, x: M.special.modified_bessel_i0(x) * M.special.modified_bessel_i1(x), X(3, 4),
      grad=False),
    R("sinc", lambda M, x: M.special.sinc(x), X(3, 4, dom="w")),
    R("entr", lambda M, x: M.special.entr(x), X(3, 4, dom="p")),
    R("special_softmax", lambda M, x: M.special.softmax(x, 1), X(3, 4)),
    R("special_log_softmax", lambda M, x: M.special.log_softmax(x, 0), X(3, 4)),
    R("special_logsumexp", lambda M, x: M.special.logsumexp(x, 1), X(3, 4)),
    R("special_exp2_expm1_log1p",
      lambda M, x: M.special.exp2(x) + M.special.expm1(x) + M.special.log1p(x * x),
      X(3, 4)),
]


def _rng(request):
    return np.random.default_rng(zlib.crc32(request.node.callspec.id.encode()))


def _make(M, specs, arrays, dtype):
    out = []
    for s, a in zip(specs, arrays):
        t = M.tensor(a, dtype=dtype)
        if isinstance(s, X):
            t.requires_grad_(True)
        out.append(t)
    return out


def _outs(r):
    return list(r) if isinstance(r, (tuple, list)) else [r]


def _np(t):
    return t.detach().numpy() if hasattr(t, "detach") else np.asarray(t)


def _run(M, fn, specs, arrays, dtype, cots, grad=True):
    ins = _make(M, specs, arrays, dtype)
    if not grad:
        for t in ins:
            t.requires_grad_(False)
    outs = _outs(fn(M, *ins))
    fouts = [o for o in outs if o.dtype.is_floating_point]
    diff = [t for t, s in zip(ins, specs) if isinstance(s, X) and grad]
    if not fouts or not diff:
        return outs, []
    loss = sum((o * M.tensor(c, dtype=o.dtype)).sum() for o, c in zip(fouts, cots))
    gs = M.autograd.grad(loss, diff, allow_unused=True)
    return outs, [np.zeros(t.shape, _np(t).dtype) if g is None else _np(g)
                  for g, t in zip(gs, diff)]


def _setup(request, fn, specs):
    rng = _rng(request)
    arrays = [s.sample(rng) for s in specs]
    with ag.no_grad():
        outs = _outs(fn(ag, *_make(ag, specs, arrays, ag.float64)))
    cots = [rng.standard_normal(tuple(o.shape)) for o in outs if o.dtype.is_floating_point]
    return arrays, cots


@pytest.mark.parametrize("fn,specs,opts", OPS)
def test_grad_vs_finite_differences(request, fn, specs, opts):
    arrays, cots = _setup(request, fn, specs)
    _, grads = _run(ag, fn, specs, arrays, ag.float64, cots)

    def loss(arrs):
        with ag.no_grad():
            outs = _outs(fn(ag, *_make(ag, specs, arrs, ag.float64)))
        fl = [o for o in outs if o.dtype.is_floating_point]
        return sum(float((_np(o) * c).sum()) for o, c in zip(fl, cots))

    k, eps = 0, 1e-6
    for i, (s, a) in enumerate(zip(specs, arrays)):
        if not isinstance(s, X):
            continue
        fd = np.zeros(a.shape)
        for j in range(a.size):
            ap, am = a.copy(), a.copy()
            ap.flat[j] += eps
            am.flat[j] -= eps
            fd.flat[j] = (loss(arrays[:i] + [ap] + arrays[i + 1:]) -
                          loss(arrays[:i] + [am] + arrays[i + 1:])) / (2 * eps)
        assert_close(grads[k], fd, rtol=1e-5, atol=1e-6, equal_nan=True,
                     msg=f"gradient of input {k}")
        k += 1


@pytest.mark.parametrize("fn,specs,opts", OPS)
def test_float32_stays_float32(request, fn, specs, opts):
    arrays, cots = _setup(request, fn, specs)
    outs, grads = _run(ag, fn, specs, arrays, ag.float32, cots)
    for o in outs:
        assert o.dtype in (ag.float32, ag.int64), o.dtype
        assert _np(o).dtype == o.dtype.np
    for g in grads:
        assert g.dtype == np.float32


@pytest.mark.parametrize("fn,specs,opts", OPS)
def test_compiled_matches_eager(request, fn, specs, opts):
    arrays, _ = _setup(request, fn, specs)
    ins = _make(ag, specs, arrays, ag.float64)
    compare_with_eager(lambda *a: fn(ag, *a), *ins, backend="interpret")


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("fn,specs,opts", OPS)
def test_forward_and_grad_vs_torch(request, torch, fn, specs, opts, dtype):
    arrays, cots = _setup(request, fn, specs)
    outs, grads = _run(ag, fn, specs, arrays, getattr(ag, dtype), cots, opts["grad"])
    touts, tgrads = _run(torch, fn, specs, arrays, getattr(torch, dtype), cots, opts["grad"])
    tol = opts["tol64"] if dtype == "float64" else opts["tol32"]
    assert len(outs) == len(touts)
    for o, to in zip(outs, touts):
        assert tuple(o.shape) == tuple(to.shape)
        assert o.dtype.name == str(to.dtype).replace("torch.", "")
        assert_close(_np(o), _np(to), rtol=tol, atol=tol, equal_nan=True)
    for g, tg in zip(grads, tgrads):
        assert_close(g, tg, rtol=tol, atol=tol, equal_nan=True)
