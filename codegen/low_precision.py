"""float16/bfloat16 in compiled programs: Numba has no 16-bit float types, so the kernels
compute in float32, and the program converts at its boundary (inputs widened to float32 on
entry, outputs stored in their 16-bit dtype on return).

`widen(graph)` gives the graph with every float16/bfloat16 value retyped float32, plus the
16-bit dtype of each input and output (None for the others). Every value eager stores as a
16-bit tensor (the result of a cast to a 16-bit dtype, of an op computed in a 16-bit dtype,
a 16-bit constant) is rounded to that dtype's precision where it is made, by a cast
`convert_element_type(x, dtype=float32, via=<16-bit dtype>)`: the float32 that holds the
16-bit value eager holds. So chains of elementwise ops give eager's bits; a matmul or a
reduction computed in a 16-bit dtype rounds its float32 result once, as eager does, and is
equal to eager within the dtype's tolerance only where its float32 accumulation order
differs. Moves without arithmetic (views, pads, concatenations) of already rounded values
are not rounded again.

`ROUND_SOURCE` is the kernels' rounding helper (registered in codegen.approx): round to
nearest, ties to even, with overflow to +-inf and 16-bit subnormals, as numpy's float16 and
ml_dtypes' bfloat16 casts; NaN stays NaN, -0.0 stays -0.0.
"""
from aotgrad.ir import dtypes as dt
from aotgrad.ir.core import Eqn, Graph, Var
from aotgrad.ir.prims import convert_element_type
from aotgrad.ir.tags import Tag

# dtype -> (significant bits, exponent of the smallest normal, largest finite value)
FORMAT = {dt.float16: (11, -14, 65504.0), dt.bfloat16: (8, -126, 3.3895313892515355e38)}

# A float64 argument: exact for float32 values, and float16 from float64 must round once
# (numpy's float64 -> float16 cast does). q is the spacing of the 16-bit values around |x|;
# adding and subtracting M = q * 2^52 rounds |x| to a multiple of q, ties to even, exactly
# (|x| < M, so |x| + M lies in [M, 2M), where float64's spacing is q).
ROUND_SOURCE = '''
@_ijit
def round_low_f64(x, digits, min_exp, max_finite):
    if not np.isfinite(x):
        return x
    a = abs(x)
    e = math.frexp(a)[1] if a > 0.0 else min_exp + 1
    q = math.ldexp(1.0, max(e, min_exp + 1) - digits)
    m = q * 4503599627370496.0
    r = (a + m) - m
    if r > max_finite:
        r = np.inf
    return math.copysign(r, x)
'''


def rounding_call(value_source, source_dtype, low):
    """Source text of `value_source` (of `source_dtype`) rounded to `low`, as a float32:
    what eager's cast to `low` and back gives. bfloat16 from float64 rounds through float32,
    as ml_dtypes' cast does; float16 rounds from the value itself, as numpy's does."""
    digits, min_exp, max_finite = FORMAT[low]
    x = value_source
    if source_dtype is dt.float64 and low is dt.bfloat16:
        x = f"np.float32({x})"
    return (f"np.float32(round_low_f64(np.float64({x}), {digits}, {min_exp}, "
            f"{max_finite!r}))")


def _moves_only(node):
    return Tag.VIEW in node.prim.tags or Tag.SHAPE in node.prim.tags


def widen(graph):
    """(graph with 16-bit floats as float32, input dtypes, output dtypes); the graph itself
    and two Nones when it holds no 16-bit float value."""
    low = dt.LOW_PRECISION

    def touches(n):
        return n.params.get("dtype") in low or any(v.dtype in low for v in n.inputs + n.outputs)

    if not any(v.dtype in low for v in graph.inputs + graph.outputs) and \
            not any(touches(n) for n in graph.nodes):
        return graph, None, None
    new = {}

    def var(v):
        if v.dtype not in low:
            return v
        if v not in new:
            new[v] = Var(v.name, v.shape, dt.float32)
        return new[v]

    nodes = []
    for n in graph.nodes:
        params = n.params
        if params.get("dtype") in low:
            params = dict(params, dtype=dt.float32)
        if n.prim is convert_element_type and n.outputs[0].dtype in low:
            params = dict(params, via=n.outputs[0].dtype)   # the cast itself rounds
            nodes.append(Eqn(n.prim, [var(v) for v in n.inputs], [var(n.outputs[0])],
                             params, n.provenance))
            continue
        outs, rounds = [], []
        for v in n.outputs:
            if v.dtype in low and v.dtype.is_floating_point and not _moves_only(n):
                exact = Var(v.name + "_f32", v.shape, dt.float32)   # before rounding
                outs.append(exact)
                rounds.append(Eqn(convert_element_type, [exact], [var(v)],
                                  {"dtype": dt.float32, "via": v.dtype}, n.provenance))
            else:
                outs.append(var(v))
        nodes.append(Eqn(n.prim, [var(v) for v in n.inputs], outs, params, n.provenance))
        nodes.extend(rounds)
    wide = Graph([var(v) for v in graph.inputs], nodes, [var(v) for v in graph.outputs],
                 name=graph.name)
    ins = [v.dtype if v.dtype in low else None for v in graph.inputs]
    outs = [v.dtype if v.dtype in low else None for v in graph.outputs]
    return wide, ins, outs
