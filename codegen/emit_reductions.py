"""Reductions inside a kernel: accumulator set-up, combining, the inner loop over the
reduced dims (float32 blocks accumulated in float64, maxnum-based max/min with a NaN
re-check) and the finishing step. A part of KernelEmitter: it writes into the shared
EmitState and reads values through a ValueEmitter."""
import math
from enum import Enum

import numpy as np

from aotgrad.codegen.emit_base import BLOCK, _Scope, const_expr, np_name
from aotgrad.codegen.index import identity
from aotgrad.ir import dtypes as dt
from aotgrad.ir import prims
from aotgrad.ir.tags import Tag


class RedOp(Enum):
    """How a reduction combines; the value is the name the kernel text uses."""
    SUM = "sum"
    PROD = "prod"
    MAX = "max"
    MIN = "min"
    ARGMAX = "argmax"
    ARGMIN = "argmin"


_RED_OPS = {prims.reduce_sum: RedOp.SUM, prims.reduce_prod: RedOp.PROD,
            prims.reduce_max: RedOp.MAX, prims.reduce_min: RedOp.MIN,
            prims.argmax: RedOp.ARGMAX, prims.argmin: RedOp.ARGMIN}
MINMAX = (RedOp.MAX, RedOp.MIN)


class ReductionEmitter:
    """The reductions of one kernel: accumulators, their updates and results."""

    def __init__(self, st, values):
        self.st, self.values = st, values

    def red_info(self, r):
        """(RedOp, accumulator dtype) of reduction node r."""
        op, d = _RED_OPS[r.prim], r.inputs[0].dtype
        if op in (RedOp.SUM, RedOp.PROD):
            return op, (dt.float64 if d.is_floating_point else dt.int64)
        if op in MINMAX:
            return op, (d if d.is_floating_point else dt.int64)
        return op, d  # argmax / argmin

    def init_expr(self, r):
        op, acc = self.red_info(r)
        if op is RedOp.SUM:
            return const_expr(0, acc)
        if op is RedOp.PROD:
            return const_expr(1, acc)
        if op in (RedOp.MAX, RedOp.MIN, RedOp.ARGMAX, RedOp.ARGMIN):
            big = op in (RedOp.MIN, RedOp.ARGMIN)
            if acc.is_floating_point:
                return const_expr(math.inf if big else -math.inf, acc)
            info = np.iinfo(np.int64)
            return const_expr(info.max if big else info.min, dt.int64)
        raise AssertionError(op)

    def combine(self, r, acc, v):
        """Statement updating accumulator `acc` with value `v` (within one row)."""
        op, ad = self.red_info(r)
        d = r.inputs[0].dtype
        if op is RedOp.SUM:
            if d is dt.bool_ or not d.is_floating_point:
                return f"{acc} += np.int64({v})"
            self.st.need("reassoc")
            return f"{acc} = _radd({acc}, {v})"
        if op is RedOp.PROD:
            if not ad.is_floating_point:
                return f"{acc} *= {v}"
            self.st.need("reassoc")
            return f"{acc} = _rmul({acc}, {v})"
        if op in MINMAX:
            if d.is_floating_point:
                self.st.need("minmax")
                return f"{acc} = _{op.value}num({acc}, {v})"
            return f"{acc} = {op.value}({acc}, np.int64({v}))"
        raise AssertionError(op)

    def inner_loop(self, lines, indent, reds, fulls, accs, slice_mode=False, jvar="j",
                   creds=None):
        """Emit the innermost loop(s) of one pass into `lines`; returns nothing.

        accs: reduction -> accumulator variable (already initialised by the caller).
        creds: column sum -> this thread's row of column partials (one inner dim only)."""
        kt = self.st.kt
        nd = len(kt.domain)
        self.st.slice_mode, self.st.jvar = slice_mode, jvar
        loop_lines = []
        ind = indent
        for P in self.st.inner[:-1]:
            self.st.loopvar[P] = f"i{P}"
            loop_lines.append(f"{ind}for i{P} in range(n{P}):")
            ind += "    "
        P = self.st.innermost
        float_sums = [r for r in reds if self.red_info(r)[0] is RedOp.SUM
                      and r.inputs[0].dtype is dt.float32 and not slice_mode]
        # float32 sums run in blocks of BLOCK; each block indexes through slices of its rows
        # (`v = x[r, lo:hi]; v[j]`): `range(lo, hi)` over the row did not vectorise (2.7x)
        self.st.slice_mode = slice_mode or bool(float_sums)
        self.st.loopvar[P] = f"(lo + {jvar})" if self.st.slice_mode else jvar
        pre = []
        self.st.view_scope = _Scope(pre, ind + "    " if float_sums else ind)
        body = []
        bind = ind + "    "
        if float_sums:
            bind += "    "
        self.st.inner_scope = _Scope(body, bind)
        self.st.pass_active = bool(self.st.cache_buf)
        approx_before = self.st.approx_uses
        blocks = {}
        for r in reds:
            v = self.values.val(r.inputs[0], identity(nd))
            a = accs[r]
            if r in float_sums:
                blocks[r] = self.st.fresh("sb")
                a = blocks[r]
            if Tag.ARG_REDUCTION in r.prim.tags:
                cmp = ">" if r.prim is prims.argmax else "<"
                ai = accs[r] + "_i"
                idxe = jvar if not slice_mode else f"(lo + {jvar})"
                self.st.inner_scope.add(
                    f"if ({v} {cmp} {a} or ({v} != {v} and {a} == {a})) and {a} == {a}:")
                self.st.inner_scope.add(f"    {a} = {v}")
                self.st.inner_scope.add(f"    {ai} = {idxe}")
            else:
                self.st.inner_scope.add(self.combine(r, a, v))
        for r, crow in (creds or {}).items():
            v = self.values.val(r.inputs[0], identity(nd))
            key = ("crow", crow)
            if key not in self.st.view_scope.memo:
                cv = self.st.fresh("cv")
                self.st.view_scope.add(f"{cv} = {crow}[lo:hi]" if self.st.slice_mode
                                    else f"{cv} = {crow}")
                self.st.view_scope.memo[key] = cv
            self.st.inner_scope.add(f"{self.st.view_scope.memo[key]}[{jvar}] += {v}")
        for v, ix, shape, cix in self.values.out_targets(fulls):
            e = self.values.val(v, ix)
            self.st.inner_scope.add(f"{self.values.access('out', v, shape, cix)} = {e}")
        hint = self.st.interleave_hint(approx_before)
        if hint:
            body.append(bind + hint)
        if self.st.pass_active:
            self.st.cache_ready |= self.st.cache_pending
            self.st.cache_pending = set()
        self.st.pass_active = False
        lines.extend(loop_lines)
        n = f"n{P}"
        if slice_mode:
            lines.extend(pre)
            lines.append(f"{ind}for {jvar} in range(hi - lo):")
            lines.extend(body)
        elif float_sums:
            lines.append(f"{ind}for lo in range(0, {n}, {BLOCK}):")
            lines.append(f"{ind}    hi = _imin(lo + {BLOCK}, {n})")
            lines.extend(pre)
            for r, s in blocks.items():
                lines.append(f"{ind}    {s} = np.float32(0.0)")
            lines.append(f"{ind}    for {jvar} in range(hi - lo):")
            lines.extend(body)
            for r, s in blocks.items():
                lines.append(f"{ind}    {accs[r]} += np.float64({s})")
        else:
            lines.extend(pre)
            lines.append(f"{ind}for {jvar} in range({n}):")
            lines.extend(body)

    def nan_fix(self, scope, r, accname):
        """max/min via maxnum ignore NaN: a second pass over the row looks for one and
        makes the result NaN."""
        op, _ = self.red_info(r)
        if op not in MINMAX or not r.inputs[0].dtype.is_floating_point:
            return
        f = "NAN32" if r.inputs[0].dtype is dt.float32 else "NAN64"
        # a separate pass: a NaN detector in the max's own loop stops LLVM from vectorising it
        chk = self.st.fresh("nn")
        scope.add(f"{chk} = False")
        saved = (self.st.inner_scope, self.st.view_scope)
        self.inner_loop_check(scope, r, chk, f)
        self.st.inner_scope, self.st.view_scope = saved

    def inner_loop_check(self, scope, r, chk, nanc):
        acc = self.st.red_vals_acc[r]
        # an or-reduction of `x != x` vectorises and is exact (an infinity, e.g. a causal
        # mask's -inf, does not send the row down a slow path)
        self._row_scan(scope.lines, scope.indent, r, lambda v: [f"{chk} |= {v} != {v}"])
        scope.add(f"if {chk}:")
        scope.add(f"    {acc} = {nanc}")

    def _row_scan(self, out, ind, r, body_of):
        """Append a loop over the reduced dims of `r` whose body is body_of(input value).
        The loop runs over whole rows: a pass of float sums before it left the state
        indexing blocks `lo:hi` (the last block's view, read up to the row's length, ran
        past the row), so whole-row indexing is set for the scan and restored after it."""
        nd = len(self.st.kt.domain)
        P = self.st.innermost
        saved = (self.st.slice_mode, self.st.loopvar.get(P))
        self.st.slice_mode, self.st.loopvar[P] = False, self.st.jvar
        try:
            self._row_scan_lines(out, ind, r, body_of, nd)
        finally:
            self.st.slice_mode, self.st.loopvar[P] = saved

    def _row_scan_lines(self, out, ind, r, body_of, nd):
        loops = []
        for P in self.st.inner[:-1]:
            loops.append(f"{ind}for i{P} in range(n{P}):")
            ind += "    "
        pre, body = [], []
        self.st.view_scope = _Scope(pre, ind)
        self.st.inner_scope = _Scope(body, ind + "    ")
        v = self.values.val(r.inputs[0], identity(nd))
        for line in body_of(v):
            self.st.inner_scope.add(line)
        out.extend(loops + pre)
        out.append(f"{ind}for {self.st.jvar} in range(n{self.st.innermost}):")
        out.extend(body)

    def finish_red(self, scope, r, acc):
        op, ad = self.red_info(r)
        od = r.outputs[0].dtype
        nm = self.st.fresh("r")
        if od is dt.bool_:
            scope.add(f"{nm} = {acc} != 0")
        elif Tag.ARG_REDUCTION in r.prim.tags:
            scope.add(f"{nm} = np.int64({acc}_i)")
        else:
            scope.add(f"{nm} = {np_name(od)}({acc})")
        self.st.red_vals[r.outputs[0]] = nm
        self.st.rowdep.add(nm)

    def init_acc(self, scope, r):
        acc = self.st.fresh("acc")
        scope.add(f"{acc} = {self.init_expr(r)}")
        if Tag.ARG_REDUCTION in r.prim.tags:
            scope.add(f"{acc}_i = 0")
        self.st.red_vals_acc[r] = acc
        return acc
