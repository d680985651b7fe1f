"""One derivative (VJP) rule per linalg prim (ir/linalg_prims.py), written with tensor ops so
that the compiled backward records them and they are differentiable again.

A factorisation's prims are one per result; each rule is the factorisation's VJP with the
other results' cotangents zero (the VJP is linear in them, so uses of several results add
up to the joint rule). Rules recompute the other results with the same prims (same flags,
so the same signs) from the saved input. The formulas are the standard ones (as PyTorch's):
- inv: -P^T g P^T;  solve X = A^-1 B: gB = A^-T g, gA = -gB X^T
- det: g det A^-T;  log|det|: g A^-T
- cholesky A = L L^T: S = L^-T Phi(L^T gL) L^-1 (Phi: lower triangle, half diagonal), the
  symmetric part of S
- qr (rows >= cols): M = R gR^T - gQ^T Q, gA = (gQ + Q copyltu(M)) R^-T; wide matrices
  through their leading square block
- eigh: gA = V (diag(gL) + (V^T gV) / (L_j - L_i)) V^T, its symmetric part
- svd: gA = U [skew(U^T gU) / E S + S skew(V^T gV) / E + diag(gS)] V^T plus the parts
  outside U's and V's columns, E_ij = S_j^2 - S_i^2
- pinv P: -P^T g P^T + (I - A P) g^T P P^T + P^T P g^T (I - P A)
"""
from aotgrad.ir import dtypes as dt
from aotgrad.ir import linalg_prims as LP
from aotgrad.runtime import tprims as tp
from aotgrad.runtime.derivatives import defvjp
from aotgrad.runtime.diag_ops import diag_embed, diagonal, tril
from aotgrad.runtime.elementwise_ops import add, div, mul, neg, sub, where
from aotgrad.runtime.join_ops import cat, narrow
from aotgrad.runtime.linalg_ops import matmul
from aotgrad.runtime.view_ops import transpose, unsqueeze
from aotgrad.runtime.factories import eye


def mT(x):  # noqa: N802  (PyTorch's name)
    return transpose(x, -2, -1)


def _eye_like(x, n):
    return eye(n, dtype=x.dtype)


def _solve(a, b):
    return tp.linalg_solve(a, b)


def _right_solve(x, r):
    """x R^-1 for square R: (R^-T x^T)^T."""
    return mT(_solve(mT(r), mT(x)))


def _inv_t(a):
    return mT(tp.linalg_inv(a))


@defvjp(LP.linalg_inv, save=("out",))
def _(ctx, g):
    p, = ctx.saved_tensors
    pt = mT(p)
    return (neg(matmul(matmul(pt, g), pt)),)


@defvjp(LP.linalg_solve, save=(0, "out"))
def _(ctx, g):
    a, x = ctx.saved_tensors
    gb = _solve(mT(a), g)
    ga = neg(matmul(gb, mT(x))) if ctx.needs_input_grad[0] else None
    return ga, gb


@defvjp(LP.linalg_det, save=(0, "out"))
def _(ctx, g):
    a, d = ctx.saved_tensors
    return (mul(unsqueeze(unsqueeze(mul(g, d), -1), -1), _inv_t(a)),)


@defvjp(LP.linalg_logabsdet, save=(0,))
def _(ctx, g):
    a, = ctx.saved_tensors
    return (mul(unsqueeze(unsqueeze(g, -1), -1), _inv_t(a)),)


def _phi(x):
    """The lower triangle with the diagonal halved."""
    return sub(tril(x), mul(diag_embed(diagonal(x, 0, -2, -1)), 0.5))


@defvjp(LP.linalg_cholesky, save=("out",))
def _(ctx, g):
    lo, = ctx.saved_tensors
    p = _phi(matmul(mT(lo), g))
    s = _right_solve(_solve(mT(lo), p), lo)        # L^-T P L^-1
    return (mul(add(s, mT(s)), 0.5),)


# ---- qr ------------------------------------------------------------------------------------
def _copyltu(m):
    """The symmetric matrix with m's lower triangle (diagonal included)."""
    low = tril(m, -1)
    return add(add(low, mT(low)), diag_embed(diagonal(m, 0, -2, -1)))


def _qr_tall(q, r, gq, gr):
    """gA for A = QR with rows >= cols (R square); gq or gr may be None (zero)."""
    m = None
    if gr is not None:
        m = matmul(r, mT(gr))
    if gq is not None:
        t = matmul(mT(gq), q)
        m = neg(t) if m is None else sub(m, t)
    b = matmul(q, _copyltu(m))
    if gq is not None:
        b = add(gq, b)
    return _right_solve(b, mT(r))                 # b R^-T


def _qr_rule(which):
    def rule(ctx, g):
        a, = ctx.saved_tensors
        complete = ctx.params["complete"]
        rows, cols = a.shape[-2:]
        if complete and rows > cols:
            raise RuntimeError("The derivative of linalg.qr is not implemented when "
                               "mode='complete' and nrows > ncols.")
        q, r = tp.linalg_qr_q(a, complete=complete), tp.linalg_qr_r(a, complete=complete)
        gq, gr = (g, None) if which == "q" else (None, g)
        if rows >= cols:
            return (_qr_tall(q, r, gq, gr),)
        # wide: A = [X | Y], X = Q U (square), R = [U | V] with V = Q^T Y
        y = narrow(a, -1, rows, cols - rows)
        u = narrow(r, -1, 0, rows)
        gu = gv = None
        if gr is not None:
            gu, gv = narrow(gr, -1, 0, rows), narrow(gr, -1, rows, cols - rows)
            extra = matmul(y, mT(gv))
            gq = extra if gq is None else add(gq, extra)
        gx = _qr_tall(q, u, gq, gu)
        gy = matmul(q, gv) if gv is not None else tp.zeros(tuple(y.shape), y.dtype)
        return (cat([gx, gy], -1),)
    return rule


defvjp(LP.linalg_qr_q, save=(0,))(_qr_rule("q"))
defvjp(LP.linalg_qr_r, save=(0,))(_qr_rule("r"))


# ---- eigh ----------------------------------------------------------------------------------
@defvjp(LP.linalg_eigvalsh, save=(0,))
def _(ctx, g):
    a, = ctx.saved_tensors
    v = tp.linalg_eigh_vectors(a, upper=ctx.params["upper"])
    return (matmul(mul(v, unsqueeze(g, -2)), mT(v)),)


def _off_diagonal_inverse(e):
    """1 / e off the diagonal, 0 on it (e is zero there)."""
    n = e.shape[-1]
    on_diag = tp.broadcast_to(_eye_bool(n), tuple(e.shape))
    return where(on_diag, 0.0, div(1.0, where(on_diag, 1.0, e)))


def _eye_bool(n):
    return tp.convert_element_type(eye(n, dtype=dt.float32), dtype=dt.bool_)


@defvjp(LP.linalg_eigh_vectors, save=(0, "out"))
def _(ctx, g):
    a, v = ctx.saved_tensors
    lam = tp.linalg_eigvalsh(a, upper=ctx.params["upper"])
    e = sub(unsqueeze(lam, -2), unsqueeze(lam, -1))       # e_ij = l_j - l_i
    inner = mul(matmul(mT(v), g), _off_diagonal_inverse(e))
    ga = matmul(matmul(v, inner), mT(v))
    return (mul(add(ga, mT(ga)), 0.5),)         # symmetric, as PyTorch's


# ---- svd -----------------------------------------------------------------------------------
def _svd_parts(a, full):
    """U and Vh cut to k = min(m, n) columns / rows, as the forward computed them, and S."""
    m, n = a.shape[-2:]
    k = min(m, n)
    u = tp.linalg_svd_u(a, full_matrices=full)
    vh = tp.linalg_svd_vh(a, full_matrices=full)
    if full:
        u, vh = narrow(u, -1, 0, k), narrow(vh, -2, 0, k)
    return u, tp.linalg_svdvals(a), vh


def _skew(x):
    return sub(x, mT(x))


def _inv_gap(s):
    s2 = mul(s, s)
    return _off_diagonal_inverse(sub(unsqueeze(s2, -2), unsqueeze(s2, -1)))  # S_j^2 - S_i^2


@defvjp(LP.linalg_svdvals, save=(0,))
def _(ctx, g):
    a, = ctx.saved_tensors
    u, _, vh = _svd_parts(a, False)
    return (matmul(mul(u, unsqueeze(g, -2)), vh),)


@defvjp(LP.linalg_svd_u, save=(0,))
def _(ctx, g):
    a, = ctx.saved_tensors
    full = ctx.params["full_matrices"]
    u, s, vh = _svd_parts(a, full)
    k = s.shape[-1]
    if full:  # the columns past k are not determined by A: their cotangent is dropped
        g = narrow(g, -1, 0, k)
    utg = matmul(mT(u), g)
    inner = mul(mul(_skew(utg), _inv_gap(s)), unsqueeze(s, -2))
    ga = matmul(matmul(u, inner), vh)
    if a.shape[-2] > k:  # (I - U U^T) gU S^-1 V^T
        ga = add(ga, matmul(div(sub(g, matmul(u, utg)), unsqueeze(s, -2)), vh))
    return (ga,)


@defvjp(LP.linalg_svd_vh, save=(0,))
def _(ctx, g):
    a, = ctx.saved_tensors
    full = ctx.params["full_matrices"]
    u, s, vh = _svd_parts(a, full)
    k = s.shape[-1]
    if full:
        g = narrow(g, -2, 0, k)
    vtgv = matmul(vh, mT(g))                     # V^T gV with gV = gVh^T
    inner = mul(unsqueeze(s, -1), mul(_skew(vtgv), _inv_gap(s)))
    ga = matmul(matmul(u, inner), vh)
    if a.shape[-1] > k:  # U S^-1 gVh (I - V V^T)
        ga = add(ga, matmul(u, div(sub(g, matmul(mT(vtgv), vh)), unsqueeze(s, -1))))
    return (ga,)


# ---- pinv ----------------------------------------------------------------------------------
@defvjp(LP.linalg_pinv, save=(0, "out"))
def _(ctx, g):
    a, p = ctx.saved_tensors
    m, n = a.shape[-2:]
    pt, gt = mT(p), mT(g)
    ga = neg(matmul(matmul(pt, g), pt))
    left = sub(_eye_like(a, m), matmul(a, p))            # I - A P   (m x m)
    right = sub(_eye_like(a, n), matmul(p, a))           # I - P A   (n x n)
    ga = add(ga, matmul(matmul(matmul(left, gt), p), pt))
    ga = add(ga, matmul(matmul(matmul(pt, p), gt), right))
    return (ga,)

