"""The codegen side of a symbolic program's per-step cost: the generated drivers (forward
and backward) of the symbolic program against the static one at the same size, called
directly on the arrays a training step passes them (no call path), in turn so that both
see the same load.

    python -m aotgrad.benchmarks.bench_dynamic_runners [--workload W4|W2] [--size 64]
        [--traced-at 32] [--reps 30] [--profile]

The symbolic program is traced at --traced-at (default: the first size bench_dynamic feeds
it, W4 32, W2 256) and run at --size, as in a run over several sizes: choices made on the
traced sizes show up here.
"""
import argparse
import os
import statistics
import time

import numpy as np

from aotgrad.benchmarks.bench_dynamic import _step, _tensors
from aotgrad.benchmarks.workloads import WORKLOADS

DYNAMIC_DIMS = {"W2": {"x": 0, "labels": 0}, "W4": {"x": 1}}
FIRST_SIZE = {"W2": 256, "W4": 32}


def _recorded_calls(f, *steps):
    """{graph name: (driver, its plan, the arguments the last of the training steps passes
    it)}, taking a step on each of `steps` (tensor lists) in turn: each generated driver
    (codegen.executor.Plan.runner) wrapped as the call path asks for it."""
    from aotgrad.codegen.executor import Plan
    calls, original = {}, Plan.runner

    def recording(plan, trusted=0):
        run = original(plan, trusted)

        def rec(*args):
            calls[plan.graph.name.rsplit("_", 1)[-1]] = (run, plan, tuple(
                a.copy() if isinstance(a, np.ndarray) else a for a in args))
            return run(*args)
        return rec
    Plan.runner = recording
    try:
        for ts in steps:
            _step(f, ts)
    finally:
        Plan.runner = original
    return calls


def _kernels_run(plan, args):
    """The names of the kernels the driver of `plan` runs on `args`, in step order (a
    symbolic program's kernel: the size variant its call picks, codegen.size_variants)."""
    from aotgrad.codegen.emit_base import PAR_MIN
    from aotgrad.ir.symbolic import evaluate
    at = dict(zip(plan.symbols, args[-1])) if plan.symbols else {}
    names = []
    for st, (_, spec) in plan.kernel_fns.items():
        small = plan.small_kernels.get(st)
        if small is not None and evaluate(small[1].work, at) < PAR_MIN:
            spec = small[1].spec
        names.append(spec.name)
    return names


def _profile(plan, args, reps):
    """{(step index, event name): median ns} over `reps` profiled runs
    (codegen.executor.profiled); the two programs' schedules are matched by step index."""
    runs = []
    for _ in range(reps):
        runs.append({(i, ev.name): t1 - t0
                     for i, (ev, t0, t1) in enumerate(plan.profiled(*args)[1])})
    return {k: statistics.median(r.get(k, 0) for r in runs) for k in runs[-1]}


def _time_pair(a, b, reps):
    """Median seconds of runs a and b ((driver, args) each), called in turn so that both
    see the same load on a shared machine."""
    ta, tb = [], []
    for run, args in (a, b):
        run(*args)
    for _ in range(reps):
        for (run, args), out in ((a, ta), (b, tb)):
            t0 = time.perf_counter()
            run(*args)
            out.append(time.perf_counter() - t0)
    return statistics.median(ta), statistics.median(tb)


def main(argv=None):
    import aotgrad
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workload", default="W4", choices=sorted(DYNAMIC_DIMS))
    ap.add_argument("--size", type=int, default=64, help="the dynamic dim's size")
    ap.add_argument("--traced-at", type=int, default=None,
                    help="the size of the symbolic program's first call")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--profile", action="store_true",
                    help="the steps whose time differs most between the two")
    args = ap.parse_args(argv)
    wl, dyn = WORKLOADS[args.workload], DYNAMIC_DIMS[args.workload]
    arrays = wl.inputs(quick=False)
    drivers, steps, kernels = {}, {}, {}
    for label, dynamic, mark in (("static", False, None),
                                 ("symbolic", None, aotgrad.mark_dynamic)):
        f = aotgrad.compile(lambda *a: wl.fn(aotgrad, *a), dynamic=dynamic)
        at = [_tensors(aotgrad, wl, arrays, dyn, args.size, mark)]
        if mark is not None:
            traced = FIRST_SIZE[args.workload] if args.traced_at is None else args.traced_at
            at.insert(0, _tensors(aotgrad, wl, arrays, dyn, traced, mark))
        calls = _recorded_calls(f, *at)
        for which, (run, plan, a) in calls.items():
            drivers[label, which] = run, a
            kernels[label, which] = _kernels_run(plan, a)
            if args.profile:
                steps[label, which] = _profile(plan, a, args.reps)
    print(f"{args.workload}, dynamic dim size {args.size}: runner median ms "
          f"(load %.2f %.2f %.2f)" % os.getloadavg())
    for which in sorted({w for _, w in drivers}):
        if ("static", which) in drivers and ("symbolic", which) in drivers:
            s, y = _time_pair(drivers["static", which], drivers["symbolic", which],
                              args.reps)
            ks, ky = kernels["static", which], kernels["symbolic", which]
            same = "the same kernels" if ks == ky else \
                f"{sum(a != b for a, b in zip(ks, ky))} of {len(ks)} kernels differ"
            print(f"  {which:10s} static {s * 1e3:8.3f}  symbolic {y * 1e3:8.3f}  "
                  f"ratio {y / s:.3f}  ({same})")
        if ("static", which) in steps and ("symbolic", which) in steps:
            a, b = steps["static", which], steps["symbolic", which]
            a, b = ({i: (name, t) for (i, name), t in x.items()} for x in (a, b))
            worst = sorted(set(a) & set(b), key=lambda i: a[i][1] - b[i][1])[:8]
            for i in worst:
                print(f"      {b[i][0][:60]:60s} static {a[i][1] / 1e3:8.1f} us  "
                      f"symbolic {b[i][1] / 1e3:8.1f} us")


if __name__ == "__main__":
    main()
