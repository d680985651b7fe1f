"""What a profiler shows of each step of a compiled program: one StepEvent per fused kernel,
matrix product and reference (numpy) step, made once per program from its schedule.

The executor's instrumented driver (`Plan.profiled`) reads a clock after each step; the
compiler turns the intervals into profiler events carrying these descriptions. The
ordinary driver reads no clock and knows nothing of this module.
"""
import dataclasses
import math

from aotgrad.codegen.scheduler import Kernel, StepKind
from aotgrad.ir.prims import dot_dims
from aotgrad.ir.symbolic import evaluate


@dataclasses.dataclass(frozen=True)
class StepEvent:
    """name: the event's name (the profiler groups events by it: a kernel shared by several
    steps, or the same product shape, is one row); shapes: the shapes the step reads;
    nodes: the IR nodes it computes (fused node count); bytes: memory it reads and writes
    (each value once); flops: floating-point operations of a product (0: not counted);
    how: how the step runs."""
    name: str
    shapes: tuple
    nodes: int
    bytes: int
    flops: int
    how: str

    def details(self):
        """The event's details as the profiler records them (keyword arguments)."""
        return {"input_shapes": [list(s) for s in self.shapes], "fused_nodes": self.nodes,
                "bytes": self.bytes, "flops": self.flops, "detail": self.how}

    def at(self, values):
        """The event of a program with symbolic sizes at one call's symbol values (its
        name keeps the symbols: one row for every size)."""
        return dataclasses.replace(
            self, shapes=tuple(tuple(evaluate(d, values) for d in s) for s in self.shapes),
            bytes=evaluate(self.bytes, values), flops=evaluate(self.flops, values))


def value_bytes(v):
    return math.prod(v.shape) * v.dtype.itemsize


def _moved(values):
    seen, total = set(), 0
    for v in values:
        if v not in seen:
            seen.add(v)
            total += value_bytes(v)
    return total


def _dims(s):
    return "x".join(map(str, s)) or "scalar"


def _dot_sizes(n):
    """(batch, m, k, n) of a product node."""
    a, b = n.inputs
    d = dot_dims(a.ndim, b.ndim, **n.params)
    return (math.prod(a.shape[i] for i in d.lhs_batch),
            math.prod(a.shape[i] for i in d.lhs_free),
            math.prod(a.shape[i] for i in d.lhs_contract),
            math.prod(b.shape[i] for i in d.rhs_free))


def step_work(st):
    """(bytes, flops) of a kernel, product or reference step: the memory it reads and
    writes (each value once) and a product's floating-point operations (0 otherwise)."""
    if isinstance(st, Kernel):
        return _moved(list(st.inputs) + list(st.outputs)), 0
    n = st.nodes[0]
    if st.kind == StepKind.DOT:
        batch, m, k, nn = _dot_sizes(n)
        return _moved(list(n.inputs) + [n.outputs[0]]), 2 * batch * m * k * nn
    ins = st.inputs if st.route is not None else n.inputs
    return _moved(list(ins) + list(n.outputs)), 0


def _kernel_event(st, spec):
    kind = st.ktype.value
    return StepEvent(
        name=f"kernel {spec.name} ({kind} {_dims(st.domain)}, {len(st.nodes)} nodes)",
        shapes=tuple(tuple(v.shape) for v in st.inputs), nodes=len(st.nodes),
        bytes=step_work(st)[0], flops=0, how="parallel" if spec.parallel else "serial")


def _dot_event(st, how):
    n = st.nodes[0]
    a, b = n.inputs
    batch, m, k, nn = _dot_sizes(n)
    nbytes, flops = step_work(st)
    stack = f"{batch}x" if batch != 1 else ""
    return StepEvent(
        name=f"matmul {stack}({m}x{k} @ {k}x{nn}) {n.outputs[0].dtype.np.name}",
        shapes=(tuple(a.shape), tuple(b.shape)), nodes=1, bytes=nbytes, flops=flops,
        how=how or "np.matmul")


def _reference_event(st):
    n = st.nodes[0]
    route = st.route
    if route is not None:
        return StepEvent(name=f"{n.prim.name} ({route.kind.value})",
                         shapes=tuple(tuple(v.shape) for v in st.inputs), nodes=1,
                         bytes=step_work(st)[0], flops=0, how=route.describe())
    return StepEvent(name=f"{n.prim.name} (numpy)",
                     shapes=tuple(tuple(v.shape) for v in n.inputs), nodes=1,
                     bytes=step_work(st)[0], flops=0, how="reference implementation")


def step_events(schedule, kernel_fns, gemm_how):
    """Per step of `schedule`, its StepEvent, or None for steps too cheap to show (views,
    value checks). kernel_fns: step -> (fn, KernelSpec); gemm_how: dot node -> how BLAS
    runs it (the executor's report)."""
    out = []
    for st in schedule.steps:
        if isinstance(st, Kernel):
            out.append(_kernel_event(st, kernel_fns[st][1]))
        elif st.kind == StepKind.DOT:
            out.append(_dot_event(st, gemm_how.get(st.nodes[0])))
        elif st.kind == StepKind.REFERENCE:
            out.append(_reference_event(st))
        else:
            out.append(None)
    return out
