"""Loop nests of a kernel: the plain nest, the full (all-dims) nest, prange blocks over a
flat domain, and the column-reduction nests. A mixin of KernelEmitter."""
import math

import numba

from aotgrad.codegen.emit_base import BLOCK, COL_CHUNK, ROW_BLOCK, _Scope, np_name
from aotgrad.codegen.index import identity
from aotgrad.codegen.steps import KernelType
from aotgrad.ir import dtypes as dt
from aotgrad.ir.symbolic import hint


class LoopNestEmitter:
    """Loop-nest methods of KernelEmitter."""

    def nest(self, body):
        """Rows (or single-row / elementwise n-d) kernels: rows in (p)range, passes inside."""
        kt = self.kt
        self.red_vals_acc = {}
        outer = self.outer
        rows = " * ".join(f"n{P}" for P in outer) or "1"
        if kt.ktype == KernelType.COLS:
            if self.float_sums_in_parallel():
                self.cols_blocked(body, rows)
                return
            self.parallel = False
        cparts = {}
        if kt.col_reds and kt.ktype == KernelType.ROWS:
            # column sums riding along (2-d domain): rows run in blocks of ROW_BLOCK, each
            # block with a float64 partial per column, combined after the loop
            body.append(f"    nrb = ({rows} + {ROW_BLOCK - 1}) // {ROW_BLOCK}")
            rb = [f"    for rblk in {self.rng('nrb')}:"]
            for r in kt.col_reds:
                cp = self.fresh("cpart")
                # float32 partials over ROW_BLOCK rows (a float64 read-modify-write per
                # element cost 10 ms on W3), blocks combined in float64 afterwards
                body.append(f"    {cp} = _zeros((nrb, n{self.inner[-1]}), "
                            f"{np_name(r.inputs[0].dtype)})")
                cparts[r] = (cp, self.fresh("crow"))
                rb.append(f"        {cparts[r][1]} = {cp}[rblk]")
            rb.append(f"        for r in range(rblk * {ROW_BLOCK}, "
                      f"_imin(rblk * {ROW_BLOCK} + {ROW_BLOCK}, {rows})):")
            self.row_scope = _Scope(rb, "            ")
        else:
            rb = [f"    for r in {self.rng(rows)}:"]
            self.row_scope = _Scope(rb, "        ")
        self.decode(self.row_scope, outer)
        if kt.ktype == KernelType.COLS:
            self.cols_nest(body, rb)
            return
        phases = self.phases()
        self.plan_row_cache(phases)
        for v, nm in self.cache_buf.items():
            self.row_scope.add(f"{nm} = _empty(n{self.innermost}, {np_name(v.dtype)})")
        for reds, fulls in phases:
            creds = {r: cparts[r][1] for r in reds if r in cparts}
            reds = [r for r in reds if r not in cparts]
            if not reds and not fulls and not creds:   # e.g. per-row gathers only
                continue
            accs = {r: self.init_acc(self.row_scope, r) for r in reds}
            self.inner_loop(rb, self.row_scope.indent, reds, fulls, accs, creds=creds)
            for r in reds:
                self.nan_fix(self.row_scope, r, accs[r])
                self.finish_red(self.row_scope, r, accs[r])
        self.write_row_outputs(self.row_scope)
        body.extend(rb)
        self._combine_blocks({r: cp for r, (cp, _) in cparts.items()})

    def float_sums_in_parallel(self):
        """A parallel kernel whose reductions are all float sums (`cols_blocked` runs it)."""
        return self.parallel and all(self.red_info(r)[0] == "sum" and
                                     r.inputs[0].dtype in (dt.float32, dt.float64)
                                     for r in self.kt.reds)

    def rows_split(self, outer):
        """Column sums over one kept dim go by ranges of rows (`cols_blocked`) rather than
        by column chunks when every thread gets at least ROW_BLOCK rows (traced sizes)."""
        rows = math.prod(self.cdom[P] for P in outer)
        return self.float_sums_in_parallel() and \
            hint(rows) >= max(1, numba.config.NUMBA_NUM_THREADS) * ROW_BLOCK

    def _combine_blocks(self, cparts):
        """Write each reduction's output: its per-row-block partials (nrb, ...) summed in
        float64, block after block."""
        for r, cp in cparts.items():
            v = r.outputs[0]
            if v not in self.kt.outputs:
                continue
            shape, _ = self.refmap[("out", v)]
            name = self.args.array("out", v, shape if shape else [1])
            of, pf = self.fresh("of"), self.fresh("pf")
            self.top_scope.add(f"{of} = {name}.reshape({name}.size)")
            self.top_scope.add(f"{pf} = {cp}.reshape((nrb, {of}.size))")
            # explicit loops: an array method here would become a parallel region per q
            tot = self.fresh("ctot")
            self.top_scope.add(f"{tot} = _zeros({of}.size, np.float64)")
            self.top_scope.add("for b in range(nrb):")
            self.top_scope.add(f"    for q in range({of}.size):")
            self.top_scope.add(f"        {tot}[q] += {pf}[b, q]")
            self.top_scope.add(f"for q in range({of}.size):")
            self.top_scope.add(f"    {of}[q] = {np_name(v.dtype)}({tot}[q])")

    def cols_blocked(self, body, rows):
        """Column sums (over one or several kept dims): prange over one contiguous range of
        rows per thread, each summing into its own float64 partial shaped like the kept dims
        through a float32 partial flushed every ROW_BLOCK rows (as in `cols_chunked`); the
        partials are combined in float64 after the loop. A thread reads the rows a
        row-parallel producer (a product's row slabs, a row kernel) wrote on its core,
        where `cols_chunked`'s column chunks read rows other threads wrote (slower on W4's
        GELU backward with its bias gradient)."""
        kt = self.kt
        kshape = ", ".join(f"n{Q}" for Q in self.inner)
        nt = max(1, numba.config.NUMBA_NUM_THREADS)   # a constant, as in `cols_chunked`
        body.append(f"    nrb = _imin({nt}, {rows})")
        cparts, views, parts, flat = {}, {}, {}, []
        rb = [f"    for rblk in {self.rng('nrb')}:",
              f"        r0 = {rows} * rblk // nrb",
              f"        r1 = {rows} * (rblk + 1) // nrb"]
        for r in kt.reds:
            cparts[r], views[r] = self.fresh("cpart"), self.fresh("crow")
            body.append(f"    {cparts[r]} = _zeros((nrb, {kshape}), np.float64)")
            rb.append(f"        {views[r]} = {cparts[r]}[rblk]")
            if r.inputs[0].dtype is dt.float32:
                parts[r] = self.fresh("pv")
                fv, fp = self.fresh("fv"), self.fresh("fp")
                rb.append(f"        {parts[r]} = _zeros(({kshape},), np.float32)")
                rb.append(f"        {fv} = {views[r]}.reshape({views[r]}.size)")
                rb.append(f"        {fp} = {parts[r]}.reshape({parts[r]}.size)")
                flat.append((fv, fp))
        rb.append("        for r in range(r0, r1):")
        self.row_scope = _Scope(rb, "            ")
        self.decode(self.row_scope, self.outer)
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
        self.red_vals_acc = {}
        P0 = self.inner[0]
        inner = self.inner
        self.inner = inner[1:]           # P0 becomes the (parallel) row loop
        self.loopvar[P0] = "r"
        for reds, fulls in self.phases():
            parts = {}
            for r in reds:
                parts[r] = self.fresh("part")
                body.append(f"    {parts[r]} = _empty(n{P0}, {np_name(self.red_info(r)[1])})")
            rb = [f"    for r in {self.rng(f'n{P0}')}:"]
            self.row_scope = _Scope(rb, "        ")
            accs = {r: self.init_acc(self.row_scope, r) for r in reds}
            self.inner_loop(rb, "        ", reds, fulls, accs)
            for r in reds:
                self.nan_fix(self.row_scope, r, accs[r])
                self.row_scope.add(f"{parts[r]}[r] = {accs[r]}")
            body.extend(rb)
            self.row_scope = None
            for r in reds:
                op = self.red_info(r)[0]
                a = self.init_acc(self.top_scope, r)
                p = parts[r]
                self.top_scope.add(f"for b in range(n{P0}):")
                if op in ("max", "min") and r.inputs[0].dtype.is_floating_point:
                    cmp = ">" if op == "max" else "<"   # a NaN partial sticks
                    self.top_scope.add(f"    {a} = {p}[b] if ({p}[b] {cmp} {a} or "
                                       f"{p}[b] != {p}[b]) and {a} == {a} else {a}")
                elif op in ("max", "min"):
                    self.top_scope.add(f"    {a} = {op}({a}, {p}[b])")
                elif op == "sum":
                    self.top_scope.add(f"    {a} += {p}[b]")
                else:
                    self.top_scope.add(f"    {a} *= {p}[b]")
                self.finish_red(self.top_scope, r, a)
        self.inner = inner
        self.write_row_outputs(self.top_scope)

    def blocked(self, body):
        """One long dim: prange over blocks of BLOCK; per-block partials for reductions."""
        self.red_vals_acc = {}
        body.append(f"    nb = (n0 + {BLOCK - 1}) // {BLOCK}")
        for reds, fulls in self.phases():
            parts = {}
            for r in reds:
                op, ad = self.red_info(r)
                p = self.fresh("part")
                parts[r] = p
                body.append(f"    {p} = _empty(nb, {np_name(ad)})")
            blk = [f"    for b in {self.rng('nb')}:",
                   f"        lo = b * {BLOCK}",
                   f"        hi = _imin(lo + {BLOCK}, n0)"]
            bs = _Scope(blk, "        ")
            accs = {}
            for r in reds:
                op, ad = self.red_info(r)
                a = self.fresh("acc")
                if op == "sum" and r.inputs[0].dtype is dt.float32:
                    bs.add(f"{a} = np.float32(0.0)")
                else:
                    bs.add(f"{a} = {self.init_expr(r)}")
                accs[r] = a
            self.inner_loop(blk, "        ", reds, fulls, accs, slice_mode=True, jvar="jj")
            for r in reds:
                op, ad = self.red_info(r)
                bs.add(f"{parts[r]}[b] = {accs[r]}")
            body.extend(blk)
            for r in reds:
                a = self.init_acc(self.top_scope, r)
                p = parts[r]
                self.top_scope.add("for b in range(nb):")
                self.top_scope.add("    " + self.combine(r, a, f"{p}[b]").replace(
                    "np.int64(", "(") if self.red_info(r)[0] not in ("max", "min") else
                    "    " + self.combine(r, a, f"{p}[b]"))
                if self.red_info(r)[0] in ("max", "min") and r.inputs[0].dtype.is_floating_point:
                    self.jvar = "j"
                    self.slice_mode = False
                    self.loopvar[0] = "j"
                    self.nan_fix(self.top_scope, r, a)
                self.finish_red(self.top_scope, r, a)
        self.write_row_outputs(self.top_scope)

    def cols_chunked(self, body):
        """Column reduction over one kept dim: prange over kept-dim chunks, rows inside."""
        kt = self.kt
        K = self.innermost
        accs = {}
        for r in kt.reds:
            op, ad = self.red_info(r)
            a = self.fresh("acc")
            body.append(f"    {a} = _full(n{K}, {np_name(ad)}, {self.init_expr(r)})")
            accs[r] = a
        rows = " * ".join(f"n{P}" for P in self.outer) or "1"
        # chunks of at most COL_CHUNK columns, at least one per thread (256 columns in one
        # chunk left a thread idle); a multiple of 16 so the inner loop vectorises whole.
        # Each column's sum is the same whatever the width. The thread count is a constant
        # of the source (numba does not cache a function that asks for it).
        nt = max(1, numba.config.NUMBA_NUM_THREADS)
        body.append(f"    cw = _imin({COL_CHUNK}, max(16, ((n{K} + {nt - 1}) // {nt} + 15) // 16 * 16))")
        body.append(f"    nc = (n{K} + cw - 1) // cw")
        cl = [f"    for cb in {self.rng('nc')}:",
              "        lo = cb * cw",
              f"        hi = _imin(lo + cw, n{K})"]
        views, parts = {}, {}
        for r in kt.reds:
            views[r] = self.fresh("av")
            cl.append(f"        {views[r]} = {accs[r]}[lo:hi]")
            if self.red_info(r)[0] == "sum" and r.inputs[0].dtype is dt.float32:
                # float32 partials over ROW_BLOCK rows, added into the float64 sums: a
                # float64 accumulator in the loop halves the vector width of everything
                # else in it (the GELU backward's bias gradient ran 1.9x slower)
                parts[r] = self.fresh("pv")
                cl.append(f"        {parts[r]} = _zeros(hi - lo, np.float32)")
        cl.append(f"        for r in range({rows}):")
        self.row_scope = _Scope(cl, "            ")
        self.decode(self.row_scope, self.outer)
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
        nd = len(self.kt.domain)
        self.slice_mode, self.jvar = slice_mode, "jj"
        P = self.innermost
        self.loopvar[P] = "(lo + jj)" if slice_mode else "jj"
        pre, inner = [], []
        ind = indent
        loops = []
        for Q in self.inner[:-1]:
            self.loopvar[Q] = f"i{Q}"
            loops.append(f"{ind}for i{Q} in range(n{Q}):")
            ind += "    "
        self.view_scope = _Scope(pre, ind)
        self.inner_scope = _Scope(inner, ind + "    ")
        for r in reds:
            v = self.val(r.inputs[0], identity(nd))
            op, ad = self.red_info(r)
            if slice_mode:
                tgt = f"{views[r]}[jj]"
            else:
                tgt = f"{views[r]}[{', '.join(self.loopvar[Q] for Q in self.inner)}]"
            if op == "sum":
                self.inner_scope.add(f"{tgt} += {np_name(dt.float32 if r in f32 else ad)}({v})")
            elif op == "prod":
                self.inner_scope.add(f"{tgt} *= {np_name(ad)}({v})")
            else:
                cmp = ">=" if op == "max" else "<="
                w = self.fresh()
                self.inner_scope.add(f"{w} = {np_name(ad)}({v})")
                self.inner_scope.add(
                    f"{tgt} = {tgt} if ({tgt} {cmp} {w} or {tgt} != {tgt}) else {w}")
        for v, ix, shape, cix in self.out_targets(fulls):
            e = self.val(v, ix)
            self.inner_scope.add(f"{self.access('out', v, shape, cix)} = {e}")
        body.extend(loops + pre)
        rng = "range(hi - lo)" if slice_mode else f"range(n{P})"
        body.append(f"{ind}for jj in {rng}:")
        body.extend(inner)

    def _cols_finish(self, accs):
        kt = self.kt
        for r in kt.reds:
            v = r.outputs[0]
            if v not in kt.outputs:
                continue
            shape, cix = self.refmap[("out", v)]
            name = self.args.array("out", v, shape if shape else [1])
            od = v.dtype
            of, af = self.fresh("of"), self.fresh("af")
            self.top_scope.add(f"{of} = {name}.reshape({name}.size)")
            self.top_scope.add(f"{af} = {accs[r]}.reshape({accs[r]}.size)")
            self.top_scope.add(f"for q in range({of}.size):")
            e = f"{af}[q] != 0" if od is dt.bool_ else f"{np_name(od)}({af}[q])"
            self.top_scope.add(f"    {of}[q] = {e}")

    def cols_nest(self, body, rb):
        """Column reduction with several kept dims: serial, accumulators shaped like them."""
        kt = self.kt
        accs = {}
        kshape = ", ".join(f"n{Q}" for Q in self.inner)
        for r in kt.reds:
            op, ad = self.red_info(r)
            a = self.fresh("acc")
            body.append(f"    {a} = _full(({kshape},), {np_name(ad)}, "
                        f"{self.init_expr(r)})")
            accs[r] = a
        fulls = [v for v in kt.outputs if v.shape == kt.domain]
        self._cols_inner(rb, "        ", kt.reds, fulls, accs, slice_mode=False)
        body.extend(rb)
        self._cols_finish(accs)
