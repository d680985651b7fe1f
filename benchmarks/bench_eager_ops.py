"""Eager ops per second on small tensors: the fixed cost of one op (dispatch, argument checks,
shape rule, autograd node, version counter, saved tensors, the new Tensor) rather than its
arithmetic. Each op on a float32 tensor of 16 elements (4x4), with and without
requires_grad, aotgrad and PyTorch eager (when installed) side by side in one process.

    python benchmarks/bench_eager_ops.py [--reps 200] [--rounds 20] [--only add,mul]
                                         [--json out.json]

Prints thousands of ops per second (the best of `rounds` rounds of `reps` calls, so that a
moment of load on a shared machine does not count), the ratio to torch, and the machine's
load average before and after."""
import argparse
import json
import os
import sys
import time

import numpy as np


def cases(M, requires_grad):
    """(name, a function doing one op) for library M on 4x4 float32 inputs."""
    rng = np.random.default_rng(0)
    a = M.tensor(rng.standard_normal((4, 4)).astype(np.float32), requires_grad=requires_grad)
    b = M.tensor(rng.standard_normal((4, 4)).astype(np.float32), requires_grad=requires_grad)
    idx = M.tensor(np.array([0, 2]))
    return [
        ("add", lambda: a + b),
        ("mul", lambda: a * b),
        ("add scalar", lambda: a + 1.0),
        ("matmul", lambda: a @ b),
        ("relu", lambda: M.relu(a)),
        ("sum", lambda: a.sum()),
        ("sum dim", lambda: a.sum(1)),
        ("index int", lambda: a[1]),
        ("index slice", lambda: a[1:3]),
        ("index tensor", lambda: a[idx]),
        ("view", lambda: a.view(16)),
        ("transpose", lambda: a.t()),
    ]


def _best_rate(fn, reps, rounds):
    fn()
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        best = min(best, time.perf_counter() - t0)
    return reps / best


def backward_rate(M, reps, rounds):
    """(x * w + b).sum().backward() on 4x4 leaves: four nodes and their backward."""
    x = M.tensor(np.ones((4, 4), np.float32))
    w = M.tensor(np.ones((4, 4), np.float32), requires_grad=True)
    b = M.tensor(np.ones((4, 4), np.float32), requires_grad=True)

    def fn():
        (x * w + b).sum().backward()
    return _best_rate(fn, max(reps // 4, 1), rounds)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--only", default="")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    import aotgrad
    libs = [("aotgrad", aotgrad)]
    try:
        import torch
        torch.set_num_threads(1)
        libs.append(("torch", torch))
    except ImportError:
        pass
    only = set(filter(None, args.only.split(",")))
    load_before = os.getloadavg()[0]
    rows = []
    for rg in (False, True):
        per_lib = {}
        for label, M in libs:
            per_lib[label] = [(name, _best_rate(fn, args.reps, args.rounds))
                              for name, fn in cases(M, rg) if not only or name in only]
        for i, (name, _) in enumerate(per_lib["aotgrad"]):
            rows.append(dict(op=name, requires_grad=rg,
                             **{label: per_lib[label][i][1] for label, _ in libs}))
    if not only or "backward" in only:
        rows.append(dict(op="mul+add+sum+backward", requires_grad=True,
                         **{label: backward_rate(M, args.reps, args.rounds)
                            for label, M in libs}))
    print(f"load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after; "
          f"4x4 float32; thousands of ops per second (best of {args.rounds} x {args.reps})")
    labels = [label for label, _ in libs]
    print(f"{'op':22s} {'grad':5s}" + "".join(f"{lab:>10s}" for lab in labels) +
          ("   torch/aotgrad" if "torch" in labels else ""))
    for r in rows:
        line = f"{r['op']:22s} {str(r['requires_grad']):5s}" + \
            "".join(f"{r[lab] / 1e3:10.1f}" for lab in labels)
        if "torch" in labels:
            line += f"{r['torch'] / r['aotgrad']:15.1f}x"
        print(line)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(dict(load_before=load_before, load_after=os.getloadavg()[0], rows=rows),
                      f, indent=1)
    return rows


if __name__ == "__main__":
    sys.exit(main() and 0)
