"""Kernel bisection: replay a compiled program step by step against the reference prims.

Every value of the program's (scheduled) graph is first computed node by node with the
prims' numpy reference implementations. Each step of the compiled program (a fused kernel,
a matrix product, a reference step) is then run on its own, on the reference values of its
inputs, and its outputs are compared with the reference values of its outputs. The first
step whose outputs differ is where the compiled program goes wrong; running each step on
correct inputs keeps an error from being blamed on the steps after it.
"""
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np

from aotgrad.codegen.executor import Plan
from aotgrad.codegen.scheduler import Kernel
from aotgrad.ir.core import Graph
from aotgrad.ir.printer import format_node
from aotgrad.testing.close import Mismatch, default_tolerances, mismatch


@dataclass
class StepReport:
    """One step of a compiled program replayed against the reference."""
    program: str              # the compiled graph's name (e.g. f_0_forward)
    index: int                # position in the program's step list
    kind: str                 # kernel | dot | ref
    kernel: str | None        # the generated kernel's name (kernel steps)
    description: str
    nodes: list               # the IR nodes the step computes
    output: str = ""          # the first output that differs
    error: Mismatch | None = None
    replay_error: str = ""    # the step could not be replayed on its own (why)

    @property
    def diverges(self):
        return self.error is not None

    def lines(self):
        """Provenance of the step's nodes: 'file:line `source` (op)', one per distinct line."""
        seen = []
        for n in self.nodes:
            p = n.provenance
            if p is None:
                continue
            text = f"{p.where()}" + (f" `{p.source}`" if p.source else "") + \
                (f" ({'backward of ' if p.phase == 'bw' else ''}{p.op})" if p.op else "")
            if text not in seen:
                seen.append(text)
        return seen

    def __str__(self):
        head = f"step [{self.index}] of {self.program}: " + \
            (f"kernel {self.kernel}" if self.kernel else self.kind) + f" ({self.description})"
        out = [head]
        if self.error is not None:
            out.append(f"output {self.output} differs from the reference prims:")
            out += ["  " + s for s in self.error.describe().splitlines()]
        out.append("IR nodes:")
        out += ["  " + format_node(n) for n in self.nodes]
        src = self.lines()
        if src:
            out.append("user source lines:")
            out += ["  " + s for s in src]
        return "\n".join(out)


@dataclass
class BisectReport:
    """The result of replaying one compiled program; `first` is the first diverging step."""
    program: str
    steps: list = field(default_factory=list)   # StepReport per replayed step

    @property
    def first(self):
        return next((s for s in self.steps if s.diverges), None)

    def __str__(self):
        f = self.first
        if f is not None:
            return f"first diverging step of {self.program}:\n{f}"
        worst = [s for s in self.steps if s.replay_error]
        text = f"{self.program}: every step matches the reference prims on its own"
        if worst:
            text += "; not replayed: " + "; ".join(
                f"[{s.index}] {s.kernel or s.kind}: {s.replay_error}" for s in worst)
        return text


def reference_values(graph, inputs):
    """Every value of `graph` computed with the prims' numpy reference implementations."""
    env = dict(zip(graph.inputs, inputs))
    for n in graph.nodes:
        outs = n.prim.impl(*[env[v] for v in n.inputs], **n.params)
        if not n.prim.multiple_results:
            outs = (outs,)
        env.update(zip(n.outputs, (np.asarray(o) for o in outs)))
    return env


def _step_runner(plan, st):
    """A one-step program running step `st` of `plan` with the same compiled kernel."""
    ins = list(st.inputs)
    if isinstance(st, Kernel):
        spec = plan.kernel_fns[st][1]
        for a in spec.args:
            if a.kind == "in" and a.var not in ins:
                ins.append(a.var)
    outs = list(st.outputs)
    if st.out_view is not None:
        outs.append(st.out_view[0])
    sub = Graph(ins, st.nodes, outs, name=f"step_{id(st)}")
    fns = {st: plan.kernel_fns[st]} if isinstance(st, Kernel) else {}
    return ins, Plan(sub, SimpleNamespace(steps=[st]), fns)


def bisect_compiled_graph(compiled, inputs, rtol=None, atol=None):
    """Replay `compiled` (a codegen CompiledGraph) step by step on `inputs` (the arrays it
    was called with). Returns a BisectReport."""
    graph, plan = compiled.scheduled_graph, compiled.plan
    env = reference_values(graph, [np.array(x, copy=True) for x in inputs])
    report = BisectReport(compiled.name)
    for i, st in enumerate(compiled.schedule.steps):
        if st.kind == "view":   # no arithmetic: a reshape or strided view of a value
            continue
        spec = plan.kernel_fns.get(st, (None, None))[1] if isinstance(st, Kernel) else None
        desc = st.describe() if isinstance(st, Kernel) else \
            f"{st.nodes[0].prim.name} -> {', '.join(v.name for v in st.outputs)}"
        r = StepReport(compiled.name, i, st.kind, spec.name if spec else None, desc,
                       list(st.nodes))
        report.steps.append(r)
        try:
            ins, runner = _step_runner(plan, st)
            got = runner(*[np.array(env[v], copy=True) for v in ins])
        except Exception as e:  # noqa: BLE001 (reported, the other steps still replay)
            r.replay_error = f"{type(e).__name__}: {e}"
            continue
        for v, g in zip(runner.graph.outputs, got):
            want = env[v]
            g = np.asarray(g)
            if g.shape != want.shape:
                r.output, r.error = v.name, Mismatch(g.size, want.size, np.inf, (), np.inf, (),
                                                     0.0, 0.0)
                break
            rt, at = (rtol, atol) if rtol is not None else default_tolerances(want.dtype)
            m = mismatch(g, want, rt, at, equal_nan=True)
            if m is not None:
                r.output, r.error = v.name, m
                break
    return report
