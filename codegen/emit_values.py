"""The values of a kernel: expressions for its nodes over the collapsed loop domain, the
index arithmetic of views, gathers and pads, and the collapse of the domain itself
(ValueEmitter, composed by emitter.KernelEmitter with the loop and reduction emitters over
one EmitState)."""
from aotgrad.codegen.emit_base import _EXPENSIVE, _NARROW_INTS, const_expr, np_name
from aotgrad.codegen.index import (Const, Dim, Gathered, gather_index, gather_row_index,
                                   identity, pad_index, view_index)
from aotgrad.codegen.node_kinds import NodeKind
from aotgrad.codegen.steps import KernelType
from aotgrad.codegen.templates import TEMPLATES, peephole
from aotgrad.ir import prims
from aotgrad.ir.symbolic import SymInt


class ValueEmitter:
    """Values of one kernel: dim collapsing, index arithmetic and the expressions of the
    values at an index, written into the scopes of the shared EmitState. It is also the
    context TEMPLATES and `peephole` see (`kt`, `args`, `need`, `const`, `const_of`,
    `inner_producer`)."""

    def __init__(self, scheduler, st):
        self.S, self.st = scheduler, st

    # -- the template context -----------------------------------------------------------------
    @property
    def kt(self):
        return self.st.kt

    @property
    def args(self):
        return self.st.args

    def need(self, h):
        self.st.need(h)

    def const(self, value, d):
        return const_expr(value, d)

    def const_of(self, var):
        """The value of var when it is a `full` (possibly broadcast) of a number known
        here, else None (a symbolic size's value is known only per call)."""
        n = self.S.prod.get(var)
        while n is not None and n.prim is prims.broadcast_in_dim:
            n = self.S.prod.get(n.inputs[0])
        if n is None or n.prim is not prims.full or isinstance(n.params["value"], SymInt):
            return None
        return n.params["value"]

    def inner_producer(self, var):
        """The node computing var inside this kernel (None when var is read from memory)."""
        return None if self._is_leaf(var) else self.S.prod.get(var)

    # -- dim collapsing -----------------------------------------------------------------------
    def collapse(self):
        """The kernel's collapsed domain: `collapse_dims` over every access of the kernel
        (cdom, cpart, dimmap, refmap; nothing is stored)."""
        kt = self.st.kt
        D = list(kt.domain) or [1]
        nd = len(kt.domain)
        if kt.ktype == KernelType.ROWS:
            part = [0 if p < nd - kt.k else 1 for p in range(nd)]
        elif kt.ktype == KernelType.COLS:
            part = [0 if p < kt.k else 1 for p in range(nd)]
        else:
            part = [0] * nd
        if nd == 0:
            part = [0]
        blocked = set()
        refs = []   # (key, shape, idx)
        red_outs = {r.outputs[0] for r in kt.reds}
        rowsh = kt.rowshape

        def visit(kind, v, ix):
            if kind == "leaf":
                shape = rowsh if v in red_outs else v.shape
                refs.append(((v, ix), list(shape), list(ix)))
            elif self.S.prod[v].prim is prims.iota or self.S.kind[self.S.prod[v]] == \
                    NodeKind.ROW_SCATTER:
                for t in ix:
                    if isinstance(t, Dim):
                        blocked.add(t.dim)
            elif self.S.kind[self.S.prod[v]] == NodeKind.PAD:   # its checks read these loop vars
                inner = pad_index(self.S.prod[v], ix)
                for t, _ in inner[1] if inner is not None else ():
                    blocked.add(t.dim)
        for v, ix in self.S.roots(kt):
            if v in red_outs:
                continue
            self.S.walk(kt, v, ix, visit, self._stop_for(v))
        for v in kt.outputs:
            ix = self.S.out_index(kt, v)
            refs.append((("out", v), list(v.shape), list(ix)))
        for r in kt.reds:
            if r in kt.col_reds:
                continue
            refs.append((("red", r.outputs[0]), list(rowsh), list(identity(len(rowsh)))))
        if any(isinstance(t, Gathered) for _, _, ix in refs for t in ix):
            blocked.update(range(len(D)))     # a gathered index: keep dims as they are
        return collapse_dims(D, part, refs, blocked)

    def _stop_for(self, root):
        """Leaf test for a walk from `root`: a value this kernel writes is expanded at its own
        root; anything else (e.g. a reduction input produced by another step) is a leaf."""
        if root in self.st.kt.outputs:
            return lambda u: u is not root and self._is_leaf(u)
        return self._is_leaf

    def _is_leaf(self, u):
        kt = self.st.kt
        if u in self.st.red_outs:
            return True
        o = self.S.owner.get(u)
        return u in self.S.graph_inputs or (o is not None and o is not kt)

    # -- expression emission ------------------------------------------------------------------
    def collapsed(self, ix):
        """Index ix over the collapsed domain (each Dim term on its merged dim)."""
        return [t.on(self.st.dimmap[t.dim]) if isinstance(t, Dim) else t for t in ix]

    def level(self, cix):
        lv = 0
        for t in cix:
            if isinstance(t, Dim):
                lv = max(lv, 2 if t.dim in self.st.inner else 1)
            elif isinstance(t, Gathered):
                lv = max(lv, 1)
        return lv

    def term(self, t, site=None):
        if isinstance(t, Const):
            return str(t.value) if t.value == 0 else \
                self.st.args.index(t.value, site and site + (t,))
        if isinstance(t, Gathered):
            return self.gather_idx(t)
        base, s, o = self.st.loopvar[t.dim], t.scale, t.offset
        e = base if s == 1 else f"{s} * {base}"
        e = e if o == 0 else f"({e} + {self.st.args.index(o, site and site + (t,))})"
        return e if t.clamp is None else \
            f"_imin(_imax({e}, {self.lit(t.clamp[0])}), {self.lit(t.clamp[1])})"

    def lit(self, x):
        """Kernel text for a size or index bound: a literal when static, else a runtime
        argument (a kernel's source is the same for every value of the symbols)."""
        return self.st.args.index(x) if isinstance(x, SymInt) else str(x)

    def scope_for(self, lv):
        if lv == 2:
            return self.st.inner_scope
        if lv == 1 and self.st.row_scope is not None:
            return self.st.row_scope
        return self.st.top_scope

    def access(self, kind, var, shape, cix):
        """Expression reading/writing var (viewed with collapsed shape) at collapsed index."""
        name = self.st.args.array(kind, var, shape if shape else [1])
        if not cix:
            return f"{name}[0]"
        lv = self.level(cix)
        last = cix[-1]
        # a row read at the loop variable plus a fixed offset (a split of the last dim:
        # attention's q, k and v out of one product) is read through a view starting at
        # the offset, so the inner loop reads it at j itself: an index `j + n` is
        # wrapped around if negative, which keeps LLVM from vectorising the loop
        shifted_row = isinstance(last, Dim) and last.scale == 1 and last.clamp is None and \
            not isinstance(last.offset, SymInt) and last.offset > 0
        if lv == 2 and isinstance(last, Dim) and last.dim == self.st.innermost and \
                (last.plain or shifted_row) and \
                not any(isinstance(t, Dim) and t.dim == self.st.innermost for t in cix[:-1]):
            off = last.offset
            key = ("view", name, tuple(cix[:-1]), off)
            vs = self.st.view_scope
            if key not in vs.memo:
                vn = self.st.fresh("v")
                pre = ", ".join(self.term(t, (name, i)) for i, t in enumerate(cix[:-1]))
                o = self.st.args.index(off, (name, len(cix) - 1, last)) if off else None
                if self.st.slice_mode:
                    span = f"lo + {o}:hi + {o}" if off else "lo:hi"
                    pre = (pre + ", " if pre else "") + span
                    vs.add(f"{vn} = {name}[{pre}]")
                elif off:
                    vs.add(f"{vn} = {name}[{pre + ', ' if pre else ''}{o}:]")
                elif pre:
                    vs.add(f"{vn} = {name}[{pre}]")
                else:
                    vn = name
                vs.memo[key] = vn
            return f"{vs.memo[key]}[{self.st.jvar}]"
        return f"{name}[{', '.join(self.term(t, (name, i)) for i, t in enumerate(cix))}]"

    def val(self, v, ix):
        """Variable name holding value v at (original-domain) index ix. The expression is
        expanded from an explicit stack (`_drive`), not by recursion: it may be as deep as
        the program (an unrolled loop's state)."""
        return _drive(self._value(v, ix))

    def _value(self, v, ix):
        """The generator behind `val`: it yields a generator for each operand value it needs
        (the driver sends back that value's name) and returns v's name."""
        kt = self.st.kt
        key = (v, ix)
        if v in self.st.red_outs:
            return self.st.red_vals[v]
        if self._is_leaf(v) or self.S.prod.get(v) is None:
            shape, cix = self.st.refmap[key]
            lv = self.level(cix)
            return self.scope_for(lv).bind(key, self.st.fresh,
                                           lambda: self.access("in", v, shape, cix))
        if self.st.pass_active and v in self.st.cache_buf and \
                ix == identity(len(kt.domain)) and \
                self.level([t.on(self.st.dimmap[t.dim]) for t in ix]) == 2:
            memo = self.st.inner_scope.memo
            if key not in memo:
                memo[key] = yield from self._cached_value(v, ix, key)
            return memo[key]
        return (yield from self._value_pw(v, ix, key))

    def _value_pw(self, v, ix, key):
        n = self.S.prod[v]
        k = self.S.kind[n]
        if k == NodeKind.VIEW:
            return (yield self._value(n.inputs[0], view_index(n, ix)))
        if k == NodeKind.COPY:
            return (yield self._value(n.inputs[0], ix))
        if k == NodeKind.PAD:
            return (yield from self._value_pad(n, ix, key))
        if k == NodeKind.ROW_GATHER:
            return (yield self._value(n.inputs[0], gather_index(n, ix)))
        # pointwise: its level is that of its index
        cix = self.collapsed(ix) if not any(isinstance(t, Gathered) for t in ix) else ix
        lv = max([self.level(cix)] + [0])
        sc = self.scope_for(lv)
        if key in sc.memo:
            return sc.memo[key]
        if lv == 0 and key in self.scope_for(1).memo:
            return self.scope_for(1).memo[key]
        if n.prim is prims.iota:
            t = ix[n.params["dim"]]
            t = t if isinstance(t, Const) else Dim(self.st.dimmap[t.dim], t.scale, t.offset)
            expr = f"{np_name(n.params['dtype'])}({self.term(t)})"
            args = []
        elif k == NodeKind.ROW_SCATTER:   # x[r, j] + (src[r] if j == idx[r] else 0)
            rix = gather_row_index(n, ix)
            x = yield self._value(n.inputs[0], ix)
            src = yield self._value(n.inputs[2], rix)
            gi = self.term(gather_index(n, ix)[-1])
            jt = cix[-1]
            zero = const_expr(0, n.outputs[0].dtype)
            expr = f"({x} + ({src} if {self.term(jt)} == {gi} else {zero}))"
            args = [x, src, gi]
        else:
            rewrite = peephole(self, n)
            args = []
            if rewrite is not None:
                helper, operand = rewrite
                self.st.need(helper)
                args.append((yield self._value(operand, ix)))
                expr = f"{helper}({args[0]})"
            else:
                for u in n.inputs:
                    args.append((yield self._value(u, ix)))
                expr = TEMPLATES[n.prim](self, n, args)
                if n.outputs[0].dtype in _NARROW_INTS:  # Numba computes them in int64: wrap
                    expr = f"{np_name(n.outputs[0].dtype)}({expr})"
        if n.prim is prims.full:
            sc.memo[key] = expr
            return expr
        # a value without loop indices that depends on a reduction result is computed where
        # the result exists (the row scope), not hoisted above the loops
        rowdep = lv == 0 and any(a in self.st.rowdep for a in args)
        if rowdep:
            sc = self.scope_for(1)
        name = self.st.fresh()
        sc.add(f"{name} = {expr}")
        sc.memo[key] = name
        if rowdep:
            self.st.rowdep.add(name)
        return name

    def _value_pad(self, n, ix, key):
        """pad (no interior): the input at the shifted, clamped index where every padded
        dim's index is in range, else the fill value. The range check is computed at the
        level of its loop vars (outside the inner loop when the padded dims are outer)."""
        fill = const_expr(n.params.get("value", 0.0), n.outputs[0].dtype)
        inner = pad_index(n, ix)
        if inner is None:
            return fill
        iix, conds = inner
        xv = yield self._value(n.inputs[0], iix)
        if not conds:
            return xv
        cterms = [(t.on(self.st.dimmap[t.dim]), m) for t, m in conds]
        csc = self.scope_for(self.level([t for t, _ in cterms]))
        ok = csc.bind(("padok", tuple(cterms)), lambda: self.st.fresh("ok"),
                      lambda: " and ".join(f"(0 <= {self.term(t)} < {self.lit(m)})"
                                             for t, m in cterms))
        cix = self.collapsed(ix)
        return self.scope_for(self.level(cix)).bind(key, self.st.fresh,
                                                    lambda: f"{xv} if {ok} else {fill}")

    def gather_idx(self, t):
        """Name of a checked per-row gather/scatter index (negative values wrap, like numpy);
        an out-of-range index sets the kernel's error flag (checked by the executor) and
        reads element 0 instead."""
        var, ix2, size = t.var, t.index, t.size
        shown, size = size, self.lit(size)
        cix2 = self.collapsed(ix2)
        sc = self.scope_for(self.level(cix2))
        key = ("gidx", var, ix2)
        if key in sc.memo:
            return sc.memo[key]
        v = self.val(var, ix2)
        gi, ok = self.st.fresh("gi"), self.st.fresh("gok")
        sc.add(f"{gi} = np.int64({v})")
        sc.add(f"{gi} = {gi} + {size} if {gi} < 0 else {gi}")
        sc.add(f"{ok} = {gi} >= 0 and {gi} < {size}")
        sc.add(f"if not {ok}:")
        sc.add("    gerr[0] = 1")
        sc.add(f"    {gi} = 0")
        self.st.checks.append(f"index out of bounds for dimension {len(ix2) - 1} with size {shown}")
        sc.memo[key] = gi
        return gi

    def decode(self, scope, outer):
        """Row index r -> loop vars of the outer dims."""
        if not outer:
            return
        if len(outer) == 1:
            self.st.loopvar[outer[0]] = "r"
            return
        rest = "r"
        for i, P in enumerate(reversed(outer)):
            nm = f"i{P}"
            self.st.loopvar[P] = nm
            if i == len(outer) - 1:
                scope.add(f"{nm} = {rest}")
            else:
                scope.add(f"{nm} = {rest} % n{P}")
                scope.add(f"q{P} = {rest} // n{P}")
                rest = f"q{P}"

    def out_targets(self, fulls):
        kt = self.st.kt
        nd = len(kt.domain)
        res = []
        for v in fulls:
            shape, cix = self.st.refmap[("out", v)]
            res.append((v, identity(nd), shape, cix))
        return res

    def phases(self):
        """Assign reductions and full-domain outputs to column passes by dependency level."""
        kt = self.st.kt
        red_outs = {r.outputs[0]: r for r in kt.reds}
        deps = {}

        def red_deps(v, ix):
            found = set()

            def visit(kind, u, _):
                if kind == "leaf" and u in red_outs:
                    found.add(red_outs[u])
            self.S.walk(kt, v, ix, visit, self._stop_for(v))
            return found
        nd = len(kt.domain)
        for r in kt.reds:
            deps[r] = red_deps(r.inputs[0], identity(nd))
        level = {}
        for r0 in kt.reds:      # level = 1 + the deepest level it depends on (no recursion)
            stack = [r0]
            while stack:
                r = stack[-1]
                if r in level:
                    stack.pop()
                    continue
                todo = [d for d in deps[r] if d not in level]
                if todo:
                    stack.extend(todo)
                    continue
                level[r] = 1 + max([level[d] for d in deps[r]] + [-1])
                stack.pop()
        fulls = [v for v in kt.outputs if v.shape == kt.domain and v not in red_outs]
        out_lvl = {}
        for v in fulls:
            ds = red_deps(v, identity(nd))
            out_lvl[v] = 1 + max([level[d] for d in ds] + [-1])
        nph = 1 + max(list(level.values()) + list(out_lvl.values()) + [0])
        return [([r for r in kt.reds if level[r] == p], [v for v in fulls if out_lvl[v] == p])
                for p in range(nph)]

    def write_row_outputs(self, scope):
        kt = self.st.kt
        cols = {r.outputs[0] for r in kt.col_reds}
        for v in kt.row_outputs if kt.ktype != KernelType.ELEMENTWISE else []:
            if kt.ktype == KernelType.COLS and v in {r.outputs[0] for r in kt.reds} or v in cols:
                continue
            shape, cix = self.st.refmap[("out", v)]
            e = self.val(v, self.S.out_index(kt, v))
            scope.add(f"{self.access('out', v, shape, cix)} = {e}")

    def plan_row_cache(self, phases):
        """Values several column passes of a row kernel need, that depend on none of the
        kernel's own reductions, or only on reductions finished before the first pass that
        needs them, and are expensive (a transcendental in their expression: the GELU chain
        in a layer-norm backward; a softmax's exp(x - max), used by the pass that sums it
        and the pass that divides it): the first pass that computes one stores it in a
        row-sized scratch buffer (in L1/L2), later passes load it. Only the values later
        passes use directly (the cut) are kept, not their operands."""
        self.st.cache_buf, self.st.cache_ready, self.st.cache_pending = {}, set(), set()
        self.st.pass_active = False
        kt = self.st.kt
        active = [(r, f) for r, f in phases if r or f]
        if kt.ktype != KernelType.ROWS or len(self.st.inner) != 1 or len(active) < 2:
            return
        nd = len(kt.domain)
        idn = identity(nd)
        red_outs = {r.outputs[0] for r in kt.reds}
        # the pass after which each reduction's row value is known (a column sum riding
        # along is known only after every row: never within the row)
        known_after = {r.outputs[0]: p for p, (reds, _) in enumerate(active) for r in reds}
        never = len(active)
        S = self.S
        dep, cost = {}, {}

        def inside(v):       # v's node when the kernel computes v, else None
            n = S.prod.get(v)
            return None if n is None or self._is_leaf(v) else n

        def ready(v):
            """The first pass that can compute v: one after the last pass that finishes a
            reduction v depends on (0 for none; memoised in `dep`)."""
            stack = [v]
            while stack:
                u = stack[-1]
                if u in dep:
                    stack.pop()
                    continue
                n = inside(u)
                if u in red_outs or n is None:
                    dep[u] = known_after.get(u, never) + 1 if u in red_outs else 0
                    stack.pop()
                    continue
                todo = [w for w in n.inputs if w not in dep]
                if todo:
                    stack.extend(todo)
                    continue
                dep[u] = max((dep[w] for w in n.inputs), default=0)
                stack.pop()
            return dep[v]

        def expense(v):
            """Cost of v's expression down to the values read from memory and the rows'
            reduction results (known by then: a later pass does not redo them)."""
            if v not in cost:
                nodes, stack = set(), [v]
                while stack:
                    u = stack.pop()
                    n = None if u in red_outs else inside(u)
                    if n is not None and n not in nodes:
                        nodes.add(n)
                        stack.extend(n.inputs)
                cost[v] = sum(_EXPENSIVE.get(n.prim, 1) for n in nodes)
            return cost[v]
        uses = []
        for reds, fulls in active:
            seen = set()

            def visit(kind, v, ix, seen=seen):
                if kind == "node" and ix == idn and S.kind[S.prod[v]] == NodeKind.POINTWISE:
                    seen.add(v)
            for root in [r.inputs[0] for r in reds] + list(fulls):
                S.walk(kt, root, idn, visit, self._stop_for(root))
            uses.append(seen)
        first = {}
        for p, u in enumerate(uses):
            for v in u:
                first.setdefault(v, p)
        cands = {v for p, u in enumerate(uses) for v in u
                 if first[v] < p and ready(v) <= first[v] and expense(v) >= 12}
        keep = set()
        for p, u in enumerate(uses):
            for c in cands & u:
                if first[c] == p:
                    continue
                users = [n.outputs[0] for n in S.users.get(c, ()) if n.outputs[0] in u]
                roots = {r.inputs[0] for r in active[p][0]} | set(active[p][1])
                # kept where phase p needs it for something it computes anew
                if c in roots or any(w not in cands or first[w] == p for w in users):
                    keep.add(c)
        for v in sorted(keep, key=lambda v: v.name):
            self.st.cache_buf[v] = self.st.fresh("scr")

    def _cached_value(self, v, ix, key):
        """Load v from its row scratch buffer, or compute it and store it there (a
        generator, like `_value`)."""
        vs = self.st.view_scope
        sk = ("scratch", v)
        if sk not in vs.memo:
            vn = self.st.fresh("v")
            buf = self.st.cache_buf[v]
            vs.add(f"{vn} = {buf}[lo:hi]" if self.st.slice_mode else f"{vn} = {buf}")
            vs.memo[sk] = vn
        view = vs.memo[sk]
        if v in self.st.cache_ready:
            name = self.st.fresh()
            self.st.inner_scope.add(f"{name} = {view}[{self.st.jvar}]")
            return name
        name = yield from self._value_pw(v, ix, key)
        self.st.inner_scope.add(f"{view}[{self.st.jvar}] = {name}")
        self.st.cache_pending.add(v)
        return name


def collapse_dims(domain, part, refs, blocked):
    """Merge adjacent dims of a kernel's loop domain that every access treats alike.

    domain: the loop sizes; part: per dim, 0 for a row (outer) dim, 1 for a reduced one
    (dims of different parts never merge); refs: every access, (key, shape, index) with
    the accessed value's shape and its index terms over the domain; blocked: dims that
    stay apart (an iota or a pad check reads their loop variable). Two dims P, P + 1 merge
    when each access reads both as consecutive plain Dim terms over dims of the same sizes
    (or reads neither). Returns (collapsed sizes, their parts, domain dim -> collapsed dim,
    key -> (collapsed shape, collapsed index)). Pure: the arguments are not changed."""
    refs = [(key, list(shape), list(ix)) for key, shape, ix in refs]
    groups = [[p] for p in range(len(domain))]
    cur = list(domain)
    changed = True
    while changed:
        changed = False
        for P in range(len(cur) - 1):
            if part[groups[P][0]] != part[groups[P + 1][0]]:
                continue
            if any(p in blocked for p in groups[P] + groups[P + 1]):
                continue
            ok = True
            for _, shape, ix in refs:
                qa = [q for q, t in enumerate(ix) if isinstance(t, Dim) and t.dim == P]
                qb = [q for q, t in enumerate(ix) if isinstance(t, Dim) and t.dim == P + 1]
                if not qa and not qb:
                    continue
                if len(qa) != 1 or len(qb) != 1 or qb[0] != qa[0] + 1 or \
                        not ix[qa[0]].plain or not ix[qb[0]].plain or \
                        shape[qb[0]] != cur[P + 1] or shape[qa[0]] != cur[P]:
                    ok = False
                    break
            if not ok:
                continue
            for i, (key, shape, ix) in enumerate(refs):
                qa = [q for q, t in enumerate(ix) if isinstance(t, Dim) and t.dim == P]
                if qa:
                    q = qa[0]
                    shape = shape[:q] + [shape[q] * shape[q + 1]] + shape[q + 2:]
                    ix = ix[:q] + [Dim(P)] + ix[q + 2:]
                ix = [t.on(t.dim - 1) if isinstance(t, Dim) and t.dim > P + 1 else t
                      for t in ix]
                refs[i] = (key, shape, ix)
            groups[P] = groups[P] + groups[P + 1]
            del groups[P + 1]
            cur[P] = cur[P] * cur[P + 1]
            del cur[P + 1]
            changed = True
            break
    return (cur, [part[g[0]] for g in groups], {p: P for P, g in enumerate(groups) for p in g},
            {key: (shape, ix) for key, shape, ix in refs})


def _drive(gen):
    """Run a value generator of ValueEmitter (`_value`) to its result: each generator it
    yields is run first (on this explicit stack, not Python's) and its result sent back."""
    stack, sent = [gen], None
    while True:
        try:
            sub = stack[-1].send(sent)
        except StopIteration as done:
            stack.pop()
            if not stack:
                return done.value
            sent = done.value
            continue
        stack.append(sub)
        sent = None
