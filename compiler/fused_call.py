"""The fused variant of a compiled loss: one program that computes the forward outputs and
the gradients of a floating scalar output at the implicit seed 1, for programs whose
outputs are backpropagated at once (`loss = f(x); loss.backward()`, a training step).

The split path runs the forward program (which saves values) and later the backward program
(which recomputes what the partitioner chose not to save). When the caller always
backpropagates the output right away with the implicit gradient, both can be one pass: the
trace's joint graph with its one tangent input replaced by the constant 1, optimised by the
same passes (CSE then shares the pointwise values the forward and the backward both compute)
and compiled by the same code generator. Such a call stores the gradients on its output's
node (runtime.compiled_backward._FusedBackward); `loss.backward()` then only writes the
leaves' `.grad` (compiler/fast_backward.py's `make_fused_backward`), as the split fast
backward does.

The choice is adaptive, per program (CallPlan.streak): the fused program is compiled and
tried once FUSED_AFTER calls in a row had their output backpropagated at once with the
implicit gradient (the fast path, compiler/fast_backward.py, or the general path with the
scalar 1: a profiler, hooks on a leaf, retain_grad on the output, autograd.grad), where
an estimate (`estimated_gain`, codegen.cost) says it saves FUSED_MIN_GAIN of the split
programs' time or more (else it is never compiled); a timing trial then keeps
the faster variant for the program (`trial`). Any other use of an output (an
explicit gradient other than 1, create_graph, anomaly mode, no backward before the next
call) drops the program back to the split path, and is never answered from the stored
gradients: the output's node runs the split forward again on the call's inputs (their
versions checked, as saved tensors are) and the general path runs the split backward.
Programs that qualify (`fused_possible`): one differentiable output, a floating scalar of a
static shape, leaf or lifted inputs, and no other CallBlock (no random seeds, so a re-run of
the forward gives the values the fused call saw; no in-place writes, .grad writes, escapes
or copied outputs, whose effects happen once per call).
"""
import enum
import math
import time
import warnings

from aotgrad.ir import passes
from aotgrad.ir.core import Eqn, Graph
from aotgrad.ir.prims import full
from aotgrad.ir.symbolic import is_static_shape

# How many calls in a row must have been backpropagated at once (implicit gradient, fast
# path) before a call compiles the fused program and tries it. The fused program costs a
# compile of its own (as long as the forward's and the backward's together) and saves
# milliseconds per step: it pays back over a training loop's many steps, not over a
# script's (or a test's) handful of calls, which keep the split programs only.
FUSED_AFTER = 8


# The fused program is compiled only where it is estimated to save at least this fraction
# of the split programs' time together (`estimated_gain`): fusing saves the saved values'
# round trip through memory (and the pointwise work the two share), which is much of a
# pointwise program's time and little of one made of matrix products, whose fused compile
# (as long as the split programs' compiles together) competes with the training for the
# cores.
FUSED_MIN_GAIN = 0.1


# How many times the timing trial runs each variant at least (the fastest run of each
# counts: the first run of a new program pays for its first allocations), and for how long
# at least, up to TRIAL_MAX_RUNS (a tiny program's runs of microseconds need many to tell).
TRIAL_RUNS = 3
TRIAL_SECONDS = 0.005
TRIAL_MAX_RUNS = 100


class FusedChoice(enum.Enum):
    """Whether a program's calls run the fused variant once the streak allows it: decided
    once, by a timing trial on a call's arguments (`trial`) when its kernels
    are compiled in their final form; the interpret backend takes FUSED without one."""
    UNDECIDED = "not tried yet"
    FUSED = "fused forward+backward"
    SPLIT = "split forward and backward"


def settled(kern):
    """Whether a compiled graph's kernels are in their final form: none runs on numpy's
    reference impls (codegen's first tier)."""
    return kern is None or not kern.first_tier


def timing_trial(run_fused, run_split):
    """(seconds of the fused run, of the split runs, the fused run's outputs): the fastest
    runs of each, alternating, so that both see the same machine load (see TRIAL_RUNS)."""
    t_fused = t_split = math.inf
    outs = None
    start = time.perf_counter()
    for k in range(TRIAL_MAX_RUNS):
        if k >= TRIAL_RUNS and time.perf_counter() - start >= TRIAL_SECONDS:
            break
        t = time.perf_counter()
        outs = run_fused()
        t_fused = min(t_fused, time.perf_counter() - t)
        t = time.perf_counter()
        run_split()
        t_split = min(t_split, time.perf_counter() - t)
    return t_fused, t_split, outs


def estimated_gain(prog):
    """The fraction of the split programs' estimated time (codegen.cost, from their
    schedules) that the fused program saves, estimated without building it: the saved
    values' round trip through memory (written by the forward unless they are its inputs,
    then read again by the backward), which one pass over both does not make."""
    from aotgrad.codegen import cost  # (loaded with the compiled programs)
    split = sum(cost.estimated_seconds(prog.compiled_graph(w).schedule)
                for w in ("forward", "backward"))
    fw = prog.forward
    ins = set(fw.inputs)
    saved = set(fw.outputs[prog.n_fw_outputs:])
    moved = sum(cost.value_seconds(v) * (1 if v in ins else 2) for v in saved)
    return moved / split if split > 0 else 0.0


def fused_possible(prog, blocks, allowed):
    """Whether `prog` may get a fused variant: its call needs no block outside `allowed`
    (see the module's docstring), it has a backward, one output that is its one
    differentiable output, a floating scalar of a static shape."""
    tr = prog.trace
    if not prog.has_backward or prog.observed or tr.out_tree is not None or \
            tr.diff_outs != [0] or tr.written_grads or not set(blocks) <= allowed:
        return False
    tangent = prog.joint.inputs[tr.n_primals]
    return is_static_shape(tangent.shape) and math.prod(tangent.shape) == 1 and \
        tangent.dtype.is_floating_point and len(prog.joint.inputs) == tr.n_primals + 1


def fused_graph(prog):
    """The fused graph of `prog`: the optimised joint graph with its tangent input computed
    as the constant 1 (`full`), taking the primals only; outputs: the forward outputs, then
    the gradients (the joint's own outputs), through the IR passes again."""
    tr = prog.trace
    joint = prog.joint
    tangent = joint.inputs[tr.n_primals]
    seed = Eqn(full, [], [tangent], {"shape": tuple(tangent.shape), "value": 1.0,
                                     "dtype": tangent.dtype})
    g = Graph(joint.inputs[:tr.n_primals], [seed] + joint.nodes, joint.outputs, "fused")
    g = passes.optimize(g)
    g.name = "fused"
    return g


def counted_lines(indent="    "):
    """Lines of a fast backward (names `node` and `plan` bound) that count a backward of
    the output of the program's latest call, made at once with the implicit gradient, toward
    the fused variant (CallPlan.streak)."""
    return [indent + "if plan.pending and node._turn == plan.turn:",
            indent + "    plan.pending = False",
            indent + "    plan.streak += 1"]


def turn_lines(indent="    "):
    """Lines of a generated call (name `plan` bound) that start a call's turn: the previous
    call's output, not backpropagated at once, ends the streak; `turn` is this call's."""
    return [indent + "if plan.pending:  # the last output was not backpropagated at once",
            indent + "    plan.streak = 0",
            indent + "plan.pending = True",
            indent + "turn = plan.turn = plan.turn + 1"]


def trial(plan, arrays, values):
    """The first calls that may run the fused program (compiled here, on first use,
    once no background compile is pending and the split programs' kernels are in their
    final form): once its kernels are in theirs too (settled; until then None, the
    split call runs),
    time both variants on the call's `arrays` (and symbol `values`) and keep the faster
    for the program's later calls (`fused_choice`, `trial_seconds`). Returns the fused
    program's outputs for this call where it won, else None."""
    prog = plan.program
    if prog.backend != "interpret":
        from aotgrad.codegen import tiers  # (loaded with the compiled programs: numba)
        if tiers.pending():
            return None  # the background compiles of the split kernels go first
        if not all(settled(prog.compiled_graph(w)) for w in ("forward", "backward")):
            # (so do those held back until the first tier has cost as much as they would,
            # codegen.rent: the fused program's schedule and codegen, as long as the split
            # programs' together, would otherwise stall a call long before they end)
            return None
        if plan.fused_choice is FusedChoice.UNDECIDED and plan.estimated_gain is None:
            plan.estimated_gain = estimated_gain(prog)
            if plan.estimated_gain < FUSED_MIN_GAIN:
                plan.fused_choice = FusedChoice.SPLIT     # not worth its compile
                return None
    try:
        kern = prog.compiled_graph("fused")
    except Exception as e:  # noqa: BLE001 (the split programs give the answer)
        plan.fused_choice = FusedChoice.SPLIT
        plan.fused_failure = f"{type(e).__name__}: {e}"
        warnings.warn(f"aotgrad.compile({prog.name}): the fused forward+backward program "
                      f"failed to compile ({plan.fused_failure}); its calls keep the "
                      f"split forward and backward programs", stacklevel=3)
        return None
    if not settled(kern):
        return None
    if prog.copied_outputs("fused"):
        # (its output could share an input's memory: the split call's copy is needed)
        plan.fused_choice = FusedChoice.SPLIT
        return None
    run = _runner(plan, prog.runner("fused"))
    call_args = list(arrays) + ([values] if prog.binding is not None else [])
    if kern is None or plan.fused_choice is FusedChoice.FUSED:
        # (interpreted: no kernels to time; or chosen in advance)
        outs = run(*call_args)
        plan.fused_choice = FusedChoice.FUSED
    else:
        fw_args = list(arrays) + list(prog.symbol_args("forward", values))
        grads = plan.implicit_grads(0, values)
        n_fw = prog.n_fw_outputs

        def split():
            saved = list(prog.runner("forward")(*fw_args)[n_fw:])
            if prog.binding is not None:
                saved.append(values)
            return prog.run_backward(saved + list(grads))
        t_fused, t_split, outs = timing_trial(lambda: run(*call_args), split)
        plan.trial_seconds = (t_split, t_fused)
        plan.fused_choice = FusedChoice.FUSED if t_fused < t_split \
            else FusedChoice.SPLIT
    if plan.fused_choice is not FusedChoice.FUSED:
        return None
    if kern is not None and plan.n_lead and not prog.observed:
        run = _runner(plan, kern.plan.runner(trusted=plan.n_lead))
    plan.fused_run = run
    return outs

def report(plan):
    """The fused variant's state in words: the choice and the trial's times."""
    text = plan.fused_choice.value
    if plan.fused_choice is FusedChoice.UNDECIDED:
        text = "fused or split: " + text
    if plan.estimated_gain is not None:
        text += f"; estimated gain {plan.estimated_gain:.0%}" + (
            f" (below {FUSED_MIN_GAIN:.0%}: not compiled)"
            if plan.estimated_gain < FUSED_MIN_GAIN else "")
    if plan.fused_failure is not None:
        text += f"; the fused program failed to compile: {plan.fused_failure}"
    if plan.trial_seconds is not None:
        t_split, t_fused = plan.trial_seconds
        text += f"; trial: split {t_split * 1e3:.3f} ms, fused {t_fused * 1e3:.3f} ms"
    return text

def _runner(plan, run):
    """The fused program's `run`, taking the call's arrays, then a symbolic program's
    symbol values (all of them, in the binding's order)."""
    prog = plan.program
    if prog.binding is not None:
        names, syms = prog.binding.names, prog.symbols("fused")
        if tuple(syms) != tuple(names):
            at = [names.index(n) for n in syms]
            whole = run

            def run(*args):
                values = args[-1]
                return whole(*args[:-1], tuple(values[i] for i in at))
        elif not syms:
            whole = run

            def run(*args):
                return whole(*args[:-1])
    return run
