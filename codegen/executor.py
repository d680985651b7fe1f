"""Executor plan: a flat list of steps over buffers planned ahead of time.

Every materialised value gets a slot. Intermediates live in a workspace allocated once
(on the first call) and shared between values whose lifetimes do not overlap. The step list
then runs as one straight-line Python function (`plan.source`, like a wrapper around the
kernels), written by codegen/driver_source.py: a call checks its inputs, allocates the
outputs and runs the lines: no per-step dispatch, no env list. The Plan keeps what its
drivers share: the buffer plan, the workspace, the kernels (swapped in as they compile) and
the drivers made so far.
"""
import math
import os
import threading
import time

import numpy as np

from aotgrad.codegen import blas, parallel_compile
from aotgrad.codegen.driver_source import DriverWriter
from aotgrad.codegen.scheduler import StepKind
from aotgrad.codegen.step_events import step_events
from aotgrad.ir.symbolic import evaluate

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
        self.view_caches = []           # per driver of a symbolic plan: values -> views
        self.bound_kernels = []         # per driver: (its globals, {step: global name})
        self.gemm_how = {}               # dot node -> how its product runs (the last driver's)
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
            if st.into is not None:           # a product written into a concatenation
                self.alias[st.outputs[0]] = st.into.root
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
            # a product written into a concatenation stores into the concatenation's
            # buffer, allocated at its first part
            for v in (st.outputs if st.into is None else [st.into.root]):
                self._slot(v)
                if v in self.buf_of:
                    continue
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
        keep_freed_memory()
        with parallel_compile.foreground():   # may compile board.post (first use)
            self._prepare()

    def _prepare(self):
        if self.symbols:
            fixed_vars = {}   # sizes known per call: workspace views made per call
            self.workspace = [np.empty(0, dtype=np.dtype(d)) for d, n in self.buffers]
        else:
            ws = [np.empty(n, dtype=np.dtype(d)) for d, n in self.buffers]
            fixed_vars = {v: ws[b][:math.prod(v.shape)].reshape(v.shape)
                          for v, b in self.buf_of.items()}
        for st in self.schedule.steps:
            if st.into is not None and st.into.root in fixed_vars:
                fixed_vars[st.outputs[0]] = st.into.view(fixed_vars[st.into.root],
                                                         st.outputs[0].shape)
        for st in self.schedule.steps:
            if st.out_view is not None and st.outputs[0] in fixed_vars:
                d, inv = st.out_view
                fixed_vars[d] = fixed_vars[st.outputs[0]].transpose(inv)
        self.out_alloc_spec = [(self.slot[v], v.shape, v.dtype.np) for v in self.out_alloc]
        self.copy_slots = [self.slot[v] for v in self.copy_outputs]
        self.fixed_views, self._timed, self._profiled = fixed_vars, None, None
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
            r = self._runners[trusted] = self._driver(self.fixed_views, trusted=trusted)[1]
        return r

    def _driver(self, fixed, timed=False, trusted=0, clock=time.perf_counter, reporting=False):
        with self._swap_lock:
            return DriverWriter(self, fixed, timed, trusted, clock, reporting).build()

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
            r = self._runners[key] = self._driver(self.fixed_views, trusted=trusted,
                                                  reporting=True)[1]
        return r


    def swap_kernel(self, st, fn, spec):
        """Run step `st` with `fn` (same arguments) from the next call on, in every driver
        made so far and later (a compiled kernel replacing its numpy first tier, a size
        variant compiled on first use)."""
        with self._swap_lock:
            self.kernel_fns[st] = (fn, spec)
            self._profiled = None          # (its events say how each kernel runs)
            for g, knames in self.bound_kernels:
                if st in knames:
                    g[knames[st]] = fn

    def swap_small(self, st, fn):
        """Run the small-size variant of step `st` (small_kernels) with `fn` from the next
        call on, in every driver made so far and later."""
        with self._swap_lock:
            variant = self.small_kernels[st][1]
            self.small_kernels[st] = (fn, variant)
            for g, knames in self.bound_kernels:
                if variant in knames:
                    g[knames[variant]] = fn


    def clear_views(self):
        for cache in self.view_caches:
            cache.clear()


    def layout_probes(self, values=None):
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
                    if st.into is None:
                        root(v)
                        continue
                    if st.into.root not in probes:    # a concatenation, at its first part
                        root(st.into.root)
                    r, p, x = probes[st.into.root]
                    probes[v] = (r, p, st.into.view(x, size(v.shape)))
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
            self._timed = self._driver(self.fixed_views, timed=True)[1]
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
            run = self._driver(self.fixed_views, timed=True, clock=time.perf_counter_ns)[1]
            self._profiled = run, step_events(self.schedule, self.kernel_fns, self.gemm_how)
        run, events = self._profiled
        outs, t = run(*arrays)
        if self.symbols:
            values = dict(zip(self.symbols, arrays[-1]))
            events = [ev and ev.at(values) for ev in events]
        return outs, [(ev, a, b) for ev, a, b in zip(events, t, t[1:]) if ev is not None]

    def normalise_input(self, a, shape, d):
        a = np.asarray(a)
        if a.shape != tuple(shape):
            raise ValueError(f"{self.graph.name}: input of shape {a.shape} where the program "
                             f"was compiled for {tuple(shape)}")
        if a.dtype != d:
            raise TypeError(f"{self.graph.name}: input of dtype {a.dtype} where the program "
                            f"was compiled for {d}")
        return a if a.flags.carray else np.array(a, order="C", copy=True)
