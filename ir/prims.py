"""The closed primitive set. Each prim is one table entry: a shape/dtype rule that validates
its inputs, a numpy reference implementation, and tags.

Prims are strict (like XLA's HLO or jax.lax): binary ops need equal shapes and dtypes;
broadcasting and type promotion are the op layer's job (runtime/ops.py).

Tags (ir/tags.py): one kind (pointwise, reduction, shape, contraction, random, index,
creation, check) and the facts other modules ask about (view, non-differentiable, ...).
"""
import builtins
import functools
import math
import typing

import numpy as np

from aotgrad.ir import dtypes as dt
from aotgrad.ir import special_math
from aotgrad.ir.collective_calls import CollectiveCall
from aotgrad.ir.core import PRIMS, Aval, PrimError, check, register
from aotgrad.ir.symbolic import SymInt, agree, nonnegative, size_le
from aotgrad.ir.tags import Tag
from aotgrad.ir.value_checks import ValueCheck



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


def _convert_rule(x, *, dtype, via=None):
    # via: a 16-bit float dtype the value is rounded to on the way (codegen.low_precision)
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
    check(all(nonnegative(s) for s in shape), f"shape {list(shape)} has a negative size")
    check(agree(math.prod(shape), math.prod(x.shape)),
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


def free_dims(ndim, contract, batch):
    """The dims of a dot_general operand that are neither contracted nor batch dims, in
    order: the output is (batch dims, lhs's free dims, rhs's free dims)."""
    return tuple(i for i in range(ndim) if i not in contract and i not in batch)


class DotDims(typing.NamedTuple):
    """A dot_general's dims per operand: contracted, batch and free (`dot_dims`)."""
    lhs_contract: tuple
    rhs_contract: tuple
    lhs_batch: tuple
    rhs_batch: tuple
    lhs_free: tuple
    rhs_free: tuple


def dot_dims(lhs_ndim, rhs_ndim, *, contract, batch=((), ())):
    """The dims of `dot_general(lhs, rhs, contract=..., batch=...)`: call it with the
    node's params (`dot_dims(a.ndim, b.ndim, **node.params)`)."""
    (lc, rc), (lb, rb) = contract, batch
    lc, rc, lb, rb = tuple(lc), tuple(rc), tuple(lb), tuple(rb)
    return DotDims(lc, rc, lb, rb, free_dims(lhs_ndim, lc, lb), free_dims(rhs_ndim, rc, rb))


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
        check(size_le(0, s) and size_le(s, l) and size_le(l, n) and st >= 1,
              f"slice [{s}:{l}:{st}] out of range for size {n}")
        d = -(-(l - s) // st)
        out.append(d if isinstance(d, SymInt) else max(0, d))  # (s <= l: a size is >= 0)
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
    d = dot_dims(a.ndim, b.ndim, contract=contract, batch=batch)
    return Aval([a.shape[i] for i in d.lhs_batch + d.lhs_free] +
                [b.shape[i] for i in d.rhs_free], a.dtype)


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
    check(all(nonnegative(s) for s in shape), f"negative size in {list(shape)}")
    return Aval(shape, dtype)


def _iota_rule(*, shape, dim, dtype):
    check(0 <= dim < len(shape), f"dim {dim} out of range for shape {list(shape)}")
    return Aval(shape, dtype)


def _random_rule(seed, *, shape, dtype):
    check(seed.shape == () and seed.dtype is dt.int64, "seed must be an int64 scalar")
    _float(Aval((), dtype))
    return Aval(shape, dtype)


def _check_values_rule(x, *, check):
    if not isinstance(check, ValueCheck):
        raise PrimError(f"check must be a ValueCheck, got {check!r}")
    return Aval(x.shape, x.dtype)


def _check_values(x, *, check):
    """x itself, once every element passed the check (see ir/value_checks.py)."""
    check.raise_if_violated(x)
    return x


def _collective_rule(x, *, call):
    if not isinstance(call, CollectiveCall):
        raise PrimError(f"call must be a CollectiveCall, got {call!r}")
    return Aval(x.shape, x.dtype)


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


def _libm_erf(x):
    return math.erf(x)


@functools.cache
def _erf_ufunc():
    """The C library's erf (math.erf's, bit for bit) as a float64 numpy ufunc, compiled by
    numba on the first large erf: `import aotgrad` does not pay for numba."""
    import numba
    return numba.vectorize(["float64(float64)"], cache=True)(_libm_erf)


# Up to this many elements math.erf runs element by element (well under a millisecond);
# larger arrays pay once for loading numba (which loads scipy too) and compiling its loop.
# Both call the C library's erf: the same bits either way.
ERF_PER_ELEMENT_MAX = 4096
_erf_per_element = np.frompyfunc(math.erf, 1, 1)


def _erf(x):
    x64 = np.asarray(x, np.float64)
    f = _erf_per_element if x64.size <= ERF_PER_ELEMENT_MAX else _erf_ufunc()
    return np.asarray(f(x64), np.float64).astype(x.dtype, copy=False)


def _wide(x):
    """A 16-bit float array as float32 (what PyTorch's CPU kernels compute in)."""
    return x.astype(np.float32) if x.dtype.itemsize == 2 and x.dtype.kind in "fV" else x


def pad_region(config, shape):
    """Where a pad by `config` puts a value of `shape`: one slice per axis."""
    return tuple(builtins.slice(lo, lo + (n - 1) * (it + 1) + 1 if n else lo, it + 1)
                 for (lo, hi, it), n in zip(config, shape))


def _pad(x, *, config, value=0.0):
    shape = _pad_rule(Aval(x.shape, dt.from_numpy(x.dtype)), config=config).shape
    out = np.full(shape, value, dtype=x.dtype)
    out[pad_region(config, x.shape)] = x
    return out


def _slice(x, *, start, limit, strides=None):
    strides = strides or (1,) * x.ndim
    return x[tuple(map(builtins.slice, start, limit, strides))]


def _dot_general(a, b, *, contract, batch=((), ())):
    if contract == _MM and batch == _NO_BATCH and a.ndim == 2 and b.ndim == 2 and \
            a.shape[1] != 1:  # a matrix product: a and b are already the canonical form
        out = np.matmul(_wide(a), _wide(b)).astype(a.dtype, copy=False)
        return out if out.flags.c_contiguous else out.copy(order="C")
    lc, rc, lb, rb, af, bf = dot_dims(a.ndim, b.ndim, contract=contract, batch=batch)
    af, bf = list(af), list(bf)
    # canonical form: a -> (batch, free, contract), b -> (batch, contract, free); one matmul
    at = np.transpose(a, list(lb) + af + list(lc))
    bt = np.transpose(b, list(rb) + list(rc) + bf)
    bsh, afs, bfs = [a.shape[i] for i in lb], [a.shape[i] for i in af], [b.shape[i] for i in bf]
    k = math.prod(a.shape[i] for i in lc)
    am = at.reshape(bsh + [math.prod(afs), k])
    bm = bt.reshape(bsh + [k, math.prod(bfs)])
    if k == 1:  # an outer product (per-sample gradients of a weight): one multiply per
        out = np.multiply(_wide(am), _wide(bm))  # element, faster than matmul's k=1 loops
    else:
        out = np.matmul(_wide(am), _wide(bm))
    out = out.reshape(bsh + afs + bfs)
    # 16-bit floats: float32 products, rounded once. C-contiguous, as PyTorch's products are
    # (np.matmul follows strided batch dims): a product's layout never depends on its inputs'
    out = out.astype(a.dtype, copy=False)
    return out if out.flags.c_contiguous else out.copy(order="C")


_MM, _NO_BATCH = ((1,), (0,)), ((), ())


def _scatter_add(x, idx, src, *, dim):
    out = x.copy()
    full_idx = list(np.indices(idx.shape, sparse=True))
    full_idx[dim] = idx
    np.add.at(out, tuple(full_idx), src)
    return out


def _random(kind):
    def impl(seed, *, shape, dtype):
        gen = np.random.Generator(np.random.Philox(int(seed)))
        wide = np.float32 if dtype.itemsize == 2 else dtype.np  # 16-bit: drawn as float32
        if kind == "uniform":
            return gen.random(shape, dtype=wide).astype(dtype.np, copy=False)
        return gen.standard_normal(shape, dtype=wide).astype(dtype.np, copy=False)
    return impl


def _reduce(fn):
    def impl(x, *, dims):  # 16-bit floats accumulate in float32
        return np.asarray(fn(_wide(x), axis=tuple(dims))).astype(x.dtype, copy=False)
    return impl


def _argsort(x, *, dim, descending=False):
    idx = np.argsort(x, axis=dim, kind="stable").astype(np.int64)
    return np.flip(idx, dim).copy() if descending else idx


def _tie_first(fn):
    """maximum/minimum as PyTorch computes them: NaN propagates, and where the inputs compare
    equal (0.0 and -0.0) the first one is the result (numpy returns the second)."""
    def impl(x, y):
        r = fn(x, y)
        if x.dtype.kind != "f":
            return r
        return np.where(x == y, x, r)
    impl.__name__ = fn.__name__
    return impl


class Quiet:
    """An impl for which numpy would warn (log(-1), 1/0, exp overflow) where PyTorch returns
    nan/inf silently: `fn` run with numpy's floating-point warnings off. A caller running
    many impls in a row (codegen.first_tier) turns them off once and calls `fn` itself."""
    __slots__ = ("fn", "__name__")

    def __init__(self, fn):
        self.fn = fn
        self.__name__ = getattr(fn, "__name__", "impl")

    def __call__(self, *args):
        with np.errstate(all="ignore"):
            return self.fn(*args)


# ---- the table ----------------------------------------------------------------------------
# One definition per prim: `name = register("name", shape rule, reference impl, tags)`.
# Quiet(...) marks the impls for which numpy would warn where PyTorch returns nan/inf.
P, R = (Tag.POINTWISE,), (Tag.REDUCTION,)
AXIS_RED = (Tag.REDUCTION, Tag.AXIS_REDUCTION)
ARG_RED = (Tag.REDUCTION, Tag.ARG_REDUCTION, Tag.NON_DIFFERENTIABLE)
CMP = (Tag.POINTWISE, Tag.NON_DIFFERENTIABLE)   # bool results
# a view of the input's elements: eagerly a numpy view (not rev: flip is copied), compiled
# possibly the input's buffer
VIEW = (Tag.SHAPE, Tag.VIEW, Tag.SHARES_MEMORY, Tag.MAY_ALIAS_INPUT)

neg = register("neg", _unary_rule("numeric"), np.negative, P)
abs = register("abs", _unary_rule("numeric"), np.abs, P)
exp = register("exp", _unary_rule("float"), Quiet(np.exp), P)
log = register("log", _unary_rule("float"), Quiet(np.log), P)
log1p = register("log1p", _unary_rule("float"), Quiet(np.log1p), P)
expm1 = register("expm1", _unary_rule("float"), Quiet(np.expm1), P)
sqrt = register("sqrt", _unary_rule("float"), Quiet(np.sqrt), P)
rsqrt = register("rsqrt", _unary_rule("float"), Quiet(lambda x: _c(x, 1) / np.sqrt(x)), P)
sin = register("sin", _unary_rule("float"), np.sin, P)
cos = register("cos", _unary_rule("float"), np.cos, P)
tanh = register("tanh", _unary_rule("float"), np.tanh, P)
logistic = register("logistic", _unary_rule("float"), _logistic, P)
erf = register("erf", _unary_rule("float"), _erf, P)
sign = register("sign", _unary_rule("numeric"), np.sign, P)
floor = register("floor", _unary_rule("float"), np.floor, P)
ceil = register("ceil", _unary_rule("float"), np.ceil, P)
reciprocal = register("reciprocal", _unary_rule("float"), Quiet(lambda x: _c(x, 1) / x), P)
logical_not = register("logical_not", _unary_rule("bool"), np.logical_not, CMP)

add = register("add", _binary_rule("any"), np.add, P)
sub = register("sub", _binary_rule("numeric"), np.subtract, P)
mul = register("mul", _binary_rule("any"), np.multiply, P)
div = register("div", _binary_rule("float"), Quiet(np.divide), P)
pow = register("pow", _binary_rule("float"), Quiet(np.power), P)
maximum = register("maximum", _binary_rule("any"), _tie_first(np.maximum), P)
minimum = register("minimum", _binary_rule("any"), _tie_first(np.minimum), P)
atan2 = register("atan2", _binary_rule("float"), np.arctan2, P)
# C's fmod, exact in IEEE arithmetic (a - trunc(a / b) * b is not once the quotient passes
# 2**24 in float32); the result has a's sign, a zero result too
fmod = register("fmod", _binary_rule("float"), Quiet(np.fmod), P)
eq = register("eq", _binary_rule("any", dt.bool_), np.equal, CMP)
ne = register("ne", _binary_rule("any", dt.bool_), np.not_equal, CMP)
lt = register("lt", _binary_rule("any", dt.bool_), np.less, CMP)
le = register("le", _binary_rule("any", dt.bool_), np.less_equal, CMP)
gt = register("gt", _binary_rule("any", dt.bool_), np.greater, CMP)
ge = register("ge", _binary_rule("any", dt.bool_), np.greater_equal, CMP)
logical_and = register("logical_and", _binary_rule("bool"), np.logical_and, CMP)
logical_or = register("logical_or", _binary_rule("bool"), np.logical_or, CMP)


# bitwise ops on integer and bool values (PyTorch's bitwise_* and shifts); shifts by a
# count outside [0, bits) give what PyTorch's CPU kernels give: 0 for <<, and for >> the
# sign fill (0 or -1), never the hardware's count modulo the width
def _bitwise_rule(x, y=None):
    for v in (x,) if y is None else (x, y):
        check(dt.is_integral(v.dtype) or v.dtype is dt.bool_,
              f"expected integer or bool inputs, got {v.dtype.name}")
    return _unary_rule("any")(x) if y is None else _binary_rule("any")(x, y)


def _shift_rule(x, y):
    check(dt.is_integral(x.dtype), f"expected integer inputs, got {x.dtype.name}")
    return _binary_rule("any")(x, y)


def _shift_count(x, y):
    bits = x.dtype.itemsize * 8
    out_of_range = (y < 0) | (y >= bits)
    return np.where(out_of_range, 0, y).astype(x.dtype), out_of_range


def _shift_left(x, y):
    n, out = _shift_count(x, y)
    return np.where(out, np.zeros((), x.dtype), np.left_shift(x, n)).astype(x.dtype)


def _shift_right(x, y):
    n, out = _shift_count(x, y)
    fill = np.where(x < 0, -1, 0).astype(x.dtype) if x.dtype.kind == "i" else \
        np.zeros_like(x)
    return np.where(out, fill, np.right_shift(x, n)).astype(x.dtype)


INT_P = (Tag.POINTWISE, Tag.NON_DIFFERENTIABLE)  # integer results, or steps
bitwise_and = register("bitwise_and", _bitwise_rule, np.bitwise_and, INT_P)
bitwise_or = register("bitwise_or", _bitwise_rule, np.bitwise_or, INT_P)
bitwise_xor = register("bitwise_xor", _bitwise_rule, np.bitwise_xor, INT_P)
bitwise_not = register("bitwise_not", _bitwise_rule, np.invert, INT_P)
shift_left = register("shift_left", _shift_rule, _shift_left, INT_P)
shift_right = register("shift_right", _shift_rule, _shift_right, INT_P)


def _gcd_rule(x, y):
    check(dt.is_integral(x.dtype), f"expected integer inputs, got {x.dtype.name}")
    return _binary_rule("any")(x, y)


gcd = register("gcd", _gcd_rule, np.gcd, INT_P)
# the next float after x towards y: a step function of its inputs, no derivative (PyTorch
# has none either)
nextafter = register("nextafter", _binary_rule("float"), np.nextafter, INT_P)

# hyperbolic, inverse trigonometric and special functions (reference impls: numpy or
# ir/special_math.py; kernels call libm/`math` or the scalar helpers of codegen/approx.py)
sinh = register("sinh", _unary_rule("float"), Quiet(np.sinh), P)
cosh = register("cosh", _unary_rule("float"), Quiet(np.cosh), P)
asinh = register("asinh", _unary_rule("float"), Quiet(np.arcsinh), P)
acosh = register("acosh", _unary_rule("float"), Quiet(np.arccosh), P)
atanh = register("atanh", _unary_rule("float"), Quiet(np.arctanh), P)
asin = register("asin", _unary_rule("float"), Quiet(np.arcsin), P)
acos = register("acos", _unary_rule("float"), Quiet(np.arccos), P)
erfc = register("erfc", _unary_rule("float"), Quiet(special_math.erfc), P)
erfcx = register("erfcx", _unary_rule("float"), Quiet(special_math.erfcx), P)
erfinv = register("erfinv", _unary_rule("float"), Quiet(special_math.erfinv), P)
lgamma = register("lgamma", _unary_rule("float"), Quiet(special_math.lgamma), P)
ndtri = register("ndtri", _unary_rule("float"), Quiet(special_math.ndtri), P)
i0e = register("i0e", _unary_rule("float"), Quiet(special_math.i0e), P)
i1e = register("i1e", _unary_rule("float"), Quiet(special_math.i1e), P)


def _polygamma_rule(x, *, n):
    _float(x)
    check(isinstance(n, int) and n >= 0, f"order n must be a non-negative int, got {n!r}")
    return Aval(x.shape, x.dtype)


polygamma = register("polygamma", _polygamma_rule, special_math.polygamma, P)


def _searchsorted_rule(seq, values, *, right):
    check(seq.ndim >= 1, "the sorted sequence must have at least one dim")
    check(seq.ndim == 1 or seq.shape[-1] > 0 or math.prod(values.shape) == 0,
          "the sorted sequence is empty")
    check(seq.dtype is values.dtype, f"dtypes {seq.dtype.name} and {values.dtype.name} differ")
    check(seq.dtype is not dt.bool_, "bool inputs")
    check(seq.ndim == 1 or (values.ndim == seq.ndim and
                            tuple(values.shape[:-1]) == tuple(seq.shape[:-1])),
          f"boundaries {list(seq.shape)} must be 1-d or match the leading dims of the "
          f"values {list(values.shape)}")
    return Aval(values.shape, dt.int64)


def _searchsorted(seq, values, *, right):
    """For each value, the first index i of its row of seq with seq[i] >= value (> value
    with right), by a binary search that moves right wherever that comparison is false:
    PyTorch's search, which also places NaN values (and values against NaN entries) last."""
    m = seq.shape[-1]
    s2 = seq.reshape(-1, m)
    v2 = values.reshape(s2.shape[0], -1) if seq.ndim > 1 else values.reshape(1, -1)
    lo = np.zeros(v2.shape, np.int64)
    hi = np.full(v2.shape, m, np.int64)
    with np.errstate(invalid="ignore"):
        while True:
            active = lo < hi
            if not active.any():
                break
            mid = (lo + hi) // 2
            mv = np.take_along_axis(s2, np.minimum(mid, m - 1), axis=1)
            right_of = ~(mv > v2) if right else ~(mv >= v2)
            lo = np.where(active & right_of, mid + 1, lo)
            hi = np.where(active & ~right_of, mid, hi)
    return lo.reshape(values.shape)


searchsorted = register("searchsorted", _searchsorted_rule, _searchsorted,
                      (Tag.INDEX, Tag.NON_DIFFERENTIABLE))

where = register("where", _where_rule, np.where, P)
def _convert(x, *, dtype, via=None):
    if dtype.itemsize != 2 and via is None:
        return x.astype(dtype.np)
    with np.errstate(over="ignore"):  # a float too large for float16 becomes inf, quietly
        return x.astype(dtype.np) if via is None else x.astype(via.np).astype(dtype.np)


convert_element_type = register("convert_element_type", _convert_rule, _convert,
                                (Tag.POINTWISE, Tag.MAY_ALIAS_INPUT))
broadcast_in_dim = register(
    "broadcast_in_dim", _broadcast_rule, lambda x, *, shape, dims: np.broadcast_to(
        x.reshape([x.shape[dims.index(d)] if d in dims else 1 for d in range(len(shape))]),
        shape), VIEW)
reshape = register("reshape", _reshape_rule, lambda x, *, shape: x.reshape(shape), VIEW)
transpose = register("transpose", _transpose_rule,
                     lambda x, *, perm: np.transpose(x, perm), VIEW)
slice = register("slice", _slice_rule, _slice, VIEW)
pad = register("pad", _pad_rule, _pad, (Tag.SHAPE,))
concatenate = register("concatenate", _concat_rule,
                       lambda *xs, dim: np.concatenate(xs, axis=dim), (Tag.SHAPE,))
# a copy: flip is not a view (numpy's flip is; writing to it reached the input)
rev = register("rev", _rev_rule, lambda x, *, dims: np.flip(x, tuple(dims)).copy(),
               (Tag.SHAPE, Tag.VIEW, Tag.MAY_ALIAS_INPUT))
# (the ufuncs' reduce: what np.sum/max/min/prod call for an ndarray, without their wrapper)
reduce_sum = register("reduce_sum", _reduce_rule("sum"), _reduce(np.add.reduce), AXIS_RED)
reduce_max = register("reduce_max", _reduce_rule("max"), _reduce(np.maximum.reduce), AXIS_RED)
reduce_min = register("reduce_min", _reduce_rule("min"), _reduce(np.minimum.reduce), AXIS_RED)
reduce_prod = register("reduce_prod", _reduce_rule("prod"), _reduce(np.multiply.reduce),
                       AXIS_RED)
argmax = register("argmax", _arg_rule,
                  lambda x, *, dim: np.argmax(x, axis=dim).astype(np.int64), ARG_RED)
argmin = register("argmin", _arg_rule,
                  lambda x, *, dim: np.argmin(x, axis=dim).astype(np.int64), ARG_RED)
def _plus_zero(a):
    """a + 0.0 for floats: a running sum that starts from +0.0 (PyTorch's scans) is never
    -0.0, while numpy's scans start from the first element and keep its -0.0."""
    if a.dtype.kind in "fc":
        a += a.dtype.type(0)
    return a


cumsum = register("cumsum", _cumsum_rule, lambda x, *, dim: _plus_zero(np.cumsum(
    _wide(x), axis=dim, dtype=_wide(x).dtype)).astype(x.dtype, copy=False), R)
def _cumprod(x, *, dim):
    with np.errstate(all="ignore"):  # inf * 0 is NaN silently, as in PyTorch
        return np.cumprod(x, axis=dim, dtype=x.dtype)


cumprod = register("cumprod", _cumsum_rule, _cumprod, R)


def _cumarg(largest):
    def impl(x, *, dim):
        """Index of the running max (min) along dim: the last occurrence of the extreme so
        far, or of the last NaN so far. A log-depth scan over (value, index) pairs."""
        val = np.moveaxis(x, dim, -1).copy()
        n = val.shape[-1]
        idx = np.broadcast_to(np.arange(n, dtype=np.int64), val.shape).copy()
        k = 1
        while k < n:
            v1, i1, v2, i2 = val[..., :-k], idx[..., :-k], val[..., k:], idx[..., k:]
            better = (v2 >= v1) if largest else (v2 <= v1)
            take = better | (v2 != v2)
            val[..., k:], idx[..., k:] = np.where(take, v2, v1), np.where(take, i2, i1)
            k *= 2
        return np.ascontiguousarray(np.moveaxis(idx, -1, dim))
    return impl


def _cumarg_rule(x, *, dim):
    check(0 <= dim < x.ndim, f"dim {dim} out of range")
    return Aval(x.shape, dt.int64)


cumargmax = register("cumargmax", _cumarg_rule, _cumarg(True),
                     (Tag.REDUCTION, Tag.NON_DIFFERENTIABLE))
cumargmin = register("cumargmin", _cumarg_rule, _cumarg(False),
                     (Tag.REDUCTION, Tag.NON_DIFFERENTIABLE))


def _logcumsumexp_rule(x, *, dim):
    _float(x)
    return _cumsum_rule(x, dim=dim)


def _logcumsumexp(x, *, dim):
    with np.errstate(all="ignore"):   # the scan starts from -inf: log(exp(-0.0)) is +0.0
        return _plus_zero(np.logaddexp.accumulate(x, axis=dim, dtype=x.dtype))


logcumsumexp = register("logcumsumexp", _logcumsumexp_rule, _logcumsumexp, R)
argsort = register("argsort", _argsort_rule, _argsort, (Tag.INDEX, Tag.NON_DIFFERENTIABLE))
dot_general = register("dot_general", _dot_rule, _dot_general, (Tag.CONTRACTION,))
gather = register("gather", _gather_rule, _gather, (Tag.INDEX, Tag.BOUNDS_CHECKED))
scatter_add = register("scatter_add", _scatter_add_rule, _scatter_add,
                       (Tag.INDEX, Tag.BOUNDS_CHECKED))
iota = register("iota", _iota_rule, lambda *, shape, dim, dtype: np.broadcast_to(
    np.arange(shape[dim], dtype=dtype.np).reshape(
        [shape[dim] if i == dim else 1 for i in range(len(shape))]), shape).copy(),
    (Tag.CREATION, Tag.NON_DIFFERENTIABLE))
full = register("full", _creation_rule,
         lambda *, shape, value, dtype: np.full(shape, value, dtype=dtype.np),
              (Tag.CREATION, Tag.NON_DIFFERENTIABLE))
check_values = register("check_values", _check_values_rule, _check_values,
                        (Tag.CHECK, Tag.MAY_ALIAS_INPUT, Tag.NON_DIFFERENTIABLE))
# a collective in two steps (ir/collective_calls.py): start it, compute on, wait for it.
# (No derivative rule: programs apply them to gradients, which nothing differentiates.)
collective_start = register("collective_start", _collective_rule,
                            lambda x, *, call: call.start(x),
                            (Tag.COMMUNICATION, Tag.NON_DIFFERENTIABLE))
collective_wait = register("collective_wait", _collective_rule,
                           lambda x, *, call: call.wait(x),
                           (Tag.COMMUNICATION, Tag.NON_DIFFERENTIABLE))
uniform = register("uniform", _random_rule, _random("uniform"),
                   (Tag.RANDOM, Tag.NON_DIFFERENTIABLE))
normal = register("normal", _random_rule, _random("normal"),
                  (Tag.RANDOM, Tag.NON_DIFFERENTIABLE))


def _poisson_rule(seed, rate, *, shape, dtype):
    _random_rule(seed, shape=shape, dtype=dtype)
    check(rate.dtype.is_floating_point, f"rate must be floating point, got {rate.dtype}")
    check(_broadcastable(rate.shape, tuple(shape)),
          f"rate of shape {rate.shape} does not broadcast to {tuple(shape)}")
    return Aval(shape, dtype)


def _broadcastable(src, shape):
    return len(src) <= len(shape) and all(
        a in (1, b) for a, b in zip(src[::-1], tuple(shape)[::-1]))


def _poisson(seed, rate, *, shape, dtype):
    """Poisson(rate) counts from the seed's Philox stream, as floats of `dtype` (rate is
    broadcast to `shape`: vmap's randomness="different" draws one set per sample)."""
    gen = np.random.Generator(np.random.Philox(int(seed)))
    lam = np.broadcast_to(np.asarray(rate, np.float64), tuple(shape))
    return gen.poisson(lam).astype(dtype.np)


# Poisson draws with the rates as an input (a reference step in compiled programs)
poisson = register("poisson", _poisson_rule, _poisson, (Tag.RANDOM, Tag.NON_DIFFERENTIABLE))

# the linear-algebra prims have their own module; printed graphs call them as prims.<name>
from aotgrad.ir.linalg_prims import (  # noqa: E402  (defined there, named here too)
    linalg_inv, linalg_solve, linalg_det, linalg_slogdet_sign, linalg_logabsdet,
    linalg_cholesky, linalg_qr_q, linalg_qr_r, linalg_svd_u, linalg_svdvals, linalg_svd_vh,
    linalg_eigvalsh, linalg_eigh_vectors, linalg_pinv)

__all__ = sorted(PRIMS) + ["PRIMS", "PrimError"]
