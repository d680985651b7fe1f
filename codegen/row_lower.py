"""A row program (codegen.row_program) as LLVM IR (llvmlite.ir, no Numba), for
codegen.row_native to compile.

The row machine (codegen.row_vm) interprets a program one instruction at a time: every
element-wise instruction is a pass over its registers in the scratch. `lower` writes the
same code matrix as one function: the element-wise instructions of one row length that
follow each other (loads, stores, arithmetic, selects) become one loop that keeps their
values in registers of the CPU, and stores to the scratch only what a later instruction
outside the loop reads; a value repeated along runs is read once a run by the loops that
use it; other gathers, reductions and accumulations keep a loop of their own, as in the
machine. The function computes what the machine computes, bit for bit: the same float64
registers rounded to float32 after every float32 instruction (kept as float32s in the
scratch where every value of the program is one: `RowProgram.float32_scratch`), the same float32
approximations (codegen.row_emit writes each instruction as the machine computes it), the same order
of every sum (tests/codegen/test_row_native.py compares the two on every instruction). A
program with an instruction not lowered here (POW) keeps the machine (`supported`)."""
import math

import numpy as np

from aotgrad.codegen.row_emit import LONG_CHAINS, Emitter, library_call
from aotgrad.codegen.row_vm import (EXACT_INT, INDEX_CLAMP, PARTIALS, AccForm, GatherForm, Op,
                                     ReduceForm, Round)

_UNLOWERED = frozenset({Op.POW})
# vectors in flight per iteration of an element-wise loop that computes a function by a
# long chain of dependent operations (an approximation's, a log's: one vector at a time
# would wait on each step); other loops take one vector an iteration: their code is a
# quarter of the size, so LLVM generates it sooner, and they run as fast (memory, not the
# chain, bounds them)
INTERLEAVE = 4


def supported(program):
    return not any(Op(int(op)) in _UNLOWERED for op in program.code[:, 0])


_LOADS = {Op.LOAD_F32, Op.LOAD_F64, Op.LOAD_B8}
_STORES = {Op.STORE_F32, Op.STORE_F64, Op.STORE_B8}
_UNARY = {Op.NEG, Op.ABS, Op.EXP, Op.LOG, Op.LOG1P, Op.EXPM1, Op.SQRT, Op.RSQRT, Op.SIN,
          Op.COS, Op.TANH, Op.LOGISTIC, Op.ERF, Op.SIGN, Op.FLOOR, Op.CEIL, Op.RECIPROCAL,
          Op.NOT, Op.TO_BOOL, Op.COPY}
_BINARY = {Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.POW, Op.MAX, Op.MIN, Op.EQ, Op.NE, Op.LT,
           Op.LE, Op.GT, Op.GE, Op.AND, Op.OR}
_POINTWISE = _LOADS | _STORES | _UNARY | _BINARY | {Op.WHERE}


def _reads(row):
    """The scratch offsets instruction `row` of the code matrix reads."""
    op = Op(int(row[0]))
    if op in _LOADS or op in (Op.LOAD_I64, Op.LOAD_I32):
        return ()
    if op in _BINARY or op is Op.GATHER_AT:
        return (int(row[2]), int(row[3]))
    if op in (Op.WHERE, Op.SCATTER_ADD_AT):
        return (int(row[2]), int(row[3]), int(row[4]))
    return (int(row[2]),)


def _writes(row):
    op = Op(int(row[0]))
    return None if op in _STORES or op in (Op.ACC_SUM, Op.ACC_MAX, Op.ACC_MIN) \
        else int(row[1])


# a value repeated along runs at least this long (each row's one value, a row of 128
# values each repeated 128 times) is read in the loops that use it, once a run, rather than
# written out by a loop of its own
ROW_VALUE_MIN_LENGTH = 8


def _row_values(code):
    """The gathers that repeat each element of their operand n // m times (REPEAT) along
    runs of at least ROW_VALUE_MIN_LENGTH, whose result only element-wise instructions
    read, while the operand's register stays as it is: {gather t: (its result's offset,
    the operand's offset, the run length, {reader u})}. Their readers read the operand once
    a run instead; the gather itself emits nothing. The readers in one run of the code
    (`_segments`) all read runs of one length."""
    out = {}
    for t, row in enumerate(code):
        op, dst, a, c, n, m = (Op(int(row[0])), int(row[1]), int(row[2]), int(row[4]),
                               int(row[5]), int(row[6]))
        if op is not Op.GATHER or c != GatherForm.REPEAT or n // m < ROW_VALUE_MIN_LENGTH:
            continue
        # (an instruction never reads the register it writes: the allocator gives its
        # result a register before it frees its operands')
        end = _redefined(code, dst, t)
        readers = {u for u in range(t + 1, end) if dst in _reads(code[u])}
        if readers and all(Op(int(code[u][0])) in _POINTWISE for u in readers) \
                and not any(_writes(code[u]) == a for u in range(t + 1, max(readers) + 1)):
            out[t] = (dst, a, n // m, readers)
    while True:                            # one run length per run of the code
        mixed = set()
        for fused, ts in _segments(code, skip=out):
            lengths = {}
            for t, (dst, a, run, readers) in out.items():
                if fused and readers & set(ts):
                    lengths.setdefault(run, []).append(t)
            if len(lengths) > 1:
                keep = max(lengths, key=lambda k: (len(lengths[k]), k))
                mixed.update(t for k, gs in lengths.items() if k != keep for t in gs)
        if not mixed:
            return out
        for t in mixed:
            del out[t]


def _redefined(code, off, after):
    """The first instruction after `after` that writes `off` (len(code) where none)."""
    return next((u for u in range(after + 1, len(code)) if _writes(code[u]) == off),
                len(code))


def _segments(code, skip=()):
    """The code's instructions in runs: each run either one non-element-wise instruction or
    element-wise ones of one row length, in order (the instructions in `skip` left out)."""
    runs = []
    for t, row in enumerate(code):
        if t in skip:
            continue
        op = Op(int(row[0]))
        fused = op in _POINTWISE
        if fused and runs and runs[-1][0] and runs[-1][1] == int(row[5]):
            runs[-1][2].append(t)
        else:
            runs.append((fused, int(row[5]), [t]))
    return [(fused, ts) for fused, _, ts in runs]


def _read_elsewhere(code, segments, row_values):
    """For each run, the offsets its instructions write that an instruction of a later run
    reads before they are written again (those go to the scratch); a per-row value's
    reader reads the value's register."""
    run_of = {t: k for k, (_, ts) in enumerate(segments) for t in ts}
    swap = {(u, dst): a for dst, a, _, readers in row_values.values() for u in readers}
    out = [set() for _ in segments]
    last_def = {}                          # offset -> the run that wrote it last
    for t, row in enumerate(code):
        if t not in run_of:
            continue
        k = run_of[t]
        for off in _reads(row):
            off = swap.get((t, off), off)
            d = last_def.get(off)
            if d is not None and d != k:
                out[d].add(off)
        w = _writes(row)
        if w is not None:
            last_def[w] = k
    return out


def lower(program, lanes):
    """The LLVM IR (text) of `program`'s function: `rows(lo, hi, addr_in, addr_out, pre, s,
    acc, idx)` runs rows lo..hi in groups of `program.group`; `pre`: the preloaded
    registers (`pre_len` float64s, shared by the parts: only read), `s`: this part's
    scratch for the others (`work` float64s); `acc`: this part's accumulators. `lanes`:
    float32 elements per vector of the CPU the code is for."""
    e = Emitter(program, lanes)
    b = e.b
    code = program.code
    group = program.group
    row_values = _row_values(code)
    segments = _segments(code, skip=row_values)
    stored = _read_elsewhere(code, segments, row_values)
    per_row = {(u, dst): (a, run) for dst, a, run, readers in row_values.values()
               for u in readers}
    # preloaded registers of one value throughout (a `full`): constants of the code
    consts = {}
    for p in program.pre:
        if p.value is not None and p.value.size:
            bits = p.value.view(np.int64)
            if (bits == bits[0]).all():
                consts[program.offsets[p.var]] = e.c64(p.value[0])
    e.scope_all(["pre", "scratch"] + [("in", k) for k in range(len(program.inputs))]
                + [("out", k) for k in range(len(program.outputs))])
    # the inputs' and outputs' addresses, as typed pointers, loaded once: (is an input,
    # slot) -> pointer
    bases = {}
    for row in code:
        op = Op(int(row[0]))
        if op in _LOADS or op in _STORES:
            key = (op in _LOADS, int(row[7]))
            if key not in bases:
                addr = b.load(b.gep(e.ain if key[0] else e.aout, [e.ci(key[1])]))
                bases[key] = b.inttoptr(addr, e.array_type(op).as_pointer())
    # preloaded registers of a value of one element, made per call: read at element 0
    scalars = {program.offsets[p.var] for p in program.pre
               if p.node is not None and math.prod(p.node.inputs[0].shape) == 1}
    exact = {program.offsets[p.var]: np.dtype(p.var.dtype.np) == np.float32
             for p in program.pre}
    # for r in lo, lo + group, ... < hi: g = min(group, hi - r)
    with e.counted(e.hi, start=e.lo) as rows:
        r = rows.index
        left = b.sub(e.hi, r)
        g = b.select(b.icmp_signed("<", left, e.ci(group)), left, e.ci(group))
        for (fused, ts), keep in zip(segments, stored):
            if fused:
                _pointwise_loop(e, code, ts, keep, r, g, bases, consts, scalars, exact,
                                per_row)
            else:
                _other(e, code[ts[0]], r, g)
                _mark_exact(exact, code[ts[0]])
        rows.step = g
    b.ret(e.ci(0))
    return str(e.module)


def _mark_exact(exact, row):
    """Record whether the register instruction `row` writes holds float32 values (or 0 and
    1) only: `exact` maps an offset to that, for the instructions so far."""
    op, dst, a, b, aux = Op(int(row[0])), int(row[1]), int(row[2]), int(row[3]), int(row[7])
    if op in _STORES or op in (Op.ACC_SUM, Op.ACC_MAX, Op.ACC_MIN):
        return
    if op in _LOADS:
        exact[dst] = op is not Op.LOAD_F64
    elif op in (Op.LOAD_I64, Op.LOAD_I32):
        exact[dst] = False
    elif op is Op.WHERE:
        exact[dst] = exact.get(a, False) and exact.get(b, False)
    elif op in (Op.GATHER, Op.GATHER_AT):
        exact[dst] = exact.get(a, False)
    else:
        exact[dst] = aux in (Round.F32, Round.BOOL)


def _pointwise_loop(e, code, ts, keep, r, g, bases, consts, scalars, exact, per_row):
    """One loop over the g * n elements of a run of element-wise instructions (a loop over
    runs of repeated values around one along each run, where the run of instructions reads
    repeated values, `per_row`: (reader, offset) -> (the value's offset, the run length)).
    A register read from the scratch that holds float32 values goes through float32
    (exact), so LLVM computes in float32 what the machine computes in float64 and rounds
    (the same result: sums, differences, products and quotients of float32 values, rounded
    once from float64, are float32's)."""
    b = e.b
    n = int(code[ts[0]][5])
    row0 = b.mul(r, e.ci(n))               # the group's first element in the arrays

    def exact_load(off, i):
        x = e.sload(off, i)
        return e.round32(x) if exact.get(off, False) else x
    # values of one element, loaded before the loop (LLVM does not prove that the loop's
    # stores to the scratch miss them, and leaves the loop scalar)
    invariant = dict(consts)
    for t in ts:
        for off in _reads(code[t]):
            if off in scalars and off not in invariant:
                invariant[off] = exact_load(off, e.ci(0))
    chain = any(Op(int(code[t][0])) in LONG_CHAINS for t in ts)
    # (no vector width asked of a loop that calls the C library: LLVM cannot give it one,
    # and says so on the process's stderr)
    scalar = any(library_call(Op(int(code[t][0])), int(code[t][7])) for t in ts)
    hint = None if scalar else e.loop_hint(INTERLEAVE if chain else 1, e.lanes)
    repeated = {per_row[(t, off)] for t in ts for off in _reads(code[t]) if (t, off) in per_row}
    if not repeated:
        with e.loop(b.mul(g, e.ci(n)), hint=hint) as i:
            _pointwise_body(e, code, ts, keep, i, row0, bases, dict(invariant), {}, per_row,
                            exact, exact_load)
        return
    run, = {length for _, length in repeated}     # (_row_values: one length per run)
    with e.loop(b.mul(g, e.ci(n // run))) as q:
        values = {a: exact_load(a, q) for a, _ in sorted(repeated)}
        with e.loop(e.ci(run), hint=hint) as k:
            i = b.add(b.mul(q, e.ci(run)), k)
            _pointwise_body(e, code, ts, keep, i, row0, bases, dict(invariant), values,
                            per_row, exact, exact_load)


def _pointwise_body(e, code, ts, keep, i, row0, bases, val, row_value, per_row, exact,
                    exact_load):
    """Element i of the run's instructions; `val`: offset -> its value in this iteration
    (constants and values of one element to start with), `row_value`: the row's values."""
    b = e.b
    for t in ts:
        def read(off):
            if (t, off) in per_row:
                return row_value[per_row[(t, off)][0]]
            return val[off] if off in val else exact_load(off, i)
        row = code[t]
        op, dst, a, bb, c, aux = (Op(int(row[0])), int(row[1]), int(row[2]), int(row[3]),
                                  int(row[4]), int(row[7]))
        if op in _LOADS:
            x = e.scoped(b.load(b.gep(bases[(True, aux)], [b.add(row0, i)])), ("in", aux))
            v = (b.fpext(x, e.F64) if op is Op.LOAD_F32 else x if op is Op.LOAD_F64
                 else b.select(b.icmp_unsigned("!=", x, e.ci(0, e.I8)), e.c64(1.0),
                               e.c64(0.0)))
        elif op in _STORES:
            x = read(a)
            if op is Op.STORE_F32:
                x = b.fptrunc(x, e.F32)
            elif op is Op.STORE_B8:
                x = b.zext(b.fcmp_unordered("!=", x, e.c64(0.0)), e.I8)
            e.scoped(b.store(x, b.gep(bases[(False, aux)], [b.add(row0, i)])), ("out", aux))
            continue
        elif op is Op.WHERE:
            v = b.select(b.fcmp_unordered("!=", read(c), e.c64(0.0)), read(a), read(bb))
        elif op in _UNARY:
            v = e.unary(op, read(a), aux)
        else:
            v = e.binary(op, read(a), read(bb), aux)
        val[dst] = v
        _mark_exact(exact, row)
        if dst in keep and _last_write(code, ts, t, dst):
            e.sstore(v, dst, i)


def _last_write(code, ts, t, dst):
    """Whether instruction t is the last of run `ts` to write offset dst."""
    return not any(_writes(code[u]) == dst for u in ts if u > t)


def _other(e, row, r, g):
    """An integer load, a gather, scatter-add, reduction or accumulation of the g rows from
    row r: the machine's loops for it."""
    b = e.b
    op, dst, a, ib, c, n, m, aux = (int(x) for x in row)
    op = Op(op)
    if op in (Op.LOAD_I64, Op.LOAD_I32):
        _load_integers(e, op, dst, n, m, aux, r, g)
        return
    if op is Op.GATHER_AT:
        _gather_at(e, dst, a, ib, c, n, m, g)
        return
    if op is Op.SCATTER_ADD_AT:
        _scatter_add_at(e, dst, a, ib, c, n, m, aux, g)
        return
    if op is Op.GATHER:
        if c == GatherForm.REPEAT:
            rep = n // m
            with e.loop(b.mul(g, e.ci(m))) as o:
                v = e.sload(a, o)
                base = b.mul(o, e.ci(rep))
                with e.loop(e.ci(rep)) as i:
                    e.sstore(v, dst, b.add(base, i))
        elif c == GatherForm.TILE:
            q = n // m
            with e.loop(b.mul(g, e.ci(q))) as t:
                src = b.mul(b.sdiv(t, e.ci(q)), e.ci(m))
                out = b.mul(t, e.ci(m))
                with e.loop(e.ci(m)) as i:
                    e.sstore(e.sload(a, b.add(src, i)), dst, b.add(out, i))
        else:
            with e.loop(g) as j:
                with e.loop(e.ci(n)) as i:
                    k = b.load(b.gep(e.idx, [b.add(e.ci(ib), i)]))
                    v = e.sload(a, b.add(b.mul(j, e.ci(m)), k))
                    e.sstore(v, dst, b.add(b.mul(j, e.ci(n)), i))
        return
    if op in (Op.REDUCE_SUM, Op.REDUCE_MAX, Op.REDUCE_MIN):
        if c == ReduceForm.RUNS:
            _reduce_runs(e, op, dst, a, n, m, aux, g)
        else:
            _reduce_indexed(e, op, dst, a, ib, n, m, aux, g)
        return
    # ACC_*: n holds the AccForm, c the accumulators' offset
    at = b.gep(e.acc, [e.ci(c)])
    with e.loop(g) as j:
        base = b.mul(j, e.ci(m))
        with e.loop(e.ci(m)) as i:
            x = e.sload(a, b.add(base, i))
            k = i if n == AccForm.DIRECT else b.load(b.gep(e.idx, [b.add(e.ci(ib), i)]))
            p = b.gep(at, [k])
            old = b.load(p)
            if op is Op.ACC_SUM:
                new = b.fadd(old, x)
            else:
                new = e.vmax(old, x, less=op is Op.ACC_MIN)
            b.store(new, p)


def _flag(e, cond, slot):
    """The machine's flag: acc[slot] = 1.0 where `cond` (the call then runs on numpy)."""
    with e.b.if_then(cond):
        e.b.store(e.c64(1.0), e.b.gep(e.acc, [slot]))


def _load_integers(e, op, dst, n, flag, slot, r, g):
    """LOAD_I64 / LOAD_I32: input `slot`'s g rows of n integers into float64s (exact: an
    int64 beyond 2**53 flags the call)."""
    b = e.b
    ity = e.I64 if op is Op.LOAD_I64 else e.I32
    at = b.inttoptr(b.load(b.gep(e.ain, [e.ci(slot)])), ity.as_pointer())
    start = b.mul(r, e.ci(n))
    with e.counted(b.mul(g, e.ci(n)), carried=[e.ir.Constant(e.I1, 0)]) as lp:
        x = e.scoped(b.load(b.gep(at, [b.add(start, lp.index)])), ("in", slot))
        wide = e.ir.Constant(e.I1, 0)
        if op is Op.LOAD_I64:
            wide = b.or_(b.icmp_signed(">", x, e.ci(EXACT_INT)),
                         b.icmp_signed("<", x, e.ci(-EXACT_INT)))
        lp.next = [b.or_(lp.values[0], wide)]
        e.sstore(b.sitofp(x, e.F64), dst, lp.index)
    if op is Op.LOAD_I64:
        _flag(e, lp.values[0], e.ci(flag))


def _index_at(e, v, size):
    """An index register's float64 `v` as the machine takes it: (the index, counted from
    the end where negative, 0 where out of range; whether it is out of range)."""
    b = e.b
    lim = e.c64(INDEX_CLAMP)
    v = e.select(e.gt(v, lim), lim, e.select(e.lt(v, b.fneg(lim)), b.fneg(lim), v))
    at = b.fptosi(v, e.I64)
    at = e.select(b.icmp_signed("<", at, e.ci(0)), b.add(at, size), at)
    bad = b.or_(b.icmp_signed("<", at, e.ci(0)), b.icmp_signed(">=", at, size))
    return e.select(bad, e.ci(0), at), bad


def _header(e, at, k):
    return e.b.load(e.b.gep(e.idx, [e.ci(at + k)]))


def _gather_at(e, dst, a, index, head, n, m, g):
    """GATHER_AT: dst[j] = a[base[j] + index[j] * stride] in each row (the header read from
    the index vector at run time, as the code is shared by programs of equal code)."""
    b = e.b
    size, stride, flag = (_header(e, head, k) for k in range(3))
    with e.loop(g) as j:
        with e.loop(e.ci(n)) as i:
            o = b.add(b.mul(j, e.ci(n)), i)
            at, bad = _index_at(e, e.sload(index, o), size)
            base = b.load(b.gep(e.idx, [b.add(e.ci(head + 3), i)]))
            src = b.add(b.add(b.mul(j, e.ci(m)), base), b.mul(at, stride))
            e.sstore(e.sload(a, src), dst, o)
            _flag(e, bad, flag)


def _scatter_add_at(e, dst, a, index, src, n, head, aux, g):
    """SCATTER_ADD_AT: dst = a, then dst[base[j] + index[j] * stride] += src[j] in each row,
    j in order (an index out of range adds nothing and flags the call)."""
    b = e.b
    k, size, stride, flag = (_header(e, head, t) for t in range(4))
    with e.loop(g) as j:
        dj = b.mul(j, e.ci(n))
        with e.loop(e.ci(n)) as i:
            e.sstore(e.sload(a, b.add(dj, i)), dst, b.add(dj, i))
        with e.loop(k) as i:
            q = b.add(b.mul(j, k), i)
            at, bad = _index_at(e, e.sload(index, q), size)
            with b.if_else(bad) as (out_of_range, in_range):
                with out_of_range:
                    b.store(e.c64(1.0), b.gep(e.acc, [flag]))
                with in_range:
                    base = b.load(b.gep(e.idx, [b.add(e.ci(head + 4), i)]))
                    o = b.add(b.add(dj, base), b.mul(at, stride))
                    v = b.fadd(e.sload(dst, o), e.sload(src, q))
                    e.sstore(e.round32(v) if aux == Round.F32 else v, dst, o)


def _reduce_runs(e, op, dst, a, n, m, aux, g):
    """The machine's reduction of each run of m // n elements: row_vm.PARTIALS partial
    results in one vector (element i into lane i % PARTIALS, the rest into lane 0), then
    halves combined, lanes 0.. with the next ones."""
    b, ir = e.b, e.ir
    run = m // n
    width = PARTIALS
    vec = ir.VectorType(e.F64, width)
    init = {Op.REDUCE_SUM: 0.0, Op.REDUCE_MAX: -np.inf, Op.REDUCE_MIN: np.inf}[op]

    def combine(x, y):
        if op is Op.REDUCE_SUM:
            return b.fadd(x, y)
        return e.vmax(x, y, less=op is Op.REDUCE_MIN)
    key = "pre" if a < e.p.pre_len else "scratch"
    with e.loop(b.mul(g, e.ci(n))) as o:
        start = b.mul(o, e.ci(run))
        with e.counted(e.ci(run // width), carried=[ir.Constant(vec, [init] * width)]) as lp:
            narrow = e.in_scratch32(a)
            at = b.bitcast(e.sptr(a, b.add(start, b.mul(lp.index, e.ci(width)))),
                           (ir.VectorType(e.F32, width) if narrow else vec).as_pointer())
            load = e.scoped(b.load(at, align=4 if narrow else 8), key)
            lp.next = [combine(lp.values[0], b.fpext(load, vec) if narrow else load)]
        acc = lp.values[0]
        t0 = b.extract_element(acc, e.ci(0, e.I32))
        for i in range(run // width * width, run):
            t0 = combine(t0, e.sload(a, b.add(start, e.ci(i))))
        acc = b.insert_element(acc, t0, e.ci(0, e.I32))
        while width > 1:
            width //= 2
            lanes = ir.VectorType(e.I32, width)
            acc = combine(b.shuffle_vector(acc, acc, ir.Constant(lanes, list(range(width)))),
                          b.shuffle_vector(acc, acc, ir.Constant(
                              lanes, list(range(width, 2 * width)))))
        v = b.extract_element(acc, e.ci(0, e.I32))
        e.sstore(e.round32(v) if aux == Round.F32 else v, dst, o)


def _reduce_indexed(e, op, dst, a, ib, n, m, aux, g):
    b = e.b
    init = {Op.REDUCE_SUM: 0.0, Op.REDUCE_MAX: -np.inf, Op.REDUCE_MIN: np.inf}[op]
    with e.loop(g) as j:
        dj = b.mul(j, e.ci(n))
        aj = b.mul(j, e.ci(m))
        with e.loop(e.ci(n)) as i:
            e.sstore(e.c64(init), dst, b.add(dj, i))
        with e.loop(e.ci(m)) as i:
            k = b.add(dj, b.load(b.gep(e.idx, [b.add(e.ci(ib), i)])))
            old = e.sload(dst, k)
            x = e.sload(a, b.add(aj, i))
            new = b.fadd(old, x) if op is Op.REDUCE_SUM else e.vmax(
                old, x, less=op is Op.REDUCE_MIN)
            e.sstore(new, dst, k)
        if aux == Round.F32:
            with e.loop(e.ci(n)) as i:
                k = b.add(dj, i)
                e.sstore(e.round32(e.sload(dst, k)), dst, k)
