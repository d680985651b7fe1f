"""Maximum error of codegen.approx's approximations: the float32 ones relative to float64
numpy, the float64 ones in units of the last place against long double, over the whole
finite range (random bit patterns) and dense ranges."""
import math
import os

import numpy as np
import pytest
from aotgrad.testing import assert_close

BOUND = 1e-6          # the documented contract; measured values are ~2e-7


@pytest.fixture(scope="module")
def mod(tmp_path_factory):
    old = os.environ.get("AOTGRAD_CACHE_DIR")
    os.environ["AOTGRAD_CACHE_DIR"] = str(tmp_path_factory.mktemp("approx_cache"))
    from aotgrad.codegen import approx, cache, prelude
    from aotgrad.codegen.inline import inline_helpers
    src = prelude.PRELUDE + approx.helper_source(approx.APPROXIMATED)
    for n in approx.APPROXIMATED:
        # v_: the statements pasted in, as kernels have them; c_: a call of the helper
        body = inline_helpers([f"        y = {n}(x[i])"])
        assert not any(f"{n}(" in line for line in body)
        src += f"\n\n@_jit\ndef v_{n}(x, out):\n    for i in range(x.size):\n" + \
            "\n".join(body) + "\n        out[i] = y\n"
        src += f"\n\n@_jit\ndef c_{n}(x, out):\n    for i in range(x.size):\n" \
               f"        out[i] = {n}(x[i])\n"
    src += """

@_jit
def alloc(n, m, v):
    a = _empty((n, m), np.float32)
    a[:] = 7
    return a, _zeros(n, np.float64), _zeros((n, m), np.int64), _full(n, np.float32, v), \\
        _full((m, n), np.float64, v)


@_jit
def imin(a, b):
    return _imin(a, b), _imax(a, b)


@_jit
def views(ws, x, n, m):
    a = _view(ws, 64, (n, m), np.float64)      # bytes 64.. of a uint8 workspace
    a[:] = 1.5
    b = _view(ws, 64 + 8 * n * m, n, np.float32)
    b[:] = 2.0
    return a, b, _view(x, 0, x.size, x.dtype), _view(x, 0, (x.shape[1], x.shape[0]), x.dtype)


@_jit
def scalar_view(x):
    v = _view(x, 4, (), x.dtype)     # 0-d: the second element
    return v[()]
"""
    m, _ = cache.load_module(src)
    yield m
    if old is None:
        os.environ.pop("AOTGRAD_CACHE_DIR", None)
    else:
        os.environ["AOTGRAD_CACHE_DIR"] = old


def _erf64(x):
    try:
        from scipy.special import erf
        return erf(x)
    except ImportError:
        return np.vectorize(math.erf)(x)


REFS = {"exp_f32": np.exp, "log_f32": np.log, "tanh_f32": np.tanh, "tanh_e_f32": np.tanh,
        "logistic_f32": lambda x: 1 / (1 + np.exp(-x)), "erf_f32": _erf64,
        # derivatives / complements, accurate where 1 - t would cancel
        "tanh_d_f32": lambda x: 1 / np.cosh(x) ** 2,
        "logistic_c_f32": lambda x: 1 / (1 + np.exp(x))}


def _inputs():
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2 ** 32, 1_000_000, dtype=np.uint64).astype(np.uint32)
    allf = bits.view(np.float32)
    allf = allf[np.isfinite(allf)]
    dense = np.concatenate([rng.uniform(-20, 20, 500_000), rng.uniform(-110, 90, 200_000),
                            np.linspace(-1, 1, 100_001)]).astype(np.float32)
    return np.concatenate([allf, dense, np.abs(allf)])


@pytest.mark.parametrize("name", sorted(REFS))
def test_max_relative_error(mod, name):
    x = _inputs()
    out = np.empty_like(x)
    getattr(mod, "v_" + name)(x, out)
    with np.errstate(all="ignore"):
        ref = REFS[name](x.astype(np.float64))
        ref32 = ref.astype(np.float32)
    normal = np.isfinite(ref) & (np.abs(ref) >= np.finfo(np.float32).tiny) & \
        (np.abs(ref) <= np.finfo(np.float32).max)
    err = np.abs(out[normal].astype(np.float64) - ref[normal]) / np.abs(ref[normal])
    assert err.max() <= BOUND, (name, err.max(), x[normal][np.argmax(err)])
    # NaN exactly where numpy has NaN; infinities where numpy overflows
    np.testing.assert_array_equal(np.isnan(out), np.isnan(ref32))
    ov = np.isinf(ref32)
    np.testing.assert_array_equal(out[ov], ref32[ov])


@pytest.mark.parametrize("name", sorted(REFS))
def test_special_values(mod, name):
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, -1e-40], np.float32)
    out = np.empty_like(x)
    getattr(mod, "v_" + name)(x, out)
    with np.errstate(all="ignore"):
        ref = REFS[name](x.astype(np.float64)).astype(np.float32)
    assert_close(out[:5], ref[:5], rtol=1e-6, atol=0, equal_nan=True)
    np.testing.assert_array_equal(np.isnan(out), np.isnan(ref))


# the float64 approximations: error in units of the last place of the exact result
# (np.longdouble's 64-bit significand is the reference), bounds a little above the measured
# maxima (0.99, 1.16, 2.04, 2.57; numpy's own tanh 1.19 and 1/(1+exp(-x)) 2.45 here)
REFS64 = {"exp_f64": np.exp, "expm1_f64": np.expm1, "tanh_f64": np.tanh,
          "logistic_f64": lambda x: 1 / (1 + np.exp(-x))}
ULPS64 = {"exp_f64": 1.0, "expm1_f64": 1.5, "tanh_f64": 2.5, "logistic_f64": 3.0}


def _inputs64():
    rng = np.random.default_rng(1)
    allf = rng.integers(0, 2 ** 63, 1_000_000, dtype=np.uint64).view(np.float64)
    allf = allf[np.isfinite(allf)]
    dense = np.concatenate([rng.uniform(-1.2, 1.2, 400_000), rng.uniform(-45, 45, 400_000),
                            rng.uniform(-750, 715, 200_000), np.linspace(-1e-3, 1e-3, 20_001),
                            rng.uniform(-1e-300, 1e-300, 10_000)])
    return np.concatenate([allf, -allf, dense])


def _longdouble_or_skip():
    if np.finfo(np.longdouble).nmant < 63:
        pytest.skip("no 80-bit long double here to take as the exact result")


@pytest.mark.parametrize("name", sorted(REFS64))
def test_float64_error_in_ulps(mod, name):
    _longdouble_or_skip()
    x = _inputs64()
    out = np.empty_like(x)
    getattr(mod, "v_" + name)(x, out)
    with np.errstate(all="ignore"):
        exact = REFS64[name](x.astype(np.longdouble))
        rounded = exact.astype(np.float64)
    finite = np.isfinite(rounded) & (rounded != 0)
    ulps = (np.abs(out[finite].astype(np.longdouble) - exact[finite])
            / np.spacing(np.abs(rounded[finite])).astype(np.longdouble))
    worst = int(np.argmax(ulps))
    assert ulps[worst] <= ULPS64[name], (name, float(ulps[worst]), x[finite][worst])
    # NaN where the function is NaN, the overflows' infinities, the underflows' zeros
    np.testing.assert_array_equal(np.isnan(out), np.isnan(rounded))
    for where in (np.isinf(rounded), rounded == 0):
        np.testing.assert_array_equal(out[where], rounded[where])


@pytest.mark.parametrize("name", sorted(REFS64))
def test_float64_special_values_and_thresholds(mod, name):
    _longdouble_or_skip()
    # signed zeros, infinities, NaN, exp's overflow and underflow thresholds and denormal
    # results, the clamps, and the branch points of the reductions and of tanh
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 709.782712893384, 709.7827128933841,
                  710.0, 711.0, -708.4, -745.1332191019411, -745.1332191019412, -745.5, -746.0,
                  -746.5, 5e-324, -5e-324, 1e-310, 40.0, -40.0, 19.1, -19.1, 0.7, -0.7, 0.35,
                  -0.35, 0.55, -0.55, 0.5493, 1e-17, -1e-17])
    out = np.empty_like(x)
    getattr(mod, "v_" + name)(x, out)
    with np.errstate(all="ignore"):
        exact = REFS64[name](x.astype(np.longdouble))
        want = exact.astype(np.float64)
    np.testing.assert_array_equal(np.isnan(out), np.isnan(want))
    exact_zero_or_inf = (want == 0) | np.isinf(want)
    np.testing.assert_array_equal(out[exact_zero_or_inf], want[exact_zero_or_inf])
    np.testing.assert_array_equal(np.signbit(out[want == 0]), np.signbit(want[want == 0]))
    ok = np.isfinite(want) & (want != 0)
    ulps = np.abs(out[ok] - exact[ok]) / np.spacing(np.abs(want[ok]))
    assert ulps.max() <= ULPS64[name], list(zip(x[ok], ulps))


@pytest.mark.parametrize("name", sorted(REFS) + sorted(REFS64))
def test_inlined_equals_called(mod, name):
    """The statements pasted into kernels compute bit for bit what the helper returns."""
    x = _inputs64() if name in REFS64 else _inputs()
    a, b = np.empty_like(x), np.empty_like(x)
    getattr(mod, "v_" + name)(x, a)
    getattr(mod, "c_" + name)(x, b)
    bits = np.uint64 if name in REFS64 else np.uint32
    np.testing.assert_array_equal(a.view(bits), b.view(bits))


def test_allocation_intrinsics(mod):
    e, z1, z2, f1, f2 = mod.alloc(3, 5, 2.5)
    assert (e.shape, e.dtype) == ((3, 5), np.float32) and (e == 7).all()
    assert (z1.shape, z1.dtype, z1.sum()) == ((3,), np.float64, 0.0)
    assert (z2.shape, z2.dtype, z2.sum()) == ((3, 5), np.int64, 0)
    assert f1.dtype == np.float32 and f1.tolist() == [2.5] * 3
    assert f2.dtype == np.float64 and f2.shape == (5, 3) and (f2 == 2.5).all()
    assert mod.alloc(0, 4, 1.0)[1].shape == (0,)
    assert mod.imin(3, -2) == (-2, 3) and mod.imin(-5, 9) == (-5, 9)


def test_view_intrinsic_reinterprets_c_arrays_in_place(mod):
    ws = np.zeros(64 + 8 * 6 + 4 * 2, np.uint8)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    a, b, flat, swapped = mod.views(ws, x, 2, 3)
    assert a.shape == (2, 3) and a.dtype == np.float64 and a.flags.c_contiguous
    np.testing.assert_array_equal(ws[64:112].view(np.float64), np.full(6, 1.5))
    np.testing.assert_array_equal(ws[112:].view(np.float32), [2.0, 2.0])
    assert (ws[:64] == 0).all() and b.dtype == np.float32
    # views of x share its memory: a write through one is seen in x
    np.testing.assert_array_equal(flat, x.ravel())
    np.testing.assert_array_equal(swapped, x.reshape(3, 2))
    flat[4] = -1
    assert x[1, 1] == -1
    # a view keeps its base alive after the caller drops it
    del ws
    assert (a == 1.5).all()
    assert mod.scalar_view(np.array([1.0, 2.5, 3.0], np.float32)) == 2.5


def test_shared_subexpressions_merge_equal_values_across_pasted_helpers():
    """tanh(x) and tanh'(x) of the same x (GELU's backward) paste the same exp, reciprocal
    and polynomial: the second copy of each value becomes a copy of the first."""
    from aotgrad.codegen.inline import inline_helpers
    body = inline_helpers(["        t = tanh_e_f32(x[i])", "        d = tanh_d_f32(x[i])"])
    # the exp's range reduction (x / ln2 rounded) and the reciprocal, once each
    reductions = [line for line in body if "np.float32(1.4426950408889634)" in line]
    divs = [line for line in body if "np.float32(1.0) / (" in line]
    assert len(reductions) == 1 and len(divs) == 1, "\n".join(body)
    # each local is assigned once (reassignments get versions), so merged values stay named
    names = [line.split(" = ")[0].strip() for line in body if " = " in line]
    assert len(names) == len(set(names)), "\n".join(body)


def test_shared_subexpressions_respect_reassignment_stores_and_runs():
    from aotgrad.codegen.text_cse import shared_subexpressions as cse
    lines = ["    a = x * y", "    b = x * y",        # merged: b is a copy of a
             "    f = a * y", "    g = b * y",        # b holds a's value: g copies f
             "    x = x + 1.0", "    c = x * y",      # x changed: not the same value
             "    p = v[j]", "    q = v[j]",          # loads merge while nothing is stored
             "    v[j] = c", "    r = v[j]",          # a store forgets the loads...
             "    w = x * y",                         # ...not the arithmetic
             "    s = h(c)", "    u = x * y",         # a call of an unknown function ends it
             "    for j in range(3):", "        e = x * y"]   # a new run: nothing known
    assert cse(lines) == ["    a = x * y", "    b = a", "    f = a * y", "    g = f",
                          "    x = x + 1.0", "    c = x * y", "    p = v[j]", "    q = p",
                          "    v[j] = c", "    r = v[j]", "    w = c", "    s = h(c)",
                          "    u = x * y", "    for j in range(3):", "        e = x * y"]


def test_shared_subexpressions_run_on_across_a_reduction_update():
    """A sum's or max's accumulator update is a pure call: the values after it still merge
    with those before it (W1's fused loss and gradient: sigmoid and 1 - sigmoid of x on
    either side of the loss's sum share one exp), and the accumulator's new value is a new
    value."""
    from aotgrad.codegen.text_cse import shared_subexpressions as cse
    lines = ["    e = -abs(x)", "    acc = _radd(acc, e)", "    m = _maxnum(m, e)",
             "    f = -abs(x)", "    g = _radd(acc, e)", "    h = acc + e"]
    assert cse(lines) == ["    e = -abs(x)", "    acc = _radd(acc, e)", "    m = _maxnum(m, e)",
                          "    f = e", "    g = _radd(acc, e)", "    h = acc + e"]


def test_shared_subexpressions_keep_the_documented_accuracy(mod):
    """The merged tanh/tanh' pair stays within the bound of each helper alone (values may
    differ from the separate helpers' in the last bit: fast-math contraction decides anew
    where a value has two users)."""
    from aotgrad.codegen import approx, cache, prelude
    from aotgrad.codegen.inline import inline_helpers
    body = inline_helpers(["        t = tanh_e_f32(x[i])", "        d = tanh_d_f32(x[i])"])
    src = prelude.PRELUDE + approx.helper_source(approx.APPROXIMATED) + \
        "\n\n@_jit\ndef both(x, o1, o2):\n    for i in range(x.size):\n" + "\n".join(body) + \
        "\n        o1[i] = t\n        o2[i] = d\n"
    m, _ = cache.load_module(src)
    x = np.linspace(-12, 12, 40001, dtype=np.float32)
    t, d = np.empty_like(x), np.empty_like(x)
    m.both(x, t, d)
    ref_t = np.tanh(x.astype(np.float64))
    ref_d = 1.0 / np.cosh(x.astype(np.float64)) ** 2
    assert np.max(np.abs(t - ref_t) / np.maximum(np.abs(ref_t), 1e-30)) <= BOUND
    assert np.max(np.abs(d - ref_d) / ref_d) <= BOUND
