"""compile_graph: schedule -> emit -> load (disk cache) -> plan; the CompiledGraph object."""
import collections
import contextlib
import functools
import gc
import logging
import threading
import time

from aotgrad.codegen import cache, cost, low_precision, parallel_compile, tiers
from aotgrad.codegen.compile_worker import numba_signature
from aotgrad.ir.passes import cse
from aotgrad.codegen.emit_base import PAR_MIN
from aotgrad.codegen.emitter import module_source
from aotgrad.codegen.index import SymbolicSizeInKernel
from aotgrad.codegen.executor import Plan
from aotgrad.codegen.first_tier import reference_kernel
from aotgrad.codegen.rent import Rent
from aotgrad.codegen.parts import PartsKernel
from aotgrad.codegen.scheduler import Kernel, Scheduler, StepKind
from aotgrad.codegen.size_variants import emit_variants, same_arguments
from aotgrad.codegen.symbols import concrete_graph, symbols_of

log = logging.getLogger(__name__)


def _sig_desc(spec):
    """The kernel's argument types as plain data (see compile_worker.numba_signature)."""
    # a kernel in parts first takes its phase, part, part count and workspace (codegen.parts)
    out = [["size"], ["size"], ["size"], ["array", "uint8", 1]] if spec.parts else []
    for a in spec.args:
        if a.kind == "size":
            out.append(["size"])
        elif a.kind == "const":
            out.append(["scalar", a.dtype.np.name])
        else:
            out.append(["array", a.var.dtype.np.name, max(1, len(a.shape))])
    return out


def _numba_sig(spec):
    return numba_signature(_sig_desc(spec))


def runnable(fn, spec):
    """What the driver calls for kernel `spec` compiled as `fn`: a kernel in parts runs
    them on the thread pool (codegen.parts)."""
    return PartsKernel(fn, spec.parts) if spec.parts else fn


_STATUS_ORDER = ("rebuilt", "new", "disk", "memory")


@contextlib.contextmanager
def _collector_paused():
    """Python's cyclic garbage collector off while a program is scheduled and emitted:
    those stages make many small, long-lived containers (index terms, per-kernel maps)
    and no cycles to collect, and with the collector on, its passes over the heap (which
    holds the traced graphs) made their time grow faster than the program (see
    benchmarks/bench_compile_depth.py). Reference counting still frees everything; the
    collector is turned back on only where it was on (another thread's compile may have
    paused it)."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def schedule_graph(graph):
    """How codegen runs `graph`, before any kernel is emitted: (the graph it schedules, with
    16-bit floats kept as float32 and identical subexpressions computed once; the 16-bit
    dtypes of its inputs and outputs (low_precision.widen); its Scheduler; its schedule)."""
    graph, low_in, low_out = low_precision.widen(graph)
    with _collector_paused():
        graph = cse(graph, keep_outputs=True)
        scheduler = Scheduler(graph)
        return graph, (low_in, low_out), scheduler, scheduler.run()


class CompiledGraph:
    """A Graph compiled to fused Numba kernels + BLAS calls. Call it with numpy arrays.

    Each distinct kernel lives in a generated module of its own (prelude, the helpers it
    uses, the kernel), so a kernel shared by programs (a forward and its backward, two
    workloads) is compiled and cached once. Kernels missing from the disk cache are
    compiled on several cores (parallel_compile)."""

    def __init__(self, graph, name="graph", reuse_outputs=False, in_helpers=False):
        t0 = time.perf_counter()
        # in_helpers: kernels missing from the disk cache are compiled by helper processes
        # only, and loaded from the cache here (a compile in a background thread of this
        # process would hold the interpreter lock for seconds: the eager kernel library)
        self._in_helpers = in_helpers
        self.graph, self.name = graph, name
        graph, (low_in, low_out), self.scheduler, self.schedule = schedule_graph(graph)
        self.scheduled_graph = graph
        with _collector_paused():
            t1 = time.perf_counter()
            helpers, own = set(), {}
            self.specs = {}
            self.small_variants = {}   # step -> its size_variants.SmallVariant
            for st in self.schedule.steps:
                if isinstance(st, Kernel):
                    own[st] = set()
                    self.specs[st], small = emit_variants(self.scheduler, st, own[st])
                    helpers |= own[st]
                    if small is not None:
                        self.small_variants[st] = small
                        helpers |= small.helpers
        self._own = own
        # step -> the spec of its size variant that the traced sizes do not run and that is
        # not compiled yet: compiled on the first call that needs it (codegen.size_variants)
        self.deferred = {}
        for st, v in self.small_variants.items():
            other = self.specs[st] if v.runs_at_hint() else v.spec
            if same_arguments(v.spec, self.specs[st]) and not cache.has_machine_code(
                    module_source([other], own[st] if other is self.specs[st] else v.helpers),
                    other.name):
                self.deferred[st] = other
        self._deferred_lock = threading.Lock()
        self.first_tier = {}           # step -> its ReferenceKernel until compiled (tiers)
        self.first_tier_done = set()   # names of kernels that ran on numpy first, compiled
        reference_first = tiers.enabled() and tiers.first_tier() is tiers.FirstTier.REFERENCE \
            and not symbols_of(graph)
        on_disk = cache.compiled_on_disk()
        for st, spec in self.specs.items():
            if self.deferred.get(st) is spec or not reference_first:
                continue
            if not cache.has_machine_code(module_source([spec], own[st]), spec.name, on_disk):
                ref = reference_kernel(st, spec)
                if ref is not None:
                    self.first_tier[st] = ref
        # the whole program as one text (what `source` shows); names the kernels k_<hash>
        self.source = module_source(list(self.specs.values()) +
                                    [v.spec for v in self.small_variants.values()], helpers)
        t2 = time.perf_counter()
        self._units = {}  # kernel name -> [spec, module, how, signature, helpers]
        for st, spec in self.specs.items():
            if spec.name not in self._units and self.deferred.get(st) is not spec:
                mod, how = cache.load_module(module_source([spec], own[st]))
                self._units[spec.name] = [spec, mod, how, _sig_desc(spec), own[st]]
        for st, v in self.small_variants.items():
            if v.spec.name not in self._units and self.deferred.get(st) is not v.spec:
                mod, how = cache.load_module(module_source([v.spec], v.helpers))
                self._units[v.spec.name] = [v.spec, mod, how, _sig_desc(v.spec), v.helpers]
        hows = [u[2] for u in self._units.values()]
        self.cache_status = next((h for h in _STATUS_ORDER if h in hows), "memory")
        self.helper_compiled = 0
        fns = self._compile_all()
        t3 = time.perf_counter()
        self.plan = Plan(graph, self.schedule, fns, reuse_outputs=reuse_outputs,
                         symbols=symbols_of(graph), low_precision=(low_in, low_out),
                         small_kernels=self.small_fns)
        self.compile_seconds = time.perf_counter() - t0
        # seconds per stage: schedule (CSE included), codegen (kernel and driver source),
        # numba (loading the modules and compiling the kernels)
        self.stage_seconds = {"schedule": t1 - t0, "codegen": t2 - t1 + time.perf_counter() - t3,
                              "numba": t3 - t2}
        self.rent = None       # the first tier's account (codegen.rent.Rent)
        if self.first_tier:
            specs = {s.name: s for s in self._on_first_tier()}
            units = [self._unit(name) for name in specs]
            # a program of a few milliseconds or more runs its steps on every core, so a
            # compile beside them slows them as much as it advances (the step waits for the
            # thread the compile delays): its compiles are held back until its first-tier
            # runs have cost as much as they would take, and that call waits for them, with
            # every core (the ski-rental rule, buying once the rent paid equals the price;
            # left at exit, they go to the detached helper, so the next run starts warm). A
            # smaller program, on one thread, compiles beside its steps on helpers that take
            # the idle cores only, and waits once its rent reaches the remaining compiles
            self.first_tier_boosted = tiers.first_tier_boosted(
                cost.estimated_seconds(self.schedule))
            tiers.track(units, tiers.Priority.FIRST_TIER)
            held = tiers.defer(self._compile_first_tier, units,
                               priority=tiers.Priority.FIRST_TIER) \
                if self.first_tier_boosted else None
            self.rent = Rent(
                self.name, {name: cost.compile_seconds(s) for name, s in specs.items()},
                parallel_compile.background_workers(), start=held,
                runs_per_call=collections.Counter(s.name for s in self._on_first_tier()))
            for ref in self.first_tier.values():
                ref.rent = self.rent
                ref.holds_workers = bool(self.first_tier_boosted)
            if held is None:
                tiers.submit(functools.partial(self._compile_first_tier, units),
                             tiers.Priority.FIRST_TIER)

    def _on_first_tier(self):
        return [self.specs[st] for st in self.first_tier]

    def _unit(self, name):
        u = self._units[name]
        return parallel_compile.Unit(u[1].__file__, u[1].__name__, name, u[3], len(u[0].body))

    def _compile_first_tier(self, units):
        """Background job (codegen.tiers): compile the kernels that run on numpy for now,
        in helper processes (each swapped into the driver as soon as it is compiled; first
        those whose numpy run took longest for their compile cost), or here where no helper
        can; True once all are swapped in. A call waiting for them (codegen.rent.Rent) goes on
        when the job ends, whatever its outcome."""
        self.rent.started()
        try:
            return self._compile_first_tier_units(units)
        finally:
            self.rent.finished()

    def _compile_first_tier_units(self, units):
        def swap_in(unit):
            if not tiers.begin_load():          # the interpreter is exiting
                return
            try:
                fn = self._compile_one(unit.kernel)    # numba's disk cache, filled by a helper
                for st in [st for st in self.first_tier if self.specs[st].name == unit.kernel]:
                    self.plan.swap_kernel(st, runnable(fn, self.specs[st]), self.specs[st])
                    del self.first_tier[st]
                self.first_tier_done.add(unit.kernel)
                self.rent.compiled(unit.kernel)
                tiers.untrack(unit)
            except Exception:       # the numpy kernel stays: correct, only slower
                log.warning("kernel %s did not compile in the background; its numpy "
                            "reference stays in use", unit.kernel, exc_info=True)
            finally:
                tiers.end_load()
        ready = [u for u in units if getattr(self._units[u.kernel][1], u.kernel).overloads]
        for unit in ready:      # compiled here meanwhile (another program shares the kernel)
            swap_in(unit)
        units = [u for u in units if u not in ready]

        def numpy_seconds(name):      # read as each helper takes its next kernel
            return sum(ref.seconds for st, ref in list(self.first_tier.items())
                       if self.specs[st].name == name)
        done = parallel_compile.compile_in_helpers(
            units, cache.cache_dir(), on_done=swap_in,
            order=lambda u: (-numpy_seconds(u.kernel) / u.cost, u.cost),
            boosted=self.first_tier_boosted) \
            if units else []
        for unit in units:       # no helpers, or one failed: compile here, in this thread
            if unit.kernel not in self.first_tier_done and not tiers.closing():
                swap_in(unit)
        log.debug("program %s: %d of %d kernels compiled by helpers in the background",
                  self.name, len(done), len(units))
        return not self.first_tier

    @property
    def module_names(self):
        return sorted(u[1].__name__ for u in self._units.values())

    def _compile_one(self, name):
        """Compile (or load from the disk cache) one kernel in this process. A failure is
        taken for a corrupt cache entry once: the module is rebuilt from scratch and compiled
        again (a second failure is a real error and propagates)."""
        u = self._units[name]
        spec, mod = u[0], u[1]
        sig = numba_signature(u[3])
        fn = getattr(mod, name)
        loaded = bool(fn.overloads)
        misses = sum(fn.stats.cache_misses.values())
        try:
            fn.compile(sig)
            if not loaded and sum(fn.stats.cache_misses.values()) > misses:
                cache.stats.compiled += 1     # numba's disk cache had no machine code
        except Exception as e:
            log.warning("kernel %s of cached module %s did not compile (%s: %s); rebuilding "
                        "the module", name, mod.__name__, type(e).__name__, e)
            cache.purge(mod.__name__)
            u[1], _ = cache.load_module(module_source([spec], u[4]), fresh=True)
            u[2] = "rebuilt"
            self.cache_status = "rebuilt"
            getattr(u[1], name).compile(sig)
        return getattr(u[1], name)

    def _compile_all(self):
        later = {spec.name for spec in self._on_first_tier()}
        todo = [self._unit(name) for name, u in self._units.items()
                if u[2] in ("new", "rebuilt") and name not in later]
        if todo and self._in_helpers:
            self.helper_compiled = len(parallel_compile.compile_in_helpers(todo,
                                                                           cache.cache_dir()))
            cache.stats.compiled += self.helper_compiled
        elif todo:
            self.helper_compiled = parallel_compile.compile_units(
                todo, lambda unit: self._compile_one(unit.kernel), cwd=cache.cache_dir())
            cache.stats.compiled += self.helper_compiled
        fn_of = {name: self._compile_one(name) for name in self._units
                 if name not in later}                                  # cache/memory hits

        def fn(st, spec):
            compiled = fn_of.get(spec.name)
            return self._stand_in(st, spec) if compiled is None else runnable(compiled, spec)
        self.small_fns = {st: (fn(st, v.spec), v) for st, v in self.small_variants.items()}
        # (a first-tier step runs its numpy reference until its kernel is compiled; first
        # tiers are for fixed sizes, size variants for symbolic ones: a step has one or neither)
        return {st: (self.first_tier[st] if st in self.first_tier else fn(st, spec), spec)
                for st, spec in self.specs.items()}

    # -- a size variant compiled on first use (codegen.size_variants) ----------------------
    def _stand_in(self, st, spec):
        """What the driver calls for step st's deferred variant `spec` until it is
        compiled: its first call asks for the compile and, as every call does until the
        compile is done, runs the step's other variant (the same arguments)."""
        def first_call(*args):
            return self._start_deferred(st, spec)(*args)
        return first_call

    def _start_deferred(self, st, spec):
        with self._deferred_lock:
            small = spec is self.small_variants[st].spec
            other = self.plan.kernel_fns[st][0] if small else self.plan.small_kernels[st][0]
            if self.deferred.get(st) is spec:
                del self.deferred[st]
                self._swap_variant(st, spec, other)
                if tiers.enabled():
                    tiers.submit(functools.partial(self._compile_deferred, st, spec))
                else:
                    self._compile_deferred(st, spec)
        return other

    def _swap_variant(self, st, spec, fn):
        if spec is self.small_variants[st].spec:
            self.plan.swap_small(st, fn)
        else:
            self.plan.swap_kernel(st, fn, spec)

    def _compile_deferred(self, st, spec):
        """Compile step st's variant `spec` (in helper processes when it runs in the
        background), load it and swap it into the driver."""
        v = self.small_variants[st]
        text = module_source([spec], v.helpers if spec is v.spec else self._own[st])
        mod, _ = cache.load_module(text)
        if tiers.enabled() and not cache.has_machine_code(text, spec.name):
            cache.stats.compiled += len(parallel_compile.compile_in_helpers(
                [parallel_compile.Unit(mod.__file__, mod.__name__, spec.name, _sig_desc(spec),
                                       len(spec.body))], cache.cache_dir()))
        if not tiers.begin_load():          # the interpreter is exiting
            return False
        try:
            fn = getattr(mod, spec.name)
            misses = sum(fn.stats.cache_misses.values())
            fn.compile(_numba_sig(spec))    # from numba's disk cache when a helper compiled it
            if sum(fn.stats.cache_misses.values()) > misses:
                cache.stats.compiled += 1   # compiled here
            self._swap_variant(st, spec, runnable(fn, spec))
        finally:
            tiers.end_load()
        return True

    def __call__(self, *arrays):
        return self.plan(*arrays)

    def kernels(self):
        return [st for st in self.schedule.steps if isinstance(st, Kernel)]

    def report(self):
        sch, plan = self.schedule, self.plan.prepared()
        lines = [f"program {self.name}: {len(sch.steps)} steps, "
                 f"{len(self.kernels())} kernels ({len(self._units)} distinct), "
                 f"{len(self._units)} modules [{self.cache_status}], "
                 f"compile {self.compile_seconds:.2f}s"
                 + (f" ({self.helper_compiled} kernels in helper processes)"
                    if self.helper_compiled else "")]
        for i, st in enumerate(sch.steps):
            if isinstance(st, Kernel):
                spec = self.specs[st]
                par = "numpy reference impls until it is compiled in the background" \
                    if st in self.first_tier else \
                    f"parallel, in parts on threads: {spec.parts.loops} loop(s)" \
                    if spec.parts else "parallel" if spec.parallel else "serial"
                small = self.small_variants.get(st)
                if self.deferred.get(st) is spec:
                    par += ", compiled on the first call that needs it"
                if small is not None:
                    par += f"; {small.spec.name}, serial, below {PAR_MIN} elements of work" + (
                        ", compiled on the first call that needs it"
                        if self.deferred.get(st) is small.spec else "")
                lines.append(f"  [{i}] kernel {spec.name} ({par}): {st.describe()}")
            else:
                n = st.nodes[0]
                what = plan.gemm_how.get(n) or (st.route and st.route.describe()) or {
                    StepKind.DOT: "BLAS np.matmul", StepKind.REFERENCE: "reference (numpy impl)",
                    StepKind.VIEW: "view (reshape)",
                    StepKind.CHECK: "run-time check of values (numpy)"}[st.kind]
                lines.append(f"  [{i}] {what}: {n.prim.name} -> "
                             f"{', '.join(v.name for v in st.outputs)}")
        lines.append("refused fusions:")
        lines += [f"  {what}: {why}" for what, why in sch.refused] or ["  (none)"]
        lines.append(f"buffers: {len(plan.buffers)} workspace buffers, "
                     f"{plan.workspace_bytes()} bytes, shared by {len(plan.buf_of)} values; "
                     f"{len(plan.out_alloc)} outputs allocated per call"
                     + (" (reused across calls)" if plan.reuse_outputs else ""))
        return "\n".join(lines)


class PerSizePlan:
    """The driver of a graph with symbolic sizes that one set of kernels cannot serve (a
    kernel would need a size in its text): one static program per set of symbol values,
    compiled on first use. Called as a symbolic program is (values as a trailing tuple)."""

    def __init__(self, graph, symbols, name, reuse_outputs):
        self.graph, self.symbols, self.name = graph, symbols, name
        self.reuse_outputs = reuse_outputs
        self.in_slots = list(range(len(graph.inputs)))
        self.owned_outputs = [False] * len(graph.outputs)   # unknown until a size runs
        self.programs = {}            # symbol values -> CompiledGraph
        self._lock = threading.Lock()

    def program(self, values):
        prog = self.programs.get(values)
        if prog is None:
            with self._lock:
                prog = self.programs.get(values)
                if prog is None:
                    prog = self.programs[values] = CompiledGraph(
                        concrete_graph(self.graph, dict(zip(self.symbols, values))),
                        name=self.name, reuse_outputs=self.reuse_outputs)
        return prog

    def prepared(self):
        return self

    def runner(self, trusted=0):
        def run(*args):
            return self.program(tuple(args[-1])).plan.prepared().runner(trusted)(*args[:-1])
        return run

    def __call__(self, *args):
        return self.runner()(*args)

    def profiled(self, *args):
        return self.program(tuple(args[-1])).plan.profiled(*args[:-1])

    def step_times(self, *args):
        return self.program(tuple(args[-1])).plan.step_times(*args[:-1])

    @property
    def source(self):
        return "\n".join(f"# at {dict(zip(self.symbols, v))}\n{p.plan.source}"
                          for v, p in self.programs.items())


class PerSizeGraph:
    """compile_graph's answer for such a graph: see PerSizePlan."""

    def __init__(self, graph, symbols, name, reuse_outputs, why):
        self.graph, self.name, self.why = graph, name, why
        self.plan = PerSizePlan(graph, symbols, name, reuse_outputs)

    def __call__(self, *args):
        return self.plan(*args)

    def report(self):
        lines = [f"program {self.name}: compiled per size of {', '.join(self.plan.symbols)} "
                 f"({self.why}); {len(self.plan.programs)} sizes so far"]
        for v, p in self.plan.programs.items():
            lines.append(f"at {dict(zip(self.plan.symbols, v))}:")
            lines.append(p.report())
        return "\n".join(lines)


def compile_graph(graph, name="forward", reuse_outputs=False, in_helpers=False):
    """Compile an IR Graph into a CompiledGraph (a callable over numpy arrays).

    A graph with symbolic sizes (codegen.symbols_of) is called with their values as one
    more argument, a tuple in that order; its kernels are the same for every value. Where
    a kernel would need a size in its text, the graph is compiled per set of values
    instead (PerSizeGraph), said in the log and its report.

    reuse_outputs=True also keeps output arrays across calls (faster; each call overwrites
    the previous call's results). in_helpers=True compiles missing kernels in helper
    processes only (see CompiledGraph)."""
    symbols = symbols_of(graph)
    if not symbols:
        return CompiledGraph(graph, name=name, reuse_outputs=reuse_outputs,
                             in_helpers=in_helpers)
    try:
        return CompiledGraph(graph, name=name, reuse_outputs=reuse_outputs,
                             in_helpers=in_helpers)
    except SymbolicSizeInKernel as e:
        why = str(e)
    except TypeError as e:       # int() of a symbolic size: a concrete size was needed
        if "outside a trace" not in str(e):
            raise
        why = str(e)
    log.info("program %s: compiled per size of %s: %s", name, ", ".join(symbols), why)
    return PerSizeGraph(graph, symbols, name, reuse_outputs, why)
