"""Forward+backward programs of issue 6's workloads through `aotgrad.compile` (numba backend).

    python benchmarks/bench_programs.py [W1 W2 W3 W4 W5 W6] [--reps N] [--json out.json]

For each workload: the compiled forward and backward graphs called directly on numpy arrays
(`prog fwd`, `prog bwd`: what codegen alone costs), and the end-to-end step
`loss = f(*tensors); loss.backward()` (`step`: adds the tensor/autograd runtime). Medians over
many repeats (the machine may be shared). Gradients are checked against eager aotgrad.
On a busy machine, `NUMBA_NUM_THREADS=1 ... --cpu` times process CPU time instead of wall time
(one thread: the time the process was descheduled does not count), for stable comparisons.
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np

import aotgrad as ag
import aotgrad.nn.functional as F
from aotgrad.tracer import Role


def w1(x):
    return (ag.tanh(1.5 * x + 0.5) * ag.sigmoid(x) + 0.1 * ag.exp(-x * x)).sum()


def w3(x, g, b):
    y = x + F.gelu(F.layer_norm(x, (x.shape[-1],), g, b), approximate="tanh")
    return (y * y).sum()


def w5(x, w1_, b1, w2, b2, y):
    return ((ag.tanh(x @ w1_ + b1) @ w2 + b2 - y) ** 2).mean()


def w6(x, t):
    return F.cross_entropy(x, t)


def _r(*s, rg=True):
    return ag.randn(*s, requires_grad=rg)


def _from_workloads(key):
    """Loss function and input maker of workload `key` in benchmarks/workloads.py (same
    sizes, seed and model code as run.py)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import workloads
    wl = workloads.WORKLOADS[key]

    def fn(*args):
        return wl.fn(ag, *args)

    def mk():
        arrs = wl.inputs(quick=False)
        return tuple(ag.tensor(arrs[n], requires_grad=n in wl.grad) for n in wl.names)
    return fn, mk


WORKLOADS = {
    "W1": (w1, lambda: (_r(1 << 22),)),
    "W2": _from_workloads("W2"),
    "W3": (w3, lambda: (_r(8192, 1024), _r(1024), _r(1024))),
    "W5": (w5, lambda: (_r(4, 8, rg=False), _r(8, 16), _r(16), _r(16, 1), _r(1),
                        _r(4, 1, rg=False))),
    "W6": (w6, lambda: (_r(4096, 1000), ag.randint(0, 1000, (4096,)))),
    "W4": _from_workloads("W4"),
}


CLOCK = time.perf_counter


def median_time(fn, reps, warm=3):
    for _ in range(warm):
        fn()
    ts = []
    for _ in range(reps):
        t = CLOCK()
        fn()
        ts.append(CLOCK() - t)
    return float(np.median(ts))


PROFILE = False


def profile_steps(label, prg, args, reps):
    """Median time of each step of a compiled program (its plan's driver, timed)."""
    plan = prg.plan
    prg(*args)
    plan.step_times(*args)
    plan._timed.__globals__["_clock"] = CLOCK   # --cpu: process time per step too
    times = [[] for _ in plan.schedule.steps]
    for _ in range(max(5, reps // 2)):
        for i, t in enumerate(plan.step_times(*args)[1]):
            times[i].append(t)
    med = [float(np.median(t)) * 1e3 for t in times]
    print(f"  {label}: {sum(med):.3f} ms in {len(med)} steps")
    lines = prg.report().splitlines()[1:1 + len(med)]
    for m, line in sorted(zip(med, lines), key=lambda p: -p[0]):
        print(f"    {m:7.3f} ms {line.strip()[:150]}")


def run(name, reps):
    fn, mk = WORKLOADS[name]
    ag.manual_seed(0)
    args = mk()
    t = time.perf_counter()
    cf = ag.compile(fn)
    loss = cf(*args)
    loss.backward()
    first = time.perf_counter() - t
    t = time.perf_counter()
    ag.codegen.wait_for_parallel_kernels(timeout=600)   # background compiles done
    settle = time.perf_counter() - t
    grads = [a.grad.numpy().copy() if a.grad is not None else None for a in args]
    # eager reference gradients
    eargs = [a.detach().requires_grad_(a.requires_grad) for a in args]
    el = fn(*eargs)
    el.backward()
    err = 0.0
    for g, a in zip(grads, eargs):
        if g is not None:
            r = a.grad.numpy()
            err = max(err, float(np.max(np.abs(g - r)) / max(np.max(np.abs(r)), 1e-30)))
    prog = next(iter(cf.cache.values())) if isinstance(cf.cache, dict) else None
    fw, bw = prog._kernels["forward"], prog._kernels["backward"]
    ins = []     # the program's inputs: arguments, lifted constants, random seeds
    for kind, x in prog.trace.roles:
        t = args[x] if kind is Role.ARG else x if kind is Role.LIFTED else None
        ins.append(t._value if t is not None else np.array(0, np.int64))
    outs = fw(*ins)
    n_fw = prog.n_fw_outputs
    bargs = list(outs[n_fw:]) + [np.ones_like(o) for o in outs[:n_fw]]
    tf = median_time(lambda: fw(*ins), reps)
    tb = median_time(lambda: bw(*bargs), reps)

    if PROFILE:
        for label, prg, pargs in (("forward", fw, ins), ("backward", bw, bargs)):
            profile_steps(label, prg, pargs, reps)

    def step():
        for a in args:
            a.grad = None
        cf(*args).backward()
    ts = median_time(step, reps)
    return dict(workload=name, fwd_ms=tf * 1e3, bwd_ms=tb * 1e3, prog_ms=(tf + tb) * 1e3,
                step_ms=ts * 1e3, first_call_s=first, settle_s=settle, grad_rel_err=err,
                fwd_kernels=len(fw.kernels()), bwd_kernels=len(bw.kernels()),
                fwd_steps=len(fw.schedule.steps), bwd_steps=len(bw.schedule.steps))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("names", nargs="*")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--json")
    ap.add_argument("--cpu", action="store_true", help="process CPU time, not wall time")
    ap.add_argument("--profile", action="store_true", help="time each step of the programs")
    a = ap.parse_args()
    if a.profile:
        global PROFILE
        PROFILE = True
    if a.cpu:
        global CLOCK
        CLOCK = time.process_time
    res = []
    for name in a.names or list(WORKLOADS):
        r = run(name, a.reps if name != "W5" else max(a.reps, 2000))
        res.append(r)
        unit, k = ("us", 1e3) if r["prog_ms"] < 1 else ("ms", 1)
        print(f"{name}: prog fwd {r['fwd_ms'] * k:8.3f} {unit}  bwd {r['bwd_ms'] * k:8.3f} {unit}"
              f"  fwd+bwd {r['prog_ms'] * k:8.3f} {unit}  step {r['step_ms'] * k:8.3f} {unit}"
              f"  first call {r['first_call_s']:.2f}s (+{r['settle_s']:.1f}s)  kernels {r['fwd_kernels']}+"
              f"{r['bwd_kernels']} (steps {r['fwd_steps']}+{r['bwd_steps']})"
              f"  grad err {r['grad_rel_err']:.1e}")
    import numba
    print(f"numba {numba.__version__}, threads {numba.get_num_threads()}/"
          f"{numba.config.NUMBA_NUM_THREADS}, cpus {os.cpu_count()}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
