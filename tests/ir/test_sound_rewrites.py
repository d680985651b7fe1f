"""Every rewrite between the user's ops and the machine code keeps eager's answer on the awkward
floats: NaN, +-inf, -0.0, 0.0, denormals, values near float32 overflow.

The rewrites: the IR passes (identity removal, transpose folding, reductions moved above
reshapes), the emit templates and peepholes (1 - tanh(y)^2,
1 - logistic(x), pow by small constants), the float32 approximations, and whatever LLVM may
do to a kernel (with fast-math flags it folded exp(log(x)) -> x, log(exp(x)) -> x, regrouped
x * c1 * c2, turned a / y + b / y into a * (1 / y) + ...). Each pattern runs eagerly and
compiled on both backends, values and gradients: where the compiled code computes the same
IEEE operations the results must agree bit for bit (NaN where NaN, the sign of zero); where it
uses an approximation, the special values must agree exactly and finite values within its
error bound.
"""
import warnings

import numpy as np
import pytest

import aotgrad as ag
from aotgrad.testing import assert_close

DENORMAL32 = float(np.float32(1e-40))
SPECIAL = [float("nan"), float("inf"), float("-inf"), -0.0, 0.0, DENORMAL32, -DENORMAL32,
           1e38, -1e38, -2.0, -0.5, 0.5, 1.0, 3.0, 1e-30, 88.0, 100.0, -100.0, 1000.0,
           2e19, -3e19, 1e-15]

# (name, fn, approximated): approximated patterns go through exp/log/tanh/logistic/erf
# approximations or rsqrt in float32, or round twice where eager rounds once (x ** -2 as
# (1 / x) / x): special values exact, finite values within APPROX_RTOL
PATTERNS = [
    ("exp_log", lambda x: ag.exp(ag.log(x)), True),
    ("log_exp", lambda x: ag.log(ag.exp(x)), True),
    ("x_div_sqrt", lambda x: x / ag.sqrt(x.abs() + 0.0), False),
    ("x_div_2sqrt", lambda x: x / (ag.sqrt(x.abs()) * 2.0), False),
    ("rsqrt", lambda x: ag.rsqrt(x), True),
    ("sqrt_backward", lambda x: ag.sqrt(x), True),
    ("one_minus_tanh_sq", lambda x: 1.0 - ag.tanh(x) * ag.tanh(x), True),
    ("one_minus_sigmoid", lambda x: 1.0 - ag.sigmoid(x), True),
    ("pow_2", lambda x: x ** 2, False),
    ("pow_3", lambda x: x ** 3, True),
    ("pow_half", lambda x: x ** 0.5, False),
    ("pow_m1", lambda x: x ** -1, False),
    ("pow_m_half", lambda x: x ** -0.5, True),
    ("pow_1_5", lambda x: x ** 1.5, True),     # its gradient is 1.5 * pow(x, 0.5)
    ("pow_tensor_half", lambda x: ag.pow(x, ag.full_like(x, 0.5)), True),   # sqrt vs powf: 1 ulp
    ("pow_m2", lambda x: x ** -2, True),
    ("x_times_0", lambda x: x * 0.0, False),
    ("x_minus_x", lambda x: x - x, False),
    ("x_div_x", lambda x: x / x, False),
    ("const_chain_mul", lambda x: x * 1e10 * 1e-10, False),
    ("const_chain_add", lambda x: (x + 3e38) - 3e38, False),
    ("shared_divisor", lambda x: 1e-30 / x + 1.0 / x, False),
    ("fma_cancel", lambda x: ag.sqrt(x * x - x * x), False),
    ("max_min_nan", lambda x: ag.maximum(x, -x) - ag.minimum(x, 0.5), False),
    ("neg_abs_sign", lambda x: -x.abs() * x.sign(), False),
    ("where_zero", lambda x: ag.where(x > 0, x, -0.0 * x), False),
    ("relu_clamp", lambda x: ag.relu(x).clamp(max=2.0), False),
    ("reshape_identity_chain", lambda x: x.reshape(-1, 1).reshape(-1).t() * 1.0, False),
]

APPROX_RTOL = 2e-6   # float32 approximations: 5e-7 relative each, a few ops chained
# 1 - tanh(x)^2 compiled is computed from exp(-2|x|): *more* accurate than eager's float32
# 1 - t*t, which cancels (4e-6 relative at x = 3); its bound is looser
RTOL = {"one_minus_tanh_sq": 1e-5}



def _inputs(dtype):
    x = np.array(SPECIAL, dtype=dtype.np)
    return x


def _grads(fn, x_np, dtype, mode):
    x = ag.tensor(x_np.copy(), dtype=dtype, requires_grad=True)
    f = fn if mode == "eager" else ag.compile(fn, backend=mode, fullgraph=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y = f(x)
        y.sum().backward()
    return y.detach().numpy(), x.grad.numpy()


def _assert_same(actual, expected, approximated, what, rtol=APPROX_RTOL):
    """NaN where NaN, inf where inf (same sign), the sign of zero, then values: bit for bit,
    or within the approximation's bound."""
    a, e = np.asarray(actual), np.asarray(expected)
    assert a.dtype == e.dtype, (what, a.dtype, e.dtype)
    assert np.array_equal(np.isnan(a), np.isnan(e)), (what, a, e)
    fin = ~np.isnan(e)
    assert np.array_equal(a[fin & np.isinf(e)], e[fin & np.isinf(e)]), (what, a, e)
    assert np.array_equal(np.isinf(a), np.isinf(e)), (what, a, e)
    zero = e == 0
    assert np.array_equal(np.signbit(a[zero]), np.signbit(e[zero])) or approximated, \
        (what, "sign of zero", a, e)
    finite = np.isfinite(e)
    if approximated:
        assert_close(a[finite], e[finite], rtol=rtol, atol=np.finfo(e.dtype).tiny, equal_nan=True,
                     msg=what)
    else:
        assert np.array_equal(a[finite], e[finite]), (what, a, e)


@pytest.mark.parametrize("backend", ["interpret", "numba"])
@pytest.mark.parametrize("name,fn,approximated", PATTERNS, ids=[p[0] for p in PATTERNS])
def test_rewrite_keeps_eager_answers_float32(name, fn, approximated, backend):
    x = _inputs(ag.float32)
    ey, eg = _grads(fn, x, ag.float32, "eager")
    cy, cg = _grads(fn, x, ag.float32, backend)
    approx = approximated and backend == "numba"
    rtol = RTOL.get(name, APPROX_RTOL)
    _assert_same(cy, ey, approx, f"{name} value", rtol)
    _assert_same(cg, eg, approx, f"{name} gradient", rtol)


F64_PATTERNS = [p for p in PATTERNS if p[0] in (
    "exp_log", "log_exp", "const_chain_mul", "shared_divisor", "fma_cancel", "x_div_sqrt",
    "one_minus_tanh_sq")]


# float64 patterns through codegen.approx's float64 exp and tanh (within 3 ulp each)
F64_APPROXIMATED = {"exp_log", "log_exp", "one_minus_tanh_sq"}
APPROX_RTOL64 = 1e-14


@pytest.mark.parametrize("name,fn,approximated", F64_PATTERNS, ids=[p[0] for p in F64_PATTERNS])
def test_rewrite_keeps_eager_answers_float64(name, fn, approximated):
    """float64 kernels agree with eager bit for bit, but where they go through the float64
    exp and tanh approximations: special values exact, finite values within a few ulp (LLVM
    folded exp(log(x)) and log(exp(x)) here under fast-math flags)."""
    x = _inputs(ag.float64)
    ey, eg = _grads(fn, x, ag.float64, "eager")
    cy, cg = _grads(fn, x, ag.float64, "numba")
    approx = name in F64_APPROXIMATED
    _assert_same(cy, ey, approx, f"{name} value", APPROX_RTOL64)
    _assert_same(cg, eg, approx, f"{name} gradient", APPROX_RTOL64)


@pytest.mark.parametrize("dtype", [ag.float32, ag.float64])
def test_reductions_keep_special_values(dtype):
    """Sums/max/min reordered for vectorisation still give NaN/inf where eager does, whatever
    the order; finite rows agree to the rounding of the summation order."""
    nan, inf = float("nan"), float("inf")
    x = np.array([[nan, 1.0, 2.0, -1.0], [inf, 1.0, -3.0, 0.5], [-inf, 2.0, 0.5, 1.0],
                  [inf, -inf, 1.0, 1.0], [-0.0, -0.0, -0.0, -0.0],
                  [DENORMAL32, DENORMAL32, 1.0, -1.0], [1e30, -2.0, 0.25, 3.0],
                  [nan, inf, -inf, 0.0]], dtype=dtype.np)
    x = np.tile(x, (1, 40))   # long enough rows for vectorised loops

    def fn(t):
        return t.sum(1), t.amax(1), t.amin(1), t.prod(1), (t * 2.0).sum(0), t.mean(1)
    with np.errstate(all="ignore"):
        e = [v.numpy() for v in fn(ag.tensor(x, dtype=dtype))]
    c = [v.numpy() for v in ag.compile(fn, fullgraph=True)(ag.tensor(x, dtype=dtype))]
    for a, b in zip(c, e):
        assert np.array_equal(np.isnan(a), np.isnan(b)), (a, b)
        assert np.array_equal(a[np.isinf(b)], b[np.isinf(b)]), (a, b)
        fin = np.isfinite(b)
        assert_close(a[fin], b[fin], rtol=1e-5, atol=1e-30, equal_nan=True)


def test_kernels_have_no_fast_math_flags():
    """The generated module asks numba for no fast-math on whole kernels; reassociation is
    given to the accumulating instruction of a reduction only."""
    from aotgrad.codegen import prelude
    assert "fastmath" not in prelude.PRELUDE
    f = ag.compile(lambda t: (ag.exp(t) * 2.0).sum(1), fullgraph=True)
    src = f.ir(ag.rand(4, 8)).source
    assert "fastmath" not in src and "_radd(" in src
