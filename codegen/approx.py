"""Vectorisable approximations: float32 exp, log, tanh, logistic and erf; float64 exp, expm1,
tanh and logistic.

Numba lowers `np.exp`/`np.tanh`/`np.log` on scalars to libm calls, which LLVM cannot
vectorise. The functions here are plain arithmetic (polynomials, one division, integer
bit manipulation for the exponent), so a fused loop that calls them vectorises.

They are kept as *source text* (`HELPERS`) because every generated module must be
self-contained (numba's `cache=True` does not track helpers imported from other files).
`helper_source(names)` returns the text for a set of helpers plus what they depend on.

Error bounds (max relative error against float64 numpy, float32 inputs over the whole
finite float32 range, normal results; measured by tests/codegen/test_codegen_approx.py):

  exp_f32       <= 2e-7   (Cody-Waite reduction by ln2 (FMAs; n rounded by adding 1.5*2^23
                           and read from the bits), degree-6 polynomial fitted here
                           (relative minimax, 9e-8 in float32), 2^n built from exponent bits
                           in two halves so that overflow, underflow and denormals come out
                           right; NaN/inf preserved; the clamps are min/max instructions;
                           x < -104.5 gives 0 without working out a denormal, which is slow)
  log_f32       <= 2e-7   (x = m 2^e, m in [sqrt(1/2), sqrt(2)), log(m) = 2 atanh(s) series,
                           s = (m-1)/(m+1); denormal inputs rescaled; x<0 -> nan, 0 -> -inf)
  tanh_f32      <= 5e-7   (x P(x^2)/Q(x^2), degrees 6 and 3, fitted here on |x| <= 9.02: 7e-9
                           in exact arithmetic, 2.9e-7 measured (float32 rounding near
                           saturation); +-1 beyond, where float32 tanh rounds to 1)
  tanh_e_f32    <= 5e-7   (|x| < 0.625: odd least-squares polynomial fitted here, error 4e-9
                           in exact arithmetic; else (1-e)/(1+e), e = exp(-2|x|): the tanh
                           used next to tanh_d_f32, which shares its e)
  tanh_d_f32    <= 5e-7   (1 - tanh(x)^2: 4e/(1+e)^2 from the same e, so the derivative
                           keeps its relative accuracy where tanh saturates)
  logistic_f32  <= 5e-7   (1/(1+e) or e/(1+e), e = exp(-|x|) <= 1; results below ~1e-38
                           (denormals) flush toward 0)
  logistic_c_f32 <= 5e-7  (1 - logistic(x), the other of the two, from the same e)
  rsqrt_f32     <= 2e-7   (1/sqrt(x), correctly rounded twice now that kernels have no
                           "arcp"; the denormal scaling and 0/inf patches stay harmless)
  erf_f32       <= 5e-7   (x P(x^2) / Q(x^2), degrees 5 and 5, fitted here on |x| <= 3.95:
                           2e-8 in exact arithmetic, 3.5e-7 measured (float32 rounding);
                           +-1 beyond, where float32 erf rounds to 1)

Float64 exp, expm1, tanh and logistic (the float64 LSTMs and RNNs of users' examples spend
their steps in them; libm's scalar calls do not vectorise). Maximum error in units of the
last place of the exact result, over the whole finite float64 range, measured by the same
test against long double:

  exp_f64       <= 1 ulp    (2^n exp(r), Cody-Waite reduction by ln2 in two FMAs, Taylor to
                             degree 13 on |r| <= ln2/2; overflow, underflow, denormals,
                             NaN and the infinities as the exact function's)
  expm1_f64     <= 1.5 ulp  (2^n (expm1(r) + 1 - 2^-n); no reduction below |x| = 0.7,
                             Taylor to degree 17 there)
  tanh_f64      <= 2.5 ulp  (-m / (m + 2), m = expm1(-2|x|), below 0.55; 1 - 2q / (1 + q),
                             q = exp(-2|x|), above; the quotient corrected for the roundings)
  logistic_f64  <= 3 ulp    (1/(1+e) or e/(1+e), e = exp(-|x|), as float32's; numpy's
                             1/(1+exp(-x)) is within 2.5 ulp, libm's tanh 1)

Other float64 functions call numpy/libm.
"""
import math

from aotgrad.codegen import low_precision as _low_precision


# name -> (dependencies, source)
HELPERS = {}


def _helper(name, deps, src):
    HELPERS[name] = (tuple(deps), src)


_helper("bitcast", (), '''
def _mk_bitcast(bits, to_float):
    # the bits of a float as the integer of its width, and back
    f, i = (numba.float32, numba.int32) if bits == 32 else (numba.float64, numba.int64)

    def impl(typingctx, x):
        def codegen(context, builder, sig, args):
            to = _llir.IntType(bits)
            if to_float:
                to = _llir.FloatType() if bits == 32 else _llir.DoubleType()
            return builder.bitcast(args[0], to)
        return (f(i) if to_float else i(f)), codegen
    return _intrinsic(impl)


_i2f = _mk_bitcast(32, True)
_f2i = _mk_bitcast(32, False)
_i2d = _mk_bitcast(64, True)
_d2i = _mk_bitcast(64, False)
''')

_helper("minmax", (), '''
def _mk_minmax(llname):
    def impl(typingctx, a, b):
        def codegen(context, builder, sig, args):
            t = args[0].type
            fn = builder.module.declare_intrinsic(llname, [t], _llir.FunctionType(t, [t, t]))
            call = builder.call(fn, args)
            call.fastmath.add("reassoc")   # a reduction's order may change: it vectorises
            return call
        return a(a, b), codegen
    return _intrinsic(impl)


_maxnum = _mk_minmax("llvm.maxnum")  # NaN-ignoring max: vectorises in reductions
_minnum = _mk_minmax("llvm.minnum")
''')

_helper("reassoc", (), '''
def _mk_reassoc(op):
    def impl(typingctx, a, b):
        def codegen(context, builder, sig, args):
            v = context.cast(builder, args[1], sig.args[1], sig.args[0])  # to acc's type
            r = getattr(builder, op)(args[0], v)
            r.flags.append("reassoc")   # this accumulation only: the loop vectorises
            return r
        return a(a, b), codegen
    return _intrinsic(impl)


_radd = _mk_reassoc("fadd")   # acc = _radd(acc, v): a float sum LLVM may reorder
_rmul = _mk_reassoc("fmul")
''')

_helper("fma", (), '''
@_intrinsic
def _fma(typingctx, a, b, c):   # a * b + c rounded once (llvm.fma: vectorises)
    def codegen(context, builder, sig, args):
        t = args[0].type
        fn = builder.module.declare_intrinsic("llvm.fma", [t], _llir.FunctionType(t, [t, t, t]))
        ops = [context.cast(builder, v, ty, sig.args[0]) for v, ty in zip(args, sig.args)]
        return builder.call(fn, ops)
    return a(a, b, c), codegen
''')

_helper("exp_f32", ("bitcast", "fma"), '''
@_ijit
def exp_f32(x):
    xc = np.float32(89.0) if x > np.float32(89.0) else x
    # below -104.5 the result is 0: compute with a harmless argument and return 0 (working
    # out a denormal costs a microcode assist, ~100 cycles per vector: a causal softmax,
    # where half the inputs are -inf, ran 3x slower)
    xc = np.float32(0.0) if xc < np.float32(-104.5) else xc
    # n = round(x / ln2) by adding 1.5 * 2^23, which leaves n in the low mantissa bits: n
    # comes from the bits (no float-to-int conversion, whose NaN case needed a select);
    # |x / ln2| < 2^22 here
    t = _fma(xc, np.float32(1.4426950408889634), np.float32(12582912.0))
    fn = t - np.float32(12582912.0)
    r = _fma(fn, np.float32(-0.693359375), xc)   # exact: 0.693359375 has 9 bits
    r = _fma(fn, np.float32(2.12194440e-4), r)
    p = np.float32(0.0013903575018048286)
    p = _fma(p, r, np.float32(0.00836635660380125))
    p = _fma(p, r, np.float32(0.04166676849126816))
    p = _fma(p, r, np.float32(0.16666541993618011))
    p = _fma(p, r, np.float32(0.5))
    p = _fma(p, r, np.float32(1.0))
    p = _fma(p, r, np.float32(1.0))
    n = _f2i(t) - np.int32(0x4B400000)
    n1 = n >> 1
    # p * 2^(n - n1) stays normal (|n - n1| <= 76): add to p's exponent bits directly
    pn = _i2f(_f2i(p) + np.int32((n - n1) << 23))
    e = pn * _i2f(np.int32((n1 + 127) << 23))
    # a NaN x gives some n: the result is x itself
    e = x if x != x else e
    return np.float32(0.0) if x < np.float32(-104.5) else e
''')

_helper("rsqrt_f32", (), '''
@_ijit
def rsqrt_f32(x):
    # Under "arcp" LLVM turned 1/sqrt(x) into its reciprocal-sqrt estimate plus a Newton
    # step, NaN at 0 and inf and -inf at denormals; kernels no longer get "arcp", and the
    # scaling of denormals (and 0) by 2^24 and the 0/inf patches keep any such lowering right
    small = x < np.float32(1.1754944e-38)
    y = x * np.float32(16777216.0) if small else x
    r = np.float32(1.0) / np.sqrt(y)
    r = r * np.float32(4096.0) if small else r
    r = np.float32(0.0) if x == INF32 else r
    return np.float32(1.0) / x if x == np.float32(0.0) else r
''')

_helper("log_f32", ("bitcast", "fma"), '''
@_ijit
def log_f32(x):
    tiny = x < np.float32(1.1754943508222875e-38)
    xs = x * np.float32(8388608.0) if tiny else x
    b = _f2i(xs)
    e = ((b >> 23) & 255) - 127
    e = e - 23 if tiny else e
    m = _i2f(np.int32((b & 8388607) | 1065353216))
    big = m > np.float32(1.4142135623730951)
    m = m * np.float32(0.5) if big else m
    e = e + 1 if big else e
    f = m - np.float32(1.0)
    s = f / (np.float32(2.0) + f)
    z = s * s
    p = np.float32(2.0 / 11.0)
    p = _fma(p, z, np.float32(2.0 / 9.0))
    p = _fma(p, z, np.float32(2.0 / 7.0))
    p = _fma(p, z, np.float32(2.0 / 5.0))
    p = _fma(p, z, np.float32(2.0 / 3.0))
    ef = np.float32(e)
    r = ef * np.float32(0.693359375) + (s * z * p + (ef * np.float32(-2.12194440e-4) + s + s))
    r = NAN32 if x < np.float32(0.0) else r
    r = -INF32 if x == np.float32(0.0) else r
    return x if (x != x or x == INF32) else r
''')

_helper("tanh_small", ("fma",), '''
@_ijit
def _tanh_small(x):
    z = x * x
    p = np.float32(-0.005652355260045331)
    p = _fma(p, z, np.float32(0.020583488975110854))
    p = _fma(p, z, np.float32(-0.053718484978778264))
    p = _fma(p, z, np.float32(0.13331091126750527))
    p = _fma(p, z, np.float32(-0.3333325872294498))
    p = _fma(p, z, np.float32(0.9999999959311561))
    return x * p
''')

# tanh alone: x P(x^2) / Q(x^2) on |x| <= 9.02 (a rational fitted here by reweighted least
# squares: 7e-9 relative in exact arithmetic; tanh(9.02) rounds to 1 in float32), about 14
# operations and a division against tanh_e_f32's ~35 and a division (W4's GELU forward
# kernel: its tanh took ~0.27 of 0.45 ms). NaN passes the clamps (comparisons are false).
_helper("tanh_f32", ("fma",), '''
@_ijit
def tanh_f32(x):
    xc = np.float32(9.02) if x > np.float32(9.02) else x
    xc = np.float32(-9.02) if xc < np.float32(-9.02) else xc
    z = xc * xc
    p = np.float32(-8.436095111320416e-14)
    p = _fma(p, z, np.float32(5.257798363356159e-11))
    p = _fma(p, z, np.float32(-2.0184007354373534e-08))
    p = _fma(p, z, np.float32(1.1144265954499133e-05))
    p = _fma(p, z, np.float32(0.003103002207353711))
    p = _fma(p, z, np.float32(0.13083158433437347))
    p = _fma(p, z, np.float32(1.0))
    q = np.float32(0.00025447524967603385)
    q = _fma(q, z, np.float32(0.024491384625434875))
    q = _fma(q, z, np.float32(0.4641648530960083))
    q = _fma(q, z, np.float32(1.0))
    return xc * p / q
''')

# tanh next to its derivative: both share e = exp(-2|x|) and r = 1/(1+e) (the same
# expressions, merged by codegen.text_cse): tanh = (1-e) r, 1 - tanh^2 = 4 e r^2,
# which stays accurate where tanh saturates (1 - t*t of the rational tanh would cancel).
_helper("tanh_e_f32", ("exp_f32", "tanh_small"), '''
@_ijit
def tanh_e_f32(x):
    a = abs(x)
    e = exp_f32(np.float32(-2.0) * a)
    r = np.float32(1.0) / (np.float32(1.0) + e)
    big = (np.float32(1.0) - e) * r
    big = big if x >= np.float32(0.0) else -big
    return _tanh_small(x) if a < np.float32(0.625) else big
''')

_helper("tanh_d_f32", ("exp_f32", "tanh_small"), '''
@_ijit
def tanh_d_f32(x):
    a = abs(x)
    e = exp_f32(np.float32(-2.0) * a)
    r = np.float32(1.0) / (np.float32(1.0) + e)
    t = _tanh_small(x)
    return np.float32(1.0) - t * t if a < np.float32(0.625) else np.float32(4.0) * e * (r * r)
''')

# logistic and its complement 1 - logistic share e = exp(-|x|) <= 1 and r = 1/(1+e):
# logistic = r or e r by the sign of x, 1 - logistic the other one (no cancellation).
_helper("logistic_f32", ("exp_f32",), '''
@_ijit
def logistic_f32(x):
    e = exp_f32(-abs(x))
    r = np.float32(1.0) / (np.float32(1.0) + e)
    return r if x >= np.float32(0.0) else e * r
''')

_helper("logistic_c_f32", ("exp_f32",), '''
@_ijit
def logistic_c_f32(x):
    e = exp_f32(-abs(x))
    r = np.float32(1.0) / (np.float32(1.0) + e)
    return e * r if x >= np.float32(0.0) else r
''')

# Float64 exp, expm1, tanh and logistic, vectorisable: exp(x) = 2^n exp(r), n = round(x/ln2),
# r = x - n ln2 in two FMA steps (ln2's high part has 32 bits: n ln2_hi is exact), |r| <=
# ln2/2 + a little; exp(r) and expm1(r) by Taylor's series, to degree 13 there and to 17 on
# |r| <= 0.7 (the remainder is below 1e-17 of the result either way), which needs no fitted
# coefficients. 2^n is built from exponent bits in two halves, so that overflow and
# denormal results round once, as the exact function's do.


def _reduce_f64(degree, whole_below=None):
    """The text of the argument reduction exp_f64, expm1_f64 and tanh_f64 begin with, from
    xc: r, n (an int64) and p = (expm1(r) - r) / r^2 by Taylor's 1/k!, k = degree .. 2.
    n = round(xc / ln2) by adding 1.5 * 2^52, which leaves n in the low mantissa bits;
    n = 0 where |xc| < `whole_below` (r = xc: expm1's result is then not a difference of
    nearly equal terms)."""
    lines = ["    t = _fma(xc, 1.4426950408889634, 6755399441055744.0)"]
    if whole_below is not None:
        lines.append(f"    t = 6755399441055744.0 if abs(xc) < {whole_below!r} else t")
    lines += ["    fn = t - 6755399441055744.0",
              "    r = _fma(fn, -0.6931471803691238, xc)",
              "    r = _fma(fn, -1.9082149292705877e-10, r)",
              "    n = _d2i(t) - np.int64(0x4338000000000000)",
              f"    p = {1 / math.factorial(degree)!r}"]
    lines += [f"    p = _fma(p, r, {1 / math.factorial(k)!r})" for k in range(degree - 1, 1, -1)]
    return "\n".join(lines) + "\n"


# e = v * 2^n, |n| <= 1100, v normal: two halves, each a normal power of two
_SCALE_F64 = """\
    n1 = n >> 1
    e = (v * _i2d((n1 + np.int64(1023)) << 52)) * _i2d((n - n1 + np.int64(1023)) << 52)
"""

_helper("exp_f64", ("bitcast", "fma"), '''
@_ijit
def exp_f64(x):
    # above 710 the result is inf (it overflows at 709.78); below -746 it is 0 (below
    # -745.13 it rounds to 0): computed with a harmless argument and replaced
    xc = 710.0 if x > 710.0 else x
    xc = 0.0 if xc < -746.0 else xc
''' + _reduce_f64(13) + '''\
    v = _fma(p, r * r, r) + 1.0
''' + _SCALE_F64 + '''\
    e = x if x != x else e
    return 0.0 if x < -746.0 else e
''')

_helper("expm1_f64", ("bitcast", "fma"), '''
@_ijit
def expm1_f64(x):
    # expm1(x) = 2^n (expm1(r) + 1 - 2^-n): 1 - 2^-n is exact for -53 <= n <= 53 (below
    # -40 the result is -1, beyond 53 the 2^-n is below the rounding)
    xc = 710.0 if x > 710.0 else x
    xc = -40.0 if xc < -40.0 else xc
''' + _reduce_f64(17, 0.7) + '''\
    m = n if n < np.int64(60) else np.int64(60)
    v = _fma(p, r * r, r) + (1.0 - _i2d((np.int64(1023) - m) << 52))
''' + _SCALE_F64 + '''\
    return x if (x != x or x == 0.0) else e
''')

# tanh|x| from one reduction of -2|x|, with s = expm1(r): below 0.55 (where tanh < 0.5),
# -m / (m + 2), m = expm1(-2|x|); above, 1 - 2q / (1 + q), q = exp(-2|x|) = 2^n (s + 1).
# Neither subtracts nearly equal terms. One division serves both: the quotient of the
# one selected, corrected for the rounding of its denominator and of the division.
_helper("tanh_f64", ("bitcast", "fma"), '''
@_ijit
def tanh_f64(x):
    a = abs(x)
    small = a < 0.55
    xc = -2.0 * a
    xc = -40.0 if xc < -40.0 else xc
''' + _reduce_f64(17, 0.7) + '''\
    s = _fma(p, r * r, r)
    v = s + (1.0 - _i2d((np.int64(1023) - n) << 52)) if small else s + 1.0
''' + _SCALE_F64 + '''\
    num = -e if small else e + e
    c = 2.0 if small else 1.0
    den = e + c
    den_lost = (c - den) + e
    inv = 1.0 / den
    q = num * inv
    q = _fma(_fma(-q, den, num) - q * den_lost, inv, q)
    t = q if small else 1.0 - q
    t = t if x > 0.0 else -t
    return x if (x != x or x == 0.0) else t
''')

# logistic as float32's: 1/(1+e) or e/(1+e) by the sign of x, e = exp(-|x|) <= 1
_helper("logistic_f64", ("exp_f64",), '''
@_ijit
def logistic_f64(x):
    e = exp_f64(-abs(x))
    r = 1.0 / (1.0 + e)
    return r if x >= 0.0 else e * r
''')


# erf(x) = x P(x^2) / Q(x^2) on |x| <= 3.95, both of degree 5 with positive coefficients
# (no cancellation), fitted here for relative error (2e-8 in exact arithmetic); beyond 3.95
# float32 erf rounds to +-1. One division and ten FMAs per element: a piecewise fit (a
# polynomial near 0, an erfc fit with an exponential further out) computes every piece in a
# vectorised loop and selects one.
_helper("erf_f32", ("fma",), '''
@_ijit
def erf_f32(x):
    xc = x if x < np.float32(3.95) else np.float32(3.95)
    xc = xc if xc > np.float32(-3.95) else np.float32(-3.95)
    z = xc * xc
    p = np.float32(2.0258770575183597e-06)
    p = _fma(p, z, np.float32(2.8466296672156102e-04))
    p = _fma(p, z, np.float32(3.8075180413909152e-03))
    p = _fma(p, z, np.float32(5.2873414909096438e-02))
    p = _fma(p, z, np.float32(1.9153679051452982e-01))
    p = _fma(p, z, np.float32(1.1283791439522235e+00))
    q = np.float32(3.7830183652902770e-05)
    q = _fma(q, z, np.float32(1.1705507083237226e-03))
    q = _fma(q, z, np.float32(1.5053804705249923e-02))
    q = _fma(q, z, np.float32(1.1455381640621837e-01))
    q = _fma(q, z, np.float32(5.0307774007024597e-01))
    q = _fma(q, z, np.float32(1.0))
    r = xc * p / q
    r = r if abs(x) < np.float32(3.95) else (np.float32(1.0) if x > np.float32(0.0) else np.float32(-1.0))
    return x if x != x else r
''')

_helper("erf_f64", (), '''
@_ijit
def erf_f64(x):
    return math.erf(x)
''')


# scalar float64 versions of ir/special_math.py's algorithms (the same steps, one element)
_helper("erfinv_f64", (), '''
@_jit
def erfinv_f64(x):
    a = abs(x)
    if a != a or a > 1.0:
        return math.nan
    if a == 1.0:
        return math.copysign(math.inf, x)
    w = math.log((1.0 - a) * (1.0 + a))
    t = 2.0 / (math.pi * 0.147) + 0.5 * w
    y = math.sqrt(math.sqrt(t * t - w / 0.147) - t)
    for _ in range(3):
        if a <= 0.5:
            r = math.erf(y) - a
        else:
            r = (1.0 - a) - math.erfc(y)
        y = y - r / (1.1283791670955126 * math.exp(-y * y) + y * r)
    return math.copysign(y, x)
''')

_helper("erfcx_f64", (), '''
@_jit
def erfcx_f64(x):
    if x != x:
        return x
    if x == math.inf:
        return 0.0
    if x == -math.inf:
        return math.inf
    if x > 10.0:
        z = 1.0 / (2.0 * x * x)
        term = 1.0
        total = 1.0
        for n in range(1, 25):
            term = term * -(2 * n - 1) * z
            total += term
        return total / (x * math.sqrt(math.pi))
    h = np.float64(np.float32(x))
    lo = x - h
    return math.exp(h * h) * math.exp(2.0 * h * lo + lo * lo) * math.erfc(x)
''')

_helper("ndtri_f64", ("erfinv_f64",), '''
@_jit
def ndtri_f64(p):
    if p != p or p < 0.0 or p > 1.0:
        return math.nan
    q = 1.0 - p if p > 0.5 else p
    if q == 0.0:
        y = -math.inf
    elif q == 0.5:
        y = 0.0
    else:
        if q < 1e-15:
            t2 = -2.0 * math.log(q)
            y = -math.sqrt(t2 - math.log(t2) - math.log(2.0 * math.pi))
        else:
            y = math.sqrt(2.0) * erfinv_f64(2.0 * q - 1.0)
        if q < 0.25:
            for _ in range(3):
                cdf = 0.5 * math.erfc(-y / math.sqrt(2.0))
                pdf = math.exp(-0.5 * y * y) / math.sqrt(2.0 * math.pi)
                y = y - (math.log(cdf) - math.log(q)) * cdf / pdf
    return -y if p > 0.5 else y
''')

_helper("bessel_e_f64", (), '''
@_jit
def bessel_e_f64(order, x):
    a = abs(x)
    if a != a:
        return a
    if a == math.inf:
        return 0.0
    if a <= 20.0:
        q = 0.25 * a * a
        term = 1.0 if order == 0 else 0.5 * a
        total = term
        for k in range(1, 60):
            term = term * q / (k * (k + order))
            total += term
        r = total * math.exp(-a)
    else:
        mu = 4.0 * order * order
        term = 1.0
        total = 1.0
        for k in range(1, 30):
            term = term * -(mu - (2 * k - 1) ** 2) / (k * 8.0 * a)
            total += term
        r = total / math.sqrt(2.0 * math.pi * a)
    return -r if order == 1 and x < 0.0 else r
''')

_helper("polygamma_f64", (), '''
_BERN = (1 / 6, -1 / 30, 1 / 42, -1 / 30, 5 / 66, -691 / 2730, 7 / 6, -3617 / 510,
         43867 / 798, -174611 / 330)


@_jit
def _fact(n):
    f = 1.0
    for i in range(2, n + 1):
        f *= i
    return f


@_jit
def polygamma_f64(n, x):
    if x != x:
        return x
    if n == 0:
        if x == math.inf:
            return math.inf
        if x == -math.inf:
            return math.nan
        refl = x < 0.5
        frac = x - math.floor(x)
        if refl and frac == 0.0:
            if x == 0.0:
                return math.inf if math.copysign(1.0, x) < 0 else -math.inf
            return math.nan
        z = 1.0 - x if refl else x
        acc = 0.0
        while z < 15.0:
            acc -= 1.0 / z
            z += 1.0
        iz2 = 1.0 / (z * z)
        s = 0.0
        p = iz2
        for k in range(10):
            s += _BERN[k] / (2 * k + 2) * p
            p *= iz2
        r = acc + math.log(z) - 0.5 / z - s
        if refl:
            r -= math.pi / math.tan(math.pi * frac)
        return r
    sign = 1.0 if n % 2 == 1 else -1.0
    if x <= 0.0 and x == math.floor(x):
        return sign * math.inf
    if x == math.inf:
        return 0.0
    if x == -math.inf:
        return math.nan
    fact = _fact(n)
    z = x
    acc = 0.0
    while z < 15.0:
        acc += 1.0 / z ** (n + 1)
        z += 1.0
    s = _fact(n - 1) / z ** n + fact / (2.0 * z ** (n + 1))
    for k in range(1, 11):
        s += _BERN[k - 1] * _fact(2 * k + n - 1) / _fact(2 * k) / z ** (2 * k + n)
    return sign * (fact * acc + s)
''')

# float32 values rounded to float16/bfloat16 precision (codegen.low_precision)
_helper("round_low_f64", (), _low_precision.ROUND_SOURCE)


def helper_source(names):
    """Source text of the helpers `names` and their dependencies, in dependency order."""
    order, seen = [], set()

    def visit(n):
        if n in seen:
            return
        seen.add(n)
        for d in HELPERS[n][0]:
            visit(d)
        order.append(n)

    for n in sorted(names):
        visit(n)
    return "".join(HELPERS[n][1] for n in order)


APPROXIMATED = ("exp_f32", "log_f32", "tanh_f32", "tanh_e_f32", "logistic_f32", "erf_f32",
                "tanh_d_f32", "logistic_c_f32", "rsqrt_f32",
                "exp_f64", "expm1_f64", "tanh_f64", "logistic_f64")
