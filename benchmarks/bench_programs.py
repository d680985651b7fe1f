"""Forward+backward programs of issue 6's workloads through `aotgrad.compile` (numba backend).

    /work/venv/bin/python benchmarks/bench_programs.py [W1 W3 W5 W6] [--reps N] [--json out.json]

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


WORKLOADS = {
    "W1": (w1, lambda: (_r(1 << 22),)),
    "W3": (w3, lambda: (_r(8192, 1024), _r(1024), _r(1024))),
    "W5": (w5, lambda: (_r(4, 8, rg=False), _r(8, 16), _r(16), _r(16, 1), _r(1),
                        _r(4, 1, rg=False))),
    "W6": (w6, lambda: (_r(4096, 1000), ag.randint(0, 1000, (4096,)))),
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


def run(name, reps):
    fn, mk = WORKLOADS[name]
    ag.manual_seed(0)
    args = mk()
    t = time.perf_counter()
    cf = ag.compile(fn)
    loss = cf(*args)
    loss.backward()
    first = time.perf_counter() - t
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
    ins = [a._value if hasattr(a, "_value") else a for a in args]
    outs = fw(*ins)
    n_fw = prog.n_fw_outputs
    bargs = list(outs[n_fw:]) + [np.ones_like(o) for o in outs[:n_fw]]
    tf = median_time(lambda: fw(*ins), reps)
    tb = median_time(lambda: bw(*bargs), reps)

    def step():
        for a in args:
            a.grad = None
        cf(*args).backward()
    ts = median_time(step, reps)
    return dict(workload=name, fwd_ms=tf * 1e3, bwd_ms=tb * 1e3, prog_ms=(tf + tb) * 1e3,
                step_ms=ts * 1e3, first_call_s=first, grad_rel_err=err,
                fwd_kernels=len(fw.kernels()), bwd_kernels=len(bw.kernels()),
                fwd_steps=len(fw.schedule.steps), bwd_steps=len(bw.schedule.steps))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("names", nargs="*")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--json")
    ap.add_argument("--cpu", action="store_true", help="process CPU time, not wall time")
    a = ap.parse_args()
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
              f"  first call {r['first_call_s']:.2f}s  kernels {r['fwd_kernels']}+"
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
