"""One derivative (VJP) rule per primitive, written with tensor ops.

The eager engine runs these on concrete tensors; the tracer runs the *same* rules on traced
tensors to derive the backward graph ahead of time. A rule is `fn(ctx, g) -> grads`, one
entry per prim input (None where not differentiable); `ctx.saved_tensors` holds what the
rule declared with `save` (input positions, and "out" for the prim's output). `save_if` makes
saving an input conditional, `{i: (j, ...)}`: input i is saved only when one of inputs j needs
a gradient, else its entry in `ctx.saved_tensors` is None (as PyTorch saves mul's `other`
only when `self` requires grad); the key "out" does the same for the output.
"""
import math

from aotgrad.ir import dtypes as dt
from aotgrad.ir import prims as P
from aotgrad.ir.core import PRIMS, Prim
from aotgrad.ir.prims import dot_dims
from aotgrad.ir.tags import Tag
from aotgrad.runtime import tprims as tp
from aotgrad.runtime.dispatch import VJP
from aotgrad.runtime.grad_fn_names import prim_node_name

class Rule:
    __slots__ = ("fn", "save_inputs", "save_output", "save_if", "node_name")

    def __init__(self, prim, fn, save_inputs, save_output, save_if=None):
        self.fn, self.save_inputs, self.save_output = fn, save_inputs, save_output
        self.save_if = save_if
        self.node_name = prim_node_name(prim)


def defvjp(prim, save=(), save_if=None):
    """Register the rule for `prim` (the Prim object, the table's key); `save` lists input
    positions and/or "out"; `save_if` maps a saved input position to the inputs whose
    gradient needs it."""
    if not isinstance(prim, Prim):
        raise TypeError(f"defvjp: expected a Prim (aotgrad.ir.prims.<name>), got {prim!r}")
    if prim in VJP:
        raise ValueError(f"defvjp: prims.{prim.name} already has a derivative rule")

    def deco(fn):
        VJP[prim] = Rule(prim, fn, tuple(i for i in save if i != "out"), "out" in save,
                         save_if)
        return fn
    return deco


def _zeros_like(t):
    return tp.zeros(t.shape, t.dtype)


def _c(v, like):
    return tp.constant(v, like.dtype)


def _bc(c, like):
    return tp.broadcast_to(c, like.shape)


# ---- unary pointwise -----------------------------------------------------------------------
@defvjp(P.neg)
def _(ctx, g):
    return (tp.neg(g),)


@defvjp(P.abs, save=(0,))
def _(ctx, g):
    x, = ctx.saved_tensors
    return (tp.mul(g, tp.sign_nan0(x)),)


@defvjp(P.exp, save=("out",))
def _(ctx, g):
    out, = ctx.saved_tensors
    return (tp.mul(g, out),)


@defvjp(P.log, save=(0,))
def _(ctx, g):
    x, = ctx.saved_tensors
    return (tp.div(g, x),)


@defvjp(P.log1p, save=(0,))
def _(ctx, g):
    x, = ctx.saved_tensors
    return (tp.div(g, tp.add(x, _bc(_c(1, x), x))),)


@defvjp(P.expm1, save=("out",))
def _(ctx, g):
    out, = ctx.saved_tensors
    return (tp.mul(g, tp.add(out, _bc(_c(1, out), out))),)


@defvjp(P.sqrt, save=("out",))
def _(ctx, g):
    out, = ctx.saved_tensors
    return (tp.div(g, tp.mul(out, _bc(_c(2, out), out))),)


@defvjp(P.rsqrt, save=("out",))
def _(ctx, g):
    out, = ctx.saved_tensors  # d/dx x^-1/2 = -1/2 x^-3/2 = -1/2 out^3
    cube = tp.mul(tp.mul(out, out), out)
    return (tp.mul(g, tp.mul(cube, _bc(_c(-0.5, out), out))),)


@defvjp(P.sin, save=(0,))
def _(ctx, g):
    x, = ctx.saved_tensors
    return (tp.mul(g, tp.cos(x)),)


@defvjp(P.cos, save=(0,))
def _(ctx, g):
    x, = ctx.saved_tensors
    return (tp.neg(tp.mul(g, tp.sin(x))),)


@defvjp(P.tanh, save=("out",))
def _(ctx, g):
    out, = ctx.saved_tensors
    return (tp.mul(g, tp.sub(_bc(_c(1, out), out), tp.mul(out, out))),)


@defvjp(P.logistic, save=("out",))
def _(ctx, g):
    out, = ctx.saved_tensors
    return (tp.mul(g, tp.mul(out, tp.sub(_bc(_c(1, out), out), out))),)


@defvjp(P.erf, save=(0,))
def _(ctx, g):
    x, = ctx.saved_tensors
    dens = tp.exp(tp.neg(tp.mul(x, x)))
    return (tp.mul(g, tp.mul(dens, _bc(_c(2 / math.sqrt(math.pi), x), x))),)


@defvjp(P.sinh, save=(0,))
def _(ctx, g):
    x, = ctx.saved_tensors
    return (tp.mul(g, tp.cosh(x)),)


@defvjp(P.cosh, save=(0,))
def _(ctx, g):
    x, = ctx.saved_tensors
    return (tp.mul(g, tp.sinh(x)),)


def _x2_plus(x, c):
    """x * x + c (c = -1 or 1); PyTorch's derivatives of asin/acos/asinh/acosh/atanh."""
    return tp.add(tp.mul(x, x), _bc(_c(c, x), x))


@defvjp(P.asinh, save=(0,))
def _(ctx, g):
    x, = ctx.saved_tensors
    return (tp.mul(g, tp.rsqrt(_x2_plus(x, 1))),)


@defvjp(P.acosh, save=(0,))
def _(ctx, g):
    x, = ctx.saved_tensors
    return (tp.mul(g, tp.rsqrt(_x2_plus(x, -1))),)


@defvjp(P.atanh, save=(0,))
def _(ctx, g):
    x, = ctx.saved_tensors
    return (tp.div(g, tp.sub(_bc(_c(1, x), x), tp.mul(x, x))),)


@defvjp(P.asin, save=(0,))
def _(ctx, g):
    x, = ctx.saved_tensors
    return (tp.mul(g, tp.rsqrt(tp.sub(_bc(_c(1, x), x), tp.mul(x, x)))),)


@defvjp(P.acos, save=(0,))
def _(ctx, g):
    x, = ctx.saved_tensors
    return (tp.neg(tp.mul(g, tp.rsqrt(tp.sub(_bc(_c(1, x), x), tp.mul(x, x))))),)


@defvjp(P.erfc, save=(0,))
def _(ctx, g):
    x, = ctx.saved_tensors
    dens = tp.exp(tp.neg(tp.mul(x, x)))
    return (tp.mul(g, tp.mul(dens, _bc(_c(-2 / math.sqrt(math.pi), x), x))),)


@defvjp(P.erfcx, save=(0, "out"))
def _(ctx, g):
    x, out = ctx.saved_tensors  # (exp(x^2) erfc(x))' = 2 x erfcx(x) - 2 / sqrt(pi)
    d = tp.sub(tp.mul(tp.mul(x, out), _bc(_c(2, x), x)), _bc(_c(2 / math.sqrt(math.pi), x), x))
    return (tp.mul(g, d),)


@defvjp(P.erfinv, save=("out",))
def _(ctx, g):
    out, = ctx.saved_tensors  # d/dx erfinv(x) = sqrt(pi) / 2 * exp(erfinv(x)^2)
    return (tp.mul(g, tp.mul(tp.exp(tp.mul(out, out)),
                             _bc(_c(math.sqrt(math.pi) / 2, out), out))),)


@defvjp(P.ndtri, save=("out",))
def _(ctx, g):
    out, = ctx.saved_tensors  # 1 / pdf(ndtri(p))
    return (tp.mul(g, tp.mul(tp.exp(tp.mul(tp.mul(out, out), _bc(_c(0.5, out), out))),
                             _bc(_c(math.sqrt(2 * math.pi), out), out))),)


@defvjp(P.i0e, save=(0, "out"))
def _(ctx, g):
    x, out = ctx.saved_tensors  # (exp(-|x|) I0)' = exp(-|x|) (I1 - sign(x) I0)
    return (tp.mul(g, tp.sub(tp.i1e(x), tp.mul(tp.sign_nan0(x), out))),)


@defvjp(P.i1e, save=(0, "out"))
def _(ctx, g):
    """(exp(-|x|) I1)' = exp(-|x|) (I0 - I1 / x - sign(x) I1), and 1/2 at x = 0."""
    x, out = ctx.saved_tensors
    zero, one = _zeros_like(x), _bc(_c(1, x), x)
    at0 = tp.eq(x, zero)
    ratio = tp.where(at0, _bc(_c(0.5, x), x), tp.div(out, tp.where(at0, one, x)))
    d = tp.sub(tp.sub(tp.i0e(x), ratio), tp.mul(tp.sign_nan0(x), out))
    return (tp.mul(g, d),)


@defvjp(P.lgamma, save=(0,))
def _(ctx, g):
    x, = ctx.saved_tensors
    return (tp.mul(g, tp.polygamma(x, n=0)),)


@defvjp(P.polygamma, save=(0,))
def _(ctx, g):
    x, = ctx.saved_tensors
    return (tp.mul(g, tp.polygamma(x, n=ctx.params["n"] + 1)),)


@defvjp(P.reciprocal, save=("out",))
def _(ctx, g):
    out, = ctx.saved_tensors
    return (tp.neg(tp.mul(g, tp.mul(out, out))),)


for _p in (P.sign, P.floor, P.ceil):  # piecewise constant: zero gradient, as in PyTorch
    defvjp(_p)(lambda ctx, g: (_zeros_like(g),))


# ---- binary pointwise ----------------------------------------------------------------------
@defvjp(P.add)
def _(ctx, g):
    return g, g


@defvjp(P.sub)
def _(ctx, g):
    return g, (tp.neg(g) if ctx.needs_input_grad[1] else None)


@defvjp(P.mul, save=(0, 1), save_if={0: (1,), 1: (0,)})
def _(ctx, g):
    x, y = ctx.saved_tensors
    return (tp.mul(g, y) if ctx.needs_input_grad[0] else None,
            tp.mul(g, x) if ctx.needs_input_grad[1] else None)


@defvjp(P.div, save=(0, 1), save_if={0: (1,)})  # a / 3 saves no a (PyTorch)
def _(ctx, g):
    x, y = ctx.saved_tensors
    gx = tp.div(g, y)
    gy = tp.neg(tp.div(tp.mul(gx, x), y)) if ctx.needs_input_grad[1] else None
    return (gx if ctx.needs_input_grad[0] else None), gy


@defvjp(P.pow, save=(0, 1, "out"), save_if={"out": (1,)})  # x ** 3 saves only x (PyTorch)
def _(ctx, g):
    x, y, out = ctx.saved_tensors
    zero = _bc(_c(0, x), x)
    one = _bc(_c(1, x), x)
    gx = gy = None
    # the masked-off branches are computed at x = 1, not at the point that gives inf or NaN:
    # differentiating the rule again (double backward, forward mode) multiplies each branch
    # by its zero cotangent, and 0 * inf would be NaN
    if ctx.needs_input_grad[0]:  # y * x^(y-1), and 0 where y == 0 (PyTorch)
        y_zero = tp.eq(y, zero)
        d = tp.mul(y, tp.pow(tp.where(y_zero, one, x), tp.sub(y, _bc(_c(1, y), y))))
        gx = tp.where(y_zero, zero, tp.mul(g, d))
    if ctx.needs_input_grad[1]:  # out * log(x), and 0 where x == 0 and y >= 0 (PyTorch)
        x_zero = tp.logical_and(tp.eq(x, zero), tp.ge(y, zero))
        d = tp.mul(g, tp.mul(out, tp.log(tp.where(x_zero, one, x))))
        gy = tp.where(x_zero, zero, d)
    return gx, gy


def _minmax_vjp(ctx, g):
    """PyTorch: the larger (smaller) input takes the gradient; ties split it in half; an
    input loses it only where the other one strictly wins, so with a NaN both take it."""
    x, y = ctx.saved_tensors
    zero, half = _bc(_c(0, g), g), _bc(_c(0.5, g), g)
    gt = tp.where(tp.eq(x, y), tp.mul(g, half), g)
    x_wins, y_wins = (tp.gt(x, y), tp.lt(x, y)) if ctx.prim is P.maximum else \
        (tp.lt(x, y), tp.gt(x, y))
    gx = tp.where(y_wins, zero, gt) if ctx.needs_input_grad[0] else None
    gy = tp.where(x_wins, zero, gt) if ctx.needs_input_grad[1] else None
    return gx, gy


defvjp(P.maximum, save=(0, 1))(_minmax_vjp)
defvjp(P.minimum, save=(0, 1))(_minmax_vjp)


@defvjp(P.atan2, save=(0, 1))
def _(ctx, g):
    """g * x / (x^2 + y^2), -g * y / (x^2 + y^2), and 0 at (0, 0) (PyTorch)."""
    y, x = ctx.saved_tensors
    den = tp.add(tp.mul(x, x), tp.mul(y, y))
    zero = _zeros_like(den)
    recip = tp.where(tp.eq(den, zero), zero, tp.reciprocal(den))
    return tp.mul(tp.mul(g, x), recip), tp.mul(tp.neg(tp.mul(g, y)), recip)


@defvjp(P.fmod, save=(0, 1), save_if={0: (1,), 1: (1,)})
def _(ctx, g):
    """g for a, and -trunc(a / b) g for b (PyTorch's, with the quotient rounded)."""
    x, y = ctx.saved_tensors
    gy = None
    if ctx.needs_input_grad[1]:
        q = tp.div(x, y)
        q = tp.where(tp.lt(q, _zeros_like(q)), tp.ceil(q), tp.floor(q))
        gy = tp.neg(tp.mul(g, q))
    return (g if ctx.needs_input_grad[0] else None), gy


@defvjp(P.where, save=(0,))
def _(ctx, g):
    pred, = ctx.saved_tensors
    zero = _zeros_like(g)
    return (None, tp.where(pred, g, zero) if ctx.needs_input_grad[1] else None,
            tp.where(pred, zero, g) if ctx.needs_input_grad[2] else None)


@defvjp(P.convert_element_type)
def _(ctx, g):
    src = ctx._in_avals[0].dtype
    if not src.is_floating_point:
        return (None,)
    return (tp.convert_element_type(g, dtype=src),)


# ---- shape ---------------------------------------------------------------------------------
@defvjp(P.broadcast_in_dim)
def _(ctx, g):
    in_shape = ctx._in_avals[0].shape
    dims = ctx.params["dims"]
    summed = [d for d in range(g.ndim) if d not in dims] + \
        [d for i, d in enumerate(dims) if in_shape[i] == 1 and g.shape[d] != 1]
    r = tp.reduce_sum(g, dims=tuple(sorted(summed))) if summed else g
    return (tp.reshape(r, shape=in_shape) if tuple(r.shape) != in_shape else r,)


@defvjp(P.reshape)
def _(ctx, g):
    return (tp.reshape(g, shape=ctx._in_avals[0].shape),)


@defvjp(P.transpose)
def _(ctx, g):
    perm = ctx.params["perm"]
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return (tp.transpose(g, perm=tuple(inv)),)


@defvjp(P.slice)
def _(ctx, g):
    shape, p = ctx._in_avals[0].shape, ctx.params
    strides = p.get("strides") or (1,) * len(shape)
    if 0 in g.shape:
        return (tp.zeros(shape, g.dtype),)
    config = tuple((s, n - (s + (m - 1) * st + 1), st - 1)
                   for s, st, n, m in zip(p["start"], strides, shape, g.shape))
    return (tp.pad(g, config=config, value=0.0),)


@defvjp(P.pad)
def _(ctx, g):
    config = ctx.params["config"]
    return (tp.slice(g, start=tuple(lo for lo, _, _ in config),
                     limit=tuple(g.shape[i] - hi for i, (_, hi, _) in enumerate(config)),
                     strides=tuple(it + 1 for _, _, it in config)),)


@defvjp(P.concatenate)
def _(ctx, g):
    dim, out, off = ctx.params["dim"], [], 0
    for a in ctx._in_avals:
        start = [0] * g.ndim
        limit = list(g.shape)
        start[dim], limit[dim] = off, off + a.shape[dim]
        off += a.shape[dim]
        out.append(tp.slice(g, start=tuple(start), limit=tuple(limit)))
    return tuple(out)


@defvjp(P.rev)
def _(ctx, g):
    return (tp.rev(g, dims=ctx.params["dims"]),)


# ---- reductions ----------------------------------------------------------------------------
def _unreduce(g, shape, dims):
    kept = tuple(d for d in range(len(shape)) if d not in dims)
    return tp.broadcast_in_dim(g, shape=tuple(shape), dims=kept)


@defvjp(P.reduce_sum)
def _(ctx, g):
    return (_unreduce(g, ctx._in_avals[0].shape, ctx.params["dims"]),)


def _amax_vjp(ctx, g):
    """Gradient split evenly among the elements equal to the max (PyTorch's amax/amin)."""
    x, out = ctx.saved_tensors
    dims, shape = ctx.params["dims"], x.shape
    mask = tp.convert_element_type(tp.eq(x, _unreduce(out, shape, dims)), dtype=g.dtype)
    count = tp.reduce_sum(mask, dims=dims)
    return (tp.mul(_unreduce(tp.div(g, count), shape, dims), mask),)


defvjp(P.reduce_max, save=(0, "out"))(_amax_vjp)
defvjp(P.reduce_min, save=(0, "out"))(_amax_vjp)


@defvjp(P.reduce_prod, save=(0, "out"))
def _(ctx, g):
    """d prod / dx_i = prod of the others, computed without dividing by zero."""
    x, out = ctx.saved_tensors
    dims, shape = ctx.params["dims"], x.shape
    zero, one = _bc(_c(0, x), x), _bc(_c(1, x), x)
    is_zero = tp.eq(x, zero)
    nzeros = tp.reduce_sum(tp.convert_element_type(is_zero, dtype=x.dtype), dims=dims)
    prod_nonzero = tp.reduce_prod(tp.where(is_zero, one, x), dims=dims)
    nz_b = _unreduce(nzeros, shape, dims)
    no_zero = tp.div(_unreduce(out, shape, dims), tp.where(is_zero, one, x))
    one_zero = tp.where(tp.logical_and(is_zero, tp.eq(nz_b, one)),
                        _unreduce(prod_nonzero, shape, dims), zero)
    d = tp.where(tp.eq(nz_b, zero), no_zero, one_zero)
    return (tp.mul(_unreduce(g, shape, dims), d),)


@defvjp(P.cumsum)
def _(ctx, g):
    d = ctx.params["dim"]
    return (tp.rev(tp.cumsum(tp.rev(g, dims=(d,)), dim=d), dims=(d,)),)


def _rev_cumsum(t, d):
    return tp.rev(tp.cumsum(tp.rev(t, dims=(d,)), dim=d), dims=(d,))


@defvjp(P.cumprod, save=(0, "out"))
def _(ctx, g):
    """d out_i / d x_k = prod_{j <= i, j != k} x_j, without dividing by a zero: before the
    first zero of a row it is out_i / x_k; at the first zero, the products with that zero
    left out (a cumprod with it set to 1); after it, 0 (PyTorch's cumprod backward)."""
    x, out = ctx.saved_tensors
    d = ctx.params["dim"]
    zero, one = _zeros_like(x), _bc(_c(1, x), x)
    is0 = tp.eq(x, zero)
    nzeros = tp.cumsum(tp.convert_element_type(is0, dtype=x.dtype), dim=d)
    before = tp.eq(nzeros, zero)
    first0 = tp.logical_and(is0, tp.eq(nzeros, one))
    g_before = tp.div(_rev_cumsum(tp.mul(g, out), d), tp.where(before, x, one))
    g_first = _rev_cumsum(tp.mul(g, tp.cumprod(tp.where(first0, one, x), dim=d)), d)
    return (tp.where(before, g_before, tp.where(first0, g_first, zero)),)


@defvjp(P.logcumsumexp, save=(0, "out"))
def _(ctx, g):
    """sum_{i >= k} g_i exp(x_k - out_i), summed in log space for the positive and the
    negative parts of g separately (no overflow)."""
    x, out = ctx.saved_tensors
    d = ctx.params["dim"]
    zero = _zeros_like(g)

    def part(gp):
        lg = tp.sub(tp.log(gp), out)
        r = tp.rev(tp.logcumsumexp(tp.rev(lg, dims=(d,)), dim=d), dims=(d,))
        return tp.exp(tp.add(x, r))

    pos = tp.where(tp.gt(g, zero), g, zero)
    neg = tp.where(tp.lt(g, zero), tp.neg(g), zero)
    return (tp.sub(part(pos), part(neg)),)


# ---- contraction and indexing --------------------------------------------------------------
def _perm_to(order):
    """perm such that transpose(result, perm) puts result dims (named by `order`) in 0..n."""
    return tuple(order.index(i) for i in range(len(order)))


@defvjp(P.dot_general, save=(0, 1))
def _(ctx, g):
    a, b = ctx.saved_tensors
    lc, rc, lb, rb, af, bf = dot_dims(a.ndim, b.ndim, **ctx.params)
    af, bf = list(af), list(bf)
    nb = len(lb)
    g_batch = tuple(range(nb))
    g_af = tuple(range(nb, nb + len(af)))
    g_bf = tuple(range(nb + len(af), g.ndim))
    ga = gb = None
    if ctx.needs_input_grad[0]:
        r = tp.dot_general(g, b, contract=(g_bf, tuple(bf)), batch=(g_batch, tuple(rb)))
        rest_b = sorted(rc)  # b's remaining dims, in b's order, map to a's contract dims
        order = list(lb) + af + [lc[rc.index(j)] for j in rest_b]
        perm = _perm_to(order)
        ga = tp.transpose(r, perm=perm) if perm != tuple(range(len(perm))) else r
    if ctx.needs_input_grad[1]:
        r = tp.dot_general(g, a, contract=(g_af, tuple(af)), batch=(g_batch, tuple(lb)))
        rest_a = sorted(lc)
        order = list(rb) + bf + [rc[lc.index(i)] for i in rest_a]
        perm = _perm_to(order)
        gb = tp.transpose(r, perm=perm) if perm != tuple(range(len(perm))) else r
    return ga, gb


@defvjp(P.gather, save=(1,))
def _(ctx, g):
    idx, = ctx.saved_tensors
    x = ctx._in_avals[0]
    return tp.scatter_add(tp.zeros(x.shape, g.dtype), idx, g, dim=ctx.params["dim"]), None


@defvjp(P.scatter_add, save=(1,))
def _(ctx, g):
    idx, = ctx.saved_tensors
    gsrc = tp.gather(g, idx, dim=ctx.params["dim"]) if ctx.needs_input_grad[2] else None
    return g, None, gsrc


NON_DIFFERENTIABLE = frozenset(p for p in PRIMS.values()
                               if Tag.NON_DIFFERENTIABLE in p.tags)
del dt
