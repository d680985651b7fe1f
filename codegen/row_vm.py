"""The row machine: one Numba function, compiled once per installation, that runs a cold
kernel's nodes row by row until the kernel's own machine code is compiled.

A kernel that keeps each row to itself (codegen.row_blocks.RowBlocks: pointwise chains, row
reductions, broadcasts of per-row or per-column values) is translated into a short program
of row instructions (codegen.row_program). `run_rows` interprets such a program over a range
of rows, a group of rows at a time: every value of a group lives in a register of the
machine's scratch, a few kilobytes that stay in the CPU's cache, and every instruction is
one vectorised loop over it. Numpy's first tier paid a Python call and a fresh array for
every node of every block; here a node costs one loop over cached memory.

The machine is a generated module like a kernel's (the prelude and codegen.approx's float32
approximations are text, and numba's cache must see all of its code in one file), kept in a
directory of the installation (codegen.row_machine, which compiles and loads it), not in
the kernel cache of the user's programs: one compile serves every program, every cache
directory and every later run.

Registers are float64, or float32 where a program's values are all float32, bools and
integers (`run_rows` is compiled for both; the `registers` argument, an empty array, picks
one): half the bytes each instruction reads and writes, twice the elements per vector. They
hold integers exactly (an integer beyond +-2**53 on float64 registers, +-2**24 on float32
ones, flags the call: numpy runs it, or float64 registers do). A float32 result is rounded to
float32 after every instruction (Round.F32): sums, products, quotients and square roots of
float32 values computed in float64 and rounded once are float32's correctly rounded results
(so on float32 registers they are computed in float32), other functions are computed in
float64 from the widened operands and rounded, and exp, log, tanh, logistic, erf and rsqrt
use the compiled kernels' float32 approximations; a reduction is made in float64 either way.
Float64 exp, expm1, tanh and logistic are the compiled kernels' float64 approximations.
So both kinds of registers give every result bit for bit the same. A bool result is 0.0 or
1.0 (Round.BOOL)."""
import enum


class Op(enum.IntEnum):
    """The row machine's instructions: each is one row (op, dst, a, b, c, n, m, aux) of a
    program's code matrix. dst, a, b, c: offsets of registers in the scratch; n: the
    result's length per row; m: the operand's, where it differs (GATHER, REDUCE_*,
    ACC_*); aux: the Round mode, or the slot of an input (LOAD_*) or output (STORE_*)."""
    LOAD_F32 = 0          # dst = input aux's rows (as float64)
    LOAD_F64 = 1
    LOAD_B8 = 2
    STORE_F32 = 3         # output aux's rows = a
    STORE_F64 = 4
    STORE_B8 = 5
    # integers (int64, int32) held exactly: an int64 beyond +-2**53 sets the part's flag
    # acc[part, m] (the program then runs on numpy)
    LOAD_I64 = 6
    LOAD_I32 = 7
    NEG = 10              # dst[i] = f(a[i])
    ABS = 11
    EXP = 12
    LOG = 13
    LOG1P = 14
    EXPM1 = 15
    SQRT = 16
    RSQRT = 17
    SIN = 18
    COS = 19
    TANH = 20
    LOGISTIC = 21
    ERF = 22
    SIGN = 23
    FLOOR = 24
    CEIL = 25
    RECIPROCAL = 26
    NOT = 27
    TO_BOOL = 28
    COPY = 29
    ADD = 40              # dst[i] = f(a[i], b[i])
    SUB = 41
    MUL = 42
    DIV = 43
    POW = 44
    MAX = 45
    MIN = 46
    EQ = 47
    NE = 48
    LT = 49
    LE = 50
    GT = 51
    GE = 52
    AND = 53
    OR = 54
    WHERE = 60            # dst[i] = a[i] if c[i] else b[i]
    # (GatherForm, ReduceForm in c, AccForm in n: the shape of the index map)
    GATHER = 70           # dst[j] = a[idx[b + j]] within each row: a broadcast
    REDUCE_SUM = 71       # dst[idx[b + i]] (+)= a[i] within each row
    REDUCE_MAX = 72
    REDUCE_MIN = 73
    # at each row's own indices, b's integer values (negative ones counted from the end);
    # one out of range sets the part's flag (see LOAD_I64). The index vector holds a
    # header from c (GATHER_AT) or m (SCATTER_ADD_AT): (SCATTER_ADD_AT only: b's length
    # per row), the indexed dim's size, its stride in a row, the flag's slot, then per
    # element of b the offset in a row of its index 0
    GATHER_AT = 74        # dst[j] = a[base[j] + b[j] * stride]
    SCATTER_ADD_AT = 75   # dst = a, then dst[base[j] + b[j] * stride] += c[j], j in order
    ACC_SUM = 80          # acc[part, c + idx[b + i]] (+)= a[i] over the part's rows
    ACC_MAX = 81
    ACC_MIN = 82


class GatherForm(enum.IntEnum):
    """A GATHER's index map, where a loop needs no index (in c): each element repeated
    n // m times (a per-row value broadcast along its row), or the row n // m times."""
    INDEXED = 0
    REPEAT = 1
    TILE = 2


class ReduceForm(enum.IntEnum):
    """A REDUCE_*'s index map (in c): runs of m // n elements (over the last axes)."""
    INDEXED = 0
    RUNS = 1


class AccForm(enum.IntEnum):
    """An ACC_*'s index map (in n): element i into element i (a sum over the rows only)."""
    INDEXED = 0
    DIRECT = 1


class Round(enum.IntEnum):
    """How an instruction's result is kept (its node's dtype)."""
    F64 = 0
    F32 = 1
    BOOL = 2


# The expression of each element-wise instruction on x (and y): (float32, float64). The
# float32 one takes x, y as float32 values and may return float32 or float64 (rounded to
# float32 either way); None: the float64 one, rounded.
_UNARY = {
    Op.NEG: ("-x", "-x"),
    Op.ABS: ("abs(x)", "abs(x)"),
    Op.EXP: ("exp_f32(x)", "exp_f64(x)"),
    Op.LOG: ("log_f32(x)", "_log(x)"),
    Op.LOG1P: (None, "_log1p(x)"),
    Op.EXPM1: (None, "expm1_f64(x)"),
    Op.SQRT: (None, "_sqrt(x)"),
    Op.RSQRT: ("rsqrt_f32(x)", "_rsqrt(x)"),
    Op.SIN: (None, "math.sin(x)"),
    Op.COS: (None, "math.cos(x)"),
    Op.TANH: ("tanh_f32(x)", "tanh_f64(x)"),
    Op.LOGISTIC: ("logistic_f32(x)", "logistic_f64(x)"),
    Op.ERF: ("erf_f32(x)", "math.erf(x)"),
    Op.SIGN: (None, "_sign(x)"),
    Op.FLOOR: (None, "np.floor(x)"),
    Op.CEIL: (None, "np.ceil(x)"),
    Op.RECIPROCAL: (None, "1.0 / x"),
    Op.NOT: (None, "1.0 if x == 0.0 else 0.0"),
    Op.TO_BOOL: (None, "1.0 if x != 0.0 else 0.0"),
    Op.COPY: (None, "x"),
}
_BINARY = {
    Op.ADD: "x + y", Op.SUB: "x - y", Op.MUL: "x * y", Op.DIV: "x / y", Op.POW: "x ** y",
    Op.MAX: "_max(x, y)", Op.MIN: "_min(x, y)",
    Op.EQ: "1.0 if x == y else 0.0", Op.NE: "1.0 if x != y else 0.0",
    Op.LT: "1.0 if x < y else 0.0", Op.LE: "1.0 if x <= y else 0.0",
    Op.GT: "1.0 if x > y else 0.0", Op.GE: "1.0 if x >= y else 0.0",
    Op.AND: "1.0 if (x != 0.0 and y != 0.0) else 0.0",
    Op.OR: "1.0 if (x != 0.0 or y != 0.0) else 0.0",
}
# the partial results a reduction over runs keeps (element i into i % PARTIALS): they
# overlap, and codegen.row_lower's code keeps them in vectors of registers
PARTIALS = 16
# the largest integer magnitude up to which every integer is a float64 (and its float32
# rounding the integer's own)
EXACT_INT = 1 << 53
# the same for float32 registers
EXACT_INT_F32 = 1 << 24
# an index register's value is clamped to +-this before it becomes an integer (it is an
# integer already, except in a call flagged for an int64 beyond 2**53, whose results numpy
# replaces: the clamp keeps the conversion defined there)
INDEX_CLAMP = float(1 << 60)
APPROXIMATIONS = ("exp_f32", "log_f32", "tanh_f32", "logistic_f32", "erf_f32", "rsqrt_f32",
                  "exp_f64", "expm1_f64", "tanh_f64", "logistic_f64")

_SCALARS = '''

@_ijit
def _max(x, y):             # NaN propagates; of two equal values (0.0, -0.0) the first
    if x != x or x == y:
        return x
    if y != y:
        return y
    return x if x > y else y


@_ijit
def _min(x, y):
    if x != x or x == y:
        return x
    if y != y:
        return y
    return x if x < y else y


@_ijit
def _sign(x):
    if x > 0.0:
        return 1.0
    if x < 0.0:
        return -1.0
    return x if x != x else 0.0     # NaN stays NaN; both zeros give 0.0, as numpy's sign


@_ijit
def _log(x):
    return math.log(x) if x > 0.0 else (-INF64 if x == 0.0 else (x if x != x else NAN64))


@_ijit
def _log1p(x):
    return math.log1p(x) if x > -1.0 else (-INF64 if x == -1.0 else (x if x != x else NAN64))


@_ijit
def _sqrt(x):
    return math.sqrt(x) if x >= 0.0 else (x if x != x else NAN64)


@_ijit
def _rsqrt(x):
    return 1.0 / _sqrt(x)


@_intrinsic
def _ptr(typingctx, addr, dtype):
    """A pointer of `dtype` at the integer address `addr`."""
    ptrty = numba.types.CPointer(dtype.dtype)

    def codegen(context, builder, sig, args):
        return builder.inttoptr(args[0], context.get_value_type(ptrty))
    return ptrty(addr, dtype), codegen
'''

_HEAD = '''

@_jit
def run_rows(phase, part, nparts, ws, code, idx, pre, registers, addr_in, addr_out, acc, nrows,
             group, work):
    lo = nrows * part // nparts
    hi = nrows * (part + 1) // nparts
    npre = pre.shape[0]
    s = np.empty(npre + work, registers.dtype)
    # the largest integer magnitude up to which the registers hold every integer exactly
    exact = EXACT_INT if s.itemsize == 8 else EXACT_INT_F32
    part_ = np.empty(PARTIALS, np.float64)
    # the results of the widest reduction by an index map (made in float64)
    widest = 0
    for k in range(code.shape[0]):
        if code[k, 0] >= 71 and code[k, 0] <= 73 and code[k, 4] != 1:
            widest = max(widest, code[k, 5])
    red = np.empty(widest, np.float64)
    for i in range(npre):
        s[i] = pre[i]
    ninstr = code.shape[0]
    r = lo
    while r < hi:
        g = min(group, hi - r)
        for k in range(ninstr):
            op = code[k, 0]
            dst = code[k, 1]
            a = code[k, 2]
            b = code[k, 3]
            c = code[k, 4]
            n = code[k, 5]
            m = code[k, 6]
            aux = code[k, 7]
            gn = g * n
            # (registers as slices: an index from a range is known not to be negative, so
            # the loops vectorise; s[dst + i] would be checked for wrapping around)
            d = s[dst:dst + gn]
            xa = s[a:a + gn]
            if op == 0:
                p32 = _ptr(addr_in[aux] + r * n * 4, np.float32)
                for i in range(gn):
                    d[i] = p32[i]
            elif op == 1:
                p64 = _ptr(addr_in[aux] + r * n * 8, np.float64)
                for i in range(gn):
                    d[i] = p64[i]
            elif op == 2:
                p8 = _ptr(addr_in[aux] + r * n, np.uint8)
                for i in range(gn):
                    d[i] = 1.0 if p8[i] != 0 else 0.0
            elif op == 3:
                q32 = _ptr(addr_out[aux] + r * n * 4, np.float32)
                for i in range(gn):
                    q32[i] = np.float32(xa[i])
            elif op == 4:
                q64 = _ptr(addr_out[aux] + r * n * 8, np.float64)
                for i in range(gn):
                    q64[i] = xa[i]
            elif op == 5:
                q8 = _ptr(addr_out[aux] + r * n, np.uint8)
                for i in range(gn):
                    q8[i] = 1 if xa[i] != 0.0 else 0
            elif op == 6:
                pi64 = _ptr(addr_in[aux] + r * n * 8, np.int64)
                wide = False
                for i in range(gn):
                    iv = pi64[i]
                    wide |= iv > exact or iv < -exact
                    d[i] = np.float64(iv)
                if wide:
                    acc[part, m] = 1.0
            elif op == 7:
                pi32 = _ptr(addr_in[aux] + r * n * 4, np.int32)
                wide = False
                for i in range(gn):
                    iv = pi32[i]
                    wide |= iv > exact or iv < -exact
                    d[i] = np.float64(iv)
                if wide:
                    acc[part, m] = 1.0
            elif op == 74:
                size = idx[c]
                stride = idx[c + 1]
                base = idx[c + 3:c + 3 + n]
                yb = s[b:b + gn]
                out_of_range = False
                for j in range(g):
                    for i in range(n):
                        at = np.int64(min(max(yb[j * n + i], -INDEX_CLAMP), INDEX_CLAMP))
                        if at < 0:
                            at += size
                        if at < 0 or at >= size:
                            out_of_range = True
                            at = 0
                        d[j * n + i] = s[a + j * m + base[i] + at * stride]
                if out_of_range:
                    acc[part, idx[c + 2]] = 1.0
            elif op == 75:
                kb = idx[m]
                size = idx[m + 1]
                stride = idx[m + 2]
                base = idx[m + 4:m + 4 + kb]
                out_of_range = False
                for j in range(g):
                    for i in range(n):
                        d[j * n + i] = xa[j * n + i]
                    for i in range(kb):
                        at = np.int64(min(max(s[b + j * kb + i], -INDEX_CLAMP),
                                          INDEX_CLAMP))
                        if at < 0:
                            at += size
                        if at < 0 or at >= size:
                            out_of_range = True
                            continue
                        o = j * n + base[i] + at * stride
                        v = d[o] + s[c + j * kb + i]
                        d[o] = np.float64(np.float32(v)) if aux == 1 else v
                if out_of_range:
                    acc[part, idx[m + 3]] = 1.0
'''

_TAIL = '''\
            elif op == 60:
                yb = s[b:b + gn]
                zc = s[c:c + gn]
                for i in range(gn):
                    # (both operands read first: a select, which vectorises; a read in
                    # each branch did not)
                    u = xa[i]
                    v = yb[i]
                    d[i] = u if zc[i] != 0.0 else v
            elif op == 70:
                if c == 1:                   # each element repeated n // m times
                    rep = n // m
                    for o in range(g * m):
                        v = xa[o]
                        do = s[dst + o * rep:dst + o * rep + rep]
                        for i in range(rep):
                            do[i] = v
                elif c == 2:                 # the row repeated n // m times
                    for t in range(g * (n // m)):
                        dt = s[dst + t * m:dst + t * m + m]
                        at = s[a + (t // (n // m)) * m:a + (t // (n // m)) * m + m]
                        for i in range(m):
                            dt[i] = at[i]
                else:
                    ix = idx[b:b + n]
                    for j in range(g):
                        dj = s[dst + j * n:dst + j * n + n]
                        aj = s[a + j * m:a + j * m + m]
                        for i in range(n):
                            dj[i] = aj[ix[i]]
            elif (op == 71 or op == 72 or op == 73) and c == 1:   # runs of m // n
                run = m // n
                init = 0.0 if op == 71 else (-INF64 if op == 72 else INF64)
                full = run // PARTIALS
                for o in range(g * n):
                    ao = s[a + o * run:a + o * run + run]
                    # PARTIALS partial results, element i into i % PARTIALS, the rest into
                    # the first, then halves combined (row_lower's vectors do the same)
                    for k in range(PARTIALS):
                        part_[k] = init
                    for q in range(full):
                        aq = ao[q * PARTIALS:q * PARTIALS + PARTIALS]
                        if op == 71:
                            for k in range(PARTIALS):
                                part_[k] = part_[k] + aq[k]
                        elif op == 72:
                            for k in range(PARTIALS):
                                part_[k] = _max(part_[k], aq[k])
                        else:
                            for k in range(PARTIALS):
                                part_[k] = _min(part_[k], aq[k])
                    for i in range(full * PARTIALS, run):
                        if op == 71:
                            part_[0] = part_[0] + ao[i]
                        elif op == 72:
                            part_[0] = _max(part_[0], ao[i])
                        else:
                            part_[0] = _min(part_[0], ao[i])
                    width = PARTIALS
                    while width > 1:
                        width //= 2
                        for k in range(width):
                            if op == 71:
                                part_[k] = part_[k] + part_[k + width]
                            elif op == 72:
                                part_[k] = _max(part_[k], part_[k + width])
                            else:
                                part_[k] = _min(part_[k], part_[k + width])
                    v = part_[0]
                    s[dst + o] = np.float64(np.float32(v)) if aux == 1 else v
            elif op == 71 or op == 72 or op == 73:
                ix = idx[b:b + m]
                # (each result made in float64 and then kept, whatever the registers hold)
                res = red[:n]
                for j in range(g):
                    dj = s[dst + j * n:dst + j * n + n]
                    aj = s[a + j * m:a + j * m + m]
                    if op == 71:
                        for i in range(n):
                            res[i] = 0.0
                        for i in range(m):
                            res[ix[i]] += aj[i]
                    elif op == 72:
                        for i in range(n):
                            res[i] = -INF64
                        for i in range(m):
                            res[ix[i]] = _max(res[ix[i]], np.float64(aj[i]))
                    else:
                        for i in range(n):
                            res[i] = INF64
                        for i in range(m):
                            res[ix[i]] = _min(res[ix[i]], np.float64(aj[i]))
                    if aux == 1:
                        for i in range(n):
                            dj[i] = np.float32(res[i])
                    else:
                        for i in range(n):
                            dj[i] = res[i]
            elif op == 80 or op == 81 or op == 82:
                ix = idx[b:b + m]
                ap = acc[part]
                at = ap[c:c + m] if n == 1 else ap[c:]
                for j in range(g):
                    aj = s[a + j * m:a + j * m + m]
                    if op == 80 and n == 1:      # element i to element i: a vector add
                        for i in range(m):
                            at[i] += aj[i]
                    elif op == 80:
                        for i in range(m):
                            at[ix[i]] += aj[i]
                    elif op == 81:
                        for i in range(m):
                            at[ix[i]] = _max(at[ix[i]], aj[i])
                    else:
                        for i in range(m):
                            at[ix[i]] = _min(at[ix[i]], aj[i])
        r += g
    return 0
'''


def _elementwise_text():
    """One branch per element-wise instruction, each a plain loop per rounding mode (the
    loops vectorise; a mode tested per element would not). Operands are widened to float64
    (or taken as float32 by an approximation) whatever the registers hold, so a result is
    the same on both machines; where they hold float32, a float32 sum, product, quotient or
    square root is computed in float32 (its rounding of the float64 result)."""
    out = []
    for op, (f32, f64) in _UNARY.items():
        rounded = (f"                        x = np.float32(xa[i])\n"
                   f"                        d[i] = np.float32({f32})\n"
                   if f32 else
                   f"                        x = np.float64(xa[i])\n"
                   f"                        d[i] = np.float32({f64})\n")
        out.append(f"            elif op == {int(op)}:\n"
                   f"                if aux == 1:\n"
                   f"                    for i in range(gn):\n" + rounded +
                   f"                else:\n"
                   f"                    for i in range(gn):\n"
                   f"                        x = np.float64(xa[i])\n"
                   f"                        d[i] = {f64}\n")
    for op, expr in _BINARY.items():
        out.append(f"            elif op == {int(op)}:\n"
                   f"                yb = s[b:b + gn]\n"
                   f"                if aux == 1:\n"
                   f"                    for i in range(gn):\n"
                   f"                        x = np.float64(xa[i])\n"
                   f"                        y = np.float64(yb[i])\n"
                   f"                        d[i] = np.float32({expr})\n"
                   f"                else:\n"
                   f"                    for i in range(gn):\n"
                   f"                        x = np.float64(xa[i])\n"
                   f"                        y = np.float64(yb[i])\n"
                   f"                        d[i] = {expr}\n")
    return "".join(out)


def machine_source():
    """The text of the row machine's module (without the cache's header line)."""
    from aotgrad.codegen import approx, prelude
    return (prelude.PRELUDE + approx.helper_source(APPROXIMATIONS) + _SCALARS
            + f"\nPARTIALS = {PARTIALS}\nEXACT_INT = {EXACT_INT}\n"
            + f"EXACT_INT_F32 = {EXACT_INT_F32}\n"
            + f"INDEX_CLAMP = {INDEX_CLAMP!r}\n" + _HEAD
            + _elementwise_text() + _TAIL)
