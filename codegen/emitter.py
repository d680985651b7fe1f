"""Emitter: Python/Numba source for the kernels of a Schedule, one self-contained module.

A kernel is emitted as a function over C-contiguous arrays (inputs and outputs, reshaped by
the executor to the kernel's *collapsed* domain: adjacent dims that every access treats
alike are merged), runtime constants (`full` values, so a new value does not need new code)
and runtime sizes (so a new batch size does not need new machine code). Index arithmetic
replaces broadcast/transpose/slice/rev/unit reshape. Loops take 1-D row views (`xr = x[i]`)
so the innermost loop is unit-stride and vectorises; blocks of a `prange` index through a
slice of the block. Float32 sums accumulate in float32 within blocks of 4096 and in float64
across blocks. Row max/min use LLVM's maxnum/minnum (vectorisable) and re-check for NaN.
"""
import hashlib
import math

import numpy as np

from aotgrad.codegen import approx
from aotgrad.codegen.scheduler import (Kernel, gather_index, gather_row_index, identity,
                                       view_index)
from aotgrad.codegen.templates import TEMPLATES, peephole
from aotgrad.ir import dtypes as dt

PAR_MIN = 1 << 17        # elements of work before a kernel uses prange
BLOCK = 4096             # elements per prange block and per float32 partial sum
COL_CHUNK = 512          # kept-dim chunk of a column reduction run in parallel
ROW_BLOCK = 64           # rows per partial of a column sum fused into a row kernel

_NP = {dt.float32: "np.float32", dt.float64: "np.float64", dt.int32: "np.int32",
       dt.int64: "np.int64", dt.bool_: "np.bool_"}
_LITERALS = (0.0, 1.0, -1.0, 2.0, 0.5)
# relative cost of a prim in a loop (default 1) for deciding what a row kernel keeps in scratch
_EXPENSIVE = {"exp": 20, "log": 20, "tanh": 24, "logistic": 22, "erf": 24, "div": 4,
              "sqrt": 4, "rsqrt": 5, "pow": 20, "log1p": 30, "expm1": 30, "sin": 30, "cos": 30,
              "atan2": 40}


def np_name(d):
    return _NP[d]


def const_expr(value, d):
    if d is dt.bool_:
        return "True" if value else "False"
    if d.is_floating_point:
        v = float(value)
        s = "32" if d is dt.float32 else "64"
        if v != v:
            return f"NAN{s}"
        if v in (math.inf, -math.inf):
            return f"INF{s}" if v > 0 else f"(-INF{s})"
        return f"np.float{s}({v!r})"
    return f"{np_name(d)}({int(value)})"


class ArgSpec:
    """One kernel argument: kind in (in, out, const, size)."""
    __slots__ = ("kind", "var", "shape", "value", "dtype")

    def __init__(self, kind, var=None, shape=None, value=None, dtype=None):
        self.kind, self.var, self.shape, self.value, self.dtype = kind, var, shape, value, dtype


class KernelSpec:
    def __init__(self, kernel, body, args, parallel):
        self.kernel, self.body, self.args, self.parallel = kernel, body, args, parallel
        self.name = None
        self.checks = []   # the kernel returns nonzero when one of these index checks failed


class _Scope:
    def __init__(self, lines, indent):
        self.lines, self.indent, self.memo = lines, indent, {}

    def add(self, line):
        self.lines.append(self.indent + line)


class KernelEmitter:
    def __init__(self, scheduler, kt, helpers):
        self.S, self.kt, self.helpers = scheduler, kt, helpers
        self.args = []            # ArgSpec
        self.argnames = {}        # key -> name
        self.tmp = 0
        self.consts = {}
        self.checks = []          # messages of index checks (error flag `gerr`)

    # -- small utilities --------------------------------------------------------------------
    def fresh(self, p="t"):
        self.tmp += 1
        return f"{p}{self.tmp}"

    def need(self, h):
        self.helpers.add(h)

    def const(self, value, d):
        return const_expr(value, d)

    def const_of(self, var):
        n = self.S.prod.get(var)
        if n is not None and n.prim.name == "full":
            return n.params["value"]
        if n is not None and n.prim.name == "broadcast_in_dim":
            return self.const_of(n.inputs[0])
        return None

    def inner_producer(self, var):
        """The node computing var inside this kernel (None when var is read from memory)."""
        return None if self._is_leaf(var) else self.S.prod.get(var)

    def const_arg(self, value, d):
        v = float(value) if d.is_floating_point else int(value)
        if d is dt.bool_ or v in _LITERALS or (d.is_floating_point and
                                                 (v != v or v in (math.inf, -math.inf))):
            return const_expr(value, d)
        key = ("const", v, d)
        if key not in self.argnames:
            name = f"c{len(self.consts)}"
            self.consts[key] = name
            self.argnames[key] = name
            self.args.append(ArgSpec("const", value=v, dtype=d))
        return self.argnames[key]

    def arg(self, kind, var, shape):
        key = (kind, var, tuple(shape))
        if key not in self.argnames:
            name = f"{'a' if kind == 'in' else 'o'}{sum(1 for k in self.argnames if k[0] == kind)}"
            self.argnames[key] = name
            self.args.append(ArgSpec(kind, var=var, shape=tuple(shape)))
        return self.argnames[key]

    # -- dim collapsing -----------------------------------------------------------------------
    def collapse(self):
        kt = self.kt
        D = list(kt.domain) or [1]
        nd = len(kt.domain)
        if kt.ktype == "rows":
            part = [0 if p < nd - kt.k else 1 for p in range(nd)]
        elif kt.ktype == "cols":
            part = [0 if p < kt.k else 1 for p in range(nd)]
        else:
            part = [0] * nd
        if nd == 0:
            part = [0]
        blocked = set()
        refs = []   # (key, shape, idx)
        red_outs = {r.outputs[0] for r in kt.reds}
        rowsh = kt.rowshape
        self.iota_refs = []

        def visit(kind, v, ix):
            if kind == "leaf":
                shape = rowsh if v in red_outs else v.shape
                refs.append(((v, ix), list(shape), list(ix)))
            elif self.S.prod[v].prim.name == "iota" or self.S.kind[self.S.prod[v]] == \
                    "rowscatter":
                for t in ix:
                    if t[0] == "d":
                        blocked.add(t[1])
        for v, ix in self.S._roots(kt):
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
        if any(t[0] == "g" for _, _, ix in refs for t in ix):
            blocked.update(range(len(D)))     # a gathered index: keep dims as they are
        groups = [[p] for p in range(len(D))]
        cur = list(D)
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
                    qa = [q for q, t in enumerate(ix) if t[0] == "d" and t[1] == P]
                    qb = [q for q, t in enumerate(ix) if t[0] == "d" and t[1] == P + 1]
                    if not qa and not qb:
                        continue
                    if len(qa) != 1 or len(qb) != 1 or qb[0] != qa[0] + 1 or \
                            ix[qa[0]][2:] != (1, 0) or ix[qb[0]][2:] != (1, 0) or \
                            shape[qb[0]] != cur[P + 1] or shape[qa[0]] != cur[P]:
                        ok = False
                        break
                if not ok:
                    continue
                for i, (key, shape, ix) in enumerate(refs):
                    qa = [q for q, t in enumerate(ix) if t[0] == "d" and t[1] == P]
                    if qa:
                        q = qa[0]
                        shape = shape[:q] + [shape[q] * shape[q + 1]] + shape[q + 2:]
                        ix = ix[:q] + [("d", P, 1, 0)] + ix[q + 2:]
                    ix = [("d", t[1] - 1, t[2], t[3]) if t[0] == "d" and t[1] > P + 1 else t
                          for t in ix]
                    refs[i] = (key, shape, ix)
                groups[P] = groups[P] + groups[P + 1]
                del groups[P + 1]
                cur[P] = cur[P] * cur[P + 1]
                del cur[P + 1]
                changed = True
                break
        self.cdom = cur
        self.cpart = [part[g[0]] for g in groups]
        self.dimmap = {p: P for P, g in enumerate(groups) for p in g}
        self.refmap = {key: (shape, ix) for key, shape, ix in refs}

    def _stop_for(self, root):
        """Leaf test for a walk from `root`: a value this kernel writes is expanded at its own
        root; anything else (e.g. a reduction input produced by another step) is a leaf."""
        if root in self.kt.outputs:
            return lambda u: u is not root and self._is_leaf(u)
        return self._is_leaf

    def _is_leaf(self, u):
        kt = self.kt
        if u in {r.outputs[0] for r in kt.reds}:
            return True
        o = self.S.owner.get(u)
        return u in self.S.g.inputs or (o is not None and o is not kt)

    # -- expression emission ------------------------------------------------------------------
    def level(self, cix):
        lv = 0
        for t in cix:
            if t[0] == "d":
                lv = max(lv, 2 if t[1] in self.inner else 1)
            elif t[0] == "g":
                lv = max(lv, 1)
        return lv

    def term(self, t):
        if t[0] == "c":
            return str(t[1])
        if t[0] == "g":
            return self.gather_idx(t)
        _, P, s, o = t
        base = self.loopvar[P]
        e = base if s == 1 else f"{s} * {base}"
        return e if o == 0 else f"({e} + {o})"

    def scope_for(self, lv):
        if lv == 2:
            return self.inner_scope
        if lv == 1 and self.row_scope is not None:
            return self.row_scope
        return self.top_scope

    def access(self, kind, var, shape, cix):
        """Expression reading/writing var (viewed with collapsed shape) at collapsed index."""
        name = self.arg(kind, var, shape if shape else [1])
        if not cix:
            return f"{name}[0]"
        lv = self.level(cix)
        last = cix[-1]
        if lv == 2 and last[0] == "d" and last[1] == self.innermost and last[2:] == (1, 0) and \
                not any(t[0] == "d" and t[1] == self.innermost for t in cix[:-1]):
            key = ("view", name, tuple(cix[:-1]))
            vs = self.view_scope
            if key not in vs.memo:
                vn = self.fresh("v")
                pre = ", ".join(self.term(t) for t in cix[:-1])
                if self.slice_mode:
                    pre = (pre + ", " if pre else "") + "lo:hi"
                    vs.add(f"{vn} = {name}[{pre}]")
                elif pre:
                    vs.add(f"{vn} = {name}[{pre}]")
                else:
                    vn = name
                vs.memo[key] = vn
            return f"{vs.memo[key]}[{self.jvar}]"
        return f"{name}[{', '.join(self.term(t) for t in cix)}]"

    def val(self, v, ix):
        """Variable name holding value v at (original-domain) index ix."""
        kt = self.kt
        key = (v, ix)
        red_outs = {r.outputs[0]: r for r in kt.reds}
        if v in red_outs:
            return self.red_vals[v]
        if self._is_leaf(v) or self.S.prod.get(v) is None:
            shape, cix = self.refmap[key]
            lv = self.level(cix)
            sc = self.scope_for(lv)
            if key in sc.memo:
                return sc.memo[key]
            name = self.fresh()
            sc.add(f"{name} = {self.access('in', v, shape, cix)}")
            sc.memo[key] = name
            return name
        if getattr(self, "pass_active", False) and v in self.cache_buf and \
                ix == identity(len(kt.domain)) and \
                self.level([("d", self.dimmap[t[1]]) + t[2:] for t in ix]) == 2:
            memo = self.inner_scope.memo
            if key not in memo:
                memo[key] = self.cached_val(v, ix, lambda: self._val_pw(v, ix, key))
            return memo[key]
        return self._val_pw(v, ix, key)

    def _val_pw(self, v, ix, key):
        n = self.S.prod[v]
        k = self.S.kind[n]
        if k == "view":
            return self.val(n.inputs[0], view_index(n, ix))
        if k == "pwcopy":
            return self.val(n.inputs[0], ix)
        if k == "rowgather":
            return self.val(n.inputs[0], gather_index(n, ix))
        # pointwise: its level is that of its index
        cix = [("d", self.dimmap[t[1]]) + t[2:] if t[0] == "d" else t for t in ix] \
            if all(t[0] == "c" or t[1] in self.dimmap for t in ix) else ix
        lv = max([self.level(cix)] + [0])
        sc = self.scope_for(lv)
        if key in sc.memo:
            return sc.memo[key]
        if lv == 0 and key in self.scope_for(1).memo:
            return self.scope_for(1).memo[key]
        if n.prim.name == "iota":
            t = ix[n.params["dim"]]
            t = ("c", t[1]) if t[0] == "c" else ("d", self.dimmap[t[1]], t[2], t[3])
            expr = f"{np_name(n.params['dtype'])}({self.term(t)})"
            args = []
        elif k == "rowscatter":   # x[r, j] + (src[r] if j == idx[r] else 0)
            rix = gather_row_index(n, ix)
            x, src = self.val(n.inputs[0], ix), self.val(n.inputs[2], rix)
            gi = self.term(gather_index(n, ix)[-1])
            jt = cix[-1]
            zero = const_expr(0, n.outputs[0].dtype)
            expr = f"({x} + ({src} if {self.term(jt)} == {gi} else {zero}))"
            args = [x, src, gi]
        else:
            args = []

            def value_of(u):
                args.append(self.val(u, ix))
                return args[-1]
            expr = peephole(self, n, value_of)
            if expr is None:
                args = [self.val(u, ix) for u in n.inputs]
                expr = TEMPLATES[n.prim.name](self, n, args)
        if n.prim.name == "full":
            sc.memo[key] = expr
            return expr
        # a value without loop indices that depends on a reduction result is computed where
        # the result exists (the row scope), not hoisted above the loops
        rowdep = lv == 0 and any(a in self.rowdep for a in args)
        if rowdep:
            sc = self.scope_for(1)
        name = self.fresh()
        sc.add(f"{name} = {expr}")
        sc.memo[key] = name
        if rowdep:
            self.rowdep.add(name)
        return name

    def gather_idx(self, t):
        """Name of a checked per-row gather/scatter index (negative values wrap, like numpy);
        an out-of-range index sets the kernel's error flag (checked by the executor) and
        reads element 0 instead."""
        _, var, ix2, size = t
        cix2 = [("d", self.dimmap[u[1]]) + u[2:] if u[0] == "d" else u for u in ix2]
        sc = self.scope_for(self.level(cix2))
        key = ("gidx", var, ix2)
        if key in sc.memo:
            return sc.memo[key]
        v = self.val(var, ix2)
        gi, ok = self.fresh("gi"), self.fresh("gok")
        sc.add(f"{gi} = np.int64({v})")
        sc.add(f"{gi} = {gi} + {size} if {gi} < 0 else {gi}")
        sc.add(f"{ok} = {gi} >= 0 and {gi} < {size}")
        sc.add(f"if not {ok}:")
        sc.add(f"    gerr[0] = 1")
        sc.add(f"    {gi} = 0")
        self.checks.append(f"index out of bounds for dimension {len(ix2) - 1} with size {size}")
        sc.memo[key] = gi
        return gi

    # -- reductions ---------------------------------------------------------------------------
    def red_info(self, r):
        name, d = r.prim.name, r.inputs[0].dtype
        if name == "reduce_sum":
            acc = dt.float64 if d.is_floating_point else dt.int64
            return "sum", acc
        if name == "reduce_prod":
            return "prod", (dt.float64 if d.is_floating_point else dt.int64)
        if name in ("reduce_max", "reduce_min"):
            return name[7:], (d if d.is_floating_point else dt.int64)
        return name, d  # argmax / argmin

    def init_expr(self, r):
        op, acc = self.red_info(r)
        if op == "sum":
            return const_expr(0, acc)
        if op == "prod":
            return const_expr(1, acc)
        if op in ("max", "min", "argmax", "argmin"):
            big = op in ("min", "argmin")
            if acc.is_floating_point:
                return const_expr(math.inf if big else -math.inf, acc)
            info = np.iinfo(np.int64)
            return const_expr(info.max if big else info.min, dt.int64)
        raise AssertionError(op)

    def combine(self, r, acc, v):
        """Statement updating accumulator `acc` with value `v` (within one row)."""
        op, ad = self.red_info(r)
        d = r.inputs[0].dtype
        if op == "sum":
            if d is dt.bool_ or not d.is_floating_point:
                return f"{acc} += np.int64({v})"
            return f"{acc} += {v}"
        if op == "prod":
            return f"{acc} *= {v}"
        if op in ("max", "min"):
            if d.is_floating_point:
                self.need("minmax")
                return f"{acc} = _{op}num({acc}, {v})"
            return f"{acc} = {op}({acc}, np.int64({v}))"
        raise AssertionError(op)

    # -- kernel layouts -------------------------------------------------------------------------
    def build(self):
        kt = self.kt
        self.collapse()
        m = len(self.cdom)
        work = math.prod(kt.domain) if kt.domain else 1
        self.parallel = work >= PAR_MIN
        sizes = [f"n{P}" for P in range(m)]
        for P in range(m):
            self.args.append(ArgSpec("size", value=self.cdom[P]))
        self.loopvar = {}
        has_arg = any(r.prim.name in ("argmax", "argmin") for r in kt.reds)
        if kt.ktype == "elementwise":
            outer = list(range(m - 1))
            inner = [m - 1]
        else:
            outer = [P for P in range(m) if self.cpart[P] == 0]
            inner = [P for P in range(m) if self.cpart[P] == 1]
        if kt.ktype == "rows" and not inner:
            inner = []
        self.outer, self.inner = outer, inner
        self.innermost = inner[-1] if inner else None
        body = []
        self.top_scope = _Scope(body, "    ")
        self.row_scope = None
        self.red_vals = {}
        self.rowdep = set()        # names whose value is only known after a reduction
        if kt.ktype == "elementwise" and m == 1 or \
                kt.ktype == "rows" and not outer and len(inner) == 1 and not has_arg:
            self.blocked(body)
        elif kt.ktype == "rows" and not outer and len(inner) > 1 and not has_arg and \
                self.parallel:
            self.full_nest(body)
        elif kt.ktype == "cols" and len(inner) == 1:
            self.cols_chunked(body)
        else:
            self.nest(body)
        argnames = [self.argnames[self._argkey(a)] if a.kind != "size" else None
                    for a in self.args]
        names, si = [], 0
        for a, nm in zip(self.args, argnames):
            if a.kind == "size":
                names.append(f"n{si}")
                si += 1
            else:
                names.append(nm)
        sig = ", ".join(names)
        text = [f"def KERNEL({sig}):", "    _wide()"]
        if self.checks:
            text.append("    gerr = np.zeros(1, np.int64)")
        for line in body:   # prange bodies become functions of their own: widen them too
            text.append(line)
            if "in prange(" in line:
                text.append(" " * (len(line) - len(line.lstrip()) + 4) + "_wide()")
        text.append("    return gerr[0]" if self.checks else "    return 0")
        spec = KernelSpec(kt, "\n".join(text) + "\n", self.args, self.parallel)
        spec.checks = sorted(set(self.checks))
        return spec

    def _argkey(self, a):
        if a.kind == "const":
            return ("const", a.value, a.dtype)
        return (a.kind, a.var, tuple(a.shape))

    def rng(self, n):
        return f"prange({n})" if self.parallel else f"range({n})"

    def decode(self, scope, outer):
        """Row index r -> loop vars of the outer dims."""
        if not outer:
            return
        if len(outer) == 1:
            self.loopvar[outer[0]] = "r"
            return
        rest = "r"
        for i, P in enumerate(reversed(outer)):
            nm = f"i{P}"
            self.loopvar[P] = nm
            if i == len(outer) - 1:
                scope.add(f"{nm} = {rest}")
            else:
                scope.add(f"{nm} = {rest} % n{P}")
                scope.add(f"q{P} = {rest} // n{P}")
                rest = f"q{P}"

    def out_targets(self, fulls):
        kt = self.kt
        nd = len(kt.domain)
        res = []
        for v in fulls:
            shape, cix = self.refmap[("out", v)]
            res.append((v, identity(nd), shape, cix))
        return res

    def phases(self):
        """Assign reductions and full-domain outputs to column passes by dependency level."""
        kt = self.kt
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

        def lvl(r):
            if r not in level:
                level[r] = 1 + max([lvl(d) for d in deps[r]] + [-1])
            return level[r]
        for r in kt.reds:
            lvl(r)
        fulls = [v for v in kt.outputs if v.shape == kt.domain and v not in red_outs]
        out_lvl = {}
        for v in fulls:
            ds = red_deps(v, identity(nd))
            out_lvl[v] = 1 + max([level[d] for d in ds] + [-1])
        nph = 1 + max(list(level.values()) + list(out_lvl.values()) + [0])
        return [([r for r in kt.reds if level[r] == p], [v for v in fulls if out_lvl[v] == p])
                for p in range(nph)]

    def inner_loop(self, lines, indent, reds, fulls, accs, slice_mode=False, jvar="j",
                   creds=None):
        """Emit the innermost loop(s) of one pass into `lines`; returns nothing.

        accs: reduction -> accumulator variable (already initialised by the caller).
        creds: column sum -> this thread's row of column partials (one inner dim only)."""
        kt = self.kt
        nd = len(kt.domain)
        self.slice_mode, self.jvar = slice_mode, jvar
        loop_lines = []
        ind = indent
        for P in self.inner[:-1]:
            self.loopvar[P] = f"i{P}"
            loop_lines.append(f"{ind}for i{P} in range(n{P}):")
            ind += "    "
        P = self.innermost
        float_sums = [r for r in reds if self.red_info(r)[0] == "sum"
                      and r.inputs[0].dtype is dt.float32 and not slice_mode]
        # float32 sums run in blocks of BLOCK; each block indexes through slices of its rows
        # (`v = x[r, lo:hi]; v[j]`): `range(lo, hi)` over the row did not vectorise (2.7x)
        self.slice_mode = slice_mode or bool(float_sums)
        self.loopvar[P] = f"(lo + {jvar})" if self.slice_mode else jvar
        pre = []
        self.view_scope = _Scope(pre, ind + "    " if float_sums else ind)
        body = []
        bind = ind + "    "
        if float_sums:
            bind += "    "
        self.inner_scope = _Scope(body, bind)
        self.pass_active = bool(getattr(self, "cache_buf", None))
        blocks = {}
        for r in reds:
            v = self.val(r.inputs[0], identity(nd))
            a = accs[r]
            if r in float_sums:
                blocks[r] = self.fresh("s")
                a = blocks[r]
            if r.prim.name in ("argmax", "argmin"):
                cmp = ">" if r.prim.name == "argmax" else "<"
                ai = accs[r] + "_i"
                idxe = jvar if not slice_mode else f"(lo + {jvar})"
                self.inner_scope.add(
                    f"if ({v} {cmp} {a} or ({v} != {v} and {a} == {a})) and {a} == {a}:")
                self.inner_scope.add(f"    {a} = {v}")
                self.inner_scope.add(f"    {ai} = {idxe}")
            else:
                self.inner_scope.add(self.combine(r, a, v))
        for r, crow in (creds or {}).items():
            v = self.val(r.inputs[0], identity(nd))
            key = ("crow", crow)
            if key not in self.view_scope.memo:
                cv = self.fresh("cv")
                self.view_scope.add(f"{cv} = {crow}[lo:hi]" if self.slice_mode
                                    else f"{cv} = {crow}")
                self.view_scope.memo[key] = cv
            self.inner_scope.add(f"{self.view_scope.memo[key]}[{jvar}] += {v}")
        for v, ix, shape, cix in self.out_targets(fulls):
            e = self.val(v, ix) if self.S.prod.get(v) is not None and not self._is_leaf(v) \
                else self.val(v, ix)
            self.inner_scope.add(f"{self.access('out', v, shape, cix)} = {e}")
        if self.pass_active:
            self.cache_ready |= self.cache_pending
            self.cache_pending = set()
        self.pass_active = False
        lines.extend(loop_lines)
        n = f"n{P}"
        if slice_mode:
            lines.extend(pre)
            lines.append(f"{ind}for {jvar} in range(hi - lo):")
            lines.extend(body)
        elif float_sums:
            lines.append(f"{ind}for lo in range(0, {n}, {BLOCK}):")
            lines.append(f"{ind}    hi = min(lo + {BLOCK}, {n})")
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

    def nan_fix(self, scope, r, accname, slice_mode=False):
        """max/min via maxnum ignore NaN: scan for one if the row had a NaN or inf."""
        op, _ = self.red_info(r)
        if op not in ("max", "min") or not r.inputs[0].dtype.is_floating_point:
            return
        f = "NAN32" if r.inputs[0].dtype is dt.float32 else "NAN64"
        lines = []
        # a separate pass: a NaN detector summed in the max's own loop stops LLVM from
        # vectorising it (measured 10x slower)
        chk = self.fresh("nn")
        scope.add(f"{chk} = {const_expr(0, r.inputs[0].dtype)}")
        saved = (self.inner_scope, self.view_scope)
        self.inner_loop_check(scope, r, chk, f)
        self.inner_scope, self.view_scope = saved
        return lines

    def inner_loop_check(self, scope, r, chk, nanc):
        nd = len(self.kt.domain)
        ind = scope.indent
        lines_loop = []
        for P in self.inner[:-1]:
            lines_loop.append(f"{ind}for i{P} in range(n{P}):")
            ind += "    "
        pre = []
        self.view_scope = _Scope(pre, ind)
        body = []
        self.inner_scope = _Scope(body, ind + "    ")
        v = self.val(r.inputs[0], identity(nd))
        self.inner_scope.add(f"{chk} += {v} * {const_expr(0, r.inputs[0].dtype)}")
        scope.lines.extend(lines_loop + pre)
        scope.lines.append(f"{ind}for {self.jvar} in range(n{self.innermost}):")
        scope.lines.extend(body)
        acc = self.red_vals_acc[r]
        scope.add(f"if {chk} != {chk}:")
        # exact rescan (rare path: the row holds a NaN or an infinity)
        ind2 = scope.indent + "    "
        sub = _Scope(scope.lines, ind2)
        lines_loop = []
        ind = ind2
        for P in self.inner[:-1]:
            lines_loop.append(f"{ind}for i{P} in range(n{P}):")
            ind += "    "
        pre = []
        self.view_scope = _Scope(pre, ind)
        body = []
        self.inner_scope = _Scope(body, ind + "    ")
        v = self.val(r.inputs[0], identity(nd))
        self.inner_scope.add(f"if {v} != {v}:")
        self.inner_scope.add(f"    {acc} = {nanc}")
        sub.lines.extend(lines_loop + pre)
        sub.lines.append(f"{ind}for {self.jvar} in range(n{self.innermost}):")
        sub.lines.extend(body)

    def finish_red(self, scope, r, acc):
        op, ad = self.red_info(r)
        od = r.outputs[0].dtype
        nm = self.fresh("r")
        if od is dt.bool_:
            scope.add(f"{nm} = {acc} != 0")
        elif op in ("argmax", "argmin"):
            scope.add(f"{nm} = np.int64({acc}_i)")
        else:
            scope.add(f"{nm} = {np_name(od)}({acc})")
        self.red_vals[r.outputs[0]] = nm
        self.rowdep.add(nm)

    def init_acc(self, scope, r):
        acc = self.fresh("acc")
        scope.add(f"{acc} = {self.init_expr(r)}")
        if r.prim.name in ("argmax", "argmin"):
            scope.add(f"{acc}_i = 0")
        self.red_vals_acc[r] = acc
        return acc

    def write_row_outputs(self, scope):
        kt = self.kt
        cols = {r.outputs[0] for r in kt.col_reds}
        for v in kt.row_outputs if kt.ktype != "elementwise" else []:
            if kt.ktype == "cols" and v in {r.outputs[0] for r in kt.reds} or v in cols:
                continue
            shape, cix = self.refmap[("out", v)]
            e = self.val(v, self.S.out_index(kt, v))
            scope.add(f"{self.access('out', v, shape, cix)} = {e}")

    def plan_row_cache(self, phases):
        """Values several column passes of a row kernel need, that do not depend on the
        kernel's own reductions and are expensive (a transcendental in their expression,
        e.g. the GELU chain in a layer-norm backward): the first pass that computes one
        stores it in a row-sized scratch buffer (in L1/L2), later passes load it. Only the
        values later passes use directly (the cut) are kept, not their operands."""
        self.cache_buf, self.cache_ready, self.cache_pending = {}, set(), set()
        self.pass_active = False
        kt = self.kt
        active = [(r, f) for r, f in phases if r or f]
        if kt.ktype != "rows" or len(self.inner) != 1 or len(active) < 2:
            return
        nd = len(kt.domain)
        idn = identity(nd)
        red_outs = {r.outputs[0] for r in kt.reds}
        S = self.S
        dep, cost = {}, {}

        def reddep(v):
            if v not in dep:
                n = S.prod.get(v)
                dep[v] = v in red_outs or (n is not None and not self._is_leaf(v) and
                                           any(reddep(u) for u in n.inputs))
            return dep[v]

        def subtree(v, acc):
            n = S.prod.get(v)
            if n is None or self._is_leaf(v) or n in acc:
                return acc
            acc.add(n)
            for u in n.inputs:
                subtree(u, acc)
            return acc

        def expense(v):
            if v not in cost:
                cost[v] = sum(_EXPENSIVE.get(n.prim.name, 1) for n in subtree(v, set()))
            return cost[v]
        uses = []
        for reds, fulls in active:
            seen = set()

            def visit(kind, v, ix, seen=seen):
                if kind == "node" and ix == idn and S.kind[S.prod[v]] == "pw":
                    seen.add(v)
            for root in [r.inputs[0] for r in reds] + list(fulls):
                S.walk(kt, root, idn, visit, self._stop_for(root))
            uses.append(seen)
        first = {}
        for p, u in enumerate(uses):
            for v in u:
                first.setdefault(v, p)
        cands = {v for p, u in enumerate(uses) for v in u
                 if first[v] < p and not reddep(v) and expense(v) >= 12}
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
            self.cache_buf[v] = self.fresh("scr")

    def cached_val(self, v, ix, compute):
        """Load v from its row scratch buffer, or compute it and store it there."""
        vs = self.view_scope
        key = ("scratch", v)
        if key not in vs.memo:
            vn = self.fresh("v")
            buf = self.cache_buf[v]
            vs.add(f"{vn} = {buf}[lo:hi]" if self.slice_mode else f"{vn} = {buf}")
            vs.memo[key] = vn
        view = vs.memo[key]
        if v in self.cache_ready:
            name = self.fresh()
            self.inner_scope.add(f"{name} = {view}[{self.jvar}]")
            return name
        name = compute()
        self.inner_scope.add(f"{view}[{self.jvar}] = {name}")
        self.cache_pending.add(v)
        return name

    def nest(self, body):
        """Rows (or single-row / elementwise n-d) kernels: rows in (p)range, passes inside."""
        kt = self.kt
        self.red_vals_acc = {}
        outer = self.outer
        rows = " * ".join(f"n{P}" for P in outer) or "1"
        if kt.ktype == "cols":
            self.parallel = False
        cparts = {}
        if kt.col_reds and kt.ktype == "rows":
            # column sums riding along (2-d domain): rows run in blocks of ROW_BLOCK, each
            # block with a float64 partial per column, combined after the loop
            body.append(f"    nrb = ({rows} + {ROW_BLOCK - 1}) // {ROW_BLOCK}")
            rb = [f"    for rblk in {self.rng('nrb')}:"]
            for r in kt.col_reds:
                cp = self.fresh("cpart")
                # float32 partials over ROW_BLOCK rows (a float64 read-modify-write per
                # element cost 10 ms on W3), blocks combined in float64 afterwards
                body.append(f"    {cp} = np.zeros((nrb, n{self.inner[-1]}), "
                            f"{np_name(r.inputs[0].dtype)})")
                cparts[r] = (cp, self.fresh("crow"))
                rb.append(f"        {cparts[r][1]} = {cp}[rblk]")
            rb.append(f"        for r in range(rblk * {ROW_BLOCK}, "
                      f"min(rblk * {ROW_BLOCK} + {ROW_BLOCK}, {rows})):")
            self.row_scope = _Scope(rb, "            ")
        else:
            rb = [f"    for r in {self.rng(rows)}:"]
            self.row_scope = _Scope(rb, "        ")
        self.decode(self.row_scope, outer)
        if kt.ktype == "cols":
            self.cols_nest(body, rb)
            return
        phases = self.phases()
        self.plan_row_cache(phases)
        for v, nm in self.cache_buf.items():
            self.row_scope.add(f"{nm} = np.empty(n{self.innermost}, {np_name(v.dtype)})")
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
        for r, (cp, _) in cparts.items():
            v = r.outputs[0]
            if v not in kt.outputs:
                continue
            shape, _ = self.refmap[("out", v)]
            name = self.arg("out", v, shape if shape else [1])
            of = self.fresh("of")
            self.top_scope.add(f"{of} = {name}.reshape({name}.size)")
            # explicit loops: an array method here would become a parallel region per q
            tot = self.fresh("ctot")
            self.top_scope.add(f"{tot} = np.zeros({of}.size, np.float64)")
            self.top_scope.add("for b in range(nrb):")
            self.top_scope.add(f"    for q in range({of}.size):")
            self.top_scope.add(f"        {tot}[q] += {cp}[b, q]")
            self.top_scope.add(f"for q in range({of}.size):")
            self.top_scope.add(f"    {of}[q] = {np_name(v.dtype)}({tot}[q])")

    def full_nest(self, body):
        """Reduction over every dim of an n-d domain that does not collapse to one dim (e.g.
        sum(f(x, bias))): prange over the first dim, one partial per index, then combined."""
        kt = self.kt
        self.red_vals_acc = {}
        P0 = self.inner[0]
        inner = self.inner
        self.inner = inner[1:]           # P0 becomes the (parallel) row loop
        self.loopvar[P0] = "r"
        for reds, fulls in self.phases():
            parts = {}
            for r in reds:
                parts[r] = self.fresh("part")
                body.append(f"    {parts[r]} = np.empty(n{P0}, {np_name(self.red_info(r)[1])})")
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
        kt = self.kt
        self.red_vals_acc = {}
        body.append(f"    nb = (n0 + {BLOCK - 1}) // {BLOCK}")
        for reds, fulls in self.phases():
            parts = {}
            for r in reds:
                op, ad = self.red_info(r)
                p = self.fresh("part")
                parts[r] = p
                body.append(f"    {p} = np.empty(nb, {np_name(ad)})")
            blk = [f"    for b in {self.rng('nb')}:",
                   f"        lo = b * {BLOCK}",
                   f"        hi = min(lo + {BLOCK}, n0)"]
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
                self.top_scope.add(f"for b in range(nb):")
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
            body.append(f"    {a} = np.full(n{K}, {self.init_expr(r)}, {np_name(ad)})")
            accs[r] = a
        rows = " * ".join(f"n{P}" for P in self.outer) or "1"
        body.append(f"    nc = (n{K} + {COL_CHUNK - 1}) // {COL_CHUNK}")
        cl = [f"    for cb in {self.rng('nc')}:",
              f"        lo = cb * {COL_CHUNK}",
              f"        hi = min(lo + {COL_CHUNK}, n{K})"]
        views = {}
        for r in kt.reds:
            views[r] = self.fresh("av")
            cl.append(f"        {views[r]} = {accs[r]}[lo:hi]")
        cl.append(f"        for r in range({rows}):")
        self.row_scope = _Scope(cl, "            ")
        self.decode(self.row_scope, self.outer)
        fulls = [v for v in kt.outputs if v.shape == kt.domain]
        self._cols_inner(cl, "            ", kt.reds, fulls, views, slice_mode=True)
        body.extend(cl)
        self._cols_finish(accs)

    def _cols_inner(self, body, indent, reds, fulls, views, slice_mode):
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
                self.inner_scope.add(f"{tgt} += {np_name(ad)}({v})")
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
            name = self.arg("out", v, shape if shape else [1])
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
            body.append(f"    {a} = np.full(({kshape},), {self.init_expr(r)}, "
                        f"{np_name(ad)})")
            accs[r] = a
        fulls = [v for v in kt.outputs if v.shape == kt.domain]
        self._cols_inner(rb, "        ", kt.reds, fulls, accs, slice_mode=False)
        body.extend(rb)
        self._cols_finish(accs)


def emit_kernel(scheduler, kt, helpers):
    return KernelEmitter(scheduler, kt, helpers).build()


def module_source(specs, helpers):
    """The module text: prelude, helpers, then each distinct kernel once (deduplicated)."""
    parts = [approx.PRELUDE, approx.helper_source(helpers)]
    by_body = {}
    for s in specs:
        h = hashlib.sha1(s.body.encode()).hexdigest()[:12]
        if h not in by_body:
            name = f"k_{h}"
            by_body[h] = name
            deco = "@_pjit" if s.parallel else "@_jit"
            parts.append(f"\n\n{deco}\n" + s.body.replace("def KERNEL(", f"def {name}(", 1))
        s.name = by_body[h]
    return "".join(parts)
