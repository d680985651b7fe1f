"""A rough estimate of how long a schedule runs, from what its steps move and compute, made
without compiling it, and of a value's trip through memory: for deciding whether a variant
of a program is worth its compile (compiler/fused_call.py: the fused forward+backward
program, which saves the split programs' saved values a round trip), and whether a
program's first-tier compiles get a helper at the caller's priority (codegen.tiers), and of
a kernel's compile: when a program stops running its kernels on numpy and waits for them
(codegen.rent.Rent).

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
# a serial kernel's compile: a transformer's kernels took 0.2 s (250 characters of body) to
# 2.5 s (4,600) each on a 2-core machine, 24 s for the GPT's 26 (59,000 characters)
COMPILE_SECONDS = 0.15
COMPILE_SECONDS_PER_CHAR = 3.4e-4


def estimated_seconds(schedule):
    """The estimated seconds of one run of `schedule` (codegen.scheduler.Schedule)."""
    return sum(step_seconds(st) for st in schedule.steps
               if isinstance(st, Kernel) or st.kind in (StepKind.DOT, StepKind.REFERENCE))


def step_seconds(st):
    """The estimated seconds of one run of step `st`: a kernel, product or reference step
    (views and checks have no work of their own)."""
    nbytes, flops = step_work(st)
    return STEP_SECONDS + hint(nbytes) / BYTES_PER_SECOND + hint(flops) / FLOPS_PER_SECOND


def compile_seconds(spec):
    """The estimated seconds numba takes to compile the serial kernel `spec` (an emitted
    kernel: its body's length stands for the work), on one core."""
    return COMPILE_SECONDS + COMPILE_SECONDS_PER_CHAR * len(spec.body)


def value_seconds(v):
    """The estimated seconds of one pass of value `v` (an IR Var) through memory."""
    return hint(value_bytes(v)) / BYTES_PER_SECOND
