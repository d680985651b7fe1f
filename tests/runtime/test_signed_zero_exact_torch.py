"""Answers that must be PyTorch's to the last bit: the sign of a zero result (relu, scans,
xlogy), the exact remainder (fmod, remainder, floor division with quotients past 2**24) and
var/std of values whose float32 sum overflows. Each is checked eager, compiled with both
backends, against closed forms (numpy's exact fmod and its Python-style remainder and floor
division of the same dtype, variances in float64) and against PyTorch where it is installed.

Not asserted here: which zero maximum/minimum/clamp (tensor bounds) and amax/amin return on
a tie of 0.0 and -0.0. PyTorch's CPU kernels answer differently in their vectorised body (the
second operand) and their scalar tail (the first), so a tensor's answer depends on where the
element sits and on the CPU's vector width; aotgrad returns the first operand everywhere.
"""
import math

import numpy as np
import pytest

import aotgrad as ag
import aotgrad.nn.functional as F

# numpy's reference prims warn on 1/0, fmod(x, 0), ...; PyTorch is silent
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

# the numba backend compiles a kernel per test (seconds): by default only where a kernel
# template is the subject (fmod's); the others run it under -m slow
MODES = [None, "interpret", pytest.param("numba", marks=pytest.mark.slow)]
MODES_NUMBA = [None, "interpret", "numba"]
nan, inf = math.nan, math.inf


def _run(fn, mode, *arrays):
    f = fn if mode is None else ag.compile(fn, backend=mode)
    out = f(*[ag.tensor(a) for a in arrays])
    return [np.asarray(t.detach().numpy()) for t in (out if isinstance(out, tuple) else (out,))]


def _bits_equal(got, want, what):
    """Equal values, NaN positions and signs of zero."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} vs {want.dtype}"
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    same &= (np.signbit(got) == np.signbit(want)) | np.isnan(want)
    assert same.all(), f"{what}: at {np.flatnonzero(~same)[:5]}: {got[~same][:5]} vs " \
                       f"{want[~same][:5]}"


# ---- sign of zero ------------------------------------------------------------------------
RELU_IN = np.array([-0.0, 0.0, -1.0, 1.0, -1e-40, nan, -inf, inf], np.float32)
RELU_OUT = np.array([-0.0, 0.0, 0.0, 1.0, 0.0, nan, 0.0, inf], np.float32)
RELU_GRAD = np.array([0, 0, 0, 1, 0, 1, 0, 1], np.float32)   # PyTorch: 0 where x <= 0


@pytest.mark.parametrize("mode", MODES)
def test_relu_keeps_negative_zero_and_has_pytorch_gradient(mode):
    x = ag.tensor(RELU_IN, requires_grad=True)
    f = (lambda t: ag.relu(t) * 1.0) if mode is None else \
        ag.compile(lambda t: ag.relu(t) * 1.0, backend=mode)
    y = f(x)
    y.sum().backward()
    _bits_equal(y.detach().numpy(), RELU_OUT, "relu")
    _bits_equal(x.grad.numpy(), RELU_GRAD, "relu gradient")


def test_relu_forward_mode_tangent_and_saved_mask():
    """jvp's tangent is PyTorch's too: 0 where x <= 0 (the zero's own value carries none)."""
    _, tangent = ag.func.jvp(ag.relu, (ag.tensor(RELU_IN),), (ag.ones(len(RELU_IN)),))
    _bits_equal(tangent.numpy(), RELU_GRAD, "relu tangent")
    f = ag.compile(lambda t: ag.relu(t).sum(), backend="interpret")
    x = ag.tensor(RELU_IN, requires_grad=True)
    f(x).backward()
    _bits_equal(x.grad.numpy(), RELU_GRAD, "compiled relu gradient")


@pytest.mark.parametrize("mode", MODES)
def test_zero_signs_of_relu_scans_and_xlogy(mode):
    def f(x):
        return (F.relu(x), ag.nn.ReLU()(x), F.relu(x.clone(), inplace=True),
                ag.cumsum(x[:2], 0), ag.logcumsumexp(x[:2], 0),
                ag.xlogy(x[:2], ag.tensor([1.0, 2.0])), ag.special.xlog1py(x[:2], x[:2]))
    x = np.array([-0.0, -0.0, 1.0, -1.0], np.float32)
    want = [np.array([-0.0, -0.0, 1.0, 0.0], np.float32)] * 3 + \
        [np.zeros(2, np.float32), np.array([0.0, math.log(2)], np.float32),
         np.zeros(2, np.float32), np.zeros(2, np.float32)]
    for i, (g, w) in enumerate(zip(_run(f, mode, x), want)):
        _bits_equal(g, w, f"output {i}")


def test_zero_signs_like_torch(torch):
    x = np.array([-0.0, -0.0, 0.0, -1.0, 2.0], np.float32)
    cases = [lambda M, t: M.relu(t), lambda M, t: M.nn.functional.relu6(t),
             lambda M, t: M.nn.functional.hardtanh(t, 0.0, 1.0), lambda M, t: t.clamp(min=0),
             lambda M, t: M.cumsum(t, 0), lambda M, t: M.cumsum(t[:1], 0),
             lambda M, t: M.cumsum(t[0], 0), lambda M, t: M.cumprod(t, 0),
             lambda M, t: M.logcumsumexp(t, 0), lambda M, t: M.cummax(t, 0)[0],
             lambda M, t: M.xlogy(t, t.abs() + 1), lambda M, t: t.sum(),
             lambda M, t: M.sign(t), lambda M, t: M.abs(t)]
    for i, case in enumerate(cases):
        want = case(torch, torch.tensor(x)).numpy()
        _bits_equal(case(ag, ag.tensor(x)).numpy(), want, f"case {i}")


# ---- exact remainders --------------------------------------------------------------------
def _remainder_inputs(dtype):
    rng = np.random.default_rng(0)
    a = rng.standard_normal(64) * rng.choice([1.0, 1e3, 1e8, 1e20, 1e30], 64)
    b = rng.standard_normal(64) * rng.choice([1e-3, 1.0, 7.0], 64)
    special = [0.0, -0.0, 7.5, -7.5, 0.1, -0.1, 3.0, -2.0, inf, -inf, nan]
    sa, sb = np.meshgrid(special, special)
    return (np.concatenate([a, sa.ravel()]).astype(dtype),
            np.concatenate([b, sb.ravel()]).astype(dtype))


@pytest.mark.parametrize("mode", MODES_NUMBA)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fmod_remainder_floor_divide_are_exact(mode, dtype):
    """numpy's fmod is exact and its remainder/floor_divide follow Python (and PyTorch):
    from the exact fmod, not from a rounded a / b. A zero remainder keeps fmod's zero (a's
    sign) in PyTorch, where Python and numpy give it b's sign."""
    a, b = _remainder_inputs(dtype)
    got = _run(lambda x, y: (ag.fmod(x, y), ag.remainder(x, y), x // y,
                             ag.div(x, y, rounding_mode="floor")), mode, a, b)
    with np.errstate(all="ignore"):
        rem = np.remainder(a, b)
        want = [np.fmod(a, b), np.where(rem == 0, np.fmod(a, b), rem), np.floor_divide(a, b),
                np.floor_divide(a, b)]
    for name, g, w in zip(["fmod", "remainder", "//", "div floor"], got, want):
        _bits_equal(g, w, name)


def test_fmod_and_remainder_gradients():
    """d/da = 1; d/db = -trunc(a / b) for fmod, -floor(a / b) for remainder (PyTorch)."""
    a0, b0 = [5.5, -5.5, 7.0, -0.5], [2.0, 2.0, -3.0, 2.0]
    for fn, rnd in [(ag.fmod, np.trunc), (ag.remainder, np.floor)]:
        a = ag.tensor(a0, requires_grad=True)
        b = ag.tensor(b0, requires_grad=True)
        fn(a, b).sum().backward()
        np.testing.assert_array_equal(a.grad.numpy(), np.ones(4, np.float32))
        np.testing.assert_array_equal(b.grad.numpy(),
                                      -rnd(np.array(a0) / np.array(b0)).astype(np.float32))


def test_exact_remainders_like_torch(torch):
    for dtype in (np.float32, np.float64):
        a, b = _remainder_inputs(dtype)
        for case in [lambda M, x, y: M.fmod(x, y), lambda M, x, y: M.remainder(x, y),
                     lambda M, x, y: x // y, lambda M, x, y: M.remainder(x, 0.1),
                     lambda M, x, y: M.fmod(x, -2.0)]:
            want = case(torch, torch.tensor(a), torch.tensor(b)).numpy()
            _bits_equal(case(ag, ag.tensor(a), ag.tensor(b)).numpy(), want, "vs torch")


# ---- var / std where the float32 sum overflows ---------------------------------------------
def _huge_rows():
    x = np.full((3, 5), 3e38, np.float32)
    x[1] = [3e38, -3e38, 1e38, 2e38, 3e38]
    x[2] = np.random.default_rng(1).standard_normal(5)
    return x


@pytest.mark.parametrize("mode", MODES)
def test_var_std_of_huge_rows_are_finite_and_float32(mode):
    x = _huge_rows()
    got = _run(lambda t: (t.var(1), t.std(1), *ag.var_mean(t, 1), *ag.std_mean(t, 1, correction=0)),
               mode, x)
    w = x.astype(np.float64)
    want = [w.var(1, ddof=1), w.std(1, ddof=1), w.var(1, ddof=1), w.mean(1),
            w.std(1), w.mean(1)]
    for i, (g, e) in enumerate(zip(got, want)):
        assert g.dtype == np.float32, f"output {i}: {g.dtype}"
        with np.errstate(over="ignore"):
            e = e.astype(np.float32)   # row 1's variance (1.2e77) is inf in float32, its std not
        np.testing.assert_allclose(g, e, rtol=2e-6, err_msg=f"output {i}")
    assert np.isfinite(got[1]).all() and got[0][0] == 0


def test_var_std_gradients_stay_float32():
    x = ag.tensor(_huge_rows()[2:], requires_grad=True)
    x.std(1).sum().backward()
    v = x.detach().numpy().astype(np.float64)
    d = v - v.mean(1, keepdims=True)
    want = d / (4 * np.sqrt((d * d).sum(1, keepdims=True) / 4))
    assert x.grad.dtype == ag.float32
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-5)


def test_var_std_like_torch(torch):
    """PyTorch's CPU var/std accumulate in double; with one output element they centre on
    the float32 mean (inf where the sum overflows), var_mean never does."""
    x = _huge_rows()
    cases = [lambda M, t: t.var(1), lambda M, t: t.std(1), lambda M, t: M.var_mean(t, 1),
             lambda M, t: M.std_mean(t, 0), lambda M, t: t[0].var(), lambda M, t: t.std(),
             lambda M, t: M.var_mean(t[0]), lambda M, t: t[:1].var(1),
             lambda M, t: t[2].double().var(), lambda M, t: t.var(0, keepdim=True)]
    for i, case in enumerate(cases):
        ours, ref = case(ag, ag.tensor(x)), case(torch, torch.tensor(x))
        ours, ref = (ours, ref) if isinstance(ours, tuple) else ((ours,), (ref,))
        for o, r in zip(ours, ref):
            assert str(o.dtype).split(".")[-1] == str(r.dtype).split(".")[-1]
            np.testing.assert_allclose(o.numpy(), r.numpy(), rtol=2e-6,
                                       err_msg=f"case {i}")


# ---- found by the adversarial sweep ---------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
def test_round_keeps_the_sign_of_zero_and_takes_decimals(mode):
    """C's nearbyint: half to even, a zero result with x's sign (round(-0.4) is -0.0);
    decimals as PyTorch: round(x * 10^d) / 10^d in x's dtype, or round(x / 10^-d) * 10^-d."""
    x = np.array([-0.5, -0.4, -0.0, 0.4, 0.5, 1.5, 2.5, -2.5, -1e-40, nan, -inf, 0.05, -0.05,
                  1234.5678, 25.0, -35.0], np.float32)
    got = _run(lambda t: (ag.round(t), ag.round(t, decimals=2), t.round(decimals=-1)), mode, x)
    want = [np.round(x), np.round(x * np.float32(100)) / np.float32(100),
            np.round(x / np.float32(10)) * np.float32(10)]
    for name, g, w in zip(["round", "decimals=2", "decimals=-1"], got, want):
        _bits_equal(g, w, name)


def test_round_nodes_and_integer_decimals():
    x = ag.tensor([0.5, 1.25], requires_grad=True)
    y, y2 = ag.round(x), ag.round(x, decimals=1)
    assert y.grad_fn.name() == "RoundBackward0" and y2.grad_fn.name() == "RoundBackward1"
    assert len(y.grad_fn.next_functions) == 1   # one node over x, as PyTorch's
    (y + y2).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 0.0])
    np.testing.assert_array_equal(ag.round(ag.tensor([15, -25])).numpy(), [15, -25])
    with pytest.raises(NotImplementedError, match="round_cpu.*Long"):
        ag.round(ag.tensor([15]), decimals=-1)


@pytest.mark.parametrize("mode", MODES)
def test_hypot_does_not_overflow(mode):
    a = np.array([0.0, 3.0, 1e30, -1e30, 3e38, 1e-30, inf, nan, 0.0], np.float32)
    b = np.array([1e30, 4.0, 1e30, 0.0, 3e38, 1e-30, nan, -inf, 0.0], np.float32)
    got, = _run(lambda x, y: ag.hypot(x, y), mode, a, b)
    want = np.hypot(a.astype(np.float64), b.astype(np.float64)).astype(np.float32)
    np.testing.assert_allclose(got, want, rtol=2e-7)
    assert got.dtype == np.float32


def test_hypot_gradient_is_pytorchs():
    a = ag.tensor([3.0, 0.0, -1e30], requires_grad=True)
    b = ag.tensor([4.0, 0.0, 1e30], requires_grad=True)
    h = ag.hypot(a, b)
    assert h.grad_fn.name() == "HypotBackward0"
    h.sum().backward()   # a / hypot, b / hypot: NaN at (0, 0)
    np.testing.assert_allclose(a.grad.numpy(), [0.6, nan, -math.sqrt(0.5)], rtol=1e-6)
    np.testing.assert_allclose(b.grad.numpy(), [0.8, nan, math.sqrt(0.5)], rtol=1e-6)


@pytest.mark.parametrize("mode", MODES)
def test_signed_zero_of_xlogy_hardswish_logsigmoid(mode):
    x = np.array([-0.0, 0.0, -1.0, -2.0, -3.5, 1e30], np.float32)
    y = np.array([1.0, 2.0, 1.0, 1.0, 0.0, 1.0], np.float32)
    got = _run(lambda t, u: (ag.xlogy(t, u), ag.special.xlog1py(t, u - 1), F.hardswish(t),
                             F.logsigmoid(t)), mode, x, y)
    # x == 0 gives +0.0; x * log(1) of a negative x is -0.0; x * relu6(x + 3) / 6 is -0.0
    # up to -3; min(x, 0) - log1p(exp(-|x|)) is +0.0 for a large x
    _bits_equal(got[0][:4], np.array([0.0, 0.0, -0.0, -0.0], np.float32), "xlogy")
    _bits_equal(got[1][:4], np.array([0.0, 0.0, -0.0, -0.0], np.float32), "xlog1py")
    _bits_equal(got[2][4:5], np.array([-0.0], np.float32), "hardswish")
    _bits_equal(got[3][5:], np.array([0.0], np.float32), "logsigmoid")


@pytest.mark.parametrize("case, error, text", [
    (lambda x: x.amax(1), IndexError, "amax(): Expected reduction dim 1 to have non-zero size."),
    (lambda x: x.amin(-1), IndexError, "amin(): Expected reduction dim -1 to have non-zero size."),
    (lambda x: x.max(1), IndexError, "max(): Expected reduction dim 1 to have non-zero size."),
    (lambda x: x.argmin(1), IndexError, "argmin(): Expected reduction dim 1 to have non-zero"),
    (lambda x: x.argmax(), IndexError, "argmax(): Expected reduction dim to be specified for "
                                       "input.numel() == 0."),
    (lambda x: x.amax(), RuntimeError, "amax(): Expected reduction dim to be specified for"),
    (lambda x: ag.aminmax(x, dim=1), IndexError, "aminmax: Expected reduction dim 1 to have"),
    (lambda x: ag.aminmax(x), RuntimeError, "aminmax(): cannot compute aminmax over an empty"),
    (lambda x: ag.linalg.vector_norm(x, -inf, dim=1), RuntimeError,
     "linalg.vector_norm cannot compute the -inf norm on the dimension 1because"),
])
def test_reductions_without_identity_over_empty_dims_raise_pytorchs_errors(case, error, text):
    with pytest.raises(error) as e:
        case(ag.zeros(2, 0))
    assert text in str(e.value)


def test_reductions_over_empty_dims_like_torch(vs_torch):
    for case in [lambda M: M.zeros(2, 0).amax(1), lambda M: M.zeros(2, 0).max(1),
                 lambda M: M.zeros(2, 0).argmax(), lambda M: M.zeros(0, 3).amax(1),
                 lambda M: M.zeros(0, 3).max(1), lambda M: M.zeros(2, 0).sum(1),
                 lambda M: M.zeros(2, 0).mean(1), lambda M: M.zeros(2, 0).prod(1),
                 lambda M: M.zeros(2, 0).norm(dim=1),
                 lambda M: M.linalg.vector_norm(M.zeros(2, 0), M.inf, dim=1)]:
        vs_torch.same(case, exact_error=True)
    vs_torch.same(lambda M: M.aminmax(M.zeros(2, 0), dim=1))  # (its text is checked above)


def test_prelu_refuses_mixed_dtypes_like_torch(vs_torch):
    from torch_compare import error_text, same_text
    for a, b in [("float64", "float32"), ("float16", "float32")]:
        ours, theirs = vs_torch.both(lambda M, nn: error_text(lambda: M.nn.functional.prelu(
            M.zeros(2, dtype=getattr(M, a)), M.tensor([0.25], dtype=getattr(M, b)))))
        assert ours is not None and same_text(ours, theirs), (ours, theirs)


@pytest.mark.parametrize("mode", MODES_NUMBA)
def test_ties_of_signed_zeros_give_the_first_operand_everywhere(mode):
    """maximum/minimum/clamp with tensor bounds on a tie of 0.0 and -0.0: the first operand,
    eager and in both backends' kernels (PyTorch's answer depends on the element's position,
    see the module's docstring; its scalar loop gives the first operand too)."""
    a = np.array([0.0, -0.0, 0.0, -0.0, nan, 1.0], np.float32)
    b = np.array([-0.0, 0.0, 0.0, -0.0, 0.0, nan], np.float32)
    got = _run(lambda x, y: (ag.maximum(x, y), ag.minimum(x, y), ag.max(x, y),
                             ag.clamp(x, min=y), ag.clamp(x, max=y)), mode, a, b)
    first = np.array([0.0, -0.0, 0.0, -0.0, nan, nan], np.float32)
    for i, g in enumerate(got):
        _bits_equal(g, first, f"output {i}")
