"""Per-prim emit templates for pointwise prims: Prim -> fn(ctx, node, args) -> expression.

`args` are the already-emitted operand expressions (variable names). `ctx.const(value,
dtype)` gives a constant in the array dtype, `ctx.need(helper)` pulls an approximation from
codegen.approx into the module, `ctx.const_of(var)` is the value of a `full` operand (or
None). Float32 exp/log/tanh/logistic/erf and float64 exp/expm1/tanh/logistic use the
vectorisable approximations of codegen.approx; the other float64 functions numpy/libm.

`peephole(ctx, node)` rewrites a few patterns that need to look through operands
(derivatives of tanh/logistic written as 1 - t*t and 1 - s, which cancel in float32 where
t or s saturates) into helpers computed from the same exponential as the value itself.

`REFERENCE_POINTWISE` lists pointwise prims deliberately run as reference steps (none).
Both are keyed by the Prim object (as the VJP rules are), never by its name.
"""
from aotgrad.codegen import low_precision
from aotgrad.ir import dtypes as dt
from aotgrad.ir import prims as P

TEMPLATES = {}
REFERENCE_POINTWISE = frozenset()


def template(*prims):
    def deco(fn):
        for p in prims:
            TEMPLATES[p] = fn
        return fn
    return deco


def _f32(node):
    return node.inputs[0].dtype is dt.float32


def _approx(name, f64_helper=None, f64_expr=None):
    """The float32 approximation `{name}_f32`; for float64, the helper `f64_helper` or
    the expression `f64_expr`."""
    def t(ctx, node, a):
        if _f32(node):
            ctx.need(f"{name}_f32")
            return f"{name}_f32({a[0]})"
        if f64_helper is not None:
            ctx.need(f64_helper)
            return f"{f64_helper}({a[0]})"
        return f64_expr.format(*a)
    return t


TEMPLATES[P.exp] = _approx("exp", "exp_f64")
TEMPLATES[P.log] = _approx("log", f64_expr="np.log({0})")


@template(P.tanh)
def _tanh(ctx, node, a):
    """Float32 tanh is the rational `tanh_f32`, unless this kernel also squares it (the
    `1 - t*t` of its derivative, see `peephole`): then `tanh_e_f32`, whose exponential and
    division `tanh_d_f32` shares."""
    if not _f32(node):
        ctx.need("tanh_f64")
        return f"tanh_f64({a[0]})"
    t = node.outputs[0]
    paired = any(n.prim is P.mul and n.inputs[0] is t and n.inputs[1] is t
                 for n in ctx.kt.nodes)
    name = "tanh_e_f32" if paired else "tanh_f32"
    ctx.need(name)
    return f"{name}({a[0]})"


TEMPLATES[P.logistic] = _approx("logistic", "logistic_f64")
TEMPLATES[P.erf] = _approx("erf", "erf_f64")


@template(P.expm1)
def _expm1(ctx, node, a):
    if _f32(node):
        return f"np.expm1({a[0]})"
    ctx.need("expm1_f64")
    return f"expm1_f64({a[0]})"


for _n, _f in [(P.log1p, "np.log1p"), (P.sqrt, "np.sqrt"),
               (P.sin, "np.sin"), (P.cos, "np.cos"), (P.floor, "np.floor"),
               (P.ceil, "np.ceil")]:
    TEMPLATES[_n] = (lambda f: lambda ctx, node, a: f"{f}({a[0]})")(_f)


for _n, _f in [(P.sinh, "np.sinh"), (P.cosh, "np.cosh"), (P.asinh, "np.arcsinh"),
               (P.acosh, "np.arccosh"), (P.atanh, "np.arctanh"), (P.asin, "np.arcsin"),
               (P.acos, "np.arccos")]:
    TEMPLATES[_n] = (lambda f: lambda ctx, node, a: f"{f}({a[0]})")(_f)


@template(P.erfc, P.lgamma)
def _math_fn(ctx, node, a):
    f = f"math.{node.prim.name}"
    if _f32(node):
        return f"np.float32({f}(np.float64({a[0]})))"
    return f"{f}({a[0]})"


@template(P.erfinv)
def _erfinv(ctx, node, a):
    ctx.need("erfinv_f64")
    if _f32(node):
        return f"np.float32(erfinv_f64(np.float64({a[0]})))"
    return f"erfinv_f64({a[0]})"


@template(P.ndtri, P.erfcx, P.i0e, P.i1e)
def _scalar_helper(ctx, node, a):
    name = node.prim.name
    if name in ("ndtri", "erfcx"):
        ctx.need(f"{name}_f64")
        call = f"{name}_f64({{}})"
    else:
        ctx.need("bessel_e_f64")
        call = f"bessel_e_f64({0 if name == 'i0e' else 1}, {{}})"
    if _f32(node):
        return f"np.float32({call.format('np.float64(' + a[0] + ')')})"
    return call.format(a[0])


@template(P.polygamma)
def _polygamma(ctx, node, a):
    ctx.need("polygamma_f64")
    n = int(node.params["n"])
    if _f32(node):
        return f"np.float32(polygamma_f64({n}, np.float64({a[0]})))"
    return f"polygamma_f64({n}, {a[0]})"


@template(P.neg)
def _neg(ctx, node, a):
    return f"(-{a[0]})"


@template(P.abs)
def _abs(ctx, node, a):
    return f"abs({a[0]})"


@template(P.sign)
def _sign(ctx, node, a):
    d = node.inputs[0].dtype
    one, zero = ctx.const(1, d), ctx.const(0, d)
    # sign(-0.0) is +0.0 (numpy and PyTorch); NaN stays NaN: x + 0 gives both
    tail = f"({a[0]} + {zero})" if d.is_floating_point else a[0]
    return f"({one} if {a[0]} > {zero} else (-{one} if {a[0]} < {zero} else {tail}))"


@template(P.rsqrt)
def _rsqrt(ctx, node, a):
    if _f32(node):   # 1/sqrt in float32 is LLVM's estimate: wrong at 0, inf, denormals
        ctx.need("rsqrt_f32")
        return f"rsqrt_f32({a[0]})"
    return f"({ctx.const(1, node.inputs[0].dtype)} / np.sqrt({a[0]}))"


@template(P.reciprocal)
def _recip(ctx, node, a):
    return f"({ctx.const(1, node.inputs[0].dtype)} / {a[0]})"


@template(P.logical_not)
def _not(ctx, node, a):
    return f"(not {a[0]})"


def _binop(op, boolop=None):
    def t(ctx, node, a):
        if boolop and node.inputs[0].dtype is dt.bool_:
            return f"({a[0]} {boolop} {a[1]})"
        return f"({a[0]} {op} {a[1]})"
    return t


TEMPLATES[P.add] = _binop("+", "|")
TEMPLATES[P.sub] = _binop("-")
TEMPLATES[P.mul] = _binop("*", "&")
TEMPLATES[P.div] = _binop("/")
for _n, _op in [(P.eq, "=="), (P.ne, "!="), (P.lt, "<"), (P.le, "<="), (P.gt, ">"),
                (P.ge, ">=")]:
    TEMPLATES[_n] = _binop(_op)
TEMPLATES[P.logical_and] = _binop("&")
TEMPLATES[P.logical_or] = _binop("|")
TEMPLATES[P.bitwise_and] = _binop("&")
TEMPLATES[P.bitwise_or] = _binop("|")
TEMPLATES[P.bitwise_xor] = _binop("^")
TEMPLATES[P.gcd] = lambda ctx, node, a: f"np.gcd({a[0]}, {a[1]})"


@template(P.nextafter)
def _nextafter(ctx, node, a):
    d = node.inputs[0].dtype
    return f"{'np.float32' if d is dt.float32 else 'np.float64'}(np.nextafter({a[0]}, {a[1]}))"


@template(P.bitwise_not)
def _invert(ctx, node, a):
    if node.inputs[0].dtype is dt.bool_:
        return f"(not {a[0]})"
    return f"(~{a[0]})"


@template(P.shift_left, P.shift_right)
def _shift(ctx, node, a):
    """A count outside [0, bits) gives 0 (<<) or the sign fill (>>), as the reference
    implementation; the emitter narrows the result to the dtype."""
    d = node.inputs[0].dtype
    x, n = a
    bits, zero = ctx.const(d.itemsize * 8, d), ctx.const(0, d)
    outside = f"({n} < {zero} or {n} >= {bits})"
    if node.prim is P.shift_left:
        return f"({zero} if {outside} else ({x} << {n}))"
    fill = f"({ctx.const(-1, d)} if {x} < {zero} else {zero})" if d.np.kind == "i" else zero
    return f"({fill} if {outside} else ({x} >> {n}))"


@template(P.maximum, P.minimum)
def _maxmin(ctx, node, a):
    d = node.inputs[0].dtype
    x, y = a
    if d is dt.bool_:
        return f"({x} | {y})" if node.prim is P.maximum else f"({x} & {y})"
    cmp = ">=" if node.prim is P.maximum else "<="
    if d.is_floating_point:  # NaN-propagating like numpy
        return f"({x} if ({x} {cmp} {y} or {x} != {x}) else {y})"
    return f"({x} if {x} {cmp} {y} else {y})"


@template(P.pow)
def _pow(ctx, node, a):
    c = ctx.const_of(node.inputs[1])
    x, d = a[0], node.inputs[0].dtype
    one = ctx.const(1, d)
    zero, ninf = ctx.const(0, d), ctx.const(-float("inf"), d)
    # pow's IEEE cases, unlike sqrt: pow(-0, 0.5) = +0, pow(-inf, 0.5) = +inf
    special = {2.0: f"({x} * {x})", 1.0: x, 3.0: f"({x} * {x} * {x})",
               0.5: f"(-{ninf} if {x} == {ninf} else np.sqrt({x} + {zero}))",
               -1.0: f"({one} / {x})",
               -0.5: f"({one} / np.sqrt({x}))", -2.0: f"(({one} / {x}) / {x})"}
    # (1 / x) / x, not 1 / (x * x): x * x overflows to inf for |x| > 1.8e19 in float32,
    # where x ** -2 is still a (denormal) number
    if c is not None and float(c) == -0.5 and d.is_floating_point:
        # pow's IEEE cases, unlike 1/sqrt: pow(-0, -0.5) = inf, pow(-inf, -0.5) = 0
        r = _rsqrt(ctx, node, [f"({x} if {x} != {zero} else {zero})"])
        return f"({zero} if {x} == {ninf} else {r})"
    if c is not None and float(c) in special:
        return special[float(c)]
    return f"np.power({x}, {a[1]})"


@template(P.atan2)
def _atan2(ctx, node, a):
    return f"np.arctan2({a[0]}, {a[1]})"


@template(P.fmod)
def _fmod(ctx, node, a):
    return f"np.fmod({a[0]}, {a[1]})"


@template(P.where)
def _where(ctx, node, a):
    return f"({a[1]} if {a[0]} else {a[2]})"


@template(P.convert_element_type)
def _convert(ctx, node, a):
    d, s = node.params["dtype"], node.inputs[0].dtype
    if node.params.get("via") is not None:    # float32 holding a 16-bit value
        ctx.need("round_low_f64")
        return low_precision.rounding_call(a[0], s, node.params["via"])
    if d is s:
        return a[0]
    if d is dt.bool_:
        return f"({a[0]} != {ctx.const(0, s)})"
    return f"np.{d.np.name}({a[0]})"


@template(P.full)
def _full(ctx, node, a):
    return ctx.args.const(node.params["value"], node.params["dtype"])


def _iota(ctx, node, a):  # needs the index: handled by the emitter
    raise AssertionError("iota is emitted by the kernel emitter")


TEMPLATES[P.iota] = _iota


def peephole(ctx, node):
    """A rewrite of `node` that looks through its operands: (helper, operand), meaning the
    node's value is `helper(operand)` (the emitter pulls the helper into the module), or None.

    Float32 `1 - tanh(y)*tanh(y)` becomes `tanh_d_f32(y)` and `1 - logistic(x)` becomes
    `logistic_c_f32(x)`: accurate where tanh/logistic saturate, and sharing their exponential
    and division with tanh(y)/logistic(x) computed in the same loop. (`x / sqrt(y)` is left
    as it is: without fast-math flags it is eager's sqrt and division, bit for bit; it
    became `x * rsqrt_f32(y)` while LLVM's "arcp" estimate made it NaN at y = 0.)
    `ctx.inner_producer(var)` is var's node when it is computed inside the kernel (not read
    from memory)."""
    if not node.inputs or node.inputs[0].dtype is not dt.float32:
        return None
    if node.prim is not P.sub:
        return None
    c = ctx.const_of(node.inputs[0])
    if c is None or float(c) != 1.0:
        return None
    p = ctx.inner_producer(node.inputs[1])
    if p is None:
        return None
    if p.prim is P.logistic:
        return "logistic_c_f32", p.inputs[0]
    if p.prim is P.mul and p.inputs[0] is p.inputs[1]:
        t = ctx.inner_producer(p.inputs[0])
        if t is not None and t.prim is P.tanh:
            return "tanh_d_f32", t.inputs[0]
    return None
