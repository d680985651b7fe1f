"""Executor plan: a flat list of steps over buffers planned ahead of time.

Every materialised value gets a slot. Intermediates live in a workspace allocated once
(on the first call) and shared between values whose lifetimes do not overlap. The step list
is then emitted as one straight-line Python function (`plan.source`, like a wrapper around
the kernels): a line per kernel call, np.matmul or reference step, with workspace views,
kernel constants and reshaped views bound once as globals. A call checks its inputs,
allocates the outputs and runs the lines: no per-step dispatch, no env list.
"""
import contextlib
import dataclasses
import functools
import math
import os
import threading
import time
import weakref

import numpy as np

from aotgrad.codegen import blas, gemm_plan, parallel_compile
from aotgrad.codegen.scheduler import Kernel, StepKind
from aotgrad.codegen.step_events import step_events
from aotgrad.ir.core import evaluate_params, located_error
from aotgrad.ir.prims import dot_dims
from aotgrad.ir.symbolic import SymInt, evaluate, source
from aotgrad.ir.tags import Tag

_MALLOC_TUNED = []


def keep_freed_memory():
    """Ask glibc's malloc to keep freed blocks for reuse (once per process). Each call of a
    compiled program allocates its outputs (a forward's saved values: ~12 MB on W4); by
    default glibc maps blocks of several MB fresh and unmaps or trims them when freed, so
    every call page-faulted its outputs in again (W4: 2800 faults, 10 ms of system time per
    step; W3 45 -> 25 ms). Blocks up to 128 MB now come from the heap and up to 512 MB of
    freed heap is kept. AOTGRAD_MALLOC_TUNING=0 leaves malloc alone."""
    if _MALLOC_TUNED:
        return
    _MALLOC_TUNED.append(True)
    import os
    import sys
    if os.environ.get("AOTGRAD_MALLOC_TUNING", "1") == "0" or not sys.platform.startswith("linux"):
        return
    try:
        import ctypes
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 128 << 20)   # M_MMAP_THRESHOLD
        libc.mallopt(-1, 512 << 20)   # M_TRIM_THRESHOLD
    except (OSError, AttributeError):   # not glibc
        pass


_LIVE = weakref.WeakSet()    # plans with drivers (for the fork guard below)
_FORKED = []

FORK_MESSAGE = ("aotgrad: compiled programs cannot run in a process forked after compiled "
                "programs ran in its parent: GNU OpenMP's threads (numba's threading layer) "
                "do not survive fork(). Start worker processes with multiprocessing's "
                "'spawn' or 'forkserver' method, or set NUMBA_THREADING_LAYER=workqueue "
                "before importing aotgrad.")


def _refuse(*args, **kwargs):
    raise RuntimeError(FORK_MESSAGE)


def _after_fork_in_child():
    """In a child forked after numba started GNU OpenMP threads, any parallel region
    terminates the process (SIGTERM, from numba). Make every program raise a clear error
    instead, now and for programs made later."""
    from numba.np.ufunc import parallel
    if not parallel._is_initialized or parallel.threading_layer() != "omp":
        return
    try:
        from numba.np.ufunc import omppool
        if getattr(omppool, "openmp_vendor", "GNU") != "GNU":
            return
    except ImportError:
        return
    _FORKED.append(True)
    for plan in list(_LIVE):
        for g, knames in plan._bound_kernels:
            g["_gemm"] = _refuse
            for name in knames.values():
                g[name] = _refuse


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


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


class Plan:
    def __init__(self, graph, schedule, kernel_fns, reuse_outputs=False, symbols=(),
                 low_precision=(None, None), small_kernels=None):
        self.graph, self.schedule = graph, schedule
        # a graph with symbolic sizes: the driver takes their values as one trailing tuple
        # (this order), binds them as locals and computes every size from them per call; its
        # workspace buffers are sized per call (grown when a call needs more)
        self.symbols = tuple(symbols)
        # per input and output: its float16/bfloat16 dtype, kept as float32 inside (None:
        # no such value; see codegen/low_precision.py)
        self.low_in, self.low_out = low_precision
        self.kernel_fns = kernel_fns     # step -> (fn, KernelSpec)
        # step -> (fn, size_variants.SmallVariant): a symbolic kernel's range-loop variant,
        # run instead of kernel_fns' at the calls whose work is small
        self.small_kernels = small_kernels or {}
        self._view_caches = []           # per driver of a symbolic plan: values -> views
        self._bound_kernels = []         # per driver: (its globals, {step: global name})
        self._swap_lock = threading.Lock()   # a kernel swap waits for a driver being built
        self.reuse_outputs = reuse_outputs
        self.slot = {}
        for v in graph.inputs:
            self._slot(v)
        self.alias = {}                  # view var -> base var (shares memory)
        self.buffers = []                # (dtype, size) per workspace buffer
        self.buf_of = {}                 # var -> workspace buffer index
        self._plan()
        self._ready = False

    def _slot(self, v):
        if v not in self.slot:
            self.slot[v] = len(self.slot)
        return self.slot[v]

    def _base(self, v):
        while v in self.alias:
            v = self.alias[v]
        return v

    def _plan(self):
        g, steps = self.graph, self.schedule.steps
        outs = set(g.outputs)
        ins = set(g.inputs)
        for st in steps:
            if st.kind in (StepKind.VIEW, StepKind.CHECK):
                self.alias[st.outputs[0]] = st.inputs[0]
            elif st.out_view is not None:     # a product written into its transposed output
                self.alias[st.out_view[0]] = st.outputs[0]
                self._slot(st.out_view[0])
        last = {}
        for i, st in enumerate(steps):
            for v in st.inputs:
                last[self._base(v)] = i
        for v in g.outputs:
            last[self._base(v)] = len(steps)
        free = {}
        self.out_alloc = []   # vars allocated fresh per call
        self.copy_outputs = []
        for i, st in enumerate(steps):
            for v in st.outputs:
                self._slot(v)
                # a reference step returns a new array; a slice kernel writes into a buffer
                if st.kind in (StepKind.REFERENCE, StepKind.VIEW, StepKind.CHECK) and \
                        st.route is None:
                    continue
                if v in outs and not self.reuse_outputs:
                    self.out_alloc.append(v)
                    continue
                key = (v.dtype.np.str, math.prod(v.shape))
                pool = free.get(key)
                if pool:
                    b = pool.pop()
                else:
                    b = len(self.buffers)
                    self.buffers.append(key)
                self.buf_of[v] = b
            for v in set(st.inputs) | set(st.outputs):
                bv = self._base(v)
                if last.get(bv, -1) <= i and bv in self.buf_of and bv not in outs:
                    free.setdefault((bv.dtype.np.str, math.prod(bv.shape)), []).append(
                        self.buf_of[bv])
                    last[bv] = 1 << 60   # release once
        for v in g.outputs:
            if v in self.alias and self._base(v) not in ins and \
                    self._base(v) not in self.out_alloc:
                self.copy_outputs.append(v)
        self.out_slots = [self.slot.get(v) if v in self.slot else self._slot(v)
                          for v in g.outputs]
        self.in_slots = [self.slot[v] for v in g.inputs]
        self.in_avals = [(v.shape, v.dtype.np) for v in g.inputs]

    def workspace_bytes(self):
        return sum(np.dtype(d).itemsize * n for d, n in self.buffers)

    # -- building the runnable steps -------------------------------------------------------
    def prepare(self):
        if _FORKED:
            raise RuntimeError(FORK_MESSAGE)
        keep_freed_memory()
        _LIVE.add(self)
        with parallel_compile.foreground():   # may compile blas.gemm_stack (first use)
            self._prepare()

    def _prepare(self):
        if self.symbols:
            fixed_vars = {}   # sizes known per call: workspace views made per call
            self._ws = [np.empty(0, dtype=np.dtype(d)) for d, n in self.buffers]
        else:
            ws = [np.empty(n, dtype=np.dtype(d)) for d, n in self.buffers]
            fixed_vars = {v: ws[b][:math.prod(v.shape)].reshape(v.shape)
                          for v, b in self.buf_of.items()}
        for st in self.schedule.steps:
            if st.out_view is not None and st.outputs[0] in fixed_vars:
                d, inv = st.out_view
                fixed_vars[d] = fixed_vars[st.outputs[0]].transpose(inv)
        self.out_alloc_spec = [(self.slot[v], v.shape, v.dtype.np) for v in self.out_alloc]
        self.copy_slots = [self.slot[v] for v in self.copy_outputs]
        self._fixed, self._timed, self._profiled = fixed_vars, None, None
        self.driver_source, self.run = self._driver(fixed_vars)
        self._runners = {0: self.run}
        self.owned_outputs = self._owned_outputs()
        self._ready = True

    def _owned_outputs(self):
        """Per output: is it a new array that no other output or input shares? (Such a
        gradient may become a leaf's .grad without a copy.)"""
        g = self.graph
        copies = set(self.copy_outputs)
        bases = [self._base(v) for v in g.outputs if v not in copies]
        return [v in copies or (self._base(v) in self.out_alloc and
                                bases.count(self._base(v)) == 1) for v in g.outputs]

    # -- the driver: the whole step list as one straight-line Python function -------------
    def runner(self, trusted=0):
        """The driver, skipping the input checks on the first `trusted` inputs: for a caller
        that vouches they are C-contiguous, writeable and of the program's shapes and dtypes
        (a backward program's saved values, made by its forward program)."""
        r = self._runners.get(trusted)
        if r is None:
            r = self._runners[trusted] = self._driver(self._fixed, trusted=trusted)[1]
        return r

    def _driver(self, fixed, timed=False, trusted=0, clock=time.perf_counter, reporting=False):
        with self._swap_lock:
            return self._build_driver(fixed, timed, trusted, clock, reporting)

    def reporting_runner(self, trusted=0):
        """A driver that takes two more arguments, `ready(k, array)` and `unread(i)`: it
        calls ready with each output k as soon as the step that finishes it has run (the
        outputs that no step makes, before the first step), rather than only returning them
        all at the end, and unread(i) once no later step reads input i (its memory may
        change from then on). A compiled backward hands each parameter's gradient to its
        post-accumulate-grad hooks (DistributedDataParallel's bucket all-reduces) while the
        rest of the program runs. Made on first use; the ordinary driver is unchanged."""
        key = ("reporting", trusted)
        r = self._runners.get(key)
        if r is None:
            r = self._runners[key] = self._driver(self._fixed, trusted=trusted,
                                                  reporting=True)[1]
        return r

    def _build_driver(self, fixed, timed, trusted, clock=time.perf_counter, reporting=False):
        """Python source for `program(*inputs) -> outputs` and the function itself.

        Each step is one line calling a kernel, np.matmul or a prim's numpy impl on local
        names; workspace views, kernel constants and reshaped views of fixed buffers are
        bound once as globals. A step costs one call, not a loop over an env list.
        With timed=True the function also returns each step's perf_counter stamp; with
        reporting=True it takes `_ready` and `_unread` last and calls `_ready(k, output k)`
        after the step that finishes output k (ready_after_steps), `_unread(i)` after the
        last step that reads input i (inputs_unread_after_steps)."""
        g = {"np": np, "_ndarray": np.ndarray, "_empty": np.empty, "_mm": np.matmul,
             "_contig": np.ascontiguousarray, "_normalise": self._normalise,
             "_gemm": blas.gemm_stack, "_gemm1": blas.gemm_serial,
             "_evp": evaluate_params}
        names, knames = {}, {}
        self._bound_kernels.append((g, knames))
        self._probe, self._gemms, self._probes_at = None, 0, None
        self.gemm_how = {}                 # dot node -> how its product runs (report)

        def bind(obj, prefix):
            name = f"{prefix}{len(g)}"
            g[name] = obj
            return name

        def name_of(v):
            if v in fixed:
                if v not in names:
                    names[v] = bind(fixed[v], "_w")
                return names[v]
            return f"v{self.slot[v]}"

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
            if self.symbols and v in self.buf_of:   # a C-contiguous view: reshape is a view
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

        ins = [f"v{s}" for s in self.in_slots]
        params = ins + ["_syms"] * bool(self.symbols) + ["_ready", "_unread"] * reporting
        lines = [f"def program({', '.join(params)}):"]
        if self.symbols:
            lines.append(f"    {', '.join(self.symbols)}, = _syms")
        for a, low in zip(ins, self.low_in or ()):
            if low is not None:   # widened even when trusted: the caller holds 16-bit arrays
                lines.append(f"    {a} = {a}.astype(np.float32)")
        for a, (shape, d) in list(zip(ins, self.in_avals))[trusted:]:
            dn = bind(np.dtype(d), "_d")
            shp = shape_source(shape)
            # flags.carray: C-contiguous, aligned and writeable, in one flags lookup
            lines.append(f"    if type({a}) is not _ndarray or {a}.dtype is not {dn} or "
                         f"{a}.shape != {shp} or not {a}.flags.carray:")
            lines.append(f"        {a} = _normalise({a}, {shp}, {dn})")
        for s, shape, d in self.out_alloc_spec:
            lines.append(f"    v{s} = _empty({shape_source(shape)}, {bind(np.dtype(d), '_d')})")
        views_at = len(lines)   # a symbolic plan's workspace views go here (below)
        if timed:
            lines.append("    _t = [_clock()]")
            g["_clock"] = clock
        body, step_of = [], []   # step_of[i]: the step body line i belongs to
        # reporting: `_ready(k, output k)` lines (no step's: an error a hook raises is its own)
        # and `_unread(i)` once no later step reads input i
        ready_at = ready_after_steps(self.schedule.steps, self.graph) if reporting else {}
        unread_at = inputs_unread_after_steps(self.schedule.steps, self.graph) \
            if reporting else {}
        report = self._output_sources(name_of, bind, fixed) if reporting else None

        def reports(i):
            return [f"        _unread({j})" for j in unread_at.get(i, ())] + \
                [f"        _ready({k}, {report[k]})" for k in ready_at.get(i, ())]
        body += reports(-1)
        step_of += [None] * len(body)
        for i, st in enumerate(self.schedule.steps):
            step_lines = self._step_lines(st, bind, name_of, shaped, operand, knames)
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
        if self.symbols:
            lines[views_at:views_at] = self._views_lines(g, bind, per_size)
        if self._gemms:   # products shared out over numba's threads: OpenBLAS on one thread
            g["_blas1"] = blas.single_threaded
            body = [f"        with {blas1}():"] + ["    " + line for line in body]
            step_of = [None] + step_of
        if not body:
            body, step_of = ["        pass"], [None]
        # an error raised by a step names its op and the user's line (the node's provenance)
        first = len(lines) + 2     # line number of body[0] in the source
        g["_locate"] = functools.partial(_locate_error, f"<{self.graph.name} program>",
                                         {first + i: st for i, st in enumerate(step_of) if st})
        lines += ["    try:"] + body + ["    except Exception as _e:", "        _n = _locate(_e)",
                                          "        if _n is _e:", "            raise",
                                          "        raise _n from None"]
        outs = self._output_sources(name_of, bind, fixed)
        lines.append(f"    return [{', '.join(outs)}]" + (", _t" if timed else ""))
        src = "\n".join(lines) + "\n"
        exec(compile(src, f"<{self.graph.name} program>", "exec"), g)
        return src, g["program"]

    def _output_sources(self, name_of, bind, fixed):
        """The driver's source text of each output's returned value."""
        outs = [name_of(v) if v in fixed else f"v{s}.copy()" if s in self.copy_slots else
                f"v{s}" for v, s in zip(self.graph.outputs, self.out_slots)]
        if self.low_out:
            outs = [o if low is None else f"{o}.astype({bind(low.np, '_d')})"
                    for o, low in zip(outs, self.low_out)]
        return outs

    def swap_kernel(self, st, fn, spec):
        """Run step `st` with `fn` (same arguments) from the next call on, in every driver
        made so far and later (a kernel's parallel variant replacing its serial one)."""
        with self._swap_lock:
            self.kernel_fns[st] = (fn, spec)
            self._profiled = None          # (its events say how each kernel runs)
            for g, knames in self._bound_kernels:
                if st in knames:
                    g[knames[st]] = fn

    def swap_small(self, st, fn):
        """Run the small-size variant of step `st` (small_kernels) with `fn` from the next
        call on, in every driver made so far and later."""
        with self._swap_lock:
            variant = self.small_kernels[st][1]
            self.small_kernels[st] = (fn, variant)
            for g, knames in self._bound_kernels:
                if variant in knames:
                    g[knames[variant]] = fn

    def _step_lines(self, st, bind, name_of, shaped, operand, knames):
        if isinstance(st, Kernel):
            fn, spec = self.kernel_fns[st]
            knames[st] = bind(fn, '_k')
            lines = self._kernel_lines(st, knames[st], spec, bind, shaped)
            small = self.small_kernels.get(st)
            if small is None:
                return lines
            # the variant a static program of this call's size runs (codegen.size_variants)
            fn, variant = small
            knames[variant] = bind(fn, '_k')
            return [f"if {variant.runs_source()}:"] + [
                "    " + line for line in self._kernel_lines(
                    st, knames[variant], variant.spec, bind, shaped)] + \
                ["else:"] + ["    " + line for line in lines]
        n = st.nodes[0]
        if st.kind == StepKind.DOT:
            pre = []
            if st.out_view is not None and st.out_view[0] not in self._fixed:
                d, inv = st.out_view
                pre = [f"{name_of(d)} = {name_of(st.outputs[0])}.transpose({inv!r})"]
            pa, sa, pb, sb, so = _dot_plan(n)
            # a static product's gemm arguments are fixed when the driver is made; else
            # np.matmul, OpenBLAS held to one thread as around gemm_stack (its threads
            # would compete with numba's spinning workers)
            call = None if self.symbols else \
                self._gemm_call(n, pa, sa, pb, sb, so, bind, name_of)
            if call:
                return [call]
            ea, eb = (operand(v, p, s) for v, p, s in zip(n.inputs, (pa, pb), (sa, sb)))
            mm = pre + [f"_mm({ea}, {eb}, out={shaped(n.outputs[0], so)})"]
            if not self.symbols:
                return mm
            self._gemms += 1
            # sizes known per call: the gemm arguments per distinct values tuple; np.matmul
            # for the sizes the static rules would send there
            sym = self._symbolic_gemm(n, (pa, sa, pb, sb, so), bind, name_of)
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
                    f"**{self._params(n, bind)})",
                    f"{name_of(n.outputs[0])} = {name_of(n.inputs[0])}"]
        if st.kind == StepKind.VIEW and st.view_expr:  # a strided view
            return [f"{name_of(st.outputs[0])} = {name_of(st.inputs[0])}{st.view_expr}"]
        if st.kind == StepKind.VIEW:
            return [f"{name_of(n.outputs[0])} = "
                    f"{name_of(n.inputs[0])}.reshape({shape_source(n.params['shape'])})"]
        if st.route is not None:   # a library kernel of codegen
            return st.route.lines(shaped, name_of, bind)
        impl = bind(n.prim.impl, "_ref_")
        params = self._params(n, bind)
        call = f"{impl}({', '.join(name_of(v) for v in n.inputs)}, **{params})"
        outs = [name_of(v) for v in n.outputs]
        if not n.prim.multiple_results:
            return [f"{outs[0]} = _contig({call})"]
        return [f"{', '.join(outs)}, = {call}"] + [f"{o} = _contig({o})" for o in outs]

    def _kernel_lines(self, st, kname, spec, bind, shaped):
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

    def _params(self, n, bind):
        """Source of a reference step's params: bound once, or evaluated per call at the
        symbol values when they hold symbolic sizes."""
        p = bind(dict(n.params), "_p")
        if not _has_symbols(tuple(n.params.values())):
            return p
        return f"_evp({p}, dict(zip({self.symbols!r}, _syms)))"

    def _views_lines(self, g, bind, per_size):
        """The driver's lines binding a symbolic plan's workspace views (_workspace_lines,
        then the reshapes of them its steps read, `per_size`: source -> name): made by a
        function of the symbol values on the first call with those values, then taken from
        a dict (a call costs a lookup, not a slice and reshape per value). Growing a buffer
        empties every driver's dict: no kept views hold on to a buffer given up."""
        clear = bind(self._clear_views, "_vclear")
        body = self._workspace_lines(bind, grown=f"        {clear}()")
        body += [f"    {name} = {expr}" for expr, name in per_size.items()]
        names = [line.split(" = ")[0].strip() for line in body
                 if line.startswith(("    v", "    _q"))]
        if not names:
            return body
        cache = {}
        self._view_caches.append(cache)
        cname, fname = bind(cache, "_vc"), f"_views{len(g)}"
        src = "\n".join([f"def {fname}(_syms):", f"    {', '.join(self.symbols)}, = _syms"] +
                        body + [f"    _r = {cname}[_syms] = ({', '.join(names)},)",
                                "    return _r"]) + "\n"
        exec(compile(src, f"<{self.graph.name} workspace views>", "exec"), g)
        return [f"    _v = {cname}.get(_syms)",
                "    if _v is None:",
                f"        _v = {fname}(_syms)",
                f"    {', '.join(names)}, = _v"]

    def _clear_views(self):
        for cache in self._view_caches:
            cache.clear()

    def _workspace_lines(self, bind, grown=None):
        """A symbolic plan's workspace: each buffer grown when this call needs more than
        it holds (then the line `grown`), each value a view of its buffer at this call's
        shape."""
        lines = [f"    _ws = {bind(self._ws, '_ws')}"] if self.buffers else []
        for b, (d, n) in enumerate(self.buffers):
            lines += [f"    _n = {source(n)}",
                      f"    if _ws[{b}].size < _n:",
                      f"        _ws[{b}] = _empty(_n, {bind(np.dtype(d), '_d')})"] + \
                ([grown] if grown else []) + [f"    _b{b} = _ws[{b}]"]
        for v, b in self.buf_of.items():
            lines.append(f"    v{self.slot[v]} = _b{b}[:{source(math.prod(v.shape))}]"
                         f".reshape({shape_source(v.shape)})")
        for st in self.schedule.steps:
            if st.out_view is not None and st.outputs[0] in self.buf_of:
                d, inv = st.out_view
                lines.append(f"    v{self.slot[d]} = v{self.slot[st.outputs[0]]}"
                             f".transpose({inv!r})")
        return lines

    def _probes(self, values=None):
        """var -> (root var, its layout_probe, the var's view of it) for every value: a
        non-view value is its own C-contiguous root; view steps are replayed on the probes.
        A view step that copies (numpy's reshape of a strided view) makes a new root.
        `values`: the symbols' values tuple, for a graph with symbolic sizes."""
        probes = {}
        at = dict(zip(self.symbols, values or ()))
        size = (lambda shape: tuple(int(evaluate(d, at)) for d in shape))

        def root(v):
            p = blas.layout_probe(size(v.shape))
            probes[v] = (v, p, p)
        for v in self.graph.inputs:
            root(v)
        for st in self.schedule.steps:
            if st.kind == StepKind.CHECK:
                probes[st.outputs[0]] = probes[st.inputs[0]]
                continue
            if st.kind != StepKind.VIEW:
                for v in st.outputs:
                    root(v)
                if st.out_view is not None:
                    d, inv = st.out_view
                    r, p, x = probes[st.outputs[0]]
                    probes[d] = (r, p, x.transpose(inv))
                continue
            out, src = st.outputs[0], st.inputs[0]
            r, p, x = probes[src]
            expr = st.view_expr
            y = eval(f"x{expr}", {"x": x, **at}) if expr else \
                x.reshape(size(st.nodes[0].params["shape"]))
            if np.may_share_memory(y, p):
                probes[out] = (r, p, y)
            else:
                root(out)
        return probes

    def _symbolic_gemm(self, n, dot_plan, bind, name_of):
        """(bound gemm_plan.SymbolicGemm, source of the flat a, b and out roots: the roots
        their views have at the hint), or None when BLAS cannot serve this product at any
        size (no library, mixed dtypes, a symbol whose hint the graph does not show)."""
        (a, b), out = n.inputs, n.outputs[0]
        d = out.dtype.np
        fn = blas.gemm_address(d) if blas.available() else None
        if fn is None or a.dtype.np != d or b.dtype.np != d:
            return None
        if self._probes_at is None:
            self._probes_at = functools.lru_cache(maxsize=64)(self._probes)
        hinted = gemm_plan.symbol_hints(self.graph, self.symbols)
        if None in hinted:
            return None
        probes = self._probes_at(hinted)
        roots = tuple(probes[v][0] for v in (a, b, out))
        blas.warm(d)
        plan = gemm_plan.SymbolicGemm(n, dot_plan, self.symbols, self._probes_at, roots, fn, d)
        self.gemm_how[n] = f"{blas.provider()} gemm, slabs chosen per call at its sizes"
        return bind(plan, "_gp"), tuple(
            self._sized(f"{name_of(r)}.reshape(-1)") if r in self.buf_of else
            f"{name_of(r)}.reshape(-1)" for r in roots)

    def _gemm_call(self, n, pa, sa, pb, sb, so, bind, name_of):
        """The line running this product as blas.gemm_stack over numba's threads (below
        blas.SERIAL_MAX multiply-adds: blas.gemm_serial on the calling thread), or None
        (np.matmul then): small products, no usable BLAS library, a dtype it has no gemm for,
        or an operand BLAS cannot read without a copy."""
        import numba
        (a, b), out = n.inputs, n.outputs[0]
        d = out.dtype.np
        fn = blas.gemm_address(d) if blas.available() else None
        if fn is None or a.dtype.np != d or b.dtype.np != d or \
                math.prod(sa) * sb[-1] < blas.SPLIT_MIN or math.prod(sa) * sb[-1] == 0:
            return None
        if self._probe is None:
            self._probe = self._probes()
        la, lb = (blas.gemm_layout(self._probe[v][2], p, s)
                  for v, p, s in ((a, pa, sa), (b, pb, sb)))
        if la is None or lb is None:
            return None

        def flat(v):   # (the flat array v's root, v's offset in it); bound when fixed
            r, p, x = self._probe[v]
            off = blas.offset_of(x, p)
            if r in self._fixed:
                return bind(self._fixed[r].reshape(-1), "_w"), off
            return f"{name_of(r)}.reshape(-1)", off

        lc = blas.gemm_layout(self._probe[out][2], None, so)
        if lc is None or lc[1] != blas.NO_TRANS:
            return None
        (fa, oa), (fb, ob), (fc, oc) = flat(a), flat(b), flat(out)
        blas.warm(d)
        batch, m, k, nn = so[:-2], sa[-2], sa[-1], sb[-1]
        serial = math.prod(sa) * sb[-1] < blas.SERIAL_MAX
        parts, cut_cols = (1, False) if serial else \
            blas.pieces(math.prod(batch), m, nn, numba.get_num_threads())
        arr = (lambda t: bind(np.array(t, np.int64), "_i"))
        self._gemms += 1
        slabs = f", {parts} {'column' if cut_cols else 'row'} slabs each" if parts > 1 else ""
        into = "" if self._probe[out][0] is out else \
            f", written into {self._probe[out][0].name}'s layout"
        where = "on the calling thread" if serial else "over numba's threads"
        self.gemm_how[n] = (f"{blas.provider()} gemm {where}: "
                            f"{math.prod(batch)} x ({m}x{k} @ {k}x{nn}){slabs}{into}")
        return (f"{'_gemm1' if serial else '_gemm'}({fn}, {la[1]}, {lb[1]}, {m}, {nn}, {k}, "
                f"{bind(d.type(1), '_c')}, {fa}, {oa}, {la[2]}, {fb}, {ob}, {lb[2]}, "
                f"{fc}, {oc}, {lc[2]}, {arr(batch)}, {arr(la[0])}, {arr(lb[0])}, "
                f"{arr(lc[0])}, {parts}, {cut_cols})")

    @property
    def source(self):
        """The generated driver (Python source of `program(*inputs)`)."""
        return self.prepared().driver_source

    def prepared(self):
        if not self._ready:
            self.prepare()
        return self

    def __call__(self, *arrays):
        if not self._ready:
            self.prepare()
        if len(arrays) != len(self.in_slots) + bool(self.symbols):
            raise TypeError(f"{self.graph.name}: expected {len(self.in_slots)} arrays"
                            + (f" and the values of {', '.join(self.symbols)}"
                               if self.symbols else "") + f", got {len(arrays)} arguments")
        return self.run(*arrays)

    def step_times(self, *arrays):
        """Run once, returning (outputs, seconds per step): the same generated driver with a
        clock read after each step."""
        if not self._ready:
            self.prepare()
        if self._timed is None:
            self._timed = self._driver(self._fixed, timed=True)[1]
        outs, t = self._timed(*arrays)
        return outs, [b - a for a, b in zip(t, t[1:])]

    def profiled(self, *arrays):
        """Run once through an instrumented copy of the driver (a clock read after each
        step): (outputs, [(StepEvent, start_ns, end_ns)]) for each kernel, product and
        reference step (codegen.step_events). Only a profiler calls it; the ordinary
        driver reads no clock."""
        if not self._ready:
            self.prepare()
        if self._profiled is None:
            run = self._driver(self._fixed, timed=True, clock=time.perf_counter_ns)[1]
            self._profiled = run, step_events(self.schedule, self.kernel_fns, self.gemm_how)
        run, events = self._profiled
        outs, t = run(*arrays)
        if self.symbols:
            values = dict(zip(self.symbols, arrays[-1]))
            events = [ev and ev.at(values) for ev in events]
        return outs, [(ev, a, b) for ev, a, b in zip(events, t, t[1:]) if ev is not None]

    def _normalise(self, a, shape, d):
        a = np.asarray(a)
        if a.shape != tuple(shape):
            raise ValueError(f"{self.graph.name}: input of shape {a.shape} where the program "
                             f"was compiled for {tuple(shape)}")
        if a.dtype != d:
            raise TypeError(f"{self.graph.name}: input of dtype {a.dtype} where the program "
                            f"was compiled for {d}")
        return a if a.flags.carray else np.array(a, order="C", copy=True)
