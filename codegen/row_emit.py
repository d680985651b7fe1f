"""The LLVM IR of a row program's parts (llvmlite.ir): `Emitter` writes one function, its
loops, its memory in alias scopes of their own, and every instruction of the row machine
(codegen.row_vm) with the machine's float semantics: float64 registers, rounded to float32
after a float32 instruction, and the approximations of codegen.approx (float32, and
float64 exp, expm1, tanh and logistic) written out step by step. codegen.row_lower arranges
a program's instructions into that function's loops; `LONG_CHAINS`: the instructions
computed by long chains of dependent operations."""
import contextlib
import math

import numpy as np

from aotgrad.codegen.row_vm import Op, Round

def _types():
    from llvmlite import ir
    return ir, ir.FloatType(), ir.DoubleType(), ir.IntType(64), ir.IntType(32), \
        ir.IntType(8), ir.IntType(1)


class _Loop:
    """A counted loop being written (Emitter.counted)."""

    def __init__(self, index, values):
        self.index = index
        self.values = values    # the carried values' phis
        self.next = list(values)
        self.step = None


class Emitter:
    """Writes one program's function with an llvmlite IRBuilder."""

    def __init__(self, program, lanes):
        self.lanes = lanes
        ir, self.F32, self.F64, self.I64, self.I32, self.I8, self.I1 = _types()
        self.ir = ir
        self.p = program
        self.module = ir.Module(name="rows")
        p64 = self.I64.as_pointer()
        pd = self.F64.as_pointer()
        fnty = ir.FunctionType(self.I64, [self.I64, self.I64, p64, p64, pd, pd, pd, p64])
        self.fn = ir.Function(self.module, fnty, name="rows")
        lo, hi, ain, aout, pre, s, acc, idx = self.fn.args
        for a in (pre, s, acc):
            a.add_attribute("noalias")
        self.lo, self.hi, self.ain, self.aout, self.pre, self.s, self.acc, self.idx = \
            lo, hi, ain, aout, pre, s, acc, idx
        self.b = ir.IRBuilder(self.fn.append_basic_block("entry"))
        # a scratch of float32s where every value the program holds is one exactly
        # (RowProgram.float32_scratch): half the bytes, and no conversions around the loops
        self.scratch32 = bool(program.float32_scratch)
        if self.scratch32:
            self.s = self.b.bitcast(s, self.F32.as_pointer())
        self._decl = {}
        # the scratch, each input and each output in an alias scope of its own: LLVM then
        # vectorises a loop over them without checking addresses at run time (the caller
        # runs the program here only where no output is an input: RowProgram.run)
        self._scopes = {}
        mod = self.module
        self._domain = mod.add_metadata([ir.MetaDataString(mod, "rows")])
        self._domain.operands = (self._domain, ir.MetaDataString(mod, "rows"))

    def _scope(self, key):
        """(alias.scope, noalias) metadata for the memory `key` names."""
        ir, mod = self.ir, self.module
        if key not in self._scopes:
            # (made with placeholder operands, then given their real ones: add_metadata
            # hashes its operands, and these refer to themselves)
            name = ir.MetaDataString(mod, str(key))
            scope = mod.add_metadata([name])
            scope.operands = (scope, self._domain, name)
            self._scopes[key] = scope
        return self._scopes[key]

    def scoped(self, instr, key):
        """Mark load or store `instr` as an access of memory `key` ("scratch", or ("in",
        slot), ("out", slot)) only; the keys must all be made (`scope_all`) first."""
        ir, mod = self.ir, self.module
        own = mod.add_metadata([ir.MetaDataString(mod, "list")])
        own.operands = (self._scopes[key],)
        others = mod.add_metadata([ir.MetaDataString(mod, "list")])
        others.operands = tuple(v for k, v in self._scopes.items() if k != key)
        instr.set_metadata("alias.scope", own)
        if others.operands:
            instr.set_metadata("noalias", others)
        return instr

    def scope_all(self, keys):
        for k in keys:
            self._scope(k)

    # constants and calls
    def c64(self, v):
        return self.ir.Constant(self.F64, float(v))

    def c32(self, v):
        return self.ir.Constant(self.F32, float(np.float32(v)))

    def ci(self, v, ty=None):
        return self.ir.Constant(ty or self.I64, int(v))

    def intrinsic(self, name, ty, nargs=1):
        key = (name, str(ty))
        if key not in self._decl:
            self._decl[key] = self.module.declare_intrinsic(
                name, [ty], self.ir.FunctionType(ty, [ty] * nargs))
        return self._decl[key]

    def extern(self, name):
        if name not in self._decl:
            self._decl[name] = self.ir.Function(
                self.module, self.ir.FunctionType(self.F64, [self.F64]), name=name)
        return self._decl[name]

    def call(self, name, *args):
        return self.b.call(self.intrinsic(name, args[0].type, len(args)), list(args))

    def loop_hint(self, interleave, width):
        """Metadata for a loop's closing branch: vectors of `width` elements, `interleave`
        of them per iteration."""
        ir, mod = self.ir, self.module
        facts = [mod.add_metadata([ir.MetaDataString(mod, name), ir.Constant(self.I32, v)])
                 for name, v in (("llvm.loop.interleave.count", interleave),
                                 ("llvm.loop.vectorize.width", width))]
        # a loop ID is a node whose first operand is itself (the last operand only makes
        # add_metadata return a new node per loop)
        md = mod.add_metadata(facts + [ir.Constant(self.I32, len(mod.metadata))])
        md.operands = (md, *facts)
        return md

    @contextlib.contextmanager
    def counted(self, stop, start=None, carried=(), hint=None):
        """Write a loop `for index in range(start, stop, step)`: yields a _Loop whose
        `values` are the phis of the values it carries (from `carried`); the body sets
        their `next` values, and `step` where it is not 1. After the loop, the phis hold
        the final values."""
        b = self.b
        before = b.block
        head = self.fn.append_basic_block()
        body = self.fn.append_basic_block()
        after = self.fn.append_basic_block()
        b.branch(head)
        b.position_at_end(head)
        i = b.phi(self.I64)
        i.add_incoming(start if start is not None else self.ci(0), before)
        phis = []
        for init in carried:
            phis.append(b.phi(init.type))
            phis[-1].add_incoming(init, before)
        b.cbranch(b.icmp_signed("<", i, stop), body, after)
        b.position_at_end(body)
        lp = _Loop(i, phis)
        yield lp
        end = b.block
        i.add_incoming(b.add(i, lp.step if lp.step is not None else self.ci(1)), end)
        for ph, v in zip(phis, lp.next):
            ph.add_incoming(v, end)
        br = b.branch(head)
        if hint is not None:
            br.set_metadata("llvm.loop", hint)
        b.position_at_end(after)

    @contextlib.contextmanager
    def loop(self, stop, start=None, hint=None):
        """`with self.loop(stop) as i:` a counted loop carrying nothing."""
        with self.counted(stop, start, hint=hint) as lp:
            yield lp.index

    def array_type(self, op):
        """The element type of the input a LOAD_* reads or the output a STORE_* writes."""
        return {Op.LOAD_F32: self.F32, Op.LOAD_F64: self.F64, Op.LOAD_B8: self.I8,
                Op.STORE_F32: self.F32, Op.STORE_F64: self.F64, Op.STORE_B8: self.I8}[op]

    # the registers: those at offsets below the program's pre_len in `pre` (preloaded,
    # only read), the others in `s` (this part's own)
    def sptr(self, off, i):
        pre_len = self.p.pre_len
        if off < pre_len:
            return self.b.gep(self.pre, [self.b.add(self.ci(off), i)])
        return self.b.gep(self.s, [self.b.add(self.ci(off - pre_len), i)])

    def in_scratch32(self, off):
        """Is the register at `off` one of float32s (in a float32 scratch)?"""
        return self.scratch32 and off >= self.p.pre_len

    def sload(self, off, i):
        x = self.scoped(self.b.load(self.sptr(off, i)),
                        "pre" if off < self.p.pre_len else "scratch")
        return self.b.fpext(x, self.F64) if self.in_scratch32(off) else x

    def sstore(self, v, off, i):
        assert off >= self.p.pre_len, "a preloaded register is written"
        if self.scratch32:          # (exact: the value is a float32's)
            v = self.b.fptrunc(v, self.F32)
        self.scoped(self.b.store(v, self.sptr(off, i)), "scratch")

    # float helpers with the machine's semantics
    def select(self, cond, x, y):
        return self.b.select(cond, x, y)

    def lt(self, x, y):
        return self.b.fcmp_ordered("<", x, y)

    def gt(self, x, y):
        return self.b.fcmp_ordered(">", x, y)

    def eq(self, x, y):
        return self.b.fcmp_ordered("==", x, y)

    def isnan(self, x):
        return self.b.fcmp_unordered("!=", x, x)

    def round32(self, x):
        return self.b.fpext(self.b.fptrunc(x, self.F32), self.F64)

    def fma(self, a, x, c):
        return self.call("llvm.fma", a, x, c)

    def poly(self, z, coeffs, const=None):
        const = const or self.c32
        p = const(coeffs[0])
        for c in coeffs[1:]:
            p = self.fma(p, z, const(c))
        return p

    def f2i(self, x):
        return self.b.bitcast(x, self.I32)

    def i2f(self, x):
        return self.b.bitcast(x, self.F32)

    # row_vm's scalar helpers (float64)
    def vmax(self, x, y, less=False):
        b = self.b
        first = b.or_(self.isnan(x), self.eq(x, y))
        better = self.lt(x, y) if less else self.gt(x, y)
        return self.select(first, x, self.select(self.isnan(y), y,
                                                 self.select(better, x, y)))

    def sign(self, x):
        return self.select(self.gt(x, self.c64(0)), self.c64(1.0),
                           self.select(self.lt(x, self.c64(0)), self.c64(-1.0),
                                       self.select(self.isnan(x), x, self.c64(0.0))))

    def log64(self, x, fn="llvm.log", at=0.0):
        pos = self.gt(x, self.c64(at))
        r = self.call(fn, x) if fn.startswith("llvm.") else self.b.call(self.extern(fn), [x])
        return self.select(pos, r, self.select(self.eq(x, self.c64(at)), self.c64(-np.inf),
                                               self.select(self.isnan(x), x,
                                                           self.c64(np.nan))))

    def sqrt64(self, x):
        ok = self.b.fcmp_ordered(">=", x, self.c64(0.0))
        return self.select(ok, self.call("llvm.sqrt", x),
                           self.select(self.isnan(x), x, self.c64(np.nan)))

    # codegen.approx's float64 approximations, step for step
    def _reduce64(self, xc, degree, whole_below=None):
        """approx._reduce_f64: (r, p, n)."""
        b = self.b
        shift = self.c64(6755399441055744.0)
        t = self.fma(xc, self.c64(1.4426950408889634), shift)
        if whole_below is not None:
            t = self.select(self.lt(self.call("llvm.fabs", xc), self.c64(whole_below)),
                            shift, t)
        fn = b.fsub(t, shift)
        r = self.fma(fn, self.c64(-0.6931471803691238), xc)
        r = self.fma(fn, self.c64(-1.9082149292705877e-10), r)
        n = b.sub(b.bitcast(t, self.I64), self.ci(0x4338000000000000))
        p = self.poly(r, [1 / math.factorial(k) for k in range(degree, 1, -1)], self.c64)
        return r, p, n

    def _scale64(self, v, n):
        """approx._SCALE_F64: v * 2^n in two halves."""
        b = self.b

        def power(k):
            return b.bitcast(b.shl(b.add(k, self.ci(1023)), self.ci(52)), self.F64)
        n1 = b.ashr(n, self.ci(1))
        return b.fmul(b.fmul(v, power(n1)), power(b.sub(n, n1)))

    def _minus_power64(self, n):
        """1 - 2^-n (n <= 60)."""
        b = self.b
        return b.fsub(self.c64(1.0), b.bitcast(
            b.shl(b.sub(self.ci(1023), n), self.ci(52)), self.F64))

    def exp64(self, x):
        b = self.b
        xc = self.select(self.gt(x, self.c64(710.0)), self.c64(710.0), x)
        xc = self.select(self.lt(xc, self.c64(-746.0)), self.c64(0.0), xc)
        r, p, n = self._reduce64(xc, 13)
        e = self._scale64(b.fadd(self.fma(p, b.fmul(r, r), r), self.c64(1.0)), n)
        e = self.select(self.isnan(x), x, e)
        return self.select(self.lt(x, self.c64(-746.0)), self.c64(0.0), e)

    def expm1_64(self, x):
        b = self.b
        xc = self.select(self.gt(x, self.c64(710.0)), self.c64(710.0), x)
        xc = self.select(self.lt(xc, self.c64(-40.0)), self.c64(-40.0), xc)
        r, p, n = self._reduce64(xc, 17, 0.7)
        m = self.select(b.icmp_signed("<", n, self.ci(60)), n, self.ci(60))
        e = self._scale64(b.fadd(self.fma(p, b.fmul(r, r), r), self._minus_power64(m)), n)
        return self.select(b.or_(self.isnan(x), self.eq(x, self.c64(0.0))), x, e)

    def tanh64(self, x):
        b = self.b
        a = self.call("llvm.fabs", x)
        small = self.lt(a, self.c64(0.55))
        xc = b.fmul(self.c64(-2.0), a)
        xc = self.select(self.lt(xc, self.c64(-40.0)), self.c64(-40.0), xc)
        r, p, n = self._reduce64(xc, 17, 0.7)
        s = self.fma(p, b.fmul(r, r), r)
        v = self.select(small, b.fadd(s, self._minus_power64(n)), b.fadd(s, self.c64(1.0)))
        e = self._scale64(v, n)
        num = self.select(small, b.fneg(e), b.fadd(e, e))
        c = self.select(small, self.c64(2.0), self.c64(1.0))
        den = b.fadd(e, c)
        den_lost = b.fadd(b.fsub(c, den), e)
        inv = b.fdiv(self.c64(1.0), den)
        q = b.fmul(num, inv)
        q = self.fma(b.fsub(self.fma(b.fneg(q), den, num), b.fmul(q, den_lost)), inv, q)
        t = self.select(small, q, b.fsub(self.c64(1.0), q))
        t = self.select(self.gt(x, self.c64(0.0)), t, b.fneg(t))
        return self.select(b.or_(self.isnan(x), self.eq(x, self.c64(0.0))), x, t)

    def logistic64(self, x):
        b = self.b
        one = self.c64(1.0)
        e = self.exp64(b.fneg(self.call("llvm.fabs", x)))
        r = b.fdiv(one, b.fadd(one, e))
        return self.select(b.fcmp_ordered(">=", x, self.c64(0.0)), r, b.fmul(e, r))

    # codegen.approx's float32 approximations, step for step
    def exp_f32(self, x):
        b = self.b
        xc = self.select(self.gt(x, self.c32(89.0)), self.c32(89.0), x)
        xc = self.select(self.lt(xc, self.c32(-104.5)), self.c32(0.0), xc)
        t = self.fma(xc, self.c32(1.4426950408889634), self.c32(12582912.0))
        fn = b.fsub(t, self.c32(12582912.0))
        r = self.fma(fn, self.c32(-0.693359375), xc)
        r = self.fma(fn, self.c32(2.12194440e-4), r)
        p = self.c32(0.0013903575018048286)
        for c in (0.00836635660380125, 0.04166676849126816, 0.16666541993618011, 0.5, 1.0,
                  1.0):
            p = self.fma(p, r, self.c32(c))
        n = b.sub(self.f2i(t), self.ci(0x4B400000, self.I32))
        n1 = b.ashr(n, self.ci(1, self.I32))
        pn = self.i2f(b.add(self.f2i(p), b.shl(b.sub(n, n1), self.ci(23, self.I32))))
        e = b.fmul(pn, self.i2f(b.shl(b.add(n1, self.ci(127, self.I32)),
                                      self.ci(23, self.I32))))
        e = self.select(self.isnan(x), x, e)
        return self.select(self.lt(x, self.c32(-104.5)), self.c32(0.0), e)

    def rsqrt_f32(self, x):
        b = self.b
        small = self.lt(x, self.c32(1.1754944e-38))
        y = self.select(small, b.fmul(x, self.c32(16777216.0)), x)
        r = b.fdiv(self.c32(1.0), self.call("llvm.sqrt", y))
        r = self.select(small, b.fmul(r, self.c32(4096.0)), r)
        r = self.select(self.eq(x, self.c32(np.inf)), self.c32(0.0), r)
        return self.select(self.eq(x, self.c32(0.0)), b.fdiv(self.c32(1.0), x), r)

    def log_f32(self, x):
        b, I32 = self.b, self.I32
        tiny = self.lt(x, self.c32(1.1754943508222875e-38))
        xs = self.select(tiny, b.fmul(x, self.c32(8388608.0)), x)
        bits = self.f2i(xs)
        e = b.sub(b.and_(b.ashr(bits, self.ci(23, I32)), self.ci(255, I32)), self.ci(127, I32))
        e = self.select(tiny, b.sub(e, self.ci(23, I32)), e)
        m = self.i2f(b.or_(b.and_(bits, self.ci(8388607, I32)), self.ci(1065353216, I32)))
        big = self.gt(m, self.c32(1.4142135623730951))
        m = self.select(big, b.fmul(m, self.c32(0.5)), m)
        e = self.select(big, b.add(e, self.ci(1, I32)), e)
        f = b.fsub(m, self.c32(1.0))
        s = b.fdiv(f, b.fadd(self.c32(2.0), f))
        z = b.fmul(s, s)
        p = self.poly(z, (2.0 / 11.0, 2.0 / 9.0, 2.0 / 7.0, 2.0 / 5.0, 2.0 / 3.0))
        ef = b.sitofp(e, self.F32)
        inner = b.fadd(b.fmul(b.fmul(s, z), p),
                       b.fadd(b.fadd(b.fmul(ef, self.c32(-2.12194440e-4)), s), s))
        r = b.fadd(b.fmul(ef, self.c32(0.693359375)), inner)
        r = self.select(self.lt(x, self.c32(0.0)), self.c32(np.nan), r)
        r = self.select(self.eq(x, self.c32(0.0)), self.c32(-np.inf), r)
        return self.select(b.or_(self.isnan(x), self.eq(x, self.c32(np.inf))), x, r)

    def tanh_f32(self, x):
        b = self.b
        xc = self.select(self.gt(x, self.c32(9.02)), self.c32(9.02), x)
        xc = self.select(self.lt(xc, self.c32(-9.02)), self.c32(-9.02), xc)
        z = b.fmul(xc, xc)
        p = self.poly(z, (-8.436095111320416e-14, 5.257798363356159e-11,
                          -2.0184007354373534e-08, 1.1144265954499133e-05,
                          0.003103002207353711, 0.13083158433437347, 1.0))
        q = self.poly(z, (0.00025447524967603385, 0.024491384625434875,
                          0.4641648530960083, 1.0))
        return b.fdiv(b.fmul(xc, p), q)

    def logistic_f32(self, x):
        b = self.b
        e = self.exp_f32(b.fneg(self.call("llvm.fabs", x)))
        r = b.fdiv(self.c32(1.0), b.fadd(self.c32(1.0), e))
        return self.select(b.fcmp_ordered(">=", x, self.c32(0.0)), r, b.fmul(e, r))

    def erf_f32(self, x):
        b = self.b
        xc = self.select(self.lt(x, self.c32(3.95)), x, self.c32(3.95))
        xc = self.select(self.gt(xc, self.c32(-3.95)), xc, self.c32(-3.95))
        z = b.fmul(xc, xc)
        p = self.poly(z, (2.0258770575183597e-06, 2.8466296672156102e-04,
                          3.8075180413909152e-03, 5.2873414909096438e-02,
                          1.9153679051452982e-01, 1.1283791439522235e+00))
        q = self.poly(z, (3.7830183652902770e-05, 1.1705507083237226e-03,
                          1.5053804705249923e-02, 1.1455381640621837e-01,
                          5.0307774007024597e-01, 1.0))
        r = b.fdiv(b.fmul(xc, p), q)
        one = self.select(self.gt(x, self.c32(0.0)), self.c32(1.0), self.c32(-1.0))
        r = self.select(self.lt(self.call("llvm.fabs", x), self.c32(3.95)), r, one)
        return self.select(self.isnan(x), x, r)

    # one element of an element-wise instruction: float64 operands, its float64 result
    def unary(self, op, x, mode):
        b = self.b
        f32 = _F32_APPROX.get(op)
        if mode == Round.F32 and f32 is not None:
            return b.fpext(getattr(self, f32)(b.fptrunc(x, self.F32)), self.F64)
        r = self._unary64(op, x)
        return self.round32(r) if mode == Round.F32 else r

    def _unary64(self, op, x):
        b = self.b
        zero, one = self.c64(0.0), self.c64(1.0)
        if op in _INTRINSIC64:
            return self.call(_INTRINSIC64[op], x)
        if op in _LIBM64:
            return b.call(self.extern(_LIBM64[op]), [x])
        if op is Op.NEG:
            return b.fneg(x)
        if op is Op.LOG:
            return self.log64(x)
        if op is Op.LOG1P:
            return self.log64(x, "log1p", -1.0)
        if op is Op.SQRT:
            return self.sqrt64(x)
        if op is Op.RSQRT:
            return b.fdiv(one, self.sqrt64(x))
        if op is Op.LOGISTIC:
            return self.logistic64(x)
        if op is Op.EXP:
            return self.exp64(x)
        if op is Op.EXPM1:
            return self.expm1_64(x)
        if op is Op.TANH:
            return self.tanh64(x)
        if op is Op.SIGN:
            return self.sign(x)
        if op is Op.RECIPROCAL:
            return b.fdiv(one, x)
        if op is Op.NOT:
            return self.select(self.eq(x, zero), one, zero)
        if op is Op.TO_BOOL:
            return self.select(b.fcmp_unordered("!=", x, zero), one, zero)
        if op is Op.COPY:
            return x
        raise NotImplementedError(op)

    def binary(self, op, x, y, mode):
        r = self._binary64(op, x, y)
        return self.round32(r) if mode == Round.F32 else r

    def _binary64(self, op, x, y):
        b = self.b
        zero, one = self.c64(0.0), self.c64(1.0)
        if op in _ARITH64:
            return getattr(b, _ARITH64[op])(x, y)
        if op is Op.MAX:
            return self.vmax(x, y)
        if op is Op.MIN:
            return self.vmax(x, y, less=True)
        if op in _COMPARE64:
            ordered, rel = _COMPARE64[op]
            c = (b.fcmp_ordered if ordered else b.fcmp_unordered)(rel, x, y)
            return self.select(c, one, zero)
        if op in (Op.AND, Op.OR):
            xs = b.fcmp_unordered("!=", x, zero)
            ys = b.fcmp_unordered("!=", y, zero)
            return self.select(b.and_(xs, ys) if op is Op.AND else b.or_(xs, ys), one, zero)
        raise NotImplementedError(op)


# float64 instructions that are one LLVM intrinsic, one libm function (as Numba's lowering
# calls them), one IR instruction (the builder's method), or a comparison (ordered or not:
# NE is true where either side is NaN) giving 1.0 or 0.0
_INTRINSIC64 = {Op.ABS: "llvm.fabs", Op.SIN: "llvm.sin", Op.COS: "llvm.cos",
                Op.FLOOR: "llvm.floor", Op.CEIL: "llvm.ceil"}
_LIBM64 = {Op.ERF: "erf"}
_ARITH64 = {Op.ADD: "fadd", Op.SUB: "fsub", Op.MUL: "fmul", Op.DIV: "fdiv"}
_COMPARE64 = {Op.EQ: (True, "=="), Op.NE: (False, "!="), Op.LT: (True, "<"),
              Op.LE: (True, "<="), Op.GT: (True, ">"), Op.GE: (True, ">=")}
# float32 instructions computed by codegen.approx's approximations (row_vm._UNARY)
_F32_APPROX = {Op.EXP: "exp_f32", Op.LOG: "log_f32", Op.RSQRT: "rsqrt_f32",
               Op.TANH: "tanh_f32", Op.LOGISTIC: "logistic_f32", Op.ERF: "erf_f32"}
# instructions computed by a long chain of dependent operations (codegen.row_lower keeps
# several vectors of them in flight)
LONG_CHAINS = frozenset(_F32_APPROX) | frozenset(_LIBM64) | {Op.EXPM1, Op.LOG1P, Op.SIN,
                                                             Op.COS}


def library_call(op, mode):
    """Whether `unary` writes instruction `op` (rounded per `mode`) as a call of the C
    library's function, which no loop around it can take as vectors."""
    return op in _LIBM64 and not (mode == Round.F32 and op in _F32_APPROX)
