"""Loop nests of a kernel: the plain nest, the full (all-dims) nest, prange blocks over a
flat domain, and the column-reduction nests. A part of KernelEmitter: it writes the loops
into the shared EmitState, values through a ValueEmitter and accumulators through a
ReductionEmitter."""
import math

import numba

from aotgrad.codegen.emit_base import BLOCK, COL_CHUNK, ROW_BLOCK, ParallelForm, _Scope, np_name
from aotgrad.codegen.emit_reductions import MINMAX, RedOp
from aotgrad.codegen.index import identity
from aotgrad.codegen.steps import KernelType
from aotgrad.ir import dtypes as dt
from aotgrad.ir.symbolic import SymInt, hint


def flat_view(name):
    """Source of a 1-d view of the C-contiguous array `name` (the prelude's `_view` intrinsic:
    numba's reshape would compile a function of its own)."""
    return f"_view({name}, 0, {name}.size, {name}.dtype)"


class LoopNestEmitter:
    """The loop nests of one kernel (one of `nest`, `full_nest`, `blocked`, `cols_chunked`
    per kernel, chosen by KernelEmitter.build)."""

    def __init__(self, st, values, reds):
        self.st, self.values, self.reds = st, values, reds

    def nest(self, body):
        """Rows (or single-row / elementwise n-d) kernels: rows in (p)range, passes inside."""
        kt = self.st.kt
        self.st.red_vals_acc = {}
        outer = self.st.outer
        rows = " * ".join(f"n{P}" for P in outer) or "1"
        if kt.ktype == KernelType.COLS:
            if self.float_sums_in_parallel():
                self.cols_blocked(body, rows)
                return
            self.st.parallel = False
        cparts = {}
        if kt.col_reds and kt.ktype == KernelType.ROWS:
            # column sums riding along (2-d domain): rows run in blocks of ROW_BLOCK, each
            # block with a float64 partial per column, combined after the loop
            body.append(f"    nrb = ({rows} + {ROW_BLOCK - 1}) // {ROW_BLOCK}")
            rb = [f"    for rblk in {self.st.rng('nrb')}:"]
            for r in kt.col_reds:
                cp = self.st.fresh("cpart")
                # float32 partials over ROW_BLOCK rows (a float64 read-modify-write per
                # element cost 10 ms on W3), blocks combined in float64 afterwards
                self.st.partials(body, cp, f"(nrb, n{self.st.inner[-1]})", r.inputs[0].dtype)
                cparts[r] = (cp, self.st.fresh("crow"))
                rb.append(f"        {cparts[r][1]} = {cp}[rblk]")
            rb.append(f"        for r in range(rblk * {ROW_BLOCK}, "
                      f"_imin(rblk * {ROW_BLOCK} + {ROW_BLOCK}, {rows})):")
            self.st.row_scope = _Scope(rb, "            ")
        else:
            rb = [f"    for r in {self.st.rng(rows)}:"]
            self.st.row_scope = _Scope(rb, "        ")
        self.values.decode(self.st.row_scope, outer)
        if kt.ktype == KernelType.COLS:
            self.cols_nest(body, rb)
            return
        phases = self.values.phases()
        self.values.plan_row_cache(phases)
        # one scratch row per thread, allocated once per call: an allocation per row (a
        # malloc and a free around a 128-element attention row) cost a sixth of a softmax
        # backward. Under numba's prange the thread count is a constant of the source, as in
        # cols_chunked, and numba's thread ids lie below it; rows are 64 bytes or more apart
        # (no cache line written by two threads). A part allocates its own.
        (nt, tid), n = self.st.thread_rows(), f"n{self.st.innermost}"
        for v, nm in self.st.cache_buf.items():
            body.append(f"    {nm}_t = _empty(({nt}, ({n} + 15) // 16 * 16 + 16), "
                        f"{np_name(v.dtype)})")
            self.st.row_scope.add(f"{nm} = {nm}_t[{tid}, :{n}]")
        for reds, fulls in phases:
            creds = {r: cparts[r][1] for r in reds if r in cparts}
            reds = [r for r in reds if r not in cparts]
            if not reds and not fulls and not creds:   # e.g. per-row gathers only
                continue
            accs = {r: self.reds.init_acc(self.st.row_scope, r) for r in reds}
            self.reds.inner_loop(rb, self.st.row_scope.indent, reds, fulls, accs, creds=creds)
            for r in reds:
                self.reds.nan_fix(self.st.row_scope, r, accs[r])
                self.reds.finish_red(self.st.row_scope, r, accs[r])
        self.values.write_row_outputs(self.st.row_scope)
        body.extend(rb)
        self._combine_blocks({r: cp for r, (cp, _) in cparts.items()})

    def float_sums_in_parallel(self):
        """A parallel kernel whose reductions are all float sums (`cols_blocked` runs it)."""
        return self.st.parallel and all(self.reds.red_info(r)[0] is RedOp.SUM and
                                     r.inputs[0].dtype in (dt.float32, dt.float64)
                                     for r in self.st.kt.reds)

    def rows_split(self, outer):
        """Column sums over one kept dim go by ranges of rows (`cols_blocked`) rather than
        by column chunks when every thread gets at least ROW_BLOCK rows (traced sizes)."""
        rows = math.prod(self.st.cdom[P] for P in outer)
        grown = hint(rows) * (self.st.growth if isinstance(rows, SymInt) else 1)
        return self.float_sums_in_parallel() and \
            grown >= max(1, numba.config.NUMBA_NUM_THREADS) * ROW_BLOCK

    def _combine_blocks(self, cparts):
        """Write each reduction's output: its per-row-block partials (nrb, ...) summed in
        float64, block after block."""
        for r, cp in cparts.items():
            v = r.outputs[0]
            if v not in self.st.kt.outputs:
                continue
            shape, _ = self.st.refmap[("out", v)]
            name = self.st.args.array("out", v, shape if shape else [1])
            of, pf = self.st.fresh("of"), self.st.fresh("pf")
            self.st.top_scope.add(f"{of} = {flat_view(name)}")
            self.st.top_scope.add(f"{pf} = _view({cp}, 0, (nrb, {of}.size), {cp}.dtype)")
            # explicit loops: an array method here would become a parallel region per q
            tot = self.st.fresh("ctot")
            self.st.top_scope.add(f"{tot} = _zeros({of}.size, np.float64)")
            self.st.top_scope.add("for b in range(nrb):")
            self.st.top_scope.add(f"    for q in range({of}.size):")
            self.st.top_scope.add(f"        {tot}[q] += {pf}[b, q]")
            self.st.top_scope.add(f"for q in range({of}.size):")
            self.st.top_scope.add(f"    {of}[q] = {np_name(v.dtype)}({tot}[q])")

    def cols_blocked(self, body, rows):
        """Column sums (over one or several kept dims): prange over one contiguous range of
        rows per thread, each summing into its own float64 partial shaped like the kept dims
        through a float32 partial flushed every ROW_BLOCK rows (as in `cols_chunked`); the
        partials are combined in float64 after the loop. A thread reads the rows a
        row-parallel producer (a product's row slabs, a row kernel) wrote on its core,
        where `cols_chunked`'s column chunks read rows other threads wrote (slower on W4's
        GELU backward with its bias gradient)."""
        kt = self.st.kt
        kshape = ", ".join(f"n{Q}" for Q in self.st.inner)
        nt = max(1, numba.config.NUMBA_NUM_THREADS)   # a constant, as in `cols_chunked`
        body.append(f"    nrb = _imin({nt}, {rows})")
        cparts, views, parts, flat = {}, {}, {}, []
        rb = [f"    for rblk in {self.st.rng('nrb')}:",
              f"        r0 = {rows} * rblk // nrb",
              f"        r1 = {rows} * (rblk + 1) // nrb"]
        for r in kt.reds:
            cparts[r], views[r] = self.st.fresh("cpart"), self.st.fresh("crow")
            self.st.partials(body, cparts[r], f"(nrb, {kshape})", dt.float64)
            rb.append(f"        {views[r]} = {cparts[r]}[rblk]")
            if r.inputs[0].dtype is dt.float32:
                parts[r] = self.st.fresh("pv")
                fv, fp = self.st.fresh("fv"), self.st.fresh("fp")
                rb.append(f"        {parts[r]} = _zeros(({kshape},), np.float32)")
                rb.append(f"        {fv} = {flat_view(views[r])}")
                rb.append(f"        {fp} = {flat_view(parts[r])}")
                flat.append((fv, fp))
        rb.append("        for r in range(r0, r1):")
        self.st.row_scope = _Scope(rb, "            ")
        self.values.decode(self.st.row_scope, self.st.outer)
        fulls = [v for v in kt.outputs if v.shape == kt.domain]
        self._cols_inner(rb, "            ", kt.reds, fulls, {**views, **parts},
                         slice_mode=False, f32=set(parts))
        self._flush_partials(rb, "r - r0 + 1", "r1 - 1", [(fv, fp, f"{fp}.size")
                                                         for fv, fp in flat])
        body.extend(rb)
        self._combine_blocks(cparts)

    def full_nest(self, body):
        """Reduction over every dim of an n-d domain that does not collapse to one dim (e.g.
        sum(f(x, bias))): prange over the first dim, one partial per index, then combined."""
        self.st.red_vals_acc = {}
        P0 = self.st.inner[0]
        inner = self.st.inner
        self.st.inner = inner[1:]           # P0 becomes the (parallel) row loop
        self.st.loopvar[P0] = "r"
        for reds, fulls in self.values.phases():
            parts = {}
            for r in reds:
                parts[r] = self.st.fresh("part")
                acc_dtype = self.reds.red_info(r)[1]
                self.st.partials(body, parts[r], f"n{P0}", acc_dtype)
            rb = [f"    for r in {self.st.rng(f'n{P0}')}:"]
            self.st.row_scope = _Scope(rb, "        ")
            accs = {r: self.reds.init_acc(self.st.row_scope, r) for r in reds}
            self.reds.inner_loop(rb, "        ", reds, fulls, accs)
            for r in reds:
                self.reds.nan_fix(self.st.row_scope, r, accs[r])
                self.st.row_scope.add(f"{parts[r]}[r] = {accs[r]}")
            body.extend(rb)
            self.st.row_scope = None
            for r in reds:
                op = self.reds.red_info(r)[0]
                a = self.reds.init_acc(self.st.top_scope, r)
                p = parts[r]
                self.st.top_scope.add(f"for b in range(n{P0}):")
                if op in MINMAX and r.inputs[0].dtype.is_floating_point:
                    cmp = ">" if op is RedOp.MAX else "<"   # a NaN partial sticks
                    self.st.top_scope.add(f"    {a} = {p}[b] if ({p}[b] {cmp} {a} or "
                                       f"{p}[b] != {p}[b]) and {a} == {a} else {a}")
                elif op in MINMAX:
                    self.st.top_scope.add(f"    {a} = {op.value}({a}, {p}[b])")
                elif op is RedOp.SUM:
                    self.st.top_scope.add(f"    {a} += {p}[b]")
                else:
                    self.st.top_scope.add(f"    {a} *= {p}[b]")
                self.reds.finish_red(self.st.top_scope, r, a)
        self.st.inner = inner
        self.values.write_row_outputs(self.st.top_scope)

    def blocked(self, body):
        """One long dim: prange over blocks of BLOCK; per-block partials for reductions."""
        self.st.red_vals_acc = {}
        body.append(f"    nb = (n0 + {BLOCK - 1}) // {BLOCK}")
        for reds, fulls in self.values.phases():
            parts = {}
            for r in reds:
                op, ad = self.reds.red_info(r)
                p = self.st.fresh("part")
                parts[r] = p
                self.st.partials(body, p, "nb", ad)
            blk = [f"    for b in {self.st.rng('nb')}:",
                   f"        lo = b * {BLOCK}",
                   f"        hi = _imin(lo + {BLOCK}, n0)"]
            bs = _Scope(blk, "        ")
            accs = {}
            for r in reds:
                op, ad = self.reds.red_info(r)
                a = self.st.fresh("acc")
                if op is RedOp.SUM and r.inputs[0].dtype is dt.float32:
                    bs.add(f"{a} = np.float32(0.0)")
                else:
                    bs.add(f"{a} = {self.reds.init_expr(r)}")
                accs[r] = a
            self.reds.inner_loop(blk, "        ", reds, fulls, accs, slice_mode=True, jvar="jj")
            for r in reds:
                op, ad = self.reds.red_info(r)
                bs.add(f"{parts[r]}[b] = {accs[r]}")
            body.extend(blk)
            for r in reds:
                a = self.reds.init_acc(self.st.top_scope, r)
                p = parts[r]
                self.st.top_scope.add("for b in range(nb):")
                minmax = self.reds.red_info(r)[0] in MINMAX
                self.st.top_scope.add("    " + self.reds.combine(r, a, f"{p}[b]").replace(
                    "np.int64(", "(") if not minmax else
                    "    " + self.reds.combine(r, a, f"{p}[b]"))
                if minmax and r.inputs[0].dtype.is_floating_point:
                    self.st.jvar = "j"
                    self.st.slice_mode = False
                    self.st.loopvar[0] = "j"
                    self.reds.nan_fix(self.st.top_scope, r, a)
                self.reds.finish_red(self.st.top_scope, r, a)
        self.values.write_row_outputs(self.st.top_scope)

    def cols_chunked(self, body):
        """Column reduction over one kept dim: prange over kept-dim chunks, rows inside."""
        kt = self.st.kt
        K = self.st.innermost
        accs, fills = {}, {}
        for r in kt.reds:
            op, ad = self.reds.red_info(r)
            a = self.st.fresh("acc")
            if self.st.parallel and self.st.form is ParallelForm.PARTS:
                # shared by the parts: each chunk sets its own slice's start value
                self.st.partials(body, a, f"n{K}", ad)
                fills[r] = self.reds.init_expr(r)
            else:
                body.append(f"    {a} = _full(n{K}, {np_name(ad)}, {self.reds.init_expr(r)})")
            accs[r] = a
        rows = " * ".join(f"n{P}" for P in self.st.outer) or "1"
        # chunks of at most COL_CHUNK columns, at least one per thread (256 columns in one
        # chunk left a thread idle); a multiple of 16 so the inner loop vectorises whole.
        # Each column's sum is the same whatever the width. The thread count is a constant
        # of the source (numba does not cache a function that asks for it).
        nt = max(1, numba.config.NUMBA_NUM_THREADS)
        body.append(f"    cw = _imin({COL_CHUNK}, max(16, ((n{K} + {nt - 1}) // {nt} + 15) // 16 * 16))")
        body.append(f"    nc = (n{K} + cw - 1) // cw")
        cl = [f"    for cb in {self.st.rng('nc')}:",
              "        lo = cb * cw",
              f"        hi = _imin(lo + cw, n{K})"]
        views, parts = {}, {}
        for r in kt.reds:
            views[r] = self.st.fresh("av")
            cl.append(f"        {views[r]} = {accs[r]}[lo:hi]")
            if r in fills:
                cl.append("        for q in range(hi - lo):")
                cl.append(f"            {views[r]}[q] = {fills[r]}")
            if self.reds.red_info(r)[0] is RedOp.SUM and r.inputs[0].dtype is dt.float32:
                # float32 partials over ROW_BLOCK rows, added into the float64 sums: a
                # float64 accumulator in the loop halves the vector width of everything
                # else in it (the GELU backward's bias gradient ran 1.9x slower)
                parts[r] = self.st.fresh("pv")
                cl.append(f"        {parts[r]} = _zeros(hi - lo, np.float32)")
        cl.append(f"        for r in range({rows}):")
        self.st.row_scope = _Scope(cl, "            ")
        self.values.decode(self.st.row_scope, self.st.outer)
        fulls = [v for v in kt.outputs if v.shape == kt.domain]
        self._cols_inner(cl, "            ", kt.reds, fulls, {**views, **parts},
                         slice_mode=True, f32=set(parts))
        self._flush_partials(cl, "r + 1", f"{rows} - 1", [(views[r], pv, "hi - lo")
                                                         for r, pv in parts.items()])
        body.extend(cl)
        self._cols_finish(accs)

    @staticmethod
    def _flush_partials(lines, done, last, pairs):
        """Inside a column-sum row loop: every ROW_BLOCK rows (`done` rows counted) and at the
        row `last`, add each float32 partial into its float64 sum and clear it. `pairs`:
        (float64 sums, float32 partials, element count), both flat."""
        if not pairs:
            return
        lines.append(f"            if ({done}) % {ROW_BLOCK} == 0 or r == {last}:")
        for acc, part, n in pairs:
            lines.append(f"                for q in range({n}):")
            lines.append(f"                    {acc}[q] += np.float64({part}[q])")
            lines.append(f"                    {part}[q] = np.float32(0.0)")

    def _cols_inner(self, body, indent, reds, fulls, views, slice_mode, f32=()):
        nd = len(self.st.kt.domain)
        self.st.slice_mode, self.st.jvar = slice_mode, "jj"
        P = self.st.innermost
        self.st.loopvar[P] = "(lo + jj)" if slice_mode else "jj"
        pre, inner = [], []
        ind = indent
        loops = []
        for Q in self.st.inner[:-1]:
            self.st.loopvar[Q] = f"i{Q}"
            loops.append(f"{ind}for i{Q} in range(n{Q}):")
            ind += "    "
        self.st.view_scope = _Scope(pre, ind)
        self.st.inner_scope = _Scope(inner, ind + "    ")
        approx_before = self.st.approx_uses
        for r in reds:
            v = self.values.val(r.inputs[0], identity(nd))
            op, ad = self.reds.red_info(r)
            if slice_mode:
                tgt = f"{views[r]}[jj]"
            else:
                tgt = f"{views[r]}[{', '.join(self.st.loopvar[Q] for Q in self.st.inner)}]"
            if op is RedOp.SUM:
                self.st.inner_scope.add(f"{tgt} += {np_name(dt.float32 if r in f32 else ad)}({v})")
            elif op is RedOp.PROD:
                self.st.inner_scope.add(f"{tgt} *= {np_name(ad)}({v})")
            else:
                cmp = ">=" if op is RedOp.MAX else "<="
                w = self.st.fresh()
                self.st.inner_scope.add(f"{w} = {np_name(ad)}({v})")
                self.st.inner_scope.add(
                    f"{tgt} = {tgt} if ({tgt} {cmp} {w} or {tgt} != {tgt}) else {w}")
        for v, ix, shape, cix in self.values.out_targets(fulls):
            e = self.values.val(v, ix)
            self.st.inner_scope.add(f"{self.values.access('out', v, shape, cix)} = {e}")
        hint = self.st.interleave_hint(approx_before)
        if hint:
            self.st.inner_scope.add(hint)
        body.extend(loops + pre)
        rng = "range(hi - lo)" if slice_mode else f"range(n{P})"
        body.append(f"{ind}for jj in {rng}:")
        body.extend(inner)

    def _cols_finish(self, accs):
        kt = self.st.kt
        for r in kt.reds:
            v = r.outputs[0]
            if v not in kt.outputs:
                continue
            shape, cix = self.st.refmap[("out", v)]
            name = self.st.args.array("out", v, shape if shape else [1])
            od = v.dtype
            of, af = self.st.fresh("of"), self.st.fresh("af")
            self.st.top_scope.add(f"{of} = {flat_view(name)}")
            self.st.top_scope.add(f"{af} = {flat_view(accs[r])}")
            self.st.top_scope.add(f"for q in range({of}.size):")
            e = f"{af}[q] != 0" if od is dt.bool_ else f"{np_name(od)}({af}[q])"
            self.st.top_scope.add(f"    {of}[q] = {e}")

    def cols_nest(self, body, rb):
        """Column reduction with several kept dims: serial, accumulators shaped like them."""
        kt = self.st.kt
        accs = {}
        kshape = ", ".join(f"n{Q}" for Q in self.st.inner)
        for r in kt.reds:
            op, ad = self.reds.red_info(r)
            a = self.st.fresh("acc")
            body.append(f"    {a} = _full(({kshape},), {np_name(ad)}, "
                        f"{self.reds.init_expr(r)})")
            accs[r] = a
        fulls = [v for v in kt.outputs if v.shape == kt.domain]
        self._cols_inner(rb, "        ", kt.reds, fulls, accs, slice_mode=False)
        body.extend(rb)
        self._cols_finish(accs)
