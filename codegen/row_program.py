"""A cold kernel as a program of the row machine (codegen.row_vm): its RowBlocks plan
(codegen.row_blocks) translated into row instructions once, then run on each call over
the kernel's arguments, on the threads of codegen.parts.

    program = row_program(kernel, rb)  # None: a node the machine has no instruction for
    program.run(args, whole, program.native, row_machine.machine())   # natively where it can

Per row, a value of the kernel is its elements past the row axes, in C order, held in a
register of `group` rows (float32 where every value is a float32, a bool or an integer,
else float64: `float32`). What a RowBlocks plan computes once per call (its `once`
nodes, a value repeated along the rows) is computed with numpy before the machine runs and
handed to it with the constants (`pre`); a reduction over the rows (a bias's gradient) is
summed per part in float64 and combined afterwards, as the numpy blocks combine theirs.
Float32, float64 and bool values run here, and int64 and int32 ones held exactly (an int64
beyond +-2**53 sends the call to numpy): loaded, compared, selected, converted, and used as
the indices of a gather or scatter-add within each row (a cross-entropy's target class; an
index out of range sends the call to numpy too, whose impl raises the error). A kernel with
another dtype (a 16-bit float), or with arithmetic or a reduction on integers, stays on
numpy."""
import ctypes
import dataclasses
import logging
import math

import numpy as np

from aotgrad.codegen import parts
from aotgrad.codegen.row_vm import (EXACT_INT, EXACT_INT_F32, AccForm, GatherForm, Op,
                                    ReduceForm, Round)
from aotgrad.ir import prims

log = logging.getLogger(__name__)

# elements of the widest value per group of rows: registers of 4 or 8 KB, a program's live ones
# in the CPU's cache
GROUP_ELEMENTS = 1024
# elements of the widest value below which a program runs on the calling thread alone
PARTS_MIN_ELEMENTS = 1 << 15

# the machine's instruction of each element-wise prim (row_vm._UNARY, _BINARY)
_ELEMENTWISE = {
    prims.neg: Op.NEG, prims.abs: Op.ABS, prims.exp: Op.EXP, prims.log: Op.LOG,
    prims.log1p: Op.LOG1P, prims.expm1: Op.EXPM1, prims.sqrt: Op.SQRT, prims.rsqrt: Op.RSQRT,
    prims.sin: Op.SIN, prims.cos: Op.COS, prims.tanh: Op.TANH, prims.logistic: Op.LOGISTIC,
    prims.erf: Op.ERF, prims.sign: Op.SIGN, prims.floor: Op.FLOOR, prims.ceil: Op.CEIL,
    prims.reciprocal: Op.RECIPROCAL, prims.logical_not: Op.NOT,
    prims.add: Op.ADD, prims.sub: Op.SUB, prims.mul: Op.MUL, prims.div: Op.DIV,
    prims.pow: Op.POW, prims.maximum: Op.MAX, prims.minimum: Op.MIN, prims.eq: Op.EQ,
    prims.ne: Op.NE, prims.lt: Op.LT, prims.le: Op.LE, prims.gt: Op.GT, prims.ge: Op.GE,
    prims.logical_and: Op.AND, prims.logical_or: Op.OR,
}
# prims whose value is their input's elements rearranged within each row (codegen.row_blocks'
# row plans keep them to the axes past the rows): a gather
_WITHIN_ROWS = (prims.slice, prims.transpose, prims.rev)
_BOOL_ARITHMETIC = {Op.ADD: Op.OR, Op.MUL: Op.AND, Op.MAX: Op.OR, Op.MIN: Op.AND}
# a reduction within a row, and over the rows: (instruction, the identity, numpy's combine)
_REDUCE = {prims.reduce_sum: Op.REDUCE_SUM, prims.reduce_max: Op.REDUCE_MAX,
           prims.reduce_min: Op.REDUCE_MIN}
_ACC = {prims.reduce_sum: (Op.ACC_SUM, 0.0, np.add),
        prims.reduce_max: (Op.ACC_MAX, -np.inf, np.maximum),
        prims.reduce_min: (Op.ACC_MIN, np.inf, np.minimum)}
_LOAD = {np.dtype(np.float32): Op.LOAD_F32, np.dtype(np.float64): Op.LOAD_F64,
         np.dtype(np.bool_): Op.LOAD_B8, np.dtype(np.int64): Op.LOAD_I64,
         np.dtype(np.int32): Op.LOAD_I32}
_STORE = {np.dtype(np.float32): Op.STORE_F32, np.dtype(np.float64): Op.STORE_F64,
          np.dtype(np.bool_): Op.STORE_B8}
_ROUND = {np.dtype(np.float32): Round.F32, np.dtype(np.float64): Round.F64,
          np.dtype(np.bool_): Round.BOOL}
_INTEGERS = frozenset({np.dtype(np.int64), np.dtype(np.int32)})


# the machine's registers' dtype, as it takes it: an empty array of that dtype
_FLOAT32 = np.zeros(0, np.float32)
_FLOAT64 = np.zeros(0, np.float64)


class Unsupported(Exception):
    """A node or value the row machine does not run: the kernel stays on numpy."""


@dataclasses.dataclass(frozen=True)
class Instr:
    """One instruction before registers are assigned: operands are vars."""
    op: Op
    dst: object             # the var it defines (None: a store or an accumulation)
    args: tuple             # the vars it reads (a, b, c)
    n: int                  # the result's elements per row
    m: int = 0              # the operand's elements per row (gather, reductions)
    aux: int = 0            # Round mode, or an input/output slot
    idx: np.ndarray = None  # the index map within a row (gather, reductions)
    acc: int = -1           # the output's offset in the accumulators (ACC_*)


@dataclasses.dataclass(frozen=True)
class _RowPart:
    """The register of a row's own reduction of `var`, a reduction over the rows and over
    elements of each row too."""
    var: object


@dataclasses.dataclass
class _Pre:
    """A register every group starts with: a constant (`value`), or a value numpy computes
    per call from the kernel's whole values (`node`, with the params for one row)."""
    var: object
    length: int
    value: np.ndarray = None
    node: object = None
    impl: object = None
    params: dict = None
    # where `node` broadcasts its whole input: a row's elements as indices into the
    # input's, None where the row is the input as it is (or its one element repeated)
    index: np.ndarray = None


class RowProgram:
    """A kernel's nodes as row-machine code (see the module docstring)."""

    def __init__(self, kernel, rb):
        self.rb = rb
        self.rows = rb.rows
        k = rb.axes
        self.length = {}                       # split var -> elements per row
        for v in rb.split:
            self.length[v] = math.prod(v.shape[k:])
            _check_dtype(v)
        if not all(self.length.values()):
            raise Unsupported("an empty value")
        self.elements = rb.rows * max(self.length.values())
        # (not fewer rows where the kernel has fewer: the machine runs a short group as a
        # tail, and programs that differ only in their number of rows, as an optimizer's
        # update of each parameter does, stay equal and compile natively once)
        self.group = max(1, GROUP_ELEMENTS // max(1, max(self.length.values())))
        self.inputs = [(i, v) for i, v in kernel.reads if v in rb.split]
        self.outputs = [(i, v) for i, v in kernel.writes if v in rb.split]
        self.summed = []                       # (arg index, var, acc offset, size, combine)
        self.pre = []
        # the accumulators' slot the machine flags a call in that numpy must run instead (an
        # index out of range, an int64 it cannot hold exactly), where it can happen; the
        # sums over the rows follow it
        self.flag_at = 0 if any(
            np.dtype(v.dtype.np) == np.int64 for v in rb.split) or any(
            n.prim in (prims.gather, prims.scatter_add) for n in rb.per_block) else None
        self._acc_base = 0 if self.flag_at is None else 1
        instrs = self._translate(kernel)
        self.code, self.idx, self.work, self.pre_len, self.offsets = self._assign(instrs)
        # (one slot at least: the machine takes a 2-d accumulator even where none is used)
        self.acc_init = np.zeros(max(1, self._acc_base + sum(
            size for _, _, _, size, _ in self.summed)))
        for _, v, off, size, (_, init, _) in self.summed:
            self.acc_init[off:off + size] = init
        self.pre_template = np.zeros(self.pre_len)
        self.native = None      # codegen.row_native: the compiled program, once it is
        for p in self.pre:
            if p.value is not None:
                _fill(self.pre_template, *self._span(p), p.value)
            else:
                x = p.node.inputs[0]
                size = math.prod(x.shape)
                index = np.asarray(p.impl(np.arange(size).reshape(x.shape),
                                          **p.params)).ravel()
                if size > 1 and not np.array_equal(index, np.arange(p.length)):
                    p.index = index
        # the preloaded registers made per call from the call's whole values: (the value's
        # var, the index of a row's elements in it or None, and their _span)
        self._per_call = [(p.node.inputs[0], p.index) + self._span(p)
                          for p in self.pre if p.node is not None]
        # the integer values among them: float32 registers hold them exactly only up to
        # 2**24 (a call with a larger one runs on float64 registers), float64 ones up to
        # 2**53 (an int64 beyond: numpy runs the call)
        self._int_checked = [p.node.inputs[0] for p in self.pre if p.node is not None
                             and np.dtype(p.node.inputs[0].dtype.np) in _INTEGERS]
        # preloaded registers of earlier calls, to fill again (their other spans hold the
        # template's constants): a call takes one or copies the template, and gives it back
        # (a list's pop and append are atomic: two threads never share one); the same for
        # the buffers of a call (_Frame)
        self._pre_free = []
        self._frames = []
        self._pre_template = _Registers(self.pre_template)
        self._idx_address = address(self.idx)
        # whether the machine writes the accumulators (a sum over the rows, a flag)
        self._acc_used = bool(self.summed) or self.flag_at is not None
        # the dtype each input and output must have (an argument of another runs on numpy)
        self._dtypes = [(i, np.dtype(v.dtype.np)) for i, v in self.inputs + self.outputs]
        self.float32 = self._float32_registers()
        # native code's scratch (codegen.row_lower) of float32s: a float32 program without
        # integers (a float32 holds each of its values exactly; an integer beyond 2**24
        # would not be, and native code has no second run on float64 registers)
        self.float32_scratch = self.float32 and not self._int_checked and not any(
            np.dtype(v.dtype.np) in _INTEGERS for v in self.length
            if not isinstance(v, _RowPart))

    def _float32_registers(self):
        """Whether the machine may run this program on float32 registers (codegen.row_vm):
        every value it holds a float32, a bool or an integer, and every constant a float32
        exactly. Each result is then the same as on float64 registers."""
        values = [v for v in self.length if not isinstance(v, _RowPart)]
        if len(values) < len(self.length):       # a row's partial reduction: float64
            return False
        if any(np.dtype(v.dtype.np) == np.float64 for v in values):
            return False
        if self.flag_at is None and any(np.dtype(v.dtype.np) in _INTEGERS for v in values):
            return False        # (a load of an integer beyond 2**24 flags the call there)
        t = self.pre_template
        return bool(np.array_equal(t.astype(np.float32).astype(np.float64), t, equal_nan=True))

    # -- translation --------------------------------------------------------------------
    def _translate(self, kernel):
        rb, k = self.rb, self.rb.axes
        steps = rb.block_steps(1)              # node -> (impl, params) for one row
        loaded = set()
        alias = {}                             # var -> the var whose register it shares
        out = []

        def reg(v):
            while v in alias:
                v = alias[v]
            return v

        def use(v):
            v = reg(v)
            if v in rb.split and v not in loaded and any(w is v for _, w in self.inputs):
                loaded.add(v)
                slot = next(j for j, (_, w) in enumerate(self.inputs) if w is v)
                dt = np.dtype(v.dtype.np)
                out.append(Instr(_LOAD[dt], v, (), self.length[v],
                                 m=self.flag_at if dt in _INTEGERS and self.flag_at is not None
                                 else 0, aux=slot))
            return v

        def gather(node, x, impl, params):
            """Node's value as a gather of the elements of x's row (the map its impl makes
            of their indices); the same register where it is x's row as it is."""
            o = node.outputs[0]
            m = self.length[reg(x)]
            idx = np.asarray(impl(np.arange(m).reshape((1,) + tuple(x.shape[k:])),
                                  **params)).ravel().astype(np.int64)
            if len(idx) == m and np.array_equal(idx, np.arange(m)):
                alias[o] = reg(x)
            else:
                out.append(Instr(Op.GATHER, o, (use(x),), self.length[o], m=m, idx=idx))

        whole_inputs = {v for _, v in kernel.reads if v not in rb.split}
        for node in rb.per_block:
            o = node.outputs[0]
            prim = node.prim
            if o in rb.summed:
                if np.dtype(o.dtype.np) == np.bool_ and prim is prims.reduce_sum:
                    prim = prims.reduce_max
                acc_op, init, combine = _ACC.get(prim, (None, None, None))
                if acc_op is None:
                    raise Unsupported(prim.name)
                x = node.inputs[0]
                _check_dtype(x)
                if np.dtype(x.dtype.np) in _INTEGERS:
                    raise Unsupported("a reduction of integers")
                dims = steps[node][1]["dims"]
                size = math.prod(o.shape)
                off = self._acc_base + sum(s for _, _, _, s, _ in self.summed)
                # (arg index None: a sum only the nodes after the rows read)
                self.summed.extend((i, o, off, size, (acc_op, init, combine))
                                   for i in [i for i, w in kernel.writes if w is o] or [None])
                row = (1,) + tuple(x.shape[k:])
                inner = tuple(d for d in dims if d != 0)
                if inner:
                    # each row reduced first (the machine's partial sums, in float64), then
                    # accumulated: one dependent add per row, not one per element
                    part = _RowPart(o)
                    self.length[part] = size
                    out.append(Instr(_REDUCE[prim], part, (use(x),), size,
                                     m=self.length[reg(x)], aux=Round.F64,
                                     idx=_reduce_index(row, (1,) + tuple(o.shape), inner)))
                    out.append(Instr(acc_op, None, (part,), 0, m=size, idx=np.arange(size),
                                     acc=off))
                    continue
                idx = _reduce_index(row, tuple(o.shape), dims)
                out.append(Instr(acc_op, None, (use(x),), 0, m=self.length[reg(x)],
                                 idx=idx, acc=off))
                continue
            _check_dtype(o)
            n = self.length[o]
            impl, params = steps[node]
            if prim is prims.full:
                value = np.asarray(impl(**params))
                if value.dtype in _INTEGERS and not _exact_integers(value):
                    raise Unsupported("an integer beyond 2**53")
                value = value.astype(np.float64).ravel()
                self.pre.append(_Pre(o, n, value=np.ascontiguousarray(value)))
            elif prim is prims.reshape:
                alias[o] = reg(node.inputs[0])
            elif prim is prims.broadcast_in_dim:
                x = node.inputs[0]
                if x not in rb.split:              # the same for every row: numpy, per call
                    if x not in whole_inputs and x not in {w for m in rb.once
                                                          for w in m.outputs}:
                        raise Unsupported("a broadcast of a value made in the rows")
                    self.pre.append(_Pre(o, n, node=node, impl=impl, params=params))
                    continue
                gather(node, x, impl, params)
            elif prim in _WITHIN_ROWS:
                gather(node, node.inputs[0], impl, params)
            elif prim in _REDUCE:
                x = node.inputs[0]
                if np.dtype(x.dtype.np) in _INTEGERS:
                    raise Unsupported("a reduction of integers")
                if np.dtype(o.dtype.np) == np.bool_ and prim is prims.reduce_sum:
                    prim = prims.reduce_max                # a sum of bools: any
                idx = _reduce_index((1,) + tuple(x.shape[k:]), (1,) + tuple(o.shape[k:]),
                                    params["dims"])
                out.append(Instr(_REDUCE[prim], o, (use(x),), n, m=self.length[reg(x)],
                                 aux=_ROUND[np.dtype(o.dtype.np)], idx=idx))
            elif prim is prims.convert_element_type:
                if params.get("via") is not None:
                    raise Unsupported("a 16-bit rounding")
                x = node.inputs[0]
                src, dst = np.dtype(x.dtype.np), np.dtype(o.dtype.np)
                if dst == np.bool_:
                    out.append(Instr(Op.TO_BOOL, o, (use(x),), n, aux=Round.BOOL))
                elif dst == np.float32 and (src == np.float64 or src in _INTEGERS):
                    # (an integer the register holds is exact: rounded once, as numpy does)
                    out.append(Instr(Op.COPY, o, (use(x),), n, aux=Round.F32))
                elif dst in _INTEGERS and not (src == np.bool_ or src in _INTEGERS
                                               and src.itemsize <= dst.itemsize):
                    raise Unsupported(f"a conversion from {src} to {dst}")
                else:                              # exact: the register holds it already
                    alias[o] = reg(x)
            elif prim is prims.where:
                c, a, b = node.inputs
                out.append(Instr(Op.WHERE, o, (use(a), use(b), use(c)), n))
            elif prim is prims.gather:
                x, index = node.inputs
                out.append(Instr(Op.GATHER_AT, o, (use(x), use(index)), n,
                                 m=self.length[reg(x)],
                                 idx=self._at_header(x, index, node.params["dim"], gather=True)))
            elif prim is prims.scatter_add:
                x, index, src = node.inputs
                if np.dtype(o.dtype.np) not in (np.float32, np.float64):
                    raise Unsupported(f"a scatter-add of {o.dtype}")
                out.append(Instr(Op.SCATTER_ADD_AT, o, (use(x), use(index), use(src)), n,
                                 aux=_ROUND[np.dtype(o.dtype.np)],
                                 idx=self._at_header(x, index, node.params["dim"], gather=False)))
            elif prim in _ELEMENTWISE:
                if any(v.shape != o.shape for v in node.inputs):
                    raise Unsupported("operands of different shapes")
                if np.dtype(o.dtype.np) in _INTEGERS:
                    raise Unsupported("arithmetic on integers")
                op = _ELEMENTWISE[prim]
                if np.dtype(o.dtype.np) == np.bool_:     # bools: or, and; 0.0 or 1.0 kept
                    op = _BOOL_ARITHMETIC.get(op, op)
                    if op in (Op.SUB, Op.DIV, Op.POW, Op.NEG, Op.RECIPROCAL):
                        raise Unsupported(f"{prim.name} of bools")
                out.append(Instr(op, o, tuple(use(v) for v in node.inputs), n,
                                 aux=_ROUND[np.dtype(o.dtype.np)]))
            else:
                raise Unsupported(prim.name)
        for slot, (_, v) in enumerate(self.outputs):
            if np.dtype(v.dtype.np) not in _STORE:
                raise Unsupported(f"an output of {v.dtype}")
            r = use(v)
            out.append(Instr(_STORE[np.dtype(v.dtype.np)], None, (r,), self.length[v], aux=slot))
        return out

    def _at_header(self, x, index, dim, gather):
        """The index vector's header of a GATHER_AT or SCATTER_ADD_AT of `x`'s rows at
        `index`'s values along `dim` (row_vm.Op)."""
        k = self.rb.axes
        xs, ixs, d = tuple(x.shape[k:]), tuple(index.shape[k:]), dim - k
        if any(i > s for e, (i, s) in enumerate(zip(ixs, xs)) if e != d):
            raise Unsupported("an index wider than its operand")   # (numpy's error)
        coords = np.indices(ixs).reshape(len(ixs), -1)
        coords[d] = 0
        base = np.ravel_multi_index(coords, xs).astype(np.int64)
        head = [xs[d], math.prod(xs[d + 1:]), self.flag_at]
        if not gather:
            head.insert(0, len(base))
        return np.concatenate([np.array(head, np.int64), base])

    # -- registers ----------------------------------------------------------------------
    def _assign(self, instrs):
        """The code matrix, index vector, work length, pre length and pre offsets: each
        value a register of length * group float64s; the preloaded ones first (never
        overwritten), the others reused once their last reader has run."""
        g = self.group
        offsets, pre_len = {}, 0
        for p in self.pre:
            offsets[p.var] = pre_len
            pre_len += p.length * g
        preloaded = {p.var for p in self.pre}
        self._sizes = {}
        last = {}
        for t, ins in enumerate(instrs):
            for v in ins.args:
                last[v] = t
        free = {}                              # size -> [offsets]
        top = pre_len
        code = np.zeros((len(instrs), 8), np.int64)
        idx_parts, idx_len = [], 0
        for t, ins in enumerate(instrs):
            a = [offsets[v] for v in ins.args]
            dst = 0
            if ins.dst is not None:
                size = ins.n * g
                if free.get(size):
                    dst = free[size].pop()
                else:
                    dst, top = top, top + size
                offsets[ins.dst] = dst
                self._sizes[ins.dst] = size
            for v in dict.fromkeys(ins.args):  # operands read for the last time: free
                if last.get(v) == t and v not in preloaded:
                    free.setdefault(self._sizes[v], []).append(offsets[v])
            ib = 0
            if ins.idx is not None:
                ib, idx_len = idx_len, idx_len + len(ins.idx)
                idx_parts.append(ins.idx)
            a += [0] * (3 - len(a))
            if ins.op is Op.WHERE:
                code[t] = (ins.op, dst, a[0], a[1], a[2], ins.n, ins.m, ins.aux)
            elif ins.op is Op.GATHER_AT:
                code[t] = (ins.op, dst, a[0], a[1], ib, ins.n, ins.m, ins.aux)
            elif ins.op is Op.SCATTER_ADD_AT:
                code[t] = (ins.op, dst, a[0], a[1], a[2], ins.n, ib, ins.aux)
            elif ins.op is Op.GATHER:
                code[t] = (ins.op, dst, a[0], ib, _gather_form(ins.idx, ins.n, ins.m), ins.n,
                           ins.m, ins.aux)
            elif ins.op in (Op.REDUCE_SUM, Op.REDUCE_MAX, Op.REDUCE_MIN):
                code[t] = (ins.op, dst, a[0], ib, _reduce_form(ins.idx, ins.n, ins.m), ins.n,
                           ins.m, ins.aux)
            elif ins.op in (Op.ACC_SUM, Op.ACC_MAX, Op.ACC_MIN):
                direct = np.array_equal(ins.idx, np.arange(ins.m))
                code[t] = (ins.op, 0, a[0], ib, ins.acc,
                           AccForm.DIRECT if direct else AccForm.INDEXED, ins.m, 0)
            else:
                code[t] = (ins.op, dst, a[0], a[1], 0, ins.n, ins.m, ins.aux)
        idx = np.concatenate(idx_parts) if idx_parts else np.zeros(1, np.int64)
        return code, np.ascontiguousarray(idx, np.int64), top - pre_len, pre_len, offsets

    # -- a call -------------------------------------------------------------------------
    def _span(self, p):
        """Where per-row value `p` lies in the preloaded registers: (first, past the last,
        their (group, length) shape, or None where a row is one element)."""
        off = self.offsets[p.var]
        return off, off + p.length * self.group, \
            None if p.length == 1 else (self.group, p.length)

    def run(self, args, whole, native=None, machine=None, addresses=None):
        """Run on the kernel's arguments `args` (outputs written): with `native` (its
        compiled code, codegen.row_native) where no output is one of the inputs (that code
        assumes them apart), else on `machine` (the row machine); an output overlaps an
        input only as the same buffer here (the caller runs the others otherwise). `whole`:
        the kernel's values that are not cut into rows, by var (its whole inputs, and what
        its `once` nodes computed from them); each reduction over the rows is added to it,
        rounded to its value's dtype, for the nodes after the rows. False: neither is
        given, or an argument has another dtype than its value's (nothing written), or the
        machine flagged the call (flag_at: its outputs may be written in part; the program
        then runs only where no output is an input, so numpy can run it again).
        `addresses`: each argument's address by its index, where the caller has them and
        every argument is C-contiguous."""
        if any(args[i].dtype != dtype for i, dtype in self._dtypes):
            return False
        if addresses is None:
            ins = [np.ascontiguousarray(args[i]) for i, _ in self.inputs]  # alive until the end
            addr_in = [address(x) for x in ins]
            addr_out = [address(args[i]) for i, _ in self.outputs]
        else:
            ins = None
            addr_in = [addresses[i] for i, _ in self.inputs]
            addr_out = [addresses[i] for i, _ in self.outputs]
        apart = set(addr_out).isdisjoint(addr_in)
        fn = native if native is not None and apart else machine
        if fn is None or self.flag_at is not None and not apart:
            return False
        registers = _FLOAT32 if self.float32 else _FLOAT64
        for x in self._int_checked:
            if registers is _FLOAT32 and not _exact_integers(whole[x], EXACT_INT_F32):
                registers = _FLOAT64
            if registers is _FLOAT64 and not _exact_integers(whole[x]):
                return False
        if not self._per_call:
            pre = self._pre_template               # (only read)
        else:
            try:
                pre = self._pre_free.pop()
            except IndexError:
                pre = _Registers(self.pre_template.copy())
        for x, index, lo, hi, rows in self._per_call:
            value = whole[x]
            _fill(pre.array, lo, hi, rows, value if index is None else np.ravel(value)[index])
        nparts = max(1, parts.get_num_threads())
        alone = self.elements < PARTS_MIN_ELEMENTS    # not worth waking the other threads
        try:
            frame = self._frames.pop()
        except IndexError:
            frame = None
        if frame is None or frame.nparts != nparts:
            frame = _Frame(self, nparts)
        # the accumulators' rows this call writes: one per part it runs in
        used = 1 if alone else nparts
        acc = frame.acc[:used]
        if fn is native:
            if self._acc_used:
                acc[...] = self.acc_init
            frame.addr[:len(addr_in)] = addr_in
            frame.addr[frame.outputs_at:frame.outputs_at + len(addr_out)] = addr_out
            ain, aout, scratch, scratch_stride, acc_at, acc_stride = frame.addresses
            native.run(1 if alone else nparts, self.rows, ain, aout, pre.address, scratch,
                       scratch_stride, acc_at, acc_stride, self._idx_address)
            flagged = self._flagged(acc)
        else:
            addr_in = np.array(addr_in or [0], np.int64)
            addr_out = np.array(addr_out or [0], np.int64)
            while True:
                if self._acc_used:
                    acc[...] = self.acc_init
                args_ = (self.code, self.idx, pre.array, registers, addr_in, addr_out, acc,
                         self.rows, self.group, self.work)
                if alone:
                    fn(1, 0, 1, parts.NO_WORKSPACE, *args_)
                else:
                    parts.run_parts(fn, args_)
                flagged = self._flagged(acc)
                if not (flagged and registers is _FLOAT32):
                    break
                # an integer beyond float32's exact ones (or an index out of range, flagged
                # again): once more on float64 registers (the outputs are apart from the
                # inputs wherever a call can be flagged)
                registers = _FLOAT64
        for i, v, off, size, (_, _, combine) in () if flagged else self.summed:
            # (one part's row is its total as it is: a reduction over that row alone)
            total = acc[0, off:off + size] if used == 1 else \
                combine.reduce(acc[:, off:off + size], axis=0)
            whole[v] = total.reshape(v.shape).astype(v.dtype.np)
            if i is not None:
                args[i][...] = whole[v].reshape(args[i].shape)
        self._frames.append(frame)
        if self._per_call:
            self._pre_free.append(pre)
        del ins
        return not flagged

    def _flagged(self, acc):
        """Whether the call that wrote accumulator rows `acc` flagged itself for numpy."""
        return self.flag_at is not None and (
            acc[0, self.flag_at] != 0.0 if len(acc) == 1 else acc[:, self.flag_at].any())


class _Registers:
    """Preloaded registers and their address (taken once: a small program's call costs
    about as much as a few addresses read from numpy)."""
    __slots__ = ("array", "address")

    def __init__(self, array):
        self.array, self.address = array, address(array)


class _Frame:
    """A call's buffers, kept for the next call of the same program: its accumulators and
    its native code's scratch (a row per part), the addresses of its inputs and outputs, and
    the addresses native code takes of these."""
    __slots__ = ("nparts", "acc", "scratch", "addr", "outputs_at", "addresses")

    def __init__(self, program, nparts):
        self.nparts = nparts
        self.acc = np.empty((nparts, program.acc_init.size))
        self.scratch = np.empty((nparts, max(1, program.work)),
                                np.float32 if program.float32_scratch else np.float64)
        self.outputs_at = max(1, len(program.inputs))
        self.addr = np.zeros(self.outputs_at + max(1, len(program.outputs)), np.int64)
        at = address(self.addr)
        self.addresses = (at, at + 8 * self.outputs_at, address(self.scratch),
                          self.scratch.strides[0], address(self.acc), self.acc.strides[0])


def address(a):
    """The address of array `a`'s first element: through a ctypes view of its buffer
    (cheaper than numpy's array interface, which builds a dict each time: a small program's
    call takes one address per input and output), else (a read-only, empty or strided
    array) through that interface."""
    try:
        return ctypes.addressof(ctypes.c_char.from_buffer(a))
    except (TypeError, ValueError, BufferError):
        return a.__array_interface__["data"][0]


def _fill(pre, lo, hi, rows, value):
    """Write a row's `value` into the preloaded registers pre[lo:hi] (a RowProgram._span),
    once for each row of a group."""
    if rows is None:                    # one element, for every row of the group
        pre[lo:hi] = value
    else:
        pre[lo:hi].reshape(rows)[...] = np.ravel(value)


def _exact_integers(value, limit=EXACT_INT):
    """Whether every element of integer array `value` is within +-limit (a float64 holds
    every integer up to EXACT_INT exactly)."""
    if value.size == 1:                 # (a scalar's test, in a tenth of the time)
        return -limit <= value.item() <= limit
    return value.size == 0 or (value.max() <= limit and value.min() >= -limit)


def _gather_form(idx, n, m):
    if n % m == 0:
        if np.array_equal(idx, np.repeat(np.arange(m), n // m)):
            return GatherForm.REPEAT
        if np.array_equal(idx, np.tile(np.arange(m), n // m)):
            return GatherForm.TILE
    return GatherForm.INDEXED


def _reduce_form(idx, n, m):
    if m % n == 0 and np.array_equal(idx, np.repeat(np.arange(n), m // n)):
        return ReduceForm.RUNS
    return ReduceForm.INDEXED


def _check_dtype(v):
    if np.dtype(v.dtype.np) not in _ROUND and np.dtype(v.dtype.np) not in _INTEGERS:
        raise Unsupported(f"dtype {v.dtype}")


def _reduce_index(in_shape, out_shape, dims):
    """For each element of a value of `in_shape` (C order), the flat index of the element of
    its reduction over `dims` (of `out_shape`) it goes to."""
    ix = np.arange(math.prod(out_shape), dtype=np.int64).reshape(out_shape)
    for d in sorted(dims):
        ix = np.expand_dims(ix, d)
    return np.ascontiguousarray(np.broadcast_to(ix, in_shape)).ravel()


def row_program(kernel, rb):
    """The RowProgram of a first-tier kernel (codegen.first_tier.ReferenceKernel) and its
    RowBlocks plan `rb`, or None where the machine cannot run it."""
    try:
        return RowProgram(kernel, rb)
    except Unsupported:
        return None
    except Exception:       # a gap here: the kernel stays on numpy, correct and slower
        log.warning("kernel %s: no row program; it stays on numpy", kernel.name,
                    exc_info=True)
        return None
