"""compile_graph: schedule -> emit -> load (disk cache) -> plan; the CompiledGraph object."""
import time

import numba
import numpy as np

from aotgrad.codegen import cache
from aotgrad.ir.passes import cse
from aotgrad.codegen.emitter import emit_kernel, module_source
from aotgrad.codegen.executor import Plan
from aotgrad.codegen.scheduler import Kernel, Scheduler


def _numba_sig(spec):
    types = []
    for a in spec.args:
        if a.kind == "size":
            types.append(numba.int64)
        elif a.kind == "const":
            types.append(numba.typeof(a.dtype.np.type(a.value)))
        else:
            types.append(numba.types.Array(numba.from_dtype(a.var.dtype.np),
                                           max(1, len(a.shape)), "C"))
    return tuple(types)


class CompiledGraph:
    """A Graph compiled to fused Numba kernels + BLAS calls. Call it with numpy arrays."""

    def __init__(self, graph, name="graph", reuse_outputs=False):
        t0 = time.perf_counter()
        self.graph, self.name = graph, name
        graph = cse(graph, keep_outputs=True)  # identical subexpressions computed once
        self.scheduled_graph = graph
        self.scheduler = Scheduler(graph)
        self.schedule = self.scheduler.run()
        helpers = set()
        self.specs = {}
        for st in self.schedule.steps:
            if isinstance(st, Kernel):
                self.specs[st] = emit_kernel(self.scheduler, st, helpers)
        self.source = module_source(list(self.specs.values()), helpers)
        self.module_name = cache.module_name(self.source)
        self.module, self.cache_status = cache.load_module(self.source)
        try:
            fns = self._compile_all()
        except Exception:  # a corrupt numba cache entry: rebuild it from scratch
            cache.purge(self.module_name)
            self.module, _ = cache.load_module(self.source, fresh=True)
            self.cache_status = "rebuilt"
            fns = self._compile_all()
        self.plan = Plan(graph, self.schedule, fns, reuse_outputs=reuse_outputs)
        self.compile_seconds = time.perf_counter() - t0

    def _compile_all(self):
        fns = {}
        done = set()
        for st, spec in self.specs.items():
            fn = getattr(self.module, spec.name)
            sig = _numba_sig(spec)
            if (spec.name, sig) not in done:
                fn.compile(sig)
                done.add((spec.name, sig))
            fns[st] = (fn, spec)
        return fns

    def __call__(self, *arrays):
        return self.plan(*arrays)

    def kernels(self):
        return [st for st in self.schedule.steps if isinstance(st, Kernel)]

    def report(self):
        sch, plan = self.schedule, self.plan
        lines = [f"program {self.name}: {len(sch.steps)} steps, "
                 f"{len(self.kernels())} kernels ({len({s.name for s in self.specs.values()})} "
                 f"distinct), module {self.module_name} [{self.cache_status}], "
                 f"compile {self.compile_seconds:.2f}s"]
        for i, st in enumerate(sch.steps):
            if isinstance(st, Kernel):
                spec = self.specs[st]
                par = "parallel" if spec.parallel else "serial"
                lines.append(f"  [{i}] kernel {spec.name} ({par}): {st.describe()}")
            else:
                n = st.nodes[0]
                what = {"dot": "BLAS np.matmul", "ref": "reference (numpy impl)",
                        "view": "view (reshape)"}[st.kind]
                lines.append(f"  [{i}] {what}: {n.prim.name} -> "
                             f"{', '.join(v.name for v in st.outputs)}")
        lines.append("refused fusions:")
        lines += [f"  {what}: {why}" for what, why in sch.refused] or ["  (none)"]
        lines.append(f"buffers: {len(plan.buffers)} workspace buffers, "
                     f"{plan.workspace_bytes()} bytes, shared by {len(plan.buf_of)} values; "
                     f"{len(plan.out_alloc)} outputs allocated per call"
                     + (" (reused across calls)" if plan.reuse_outputs else ""))
        return "\n".join(lines)


def compile_graph(graph, name="forward", reuse_outputs=False):
    """Compile an IR Graph into a CompiledGraph (a callable over numpy arrays).

    reuse_outputs=True also keeps output arrays across calls (faster; each call overwrites
    the previous call's results)."""
    return CompiledGraph(graph, name=name, reuse_outputs=reuse_outputs)
