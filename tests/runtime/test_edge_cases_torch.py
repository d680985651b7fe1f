"""Eager ops and their gradients at the edges, against PyTorch and against closed forms.

Ties, signed zeros, NaN and infinities, extreme inputs of activations, empty and 0-d inputs,
integer and bool dtypes and type promotion. The torch tests run each case through aotgrad and
PyTorch with the same upstream gradient and compare values, dtypes and gradients, NaN positions
exactly. The closed-form tests below them guard the bugs this comparison found, without torch.

Known, deliberate differences (not tested here; see the cases' comments where they are cut):
topk's order among equal elements (unspecified in PyTorch), max()/min() over all elements
with a NaN (gradient NaN everywhere, like amax, where PyTorch sends it to the NaNs), prod,
var and remainder gradients at infinite inputs, gelu(inf) (inf here, NaN in PyTorch),
and pow(-0.0, -0.5) (+inf, IEEE; PyTorch -inf). Exact remainders and signs of zero:
test_signed_zero_exact_torch.py.
"""
import itertools
import math

import numpy as np
import pytest

import aotgrad as ag
import aotgrad.nn.functional as F
from aotgrad.testing import assert_close

# numpy's reference prims warn on sin(inf), inf - inf, ...; PyTorch is silent
pytestmark = [pytest.mark.filterwarnings("ignore::RuntimeWarning"),
              pytest.mark.filterwarnings("ignore:std.*degrees of freedom:UserWarning")]
inf, nan = math.inf, math.nan
FLOATS = (np.float64, np.float32)


# ---- the harness: vs_torch.grads (value, dtype and input gradients against PyTorch) ------
def _grid(vals, dtype):
    p = np.array(list(itertools.product(vals, vals)), dtype=dtype)
    return p[:, 0].copy(), p[:, 1].copy()


SPECIAL = [0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 2.5, 1e-30, -1e-30, 1e30, -1e30, 100.0, -100.0,
           800.0, -800.0, inf, -inf, nan]
PAIR = [0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -3.5, 3.0, inf, -inf, nan]
EXTREME = [-1e4, -800., -100., -60., -30., -20.5, -20., -19.5, -5., -1., -0.5, -1e-8, -0.0, 0.0,
           1e-8, 0.5, 1., 5., 6., 6.5, 19.5, 20., 20.5, 30., 60., 100., 800., 1e4, -inf, nan]


# ---- pointwise -----------------------------------------------------------------------------
UNARY = ["exp", "log", "log1p", "expm1", "sqrt", "rsqrt", "sin", "cos", "tan", "tanh", "sigmoid",
         "erf", "floor", "ceil", "round", "reciprocal", "neg", "abs", "sign", "square", "relu",
         "log2", "log10", "exp2", "nan_to_num"]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", UNARY)
def test_unary_special_values(vs_torch, name, dtype):
    vs_torch.grads(lambda m, x: getattr(x, name)(), np.array(SPECIAL, dtype))


@pytest.mark.parametrize("name", ["isnan", "isinf", "isfinite", "sign", "abs", "neg", "square"])
@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.bool_])
def test_unary_integer_and_bool(vs_torch, name, dtype):
    if dtype is np.bool_ and name in ("neg", "abs"):
        pytest.skip("PyTorch rejects these for bool")
    x = np.array([0, 1, -2, 3], dtype) if dtype is not np.bool_ else np.array([True, False])
    vs_torch.grads(lambda m, t: getattr(t, name)(), x, grad=False)


BINARY = {
    "add": lambda m, a, b: a + b, "sub": lambda m, a, b: a - b, "mul": lambda m, a, b: a * b,
    "div": lambda m, a, b: a / b, "maximum": lambda m, a, b: m.maximum(a, b),
    "minimum": lambda m, a, b: m.minimum(a, b), "atan2": lambda m, a, b: m.atan2(a, b),
    "pow": lambda m, a, b: a ** b,
    "div_floor": lambda m, a, b: a.div(b, rounding_mode="floor"),
    "div_trunc": lambda m, a, b: a.div(b, rounding_mode="trunc"),
}


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", list(BINARY))
def test_binary_special_pairs(vs_torch, name, dtype):
    vs_torch.grads(BINARY[name], *_grid(PAIR, dtype))


@pytest.mark.parametrize("dtype", FLOATS)
def test_remainder_and_floor_divide(vs_torch, dtype):
    a, b = _grid(PAIR, dtype)
    vs_torch.grads(lambda m, x, y: x % y, a, b, grad=False)
    vs_torch.grads(lambda m, x, y: x // y, a, b, grad=False)
    keep = np.isfinite(a) | np.isnan(a)  # PyTorch's b-gradient at a = +-inf is NaN, ours inf
    vs_torch.grads(lambda m, x, y: m.remainder(x, y), a[keep], b[keep])


@pytest.mark.parametrize("name", ["eq", "ne", "lt", "le", "gt", "ge"])
def test_comparisons_special_pairs(vs_torch, name):
    vs_torch.grads(lambda m, a, b: getattr(a, name)(b), *_grid(PAIR, np.float64), grad=False)


INT_BINARY = ["add", "sub", "mul", "div", "div_floor", "div_trunc", "maximum", "minimum"]


@pytest.mark.parametrize("dtype", [np.int64, np.int32])
@pytest.mark.parametrize("name", INT_BINARY + ["floor_divide", "remainder", "pow"])
def test_integer_binary(vs_torch, name, dtype):
    a, b = _grid([0, 1, -1, 2, -2, 3, -3, 7, -7], dtype)
    if name in ("floor_divide", "remainder", "div_floor", "div_trunc"):
        a, b = a[b != 0], b[b != 0]
    if name == "pow":
        a, b = a[b >= 0], b[b >= 0]
    fn = BINARY.get(name) or {"floor_divide": lambda m, x, y: x // y,
                              "remainder": lambda m, x, y: x % y}[name]
    vs_torch.grads(fn, a, b, grad=False)


SCALAR_OPS = {"add": lambda t, s: t + s, "mul": lambda t, s: t * s, "div": lambda t, s: t / s,
              "pow": lambda t, s: t ** s, "rpow": lambda t, s: s ** t,
              "mod": lambda t, s: t % s, "floordiv": lambda t, s: t // s,
              "eq": lambda t, s: t == s, "rsub": lambda t, s: s - t}


@pytest.mark.parametrize("scalar", [2, 2.5, -3, 0.5])
@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.bool_, np.float32, np.float64])
@pytest.mark.parametrize("name", list(SCALAR_OPS))
def test_python_scalar_promotion(vs_torch, name, dtype, scalar):
    if dtype is np.bool_ and name in ("rsub", "mod", "floordiv"):
        pytest.skip("PyTorch rejects these for bool")
    if name == "pow" and scalar == -3 and dtype is not np.float32 and dtype is not np.float64:
        pytest.skip("integers to negative integer powers raise (tested below)")
    x = np.array([1, 2, 3], dtype)
    vs_torch.grads(lambda m, t: SCALAR_OPS[name](t, scalar), x, grad=False)


@pytest.mark.parametrize("zero_d", [(3, np.int64), (2.5, np.float64), (True, np.bool_),
                                    (3, np.int32)])
@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.bool_, np.float32])
def test_zero_dim_tensor_promotion(vs_torch, dtype, zero_d):
    value, zdtype = zero_d
    x, z = np.array([1, 0, 3], dtype), np.array(value, zdtype)
    vs_torch.grads(lambda m, a, b: a * b, x, z, grad=False)
    vs_torch.grads(lambda m, a, b: m.where(a > 0, a, b), x, z, grad=False)


# ---- clamp, activations --------------------------------------------------------------------
CLAMP_X = [-2., -1., -0.5, 0., 0.5, 1., 2., inf, -inf, nan]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("lo,hi", [(-1., 1.), (None, 1.), (-1., None), (0., 0.), (1., -1.),
                                   (0.5, 0.5)])
def test_clamp_scalar_bounds(vs_torch, lo, hi, dtype):
    vs_torch.grads(lambda m, x: x.clamp(lo, hi), np.array(CLAMP_X, dtype))


def test_clamp_tensor_bounds(vs_torch):
    x = np.array(CLAMP_X)
    lo = np.array([-1., -1., 0., 0., 0.5, 1., 2., 0., 0., 0.])
    hi = np.array([1., -2., 0., 1., 0.5, 1., 1., 1., 1., 1.])
    vs_torch.grads(lambda m, a, b, c: a.clamp(b, c), x, lo, hi)
    vs_torch.grads(lambda m, a, b: a.clamp(min=b), x, lo)
    vs_torch.grads(lambda m, a, c: a.clamp(max=c), x, hi)


ACTIVATIONS = [("relu", {}), ("relu6", {}), ("hardtanh", {}),
               ("hardtanh", dict(min_val=-2., max_val=5.)), ("leaky_relu", {}),
               ("leaky_relu", dict(negative_slope=0.2)), ("elu", {}), ("elu", dict(alpha=0.5)),
               ("gelu", {}), ("gelu", dict(approximate="tanh")), ("silu", {}), ("mish", {}),
               ("softplus", {}), ("softplus", dict(beta=2.)),
               ("softplus", dict(beta=0.5, threshold=5.)), ("softplus", dict(beta=-1.)),
               ("logsigmoid", {}), ("tanh", {}), ("sigmoid", {})]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name,kw", ACTIVATIONS, ids=[f"{n}{k}" for n, k in ACTIVATIONS])
def test_activation_extremes(vs_torch, name, kw, dtype):
    x = EXTREME + ([inf] if name != "gelu" else [])  # gelu(inf): inf here, NaN in PyTorch
    # float32 gelu near -5 loses digits to 1 + erf(x) cancellation, in PyTorch as here
    vs_torch.grads(lambda m, t: getattr(m.nn.functional, name)(t, **kw), np.array(x, dtype),
            atol=5e-7 if dtype is np.float32 else None)


# ---- reductions ----------------------------------------------------------------------------
TIES = [[1., 3., 3., 0.], [2., 2., 2., 2.], [-1., nan, 5., 5.], [-inf, -inf, 0., -0.]]
FINITE = [[1., 3., 3., 0.], [2., 2., 2., 2.], [-1., 4., 5., 5.], [-7., 0.5, 0., -0.]]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("dim", [None, 0, 1, -1, (0, 1)])
@pytest.mark.parametrize("name", ["amax", "amin"])
def test_amax_amin_ties_split_evenly(vs_torch, name, dim, keepdim, dtype):
    x = np.array(TIES, dtype)
    if dim is None:
        vs_torch.grads(lambda m, t: getattr(t, name)(), x)
    else:
        vs_torch.grads(lambda m, t: getattr(t, name)(dim, keepdim=keepdim), x)


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("name", ["max", "min"])
def test_max_min_dim_goes_to_the_returned_index(vs_torch, name, dim, keepdim):
    x = np.array(TIES)
    vs_torch.grads(lambda m, t: getattr(t, name)(dim, keepdim=keepdim)[0], x)
    vs_torch.grads(lambda m, t: getattr(t, name)(dim, keepdim=keepdim)[1], x, grad=False)
    vs_torch.grads(lambda m, t: getattr(t, "arg" + name)(dim, keepdim=keepdim), x, grad=False)


@pytest.mark.parametrize("name", ["max", "min"])
def test_max_min_all_ties(vs_torch, name):
    vs_torch.grads(lambda m, t: getattr(t, name)(), np.array(FINITE))
    vs_torch.grads(lambda m, t: getattr(t, "arg" + name)(), np.array(TIES), grad=False)


REDUCTIONS = {"sum": lambda t, d: t.sum(d), "mean": lambda t, d: t.mean(d),
              "logsumexp": lambda t, d: t.logsumexp(d), "softmax": lambda t, d: t.softmax(d),
              "log_softmax": lambda t, d: t.log_softmax(d), "cumsum": lambda t, d: t.cumsum(d)}


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("dim", [0, -1])
@pytest.mark.parametrize("name", list(REDUCTIONS))
def test_reductions_with_special_values(vs_torch, name, dim, dtype):
    vs_torch.grads(lambda m, t: REDUCTIONS[name](t, dim), np.array(TIES, dtype),
            rtol=1e-5 if dtype is np.float32 else None)


@pytest.mark.parametrize("dim", [None, 0, 1])
@pytest.mark.parametrize("correction", [0, 1])
@pytest.mark.parametrize("name", ["std", "var"])
def test_std_var_with_constant_rows(vs_torch, name, correction, dim):
    # a constant row: std's gradient is 0 there (PyTorch), not 0 * inf
    x = np.array(FINITE + [[3., 3., 3., 3.]])
    vs_torch.grads(lambda m, t: getattr(t, name)(dim, correction=correction), x)


@pytest.mark.parametrize("dim", [None, 1])
@pytest.mark.parametrize("p", [2, 1, 3, 0.5, inf, -inf, 0, -1, "fro"])
@pytest.mark.parametrize("rows", [[[0., 0., 0.], [0., 0., 0.]], [[0., 0., 0.], [3., 4., 0.]],
                                  [[3., 3., 3.], [-1., 2., 0.5]]], ids=["zeros", "mixed", "dense"])
def test_norm_at_zero(vs_torch, p, dim, rows):
    if p == "fro" and dim is not None:
        pytest.skip("fro with a dim is the 2-norm")
    vs_torch.grads(lambda m, t: t.norm(p, dim) if dim is not None else t.norm(p), np.array(rows))


@pytest.mark.parametrize("p", [2.0, 1.0])
def test_normalize_zero_rows(vs_torch, p):
    vs_torch.grads(lambda m, t: m.nn.functional.normalize(t, p=p, dim=1),
            np.array([[0., 0., 0.], [3., 4., 0.]]))


@pytest.mark.parametrize("rows", [[[1., 0., 2.], [0., 0., 0.]], [[0., 1., 0.], [2., 3., 4.]],
                                  [[0., 0., 5.], [1., 2., 3.]]])
@pytest.mark.parametrize("dim", [None, 0, 1])
def test_prod_with_zeros(vs_torch, rows, dim):
    vs_torch.grads(lambda m, t: t.prod() if dim is None else t.prod(dim), np.array(rows))


SOFTMAX_ROWS = [[0., 1., 2.], [1000., 0., -1000.], [inf, 1., 0.], [-inf, 1., 0.],
                [-inf, -inf, -inf], [nan, 1., 2.], [inf, inf, 1.]]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("row", SOFTMAX_ROWS)
@pytest.mark.parametrize("name", ["softmax", "log_softmax", "logsumexp"])
def test_softmax_family_extreme_rows(vs_torch, name, row, dtype):
    vs_torch.grads(lambda m, t: getattr(t, name)(0), np.array(row, dtype))
    if name != "logsumexp":
        vs_torch.grads(lambda m, t: getattr(m.nn.functional, name)(t, dim=0),
                np.array(row, dtype))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("stable", [False, True])
@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("dim", [0, -1])
def test_sort_ties_and_nan(vs_torch, dim, descending, stable, dtype):
    x = np.array(TIES, dtype)
    vs_torch.grads(lambda m, t: t.sort(dim=dim, descending=descending, stable=stable), x)
    vs_torch.grads(lambda m, t: t.sort(dim=dim, descending=descending, stable=stable)[1], x,
            grad=False)
    vs_torch.grads(lambda m, t: t.argsort(dim=dim, descending=descending), x, grad=False)


@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("k", [1, 2, 4])
def test_topk(vs_torch, k, largest):
    x = np.array([[1., 3., 2., 0.], [-1., nan, 5., 4.], [-inf, 7., 0., -3.]])
    vs_torch.grads(lambda m, t: t.topk(k, largest=largest), x)
    vs_torch.grads(lambda m, t: t.topk(k, largest=largest)[1], x, grad=False)
    # among equal elements PyTorch's choice is unspecified: compare the values only
    vs_torch.grads(lambda m, t: t.topk(k, largest=largest)[0], np.array(TIES), grad=False)


EMPTY_OPS = {"sum": lambda t, d: t.sum(d), "mean": lambda t, d: t.mean(d),
             "prod": lambda t, d: t.prod(d), "logsumexp": lambda t, d: t.logsumexp(d),
             "softmax": lambda t, d: t.softmax(d), "log_softmax": lambda t, d: t.log_softmax(d),
             "all": lambda t, d: t.all(d), "any": lambda t, d: t.any(d),
             "count_nonzero": lambda t, d: t.count_nonzero(d), "amax": lambda t, d: t.amax(d),
             "std": lambda t, d: t.std(d), "norm": lambda t, d: t.norm(2, d),
             "cumsum": lambda t, d: t.cumsum(d)}


@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("name", list(EMPTY_OPS))
def test_empty_inputs(vs_torch, name, dim):
    x = np.zeros((0, 3))
    if name == "amax" and dim == 0:
        pytest.skip("amax over an empty dim is an error in both")
    grad = name not in ("all", "any", "count_nonzero")
    vs_torch.grads(lambda m, t: EMPTY_OPS[name](t, dim), x, grad=grad)


@pytest.mark.parametrize("name", ["sum", "mean", "amax", "softmax", "log_softmax", "logsumexp",
                                  "cumsum", "std", "norm", "prod", "sort", "topk", "argsort",
                                  "max", "argmax"])
def test_zero_dim_inputs(vs_torch, name):
    fn = {"softmax": lambda m, t: t.softmax(0), "log_softmax": lambda m, t: t.log_softmax(-1),
          "logsumexp": lambda m, t: t.logsumexp(0), "cumsum": lambda m, t: t.cumsum(0),
          "sort": lambda m, t: t.sort(), "topk": lambda m, t: t.topk(1),
          "argsort": lambda m, t: t.argsort(), "max": lambda m, t: t.max(0, keepdim=True),
          "argmax": lambda m, t: t.argmax(0), "std": lambda m, t: t.std(correction=0)}
    fn = fn.get(name, lambda m, t: getattr(t, name)())
    vs_torch.grads(fn, np.array(2.5), grad=name not in ("argsort", "argmax"))


@pytest.mark.parametrize("dtype", [np.int64, np.bool_])
@pytest.mark.parametrize("name", ["sum", "prod", "cumsum", "amax", "max", "min", "all", "any",
                                  "count_nonzero", "nan_to_num", "sign"])
def test_integer_reductions(vs_torch, name, dtype):
    x = np.array([[1, 0], [3, 4]], dtype)
    fn = {"cumsum": lambda m, t: t.cumsum(1)}.get(name, lambda m, t: getattr(t, name)())
    vs_torch.grads(fn, x, grad=False)


# ---- nn.functional ---------------------------------------------------------------------------
def test_sdpa_fully_masked_row(vs_torch):
    q = np.random.RandomState(0).randn(1, 3, 4)
    mask = np.array([[False, False, False], [True, False, False], [True, True, True]])
    vs_torch.grads(lambda m, t: m.nn.functional.scaled_dot_product_attention(
        t, t, t, attn_mask=m.tensor(mask)), q)
    fmask = np.where(mask, 0.0, -inf)
    vs_torch.grads(lambda m, t: m.nn.functional.scaled_dot_product_attention(
        t, t, t, attn_mask=m.tensor(fmask)), q)


def test_bce_with_logits_extremes(vs_torch):
    z = np.array([-1e4, -100., -30., -0., 0., 0., 30., 100., 1e4, inf, -inf])
    t = np.array([0., 1., 0.5, 0., 1., 0.25, 0., 1., 0.3, 1., 0.])
    vs_torch.grads(lambda m, a, b: m.nn.functional.binary_cross_entropy_with_logits(
        a, b, reduction="none"), z, t)


def test_cross_entropy_ignored_rows_with_minus_inf(vs_torch):
    logits = np.array([[1000., 0., -1000.], [-inf, 0., 1.], [0., 0., 0.], [1., 2., 3.]])
    target = np.array([0, 1, 2, 1])
    for kw in ({}, dict(ignore_index=1), dict(ignore_index=1, reduction="sum")):
        vs_torch.grads(lambda m, a, b: m.nn.functional.cross_entropy(a, b, **kw), logits, target)


# ---- closed forms (no torch): the bugs found above -------------------------------------------
def _grad(fn, *values, dtype=ag.float64):
    ts = [ag.tensor(v, dtype=dtype, requires_grad=True) for v in values]
    out = fn(*ts)
    out.sum().backward()
    return out.detach().numpy(), [t.grad.numpy() for t in ts]


def test_closed_abs_sign_at_nan_and_zero():
    v, (g,) = _grad(lambda x: x.abs(), [nan, 0.0, -0.0, -2.0])
    np.testing.assert_array_equal(g, [0.0, 0.0, 0.0, -1.0])
    np.testing.assert_array_equal(ag.tensor([nan, -0.0, 3.0, -inf]).sign().numpy(),
                                  [0.0, 0.0, 1.0, -1.0])
    assert ag.tensor([True, False]).sign().dtype is ag.bool


def test_closed_maximum_minimum_nan_and_ties():
    for f in (ag.maximum, ag.minimum):
        v, (ga, gb) = _grad(f, [nan, 1.0, 2.0, 5.0], [1.0, nan, 2.0, 0.0])
        np.testing.assert_array_equal(ga, [1.0, 1.0, 0.5, 1.0 if f is ag.maximum else 0.0])
        np.testing.assert_array_equal(gb, [1.0, 1.0, 0.5, 0.0 if f is ag.maximum else 1.0])


def test_closed_atan2_at_origin():
    _, (gy, gx) = _grad(ag.atan2, [0.0, 1.0], [0.0, 1.0])
    np.testing.assert_array_equal(gy, [0.0, 0.5])
    np.testing.assert_array_equal(gx, [0.0, -0.5])


def test_closed_rounding_divisions():
    a = ag.tensor([-7, 7, -6, 0])
    assert (a // 2).tolist() == [-4, 3, -3, 0] and (a // 2).dtype is ag.int64
    assert a.div(2, rounding_mode="floor").tolist() == [-4, 3, -3, 0]
    assert a.div(2, rounding_mode="trunc").tolist() == [-3, 3, -3, 0]
    assert a.div(2, rounding_mode="trunc").dtype is ag.int64
    assert (a % -3).tolist() == [-1, -2, 0, 0]
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        a // ag.tensor([1, 0, 1, 1])
    with pytest.raises(ValueError, match="rounding_mode"):
        a.div(2, rounding_mode="round")
    # float: Python's rules at infinities, zero gradients (never NaN) even where b == 0
    x = ag.tensor([1.0, -1.0, inf, 5.5, -0.5], requires_grad=True)
    y = ag.tensor([-inf, inf, 1.0, 0.0, 2.0], requires_grad=True)
    np.testing.assert_array_equal(x.div(y, rounding_mode="floor").detach().numpy(),
                                  [-1.0, -1.0, nan, inf, -1.0])
    np.testing.assert_array_equal((x.detach() // y.detach()).numpy(), [-1.0, -1.0, nan, inf, -1.0])
    x.div(y, rounding_mode="trunc").sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.zeros(5))
    np.testing.assert_array_equal(y.grad.numpy(), np.zeros(5))


def test_closed_remainder_python_semantics():
    v, (ga, gb) = _grad(ag.remainder, [-1.0, 1.0, 5.5, -5.5, 3.0, 1.0],
                        [inf, -inf, -2.0, 2.0, 0.0, 3.0])
    np.testing.assert_array_equal(v, [inf, -inf, -0.5, 0.5, nan, 1.0])
    np.testing.assert_array_equal(ga, np.ones(6))  # d/da = 1 everywhere, also where b == 0
    # d/db = -floor(a / b): -(-1), -(-1), -(-3), -(-3), -inf, -0
    np.testing.assert_array_equal(gb, [1.0, 1.0, 3.0, 3.0, -inf, 0.0])


def test_closed_integer_pow_and_exp2():
    a = ag.tensor([2, -3, 0])
    assert (a ** 3).tolist() == [8, -27, 0] and (a ** 3).dtype is ag.int64
    assert (2 ** a[:1]).dtype is ag.int64 and (2 ** a[:1]).tolist() == [4]
    assert (ag.tensor([True, False]) ** 2).dtype is ag.int64
    assert (a ** ag.tensor([1, 0, 2])).tolist() == [2, 1, 0]
    with pytest.raises(RuntimeError, match="negative integer powers"):
        a ** -1
    e = ag.tensor([3.0, -1.0, 10.0, 0.5]).exp2()  # float32 exact at integers
    assert e.dtype is ag.float32
    np.testing.assert_array_equal(e.numpy()[:3], np.float32([8.0, 0.5, 1024.0]))


def test_closed_zero_dim_tensors_do_not_widen():
    assert (ag.tensor([1, 2], dtype=ag.int32) + ag.tensor(3)).dtype is ag.int32
    assert (ag.ones(2) * ag.tensor(2.0, dtype=ag.float64)).dtype is ag.float32
    assert (ag.tensor([1, 2]) * ag.tensor(2.0, dtype=ag.float64)).dtype is ag.float64
    assert (ag.tensor(1.0, dtype=ag.float64) * ag.tensor(2.0)).dtype is ag.float64
    with pytest.raises(RuntimeError, match="bool tensor is not supported"):
        ag.tensor([1, 2]) - True


def test_closed_clamp_gradients():
    _, (g,) = _grad(lambda x: x.clamp(-1.0, 1.0), [nan, -1.0, 1.0, 0.0, 2.0])
    np.testing.assert_array_equal(g, [0.0, 1.0, 1.0, 1.0, 0.0])
    x, lo, hi = [-2.0, 0.0, 5.0, -2.0], [-1.0, -1.0, -1.0, 0.0], [1.0, 1.0, 1.0, 0.0]
    v, (gx, glo, ghi) = _grad(lambda a, b, c: a.clamp(b, c), x, lo, hi)
    np.testing.assert_array_equal(v, [-1.0, 0.0, 1.0, 0.0])
    np.testing.assert_array_equal(gx, [0.0, 1.0, 0.0, 0.0])
    np.testing.assert_array_equal(glo, [1.0, 0.0, 0.0, 0.0])  # lo == hi: nobody's
    np.testing.assert_array_equal(ghi, [0.0, 0.0, 1.0, 0.0])
    assert np.isnan(ag.tensor([1.0]).clamp(min=ag.tensor([nan])).item())


def test_closed_hardtanh_relu6_bounds():
    _, (g,) = _grad(F.relu6, [0.0, 6.0, 3.0, -1.0, 7.0, nan])
    np.testing.assert_array_equal(g, [0.0, 0.0, 1.0, 0.0, 0.0, 1.0])
    v, (g,) = _grad(lambda x: F.hardtanh(x, -2.0, 5.0), [-2.0, 5.0, 0.0, -3.0])
    np.testing.assert_array_equal(v, [-2.0, 5.0, 0.0, -2.0])
    np.testing.assert_array_equal(g, [0.0, 0.0, 1.0, 0.0])


def test_closed_elu_softplus_logsigmoid():
    _, (g,) = _grad(F.elu, [800.0, 1e4, inf, nan, 0.0, -1.0])
    assert_close(g, [1.0, 1.0, 1.0, 1.0, 1.0, math.exp(-1.0)], rtol=1e-7, atol=0, equal_nan=True)
    for f, want in ((F.softplus, 0.5), (F.logsigmoid, 0.5), (lambda x: F.softplus(x, 2.0), 0.5)):
        _, (g,) = _grad(f, [0.0])
        assert g[0] == want
    v, (g,) = _grad(F.softplus, [-800.0, 800.0, 3.0])
    assert_close(v, [0.0, 800.0, math.log1p(math.exp(3.0))], rtol=1e-7, atol=0, equal_nan=True)
    assert_close(g, [0.0, 1.0, 1 / (1 + math.exp(-3.0))], rtol=1e-7, atol=0, equal_nan=True)
    z, t = [0.0, 0.0, 20.0], [0.0, 1.0, 1.0]
    _, (gz, _) = _grad(lambda a, b: F.binary_cross_entropy_with_logits(a, b, reduction="sum"),
                       z, t)
    assert_close(gz, [0.5, -0.5, 1 / (1 + math.exp(-20.0)) - 1.0], rtol=1e-7, atol=0,
                 equal_nan=True)


def test_closed_std_norm_at_zero():
    for f in (lambda x: x.std(), lambda x: x.norm(), lambda x: x.norm(3),
              lambda x: x.norm(0.5), lambda x: x.std(1, correction=0)):
        _, (g,) = _grad(f, [[2.0, 2.0], [2.0, 2.0]] if f(ag.ones(1, 1)).ndim else [[0.0, 0.0]])
        np.testing.assert_array_equal(g, np.zeros_like(g))
    _, (g,) = _grad(lambda x: x.norm(), [[0.0, 0.0]])
    np.testing.assert_array_equal(g, [[0.0, 0.0]])
    _, (g,) = _grad(lambda x: F.normalize(x, dim=1), [[0.0, 0.0], [3.0, 4.0]])
    assert np.isfinite(g).all()
    assert ag.tensor([[0.0, 2.0], [1.0, 1.0]]).norm(0).item() == 3.0
    assert ag.tensor([-3.0, 0.5, 2.0]).norm(-inf).item() == 0.5


def test_closed_log_softmax():
    x = ag.tensor([inf, 1.0, 0.0]).log_softmax(0).numpy()
    assert np.isnan(x).all()  # PyTorch's formula: x - max is NaN at inf
    x32 = ag.tensor([0.0, 2.0, 5.0, -0.0]).log_softmax(0).numpy()  # float32: x - m first
    ref = np.array([0.0, 2.0, 5.0, 0.0]) - 5.0
    ref -= np.log(np.exp(ref).sum())
    assert_close(x32, ref, rtol=3e-7, atol=0, equal_nan=True, check_dtype=False)


def test_closed_argsort_descending_is_stable():
    x = ag.tensor([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 2.0, 2.0], [nan, 1.0, nan, 5.0]])
    assert x.argsort(-1, descending=True).tolist() == [[1, 2, 0, 3], [0, 1, 2, 3], [0, 2, 3, 1]]
    assert x.sort(-1, descending=True)[1].tolist()[1] == [0, 1, 2, 3]
    assert x.argsort(-1).tolist()[1] == [0, 1, 2, 3]


def test_closed_empty_and_zero_dim():
    e = ag.zeros(0, 3)
    assert e.all().item() is True and e.any().item() is False
    assert e.all(0).tolist() == [True] * 3 and e.any(0, keepdim=True).shape == (1, 3)
    assert e.logsumexp(0).tolist() == [-inf] * 3
    assert e.softmax(0).shape == (0, 3) and e.log_softmax(1).shape == (0, 3)
    s = ag.tensor(2.5, requires_grad=True)
    assert s.cumsum(0).item() == 2.5 and s.sort()[0].item() == 2.5
    assert s.sort()[1].item() == 0 and s.topk(1)[0].item() == 2.5
    assert ag.tensor([1, 2]).nan_to_num().tolist() == [1, 2]


def test_closed_sdpa_fully_masked_row_is_zero():
    q = ag.tensor(np.random.RandomState(1).randn(2, 3), requires_grad=True)
    mask = ag.tensor([[True, False], [False, False]])
    out = F.scaled_dot_product_attention(q, q, q, attn_mask=mask)
    np.testing.assert_array_equal(out.detach().numpy()[1], np.zeros(3))
    out.sum().backward()
    assert np.isfinite(q.grad.numpy()).all()


def test_closed_losses_without_nan_gradients():
    x = ag.tensor([0.0, 1.0, 0.5], requires_grad=True)  # a saturated sigmoid gives 0 or 1
    F.binary_cross_entropy(x, ag.tensor([0.0, 1.0, 1.0]), reduction="sum").backward()
    # PyTorch's (x - t) / max(x (1 - x), 1e-12): 0 where the input equals the target
    assert_close(x.grad.numpy(), [0.0, 0.0, -2.0], rtol=1e-7, atol=0, equal_nan=True)
    logits = ag.tensor([[-inf, 0.0], [0.0, 1.0]], requires_grad=True)
    loss = F.cross_entropy(logits, ag.tensor([0, 1]), ignore_index=0)
    assert np.isfinite(loss.item())
    loss.backward()
    assert np.isfinite(logits.grad.numpy()).all()


# ---- closed forms of the tie, NaN and pow edge cases above (they hold without torch) --------
def test_closed_amax_amin_ties_split_the_gradient_evenly():
    rows = [[1., 3., 3., 0.], [2., 2., 2., 2.], [-inf, -inf, 0., -0.]]
    for dtype in (ag.float64, ag.float32):
        v, (g,) = _grad(lambda t: t.amax(1), rows, dtype=dtype)
        np.testing.assert_array_equal(v, [3., 2., 0.])
        # the maximum's gradient is shared by the elements equal to it (0 and -0 are equal)
        np.testing.assert_array_equal(g, [[0, .5, .5, 0], [.25] * 4, [0, 0, .5, .5]])
        v, (g,) = _grad(lambda t: t.amin(1), rows, dtype=dtype)
        np.testing.assert_array_equal(v, [0., 2., -inf])
        np.testing.assert_array_equal(g, [[0, 0, 0, 1], [.25] * 4, [.5, .5, 0, 0]])
    v, (g,) = _grad(lambda t: t.amax(), rows)          # over all elements: 3 appears twice
    assert v == 3. and g.sum() == 1. and g[0, 1] == g[0, 2] == .5
    v, (g,) = _grad(lambda t: t.amax(0, keepdim=True), [[1., 5.], [1., 2.]])
    np.testing.assert_array_equal(v, [[1., 5.]])
    np.testing.assert_array_equal(g, [[.5, 1.], [.5, 0.]])


def test_closed_max_min_with_dim_take_the_first_tied_index():
    rows = [[1., 3., 3., 0.], [2., 2., 2., 2.], [-1., nan, 5., 5.]]
    x = ag.tensor(rows, dtype=ag.float64, requires_grad=True)
    v, i = x.max(1)
    np.testing.assert_array_equal(v.detach().numpy(), [3., 2., nan])   # NaN propagates
    assert i.tolist() == [1, 0, 1] and x.argmax(1).tolist() == [1, 0, 1]
    v.sum().backward()                                 # the gradient goes to that index only
    np.testing.assert_array_equal(x.grad.numpy(), [[0, 1, 0, 0], [1, 0, 0, 0], [0, 1, 0, 0]])
    x.grad = None
    v, i = x.min(1)
    np.testing.assert_array_equal(v.detach().numpy(), [0., 2., nan])
    assert i.tolist() == [3, 0, 1] and x.argmin(1).tolist() == [3, 0, 1]
    v.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[0, 0, 0, 1], [1, 0, 0, 0], [0, 1, 0, 0]])


def test_closed_max_min_over_all_elements():
    v, (g,) = _grad(lambda t: t.max(), [[1., 5.], [5., -7.]])
    assert v == 5. and g.tolist() == [[0., .5], [.5, 0.]]      # ties share, like amax
    v, (g,) = _grad(lambda t: t.min(), [[1., 5.], [5., -7.]])
    assert v == -7. and g.tolist() == [[0., 0.], [0., 1.]]
    t = ag.tensor([[-1., 3.], [nan, -inf], [-inf, 3.]])
    assert t.argmax().item() == 2 and t.argmin().item() == 2   # NaN wins both, first one
    assert ag.tensor([[0., 7.], [7., -inf], [-inf, 1.]]).argmax().item() == 1
    assert ag.tensor([[0., 7.], [7., -inf], [-inf, 1.]]).argmin().item() == 3


def test_closed_pow_at_zero_one_and_nan():
    # IEEE pow: x ** 0 == 1 for every x (NaN too), 1 ** y == 1 for every y (NaN too),
    # 0 ** negative == +inf, -0.0 ** negative odd integer == -inf
    x = [0., nan, 1., 1., 0., -0., 0.]
    y = [0., 0., nan, inf, -1., -1., .5]
    v, (gx, gy) = _grad(lambda a, b: a ** b, x, y)
    np.testing.assert_array_equal(v, [1., 1., 1., 1., inf, -inf, 0.])
    # d/dx = y x^(y-1), taken as 0 where y == 0; d/dy = x^y log(x), taken as 0 where x == 0
    # and y >= 0 (the limits PyTorch uses, so that 0 ** 0 trains without NaN)
    assert gx[0] == 0. and gy[0] == 0.
    assert gx[1] == 0.                                 # y == 0: the constant 1
    assert gx[6] == inf and gy[6] == 0.                # d/dx sqrt(x) at 0; 0 ** y for y > 0
    assert (ag.tensor([0, 2, -3]) ** 0).tolist() == [1, 1, 1]
    assert (ag.tensor([0]) ** ag.tensor([0])).tolist() == [1]
    assert (ag.tensor(0.) ** 0).item() == 1. and (0. ** ag.tensor([0.])).tolist() == [1.]
