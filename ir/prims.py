"""The closed primitive set. Each prim is one table entry: a shape/dtype rule that validates
its inputs, a numpy reference implementation, and tags.

Prims are strict (like XLA's HLO or jax.lax): binary ops need equal shapes and dtypes;
broadcasting and type promotion are the op layer's job (runtime/ops.py).

Tags: pointwise, reduction, shape, contraction, random, index, creation.
"""
import builtins
import math

import numpy as np

from aotgrad.ir import dtypes as dt
from aotgrad.ir.core import Aval, Prim, PrimError, check

PRIMS = {}  # name -> Prim


def register(name, rule, impl, tags=(), multiple_results=False):
    p = Prim(name, rule, impl, tags, multiple_results)
    PRIMS[name] = p
    globals()[name] = p
    return p


# ---- shape rules -------------------------------------------------------------------------

def _float(x):
    check(x.dtype.is_floating_point, f"expected a floating-point input, got {x.dtype.name}")


def _unary_rule(kind):
    def rule(x):
        if kind == "float":
            _float(x)
        elif kind == "bool":
            check(x.dtype is dt.bool_, f"expected a bool input, got {x.dtype.name}")
        elif kind == "numeric":
            check(x.dtype is not dt.bool_, "expected a numeric input, got bool")
        return Aval(x.shape, x.dtype)
    return rule


def _binary_rule(kind, out=None):
    def rule(x, y):
        check(x.shape == y.shape, f"shapes {list(x.shape)} and {list(y.shape)} differ "
                                  f"(prims do not broadcast)")
        check(x.dtype is y.dtype, f"dtypes {x.dtype.name} and {y.dtype.name} differ")
        if kind == "float":
            _float(x)
        elif kind == "bool":
            check(x.dtype is dt.bool_, f"expected bool inputs, got {x.dtype.name}")
        elif kind == "numeric":
            check(x.dtype is not dt.bool_, "expected numeric inputs, got bool")
        return Aval(x.shape, out or x.dtype)
    return rule


def _where_rule(pred, x, y):
    check(pred.dtype is dt.bool_, f"condition must be bool, got {pred.dtype.name}")
    check(pred.shape == x.shape == y.shape,
          f"shapes {list(pred.shape)}, {list(x.shape)}, {list(y.shape)} differ")
    check(x.dtype is y.dtype, f"dtypes {x.dtype.name} and {y.dtype.name} differ")
    return Aval(x.shape, x.dtype)


def _convert_rule(x, *, dtype):
    check(isinstance(dtype, dt.DType), f"dtype must be an aotgrad dtype, got {dtype!r}")
    return Aval(x.shape, dtype)


def _broadcast_rule(x, *, shape, dims):
    shape, dims = tuple(shape), tuple(dims)
    check(len(dims) == x.ndim, f"dims {dims} must have one entry per input dim ({x.ndim})")
    check(all(0 <= d < len(shape) for d in dims) and list(dims) == sorted(set(dims)),
          f"dims {dims} must be strictly increasing and < {len(shape)}")
    for i, d in enumerate(dims):
        check(x.shape[i] in (1, shape[d]),
              f"input dim {i} of size {x.shape[i]} cannot broadcast to size {shape[d]} "
              f"of target shape {list(shape)}")
    return Aval(shape, x.dtype)


def _reshape_rule(x, *, shape):
    check(all(s >= 0 for s in shape), f"shape {list(shape)} has a negative size")
    check(math.prod(shape) == math.prod(x.shape),
          f"cannot reshape {list(x.shape)} ({math.prod(x.shape)} elements) to {list(shape)}")
    return Aval(shape, x.dtype)


def unit_reshape_map(src, dst):
    """For a reshape that only inserts/removes size-1 dims: for each dst dim, the src dim it
    comes from (or None for an inserted unit dim). None when the reshape moves data."""
    s = [(i, n) for i, n in enumerate(src) if n != 1]
    d = [(i, n) for i, n in enumerate(dst) if n != 1]
    if [n for _, n in s] != [n for _, n in d]:
        return None
    m = [None] * len(dst)
    for (si, _), (di, _) in zip(s, d):
        m[di] = si
    return m


def _transpose_rule(x, *, perm):
    check(sorted(perm) == list(range(x.ndim)), f"perm {tuple(perm)} is not a permutation "
                                               f"of {x.ndim} dims")
    return Aval([x.shape[p] for p in perm], x.dtype)


def _slice_rule(x, *, start, limit, strides=None):
    strides = strides or (1,) * x.ndim
    check(len(start) == len(limit) == len(strides) == x.ndim,
          f"start/limit/strides need {x.ndim} entries")
    out = []
    for s, l, st, n in zip(start, limit, strides, x.shape):
        check(0 <= s <= l <= n and st >= 1, f"slice [{s}:{l}:{st}] out of range for size {n}")
        out.append(max(0, -(-(l - s) // st)))
    return Aval(out, x.dtype)


def _pad_rule(x, *, config, value=0.0):
    check(len(config) == x.ndim, f"pad config needs {x.ndim} (lo, hi, interior) entries")
    out = []
    for (lo, hi, interior), n in zip(config, x.shape):
        check(lo >= 0 and hi >= 0 and interior >= 0, "pad amounts must be non-negative")
        out.append(lo + hi + n + max(0, n - 1) * interior)
    return Aval(out, x.dtype)


def _concat_rule(*xs, dim):
    check(len(xs) >= 1, "needs at least one input")
    x0 = xs[0]
    check(0 <= dim < x0.ndim, f"dim {dim} out of range for {x0.ndim} dims")
    for x in xs[1:]:
        check(x.dtype is x0.dtype, f"dtypes {x0.dtype.name} and {x.dtype.name} differ")
        check(x.ndim == x0.ndim and all(a == b for i, (a, b) in enumerate(zip(x.shape, x0.shape))
                                        if i != dim),
              f"shapes {list(x0.shape)} and {list(x.shape)} differ outside dim {dim}")
    shape = list(x0.shape)
    shape[dim] = sum(x.shape[dim] for x in xs)
    return Aval(shape, x0.dtype)


def _rev_rule(x, *, dims):
    check(all(0 <= d < x.ndim for d in dims), f"dims {dims} out of range")
    return Aval(x.shape, x.dtype)


def _reduce_rule(kind):
    def rule(x, *, dims):
        check(all(0 <= d < x.ndim for d in dims) and len(set(dims)) == len(dims),
              f"dims {tuple(dims)} out of range or repeated for {x.ndim} dims")
        if kind != "sum":
            check(x.dtype is not dt.bool_ or kind in ("max", "min"), "bool input")
        if kind in ("max", "min"):
            check(all(x.shape[d] > 0 for d in dims), "reduction over an empty dim has no identity")
        return Aval([n for i, n in enumerate(x.shape) if i not in dims], x.dtype)
    return rule


def _arg_rule(x, *, dim):
    check(0 <= dim < x.ndim, f"dim {dim} out of range for {x.ndim} dims")
    check(x.shape[dim] > 0, "argmax/argmin over an empty dim")
    return Aval([n for i, n in enumerate(x.shape) if i != dim], dt.int64)


def _dot_rule(a, b, *, contract, batch=((), ())):
    (lc, rc), (lb, rb) = contract, batch
    check(a.dtype is b.dtype, f"dtypes {a.dtype.name} and {b.dtype.name} differ")
    check(a.dtype is not dt.bool_, "bool inputs")
    check(len(lc) == len(rc) and len(lb) == len(rb), "contract/batch dims do not pair up")
    for i, j in list(zip(lc, rc)) + list(zip(lb, rb)):
        check(0 <= i < a.ndim and 0 <= j < b.ndim, "contract/batch dims out of range")
        check(a.shape[i] == b.shape[j],
              f"size mismatch: lhs dim {i} is {a.shape[i]}, rhs dim {j} is {b.shape[j]} "
              f"(lhs {list(a.shape)}, rhs {list(b.shape)})")
    af = [n for i, n in enumerate(a.shape) if i not in lc and i not in lb]
    bf = [n for i, n in enumerate(b.shape) if i not in rc and i not in rb]
    return Aval([a.shape[i] for i in lb] + af + bf, a.dtype)


def _gather_rule(x, idx, *, dim):
    check(dt.is_integer(idx.dtype), f"index must be an integer tensor, got {idx.dtype.name}")
    check(idx.ndim == x.ndim, f"index has {idx.ndim} dims, input has {x.ndim}")
    check(0 <= dim < x.ndim, f"dim {dim} out of range")
    check(all(i <= n for d, (i, n) in enumerate(zip(idx.shape, x.shape)) if d != dim),
          f"index shape {list(idx.shape)} exceeds input shape {list(x.shape)} outside dim {dim}")
    return Aval(idx.shape, x.dtype)


def _gather(x, idx, *, dim):
    """out[..., i, ...] = x[..., idx[..., i, ...], ...] along `dim`; outside `dim` the index
    may be smaller than x (PyTorch's gather), so x is cut to idx's extent there first."""
    x = x[tuple(builtins.slice(None) if d == dim else builtins.slice(0, n)
                for d, n in enumerate(idx.shape))]
    return np.take_along_axis(x, idx, axis=dim)


def _scatter_add_rule(x, idx, src, *, dim):
    check(dt.is_integer(idx.dtype), f"index must be an integer tensor, got {idx.dtype.name}")
    check(idx.shape == src.shape, f"index {list(idx.shape)} and src {list(src.shape)} differ")
    check(src.dtype is x.dtype, f"dtypes {x.dtype.name} and {src.dtype.name} differ")
    check(idx.ndim == x.ndim and 0 <= dim < x.ndim, "index/dim do not match the input's dims")
    return Aval(x.shape, x.dtype)


def _creation_rule(*, shape, dtype, **_):
    check(all(int(s) >= 0 for s in shape), f"negative size in {list(shape)}")
    return Aval(shape, dtype)


def _iota_rule(*, shape, dim, dtype):
    check(0 <= dim < len(shape), f"dim {dim} out of range for shape {list(shape)}")
    return Aval(shape, dtype)


def _random_rule(seed, *, shape, dtype):
    check(seed.shape == () and seed.dtype is dt.int64, "seed must be an int64 scalar")
    _float(Aval((), dtype))
    return Aval(shape, dtype)


def _argsort_rule(x, *, dim, descending=False):
    check(0 <= dim < x.ndim, f"dim {dim} out of range")
    return Aval(x.shape, dt.int64)


def _cumsum_rule(x, *, dim):
    check(0 <= dim < x.ndim, f"dim {dim} out of range")
    check(x.dtype is not dt.bool_, "bool input")
    return Aval(x.shape, x.dtype)


# ---- numpy reference implementations ------------------------------------------------------

def _c(x, v):
    """A constant in x's dtype (never a silent float64)."""
    return x.dtype.type(v)


def _logistic(x):
    return np.exp(-np.logaddexp(_c(x, 0), -x)).astype(x.dtype, copy=False)


try:
    from scipy.special import erf as _erf_impl
except ImportError:  # scipy is optional: exact but slower fallback
    _erf_impl = np.vectorize(math.erf, otypes=[np.float64])


def _erf(x):
    return np.asarray(_erf_impl(x)).astype(x.dtype, copy=False)


def _pad(x, *, config, value=0.0):
    shape = _pad_rule(Aval(x.shape, dt.from_numpy(x.dtype)), config=config).shape
    out = np.full(shape, value, dtype=x.dtype)
    idx = tuple(builtins.slice(lo, lo + (n - 1) * (it + 1) + 1 if n else lo, it + 1)
                for (lo, hi, it), n in zip(config, x.shape))
    out[idx] = x
    return out


def _slice(x, *, start, limit, strides=None):
    strides = strides or (1,) * x.ndim
    return x[tuple(builtins.slice(s, l, st) for s, l, st in zip(start, limit, strides))]


def _dot_general(a, b, *, contract, batch=((), ())):
    (lc, rc), (lb, rb) = contract, batch
    af = [i for i in range(a.ndim) if i not in lc and i not in lb]
    bf = [i for i in range(b.ndim) if i not in rc and i not in rb]
    # canonical form: a -> (batch, free, contract), b -> (batch, contract, free); one matmul
    at = np.transpose(a, list(lb) + af + list(lc))
    bt = np.transpose(b, list(rb) + list(rc) + bf)
    bsh, afs, bfs = [a.shape[i] for i in lb], [a.shape[i] for i in af], [b.shape[i] for i in bf]
    k = math.prod(a.shape[i] for i in lc)
    am = at.reshape(bsh + [math.prod(afs), k])
    bm = bt.reshape(bsh + [k, math.prod(bfs)])
    return np.matmul(am, bm).reshape(bsh + afs + bfs)


def _scatter_add(x, idx, src, *, dim):
    out = x.copy()
    full_idx = list(np.indices(idx.shape, sparse=True))
    full_idx[dim] = idx
    np.add.at(out, tuple(full_idx), src)
    return out


def _random(kind):
    def impl(seed, *, shape, dtype):
        gen = np.random.Generator(np.random.Philox(int(seed)))
        if kind == "uniform":
            return gen.random(shape, dtype=dtype.np)
        return gen.standard_normal(shape, dtype=dtype.np)
    return impl


def _reduce(fn):
    def impl(x, *, dims):
        return np.asarray(fn(x, axis=tuple(dims))).astype(x.dtype, copy=False)
    return impl


def _argsort(x, *, dim, descending=False):
    idx = np.argsort(x, axis=dim, kind="stable").astype(np.int64)
    return np.flip(idx, dim).copy() if descending else idx


def _quiet(fn):
    """numpy warns on log(-1), 1/0, exp overflow; PyTorch returns nan/inf silently."""
    def impl(*args):
        with np.errstate(all="ignore"):
            return fn(*args)
    impl.__name__ = getattr(fn, "__name__", "impl")
    return impl


# ---- the table ----------------------------------------------------------------------------
P, R = ("pointwise",), ("reduction",)
_QUIET = {"exp", "log", "log1p", "expm1", "sqrt", "rsqrt", "reciprocal", "div", "pow"}
for _name, _fn, _kind in [
    ("neg", np.negative, "numeric"), ("abs", np.abs, "numeric"), ("exp", np.exp, "float"),
    ("log", np.log, "float"), ("log1p", np.log1p, "float"), ("expm1", np.expm1, "float"),
    ("sqrt", np.sqrt, "float"), ("rsqrt", lambda x: _c(x, 1) / np.sqrt(x), "float"),
    ("sin", np.sin, "float"), ("cos", np.cos, "float"), ("tanh", np.tanh, "float"),
    ("logistic", _logistic, "float"), ("erf", _erf, "float"), ("sign", np.sign, "numeric"),
    ("floor", np.floor, "float"), ("ceil", np.ceil, "float"),
    ("reciprocal", lambda x: _c(x, 1) / x, "float"), ("logical_not", np.logical_not, "bool"),
]:
    register(_name, _unary_rule(_kind), _quiet(_fn) if _name in _QUIET else _fn, P)

for _name, _fn, _kind, _out in [
    ("add", np.add, "any", None), ("sub", np.subtract, "numeric", None),
    ("mul", np.multiply, "any", None), ("div", np.divide, "float", None),
    ("pow", np.power, "float", None), ("maximum", np.maximum, "any", None),
    ("minimum", np.minimum, "any", None), ("atan2", np.arctan2, "float", None),
    ("eq", np.equal, "any", dt.bool_), ("ne", np.not_equal, "any", dt.bool_),
    ("lt", np.less, "any", dt.bool_), ("le", np.less_equal, "any", dt.bool_),
    ("gt", np.greater, "any", dt.bool_), ("ge", np.greater_equal, "any", dt.bool_),
    ("logical_and", np.logical_and, "bool", None), ("logical_or", np.logical_or, "bool", None),
]:
    register(_name, _binary_rule(_kind, _out), _quiet(_fn) if _name in _QUIET else _fn, P)

register("where", _where_rule, np.where, P)
register("convert_element_type", _convert_rule, lambda x, *, dtype: x.astype(dtype.np), P)
register("broadcast_in_dim", _broadcast_rule, lambda x, *, shape, dims: np.broadcast_to(
    x.reshape([x.shape[dims.index(d)] if d in dims else 1 for d in range(len(shape))]), shape),
    ("shape",))
register("reshape", _reshape_rule, lambda x, *, shape: x.reshape(shape), ("shape",))
register("transpose", _transpose_rule, lambda x, *, perm: np.transpose(x, perm), ("shape",))
register("slice", _slice_rule, _slice, ("shape",))
register("pad", _pad_rule, _pad, ("shape",))
register("concatenate", _concat_rule, lambda *xs, dim: np.concatenate(xs, axis=dim), ("shape",))
# a copy: flip is not a view (numpy's flip is; writing to it reached the input)
register("rev", _rev_rule, lambda x, *, dims: np.flip(x, tuple(dims)).copy(), ("shape",))
register("reduce_sum", _reduce_rule("sum"), _reduce(np.sum), R)
register("reduce_max", _reduce_rule("max"), _reduce(np.max), R)
register("reduce_min", _reduce_rule("min"), _reduce(np.min), R)
register("reduce_prod", _reduce_rule("prod"), _reduce(np.prod), R)
register("argmax", _arg_rule, lambda x, *, dim: np.argmax(x, axis=dim).astype(np.int64), R)
register("argmin", _arg_rule, lambda x, *, dim: np.argmin(x, axis=dim).astype(np.int64), R)
register("cumsum", _cumsum_rule, lambda x, *, dim: np.cumsum(x, axis=dim, dtype=x.dtype), R)
register("argsort", _argsort_rule, _argsort, ("index",))
register("dot_general", _dot_rule, _dot_general, ("contraction",))
register("gather", _gather_rule, _gather, ("index",))
register("scatter_add", _scatter_add_rule, _scatter_add, ("index",))
register("iota", _iota_rule, lambda *, shape, dim, dtype: np.broadcast_to(
    np.arange(shape[dim], dtype=dtype.np).reshape(
        [shape[dim] if i == dim else 1 for i in range(len(shape))]), shape).copy(), ("creation",))
register("full", _creation_rule,
         lambda *, shape, value, dtype: np.full(shape, value, dtype=dtype.np), ("creation",))
register("uniform", _random_rule, _random("uniform"), ("random",))
register("normal", _random_rule, _random("normal"), ("random",))

__all__ = sorted(PRIMS) + ["PRIMS", "PrimError"]
