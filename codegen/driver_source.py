"""The straight-line driver of a Plan (codegen/executor.py): its Python source and the
function made from it. A DriverWriter writes one driver: a line per kernel call,
product or reference step, with workspace views, kernel constants and reshaped views
bound once as globals; its variants (timed, profiled, reporting each gradient as
it is made) differ in a few lines."""
import contextlib
import dataclasses
import functools
import math

import numpy as np

from aotgrad.codegen import blas, gemm_plan
from aotgrad.codegen.parts import get_num_threads
from aotgrad.codegen.scheduler import Kernel, StepKind
from aotgrad.ir.core import evaluate_params, located_error
from aotgrad.ir.prims import dot_dims
from aotgrad.ir.symbolic import SymInt, source
from aotgrad.ir.tags import Tag


def _locate_error(filename, step_at_line, err):
    """err re-made to name the op and user line of the step of a generated driver (source
    `filename`) that raised it; err itself when that step is not known."""
    tb, line = err.__traceback__, None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            line = tb.tb_lineno
        tb = tb.tb_next
    st = step_at_line.get(line)
    if st is None:
        return err
    checked = [n for n in st.nodes if Tag.BOUNDS_CHECKED in n.prim.tags]
    return located_error(err, (checked or st.nodes)[0])


def shape_source(shape):
    """Python source of a shape tuple; symbolic sizes as expressions of the symbols (the
    driver binds them as locals)."""
    return "(" + "".join(source(d) + ", " for d in shape).rstrip(" ") + ")"


def _has_symbols(p):
    if isinstance(p, (tuple, list)):
        return any(_has_symbols(x) for x in p)
    if isinstance(p, slice):
        return _has_symbols((p.start, p.stop, p.step))
    if dataclasses.is_dataclass(p) and not isinstance(p, type):   # a ValueCheck's bound
        return any(_has_symbols(getattr(p, f.name)) for f in dataclasses.fields(p))
    return isinstance(p, SymInt)


def _dot_plan(node):
    a, b = node.inputs
    lc, rc, lb, rb, af, bf = dot_dims(a.ndim, b.ndim, **node.params)
    pa, pb = list(lb + af + lc), list(rb + rc + bf)
    B = [a.shape[i] for i in lb]   # batch dims kept apart: merging them copies a strided view
    M = math.prod(a.shape[i] for i in af)
    K = math.prod(a.shape[i] for i in lc)
    N = math.prod(b.shape[i] for i in bf)
    sa = tuple(B + [M, K])
    sb = tuple(B + [K, N])
    so = tuple(B + [M, N])
    pa = None if pa == list(range(a.ndim)) else tuple(pa)
    pb = None if pb == list(range(b.ndim)) else tuple(pb)
    return pa, sa, pb, sb, so


def ready_after_steps(steps, graph):
    """{step index: the indices of the graph's outputs whose value is final once that step
    has run}; index -1: before the first step (an input returned as it is). Each value is
    stored by one step (the IR is in SSA form): the step that lists it among its outputs,
    or a product's transposed result (`out_view`)."""
    made_by = {}
    for i, st in enumerate(steps):
        for v in st.outputs:
            made_by[v] = i
        if st.out_view is not None:
            made_by[st.out_view[0]] = i
    inputs = set(graph.inputs)
    ready = {}
    for k, v in enumerate(graph.outputs):
        # (a value no step lists: reported after the last step, to be safe)
        i = made_by.get(v, -1 if v in inputs else len(steps) - 1)
        ready.setdefault(i, []).append(k)
    return ready


def inputs_unread_after_steps(steps, graph):
    """{step index: the indices of the graph's inputs that no later step reads, through
    itself or a value that may share its memory}; index -1: inputs no step reads. An input
    that an output may share memory with is left out (it is read until the end). A view,
    a check and a reference step (numpy may return a view) may share their inputs' memory;
    kernels and products write into buffers of their own."""
    shares = {v: {i} for i, v in enumerate(graph.inputs)}
    last = {}
    for t, st in enumerate(steps):
        read = set()
        for v in st.inputs:
            read |= shares.get(v, set())
        for i in read:
            last[i] = t
        if st.kind in (StepKind.VIEW, StepKind.CHECK) or \
                (st.kind is StepKind.REFERENCE and read):
            for v in list(st.outputs) + ([st.out_view[0]] if st.out_view else []):
                shares[v] = shares.get(v, set()) | read
        elif st.out_view is not None:
            shares[st.out_view[0]] = shares.get(st.outputs[0], set())
    returned = set()
    for v in graph.outputs:
        returned |= shares.get(v, set())
    unread = {}
    for i in range(len(graph.inputs)):
        if i not in returned:
            unread.setdefault(last.get(i, -1), []).append(i)
    return unread


class DriverWriter:
    """Writes one driver of `plan` (see Plan.driver): `build()` -> (source, function).
    `fixed`: values whose arrays are known when the driver is made (workspace views of
    a fixed-size plan), bound as globals."""

    def __init__(self, plan, fixed, timed=False, trusted=0, clock=None,
                 reporting=False):
        self.plan, self.fixed, self.timed, self.trusted = plan, fixed, timed, trusted
        self.clock, self.reporting = clock, reporting

    def build(self):
        """Python source for `program(*inputs) -> outputs` and the function itself.

        Each step is one line calling a kernel, np.matmul or a prim's numpy impl on local
        names; workspace views, kernel constants and reshaped views of fixed buffers are
        bound once as globals. A step costs one call, not a loop over an env list.
        With timed=True the function also returns each step's perf_counter stamp; with
        reporting=True it takes `_ready` and `_unread` last and calls `_ready(k, output k)`
        after the step that finishes output k (ready_after_steps), `_unread(i)` after the
        last step that reads input i (inputs_unread_after_steps)."""
        fixed, timed, trusted, clock, reporting = \
            self.fixed, self.timed, self.trusted, self.clock, self.reporting
        g = {"np": np, "_ndarray": np.ndarray, "_empty": np.empty, "_mm": np.matmul,
             "_contig": np.ascontiguousarray, "_normalise": self.plan.normalise_input,
             "_gemm": blas.gemm_threads, "_gemm1": blas.gemm_serial,
             "_evp": evaluate_params}
        names, knames = {}, {}
        self.plan.bound_kernels.append((g, knames))
        self._probe, self._gemms, self._probes_at = None, 0, None
        self.plan.gemm_how = {}                 # dot node -> how its product runs (report)

        def bind(obj, prefix):
            name = f"{prefix}{len(g)}"
            g[name] = obj
            return name

        def name_of(v):
            if v in fixed:
                if v not in names:
                    names[v] = bind(fixed[v], "_w")
                return names[v]
            return f"v{self.plan.slot[v]}"

        per_size = {}   # source of a workspace view -> its name (a symbolic plan's)

        def sized(expr):
            """The name of `expr`, a view of workspace buffers that depends only on the
            symbol values: made once per values tuple (see _views_lines)."""
            if expr not in per_size:
                per_size[expr] = f"_q{len(per_size)}"
            return per_size[expr]
        self._sized, self._gemm_args = sized, []

        def shaped(v, shp):
            """v viewed with shape shp (a bound global when v is a fixed buffer)."""
            shp = tuple(shp)
            if tuple(v.shape) == shp:
                return name_of(v)
            if v in fixed:
                view = fixed[v].reshape(shp)
                if np.shares_memory(view, fixed[v]):
                    return bind(view, "_w")
            if self.plan.symbols and v in self.plan.buf_of:   # a C-contiguous view: reshape is a view
                return sized(f"{name_of(v)}.reshape({shape_source(shp)})")
            return f"{name_of(v)}.reshape({shape_source(shp)})"

        def operand(v, perm, shp):
            """A matmul operand: v transposed by perm, reshaped to shp."""
            if perm is None:
                return shaped(v, shp)
            if v in fixed:  # a view of a workspace buffer: bound once
                view = fixed[v].transpose(perm).reshape(shp)
                if np.shares_memory(view, fixed[v]):
                    return bind(view, "_w")
            if tuple(v.shape[i] for i in perm) != tuple(shp):
                return f"{name_of(v)}.transpose({perm!r}).reshape({shape_source(shp)})"
            # no reshape needed; a weight's plain transpose as .T (0.08 against 0.28 us)
            return f"{name_of(v)}.T" if tuple(perm) == (1, 0) else \
                f"{name_of(v)}.transpose({perm!r})"

        ins = [f"v{s}" for s in self.plan.in_slots]
        params = ins + ["_syms"] * bool(self.plan.symbols) + ["_ready", "_unread"] * reporting
        lines = [f"def program({', '.join(params)}):"]
        if self.plan.symbols:
            lines.append(f"    {', '.join(self.plan.symbols)}, = _syms")
        for a, low in zip(ins, self.plan.low_in or ()):
            if low is not None:   # widened even when trusted: the caller holds 16-bit arrays
                lines.append(f"    {a} = {a}.astype(np.float32)")
        for a, (shape, d) in list(zip(ins, self.plan.in_avals))[trusted:]:
            dn = bind(np.dtype(d), "_d")
            shp = shape_source(shape)
            # flags.carray: C-contiguous, aligned and writeable, in one flags lookup
            lines.append(f"    if type({a}) is not _ndarray or {a}.dtype is not {dn} or "
                         f"{a}.shape != {shp} or not {a}.flags.carray:")
            lines.append(f"        {a} = _normalise({a}, {shp}, {dn})")
        for s, shape, d in self.plan.out_alloc_spec:
            lines.append(f"    v{s} = _empty({shape_source(shape)}, {bind(np.dtype(d), '_d')})")
        views_at = len(lines)   # a symbolic plan's workspace views go here (below)
        if timed:
            lines.append("    _t = [_clock()]")
            g["_clock"] = clock
        body, step_of = [], []   # step_of[i]: the step body line i belongs to
        # reporting: `_ready(k, output k)` lines (no step's: an error a hook raises is its own)
        # and `_unread(i)` once no later step reads input i
        ready_at = ready_after_steps(self.plan.schedule.steps, self.plan.graph) if reporting else {}
        unread_at = inputs_unread_after_steps(self.plan.schedule.steps, self.plan.graph) \
            if reporting else {}
        report = self.output_sources(name_of, bind, fixed) if reporting else None

        def reports(i):
            return [f"        _unread({j})" for j in unread_at.get(i, ())] + \
                [f"        _ready({k}, {report[k]})" for k in ready_at.get(i, ())]
        body += reports(-1)
        step_of += [None] * len(body)
        for i, st in enumerate(self.plan.schedule.steps):
            step_lines = self.step_lines(st, bind, name_of, shaped, operand, knames)
            body += ["        " + line for line in step_lines]
            step_of += [st] * len(step_lines)
            after = reports(i)
            body += after
            step_of += [None] * len(after)
            if timed:
                body.append("        _t.append(_clock())")
                step_of.append(None)
        blas1 = "_blas1"
        if self._gemm_args:   # as a static program: OpenBLAS held to one thread only where
            # a product of this call's sizes runs on the gemm schedule
            g["_nullctx"] = contextlib.nullcontext
            blas1 = sized(f"(_blas1 if any(g is not None for g in "
                          f"({', '.join(self._gemm_args)},)) else _nullctx)")
        if self.plan.symbols:
            lines[views_at:views_at] = self.views_lines(g, bind, per_size)
        if self._gemms:   # products shared out over aotgrad's threads: OpenBLAS on one thread
            g["_blas1"] = blas.single_threaded
            body = [f"        with {blas1}():"] + ["    " + line for line in body]
            step_of = [None] + step_of
        if not body:
            body, step_of = ["        pass"], [None]
        # an error raised by a step names its op and the user's line (the node's provenance)
        first = len(lines) + 2     # line number of body[0] in the source
        g["_locate"] = functools.partial(_locate_error, f"<{self.plan.graph.name} program>",
                                         {first + i: st for i, st in enumerate(step_of) if st})
        lines += ["    try:"] + body + ["    except Exception as _e:", "        _n = _locate(_e)",
                                          "        if _n is _e:", "            raise",
                                          "        raise _n from None"]
        outs = self.output_sources(name_of, bind, fixed)
        lines.append(f"    return [{', '.join(outs)}]" + (", _t" if timed else ""))
        src = "\n".join(lines) + "\n"
        exec(compile(src, f"<{self.plan.graph.name} program>", "exec"), g)
        return src, g["program"]

    def output_sources(self, name_of, bind, fixed):
        """The driver's source text of each output's returned value."""
        outs = [name_of(v) if v in fixed else f"v{s}.copy()" if s in self.plan.copy_slots else
                f"v{s}" for v, s in zip(self.plan.graph.outputs, self.plan.out_slots)]
        if self.plan.low_out:
            outs = [o if low is None else f"{o}.astype({bind(low.np, '_d')})"
                    for o, low in zip(outs, self.plan.low_out)]
        return outs

    def step_lines(self, st, bind, name_of, shaped, operand, knames):
        if isinstance(st, Kernel):
            fn, spec = self.plan.kernel_fns[st]
            knames[st] = bind(fn, '_k')
            lines = self.kernel_lines(st, knames[st], spec, bind, shaped)
            small = self.plan.small_kernels.get(st)
            if small is None:
                return lines
            # the variant a static program of this call's size runs (codegen.size_variants)
            fn, variant = small
            knames[variant] = bind(fn, '_k')
            return [f"if {variant.runs_source()}:"] + [
                "    " + line for line in self.kernel_lines(
                    st, knames[variant], variant.spec, bind, shaped)] + \
                ["else:"] + ["    " + line for line in lines]
        n = st.nodes[0]
        if st.kind == StepKind.DOT:
            pre = []
            if st.out_view is not None and st.out_view[0] not in self.plan.fixed_views:
                d, inv = st.out_view
                pre = [f"{name_of(d)} = {name_of(st.outputs[0])}.transpose({inv!r})"]
            pa, sa, pb, sb, so = _dot_plan(n)
            # a static product's gemm arguments are fixed when the driver is made; else
            # np.matmul, OpenBLAS held to one thread as around gemm_threads (its threads
            # would compete with the kernels' parts for the cores)
            call = None if self.plan.symbols else \
                self.gemm_call(n, pa, sa, pb, sb, so, bind, name_of)
            if call:
                return [call]
            ea, eb = (operand(v, p, s) for v, p, s in zip(n.inputs, (pa, pb), (sa, sb)))
            mm = pre + [f"_mm({ea}, {eb}, out={shaped(n.outputs[0], so)})"]
            if not self.plan.symbols:
                return mm
            self._gemms += 1
            # sizes known per call: the gemm arguments per distinct values tuple; np.matmul
            # for the sizes the static rules would send there
            sym = self.symbolic_gemm(n, (pa, sa, pb, sb, so), bind, name_of)
            if sym is None:
                return mm
            g, (fa, fb, fc) = sym
            # the gemm arguments: a function of the symbol values, made once per values
            ga = self._sized(f"{g}(_syms)")
            self._gemm_args.append(ga)
            return pre + [f"if {ga} is None:"] + ["    " + mm[-1]] + \
                ["else:", f"    (_gemm1 if {ga}[0] else _gemm)(*{ga}[1], {fa}, *{ga}[2], {fb}, "
                           f"*{ga}[3], {fc}, *{ga}[4])"]
        if st.kind == StepKind.CHECK:   # raises, or its output is its input
            return [f"{bind(n.prim.impl, '_ref_')}({name_of(n.inputs[0])}, "
                    f"**{self.params(n, bind)})",
                    f"{name_of(n.outputs[0])} = {name_of(n.inputs[0])}"]
        if st.kind == StepKind.VIEW and st.view_expr:  # a strided view
            return [f"{name_of(st.outputs[0])} = {name_of(st.inputs[0])}{st.view_expr}"]
        if st.kind == StepKind.VIEW:
            return [f"{name_of(n.outputs[0])} = "
                    f"{name_of(n.inputs[0])}.reshape({shape_source(n.params['shape'])})"]
        if st.route is not None:   # a library kernel of codegen
            return st.route.lines(shaped, name_of, bind)
        impl = bind(n.prim.impl, "_ref_")
        params = self.params(n, bind)
        call = f"{impl}({', '.join(name_of(v) for v in n.inputs)}, **{params})"
        outs = [name_of(v) for v in n.outputs]
        if not n.prim.multiple_results:
            return [f"{outs[0]} = _contig({call})"]
        return [f"{', '.join(outs)}, = {call}"] + [f"{o} = _contig({o})" for o in outs]

    def kernel_lines(self, st, kname, spec, bind, shaped):
        """The lines calling kernel `kname` (its KernelSpec `spec`) for step `st`."""
        args = []
        for a in spec.args:
            if a.kind == "size":
                args.append(source(a.value))
            elif a.kind == "const" and _has_symbols(a.value):   # a size's value, per call
                args.append(f"{bind(a.dtype.np.type, '_t')}({source(a.value)})")
            elif a.kind == "const":
                args.append(bind(a.dtype.np.type(a.value), "_c"))
            else:
                args.append(shaped(a.var, a.shape))
        call = f"{kname}({', '.join(args)})"
        if not spec.checks:
            return [call]
        names = sorted({n.prim.name for n in st.nodes if Tag.BOUNDS_CHECKED in n.prim.tags})
        msg = f"{'/'.join(names) or 'gather'}(): {'; '.join(spec.checks)}"
        return [f"if {call}:", f"    raise IndexError({msg!r})"]

    def params(self, n, bind):
        """Source of a reference step's params: bound once, or evaluated per call at the
        symbol values when they hold symbolic sizes."""
        p = bind(dict(n.params), "_p")
        if not _has_symbols(tuple(n.params.values())):
            return p
        return f"_evp({p}, dict(zip({self.plan.symbols!r}, _syms)))"

    def views_lines(self, g, bind, per_size):
        """The driver's lines binding a symbolic plan's workspace views (_workspace_lines,
        then the reshapes of them its steps read, `per_size`: source -> name): made by a
        function of the symbol values on the first call with those values, then taken from
        a dict (a call costs a lookup, not a slice and reshape per value). Growing a buffer
        empties every driver's dict: no kept views hold on to a buffer given up."""
        clear = bind(self.plan.clear_views, "_vclear")
        body = self.workspace_lines(bind, grown=f"        {clear}()")
        body += [f"    {name} = {expr}" for expr, name in per_size.items()]
        names = [line.split(" = ")[0].strip() for line in body
                 if line.startswith(("    v", "    _q"))]
        if not names:
            return body
        cache = {}
        self.plan.view_caches.append(cache)
        cname, fname = bind(cache, "_vc"), f"_views{len(g)}"
        src = "\n".join([f"def {fname}(_syms):", f"    {', '.join(self.plan.symbols)}, = _syms"] +
                        body + [f"    _r = {cname}[_syms] = ({', '.join(names)},)",
                                "    return _r"]) + "\n"
        exec(compile(src, f"<{self.plan.graph.name} workspace views>", "exec"), g)
        return [f"    _v = {cname}.get(_syms)",
                "    if _v is None:",
                f"        _v = {fname}(_syms)",
                f"    {', '.join(names)}, = _v"]

    def workspace_lines(self, bind, grown=None):
        """A symbolic plan's workspace: each buffer grown when this call needs more than
        it holds (then the line `grown`), each value a view of its buffer at this call's
        shape."""
        lines = [f"    _ws = {bind(self.plan.workspace, '_ws')}"] if self.plan.buffers else []
        for b, (d, n) in enumerate(self.plan.buffers):
            lines += [f"    _n = {source(n)}",
                      f"    if _ws[{b}].size < _n:",
                      f"        _ws[{b}] = _empty(_n, {bind(np.dtype(d), '_d')})"] + \
                ([grown] if grown else []) + [f"    _b{b} = _ws[{b}]"]
        for v, b in self.plan.buf_of.items():
            lines.append(f"    v{self.plan.slot[v]} = _b{b}[:{source(math.prod(v.shape))}]"
                         f".reshape({shape_source(v.shape)})")
        for st in self.plan.schedule.steps:
            if st.out_view is not None and st.outputs[0] in self.plan.buf_of:
                d, inv = st.out_view
                lines.append(f"    v{self.plan.slot[d]} = v{self.plan.slot[st.outputs[0]]}"
                             f".transpose({inv!r})")
        return lines

    def symbolic_gemm(self, n, dot_plan, bind, name_of):
        """(bound gemm_plan.SymbolicGemm, source of the flat a, b and out roots: the roots
        their views have at the hint), or None when BLAS cannot serve this product at any
        size (no library, mixed dtypes, a symbol whose hint the graph does not show)."""
        (a, b), out = n.inputs, n.outputs[0]
        d = out.dtype.np
        fn = blas.gemm_address(d) if blas.available() else None
        if fn is None or a.dtype.np != d or b.dtype.np != d:
            return None
        if self._probes_at is None:
            self._probes_at = functools.lru_cache(maxsize=64)(self.plan.layout_probes)
        hinted = gemm_plan.symbol_hints(self.plan.graph, self.plan.symbols)
        if None in hinted:
            return None
        probes = self._probes_at(hinted)
        roots = tuple(probes[v][0] for v in (a, b, out))
        blas.warm(d)
        plan = gemm_plan.SymbolicGemm(n, dot_plan, self.plan.symbols, self._probes_at, roots, fn, d)
        self.plan.gemm_how[n] = f"{blas.provider()} gemm, slabs chosen per call at its sizes"
        return bind(plan, "_gp"), tuple(
            self._sized(f"{name_of(r)}.reshape(-1)") if r in self.plan.buf_of else
            f"{name_of(r)}.reshape(-1)" for r in roots)

    def gemm_call(self, n, pa, sa, pb, sb, so, bind, name_of):
        """The line running this product as blas.gemm_threads over aotgrad's threads (below
        blas.SERIAL_MAX multiply-adds: blas.gemm_serial on the calling thread), or None
        (np.matmul then): small products, no usable BLAS library, a dtype it has no gemm for,
        or an operand BLAS cannot read without a copy."""
        (a, b), out = n.inputs, n.outputs[0]
        d = out.dtype.np
        fn = blas.gemm_address(d) if blas.available() else None
        if fn is None or a.dtype.np != d or b.dtype.np != d or \
                math.prod(sa) * sb[-1] < blas.SPLIT_MIN or math.prod(sa) * sb[-1] == 0:
            return None
        if self._probe is None:
            self._probe = self.plan.layout_probes()
        la, lb = (blas.gemm_layout(self._probe[v][2], p, s)
                  for v, p, s in ((a, pa, sa), (b, pb, sb)))
        if la is None or lb is None:
            return None

        def flat(v):   # (the flat array v's root, v's offset in it); bound when fixed
            r, p, x = self._probe[v]
            off = blas.offset_of(x, p)
            if r in self.plan.fixed_views:
                return bind(self.plan.fixed_views[r].reshape(-1), "_w"), off
            return f"{name_of(r)}.reshape(-1)", off

        lc = blas.gemm_layout(self._probe[out][2], None, so)
        if lc is None or lc[1] != blas.NO_TRANS:
            return None
        (fa, oa), (fb, ob), (fc, oc) = flat(a), flat(b), flat(out)
        blas.warm(d)
        batch, m, k, nn = so[:-2], sa[-2], sa[-1], sb[-1]
        serial = math.prod(sa) * sb[-1] < blas.SERIAL_MAX
        parts, cut_cols = (1, False) if serial else \
            blas.pieces(math.prod(batch), m, nn, get_num_threads())
        arr = (lambda t: bind(np.array(t, np.int64), "_i"))
        self._gemms += 1
        slabs = f", {parts} {'column' if cut_cols else 'row'} slabs each" if parts > 1 else ""
        into = "" if self._probe[out][0] is out else \
            f", written into {self._probe[out][0].name}'s layout"
        where = "on the calling thread" if serial else "in parts on threads"
        self.plan.gemm_how[n] = (f"{blas.provider()} gemm {where}: "
                            f"{math.prod(batch)} x ({m}x{k} @ {k}x{nn}){slabs}{into}")
        return (f"{'_gemm1' if serial else '_gemm'}({fn}, {la[1]}, {lb[1]}, {m}, {nn}, {k}, "
                f"{bind(d.type(1), '_c')}, {fa}, {oa}, {la[2]}, {fb}, {ob}, {lb[2]}, "
                f"{fc}, {oc}, {lc[2]}, {arr(batch)}, {arr(la[0])}, {arr(lb[0])}, "
                f"{arr(lc[0])}, {parts}, {cut_cols})")
