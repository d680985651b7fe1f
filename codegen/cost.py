"""A rough estimate of how long a schedule runs, from what its steps move and compute, made
without compiling it, and of a value's trip through memory: for deciding whether a variant
of a program is worth its compile (compiler/fused_call.py: the fused forward+backward
program, which saves the split programs' saved values a round trip), and whether a
program's first-tier compiles get a helper at the caller's priority (codegen.tiers).

A fused kernel or a reference step costs the bytes it reads and writes (each value once, as
the profiler counts them, codegen.step_events) at BYTES_PER_SECOND; a matrix product its
flops at FLOPS_PER_SECOND; every step STEP_SECONDS of call overhead. The rates are this
code's order of magnitude on a CPU of a few cores, not a measurement: the fused choice reads
a ratio of two estimates of one program (and a variant chosen by it is still timed against
the split one before it is kept, fused_call.trial), the tiers only whether a program's run
is of milliseconds. Symbolic sizes count at their traced value.
"""
from aotgrad.codegen.scheduler import Kernel, StepKind
from aotgrad.codegen.step_events import step_work, value_bytes
from aotgrad.ir.symbolic import hint

BYTES_PER_SECOND = 10e9
FLOPS_PER_SECOND = 100e9
STEP_SECONDS = 2e-6


def estimated_seconds(schedule):
    """The estimated seconds of one run of `schedule` (codegen.scheduler.Schedule)."""
    total = 0.0
    for st in schedule.steps:
        if not isinstance(st, Kernel) and st.kind not in (StepKind.DOT, StepKind.REFERENCE):
            continue        # views and checks: no work of their own
        nbytes, flops = step_work(st)
        total += STEP_SECONDS + hint(nbytes) / BYTES_PER_SECOND + hint(flops) / FLOPS_PER_SECOND
    return total


def value_seconds(v):
    """The estimated seconds of one pass of value `v` (an IR Var) through memory."""
    return hint(value_bytes(v)) / BYTES_PER_SECOND
