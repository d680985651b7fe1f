"""Dynamic shapes: one symbolic program against one static program per size.

Two scenarios (issue 18):
- W2 (MLP 784-1024-1024-10) for an epoch whose last batch is smaller (ragged);
- W4 (pre-LN transformer block) fed 10 sequence lengths T = 32..128.

For each: the compiles, the total wall time of the run (compiles included), and the
per-step time (forward + backward, median) of the symbolic program against the static
program at the same size; with torch installed, torch.compile(dynamic=True) beside them.

    python -m aotgrad.benchmarks.bench_dynamic [--quick] [--backend numba|interpret]
        [--no-torch]

The symbolic run marks the data dims dynamic (aotgrad.mark_dynamic: the batch of x and
labels for W2, T of x for W4); the weights stay static. The static run compiles with
dynamic=False (cache_size_limit raised so that no size runs eagerly).
"""
import argparse
import statistics
import time

import numpy as np

from aotgrad.benchmarks.workloads import WORKLOADS


def _tensors(M, wl, arrays, dyn, n, mark):
    """The workload's inputs with the data dim cut to n (tensors of library M)."""
    out = []
    for name in wl.names:
        a = arrays[name]
        if name in dyn:
            sl = [slice(None)] * a.ndim
            sl[dyn[name]] = slice(0, n)
            a = np.ascontiguousarray(a[tuple(sl)])
        t = M.tensor(a, requires_grad=name in wl.grad)
        if mark is not None and name in dyn:
            mark(t, dyn[name])
        out.append(t)
    return out


def _step(f, ts):
    for t in ts:
        t.grad = None
    loss = f(*ts)
    loss.backward()
    return float(loss.detach())


def _per_step(f, ts, reps):
    _step(f, ts)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        _step(f, ts)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _aotgrad_run(wl, arrays, dyn, sizes, symbolic, backend):
    import aotgrad
    f = aotgrad.compile(lambda *a: wl.fn(aotgrad, *a), backend=backend,
                        dynamic=None if symbolic else False)
    f.cache_size_limit = 64
    mark = aotgrad.mark_dynamic if symbolic else None
    t0 = time.perf_counter()
    for n in sizes:
        _step(f, _tensors(aotgrad, wl, arrays, dyn, n, mark))
    total = time.perf_counter() - t0
    return f, total


def _torch_run(wl, arrays, dyn, sizes):
    import torch
    import torch._dynamo
    torch._dynamo.reset()
    f = torch.compile(lambda *a: wl.fn(torch, *a), dynamic=True)
    t0 = time.perf_counter()
    for n in sizes:
        _step(f, _tensors(torch, wl, arrays, dyn, n, None))
    total = time.perf_counter() - t0
    from torch._dynamo.utils import counters
    return f, total, counters["stats"].get("unique_graphs", "?")


def scenario(title, key, dyn, sizes, timed_sizes, args):
    import aotgrad
    wl = WORKLOADS[key]
    arrays = wl.inputs(quick=args.quick)
    print(f"\n{title}: sizes {list(sizes)}")
    rows = []
    static, t_static = _aotgrad_run(wl, arrays, dyn, sizes, False, args.backend)
    symbolic, t_sym = _aotgrad_run(wl, arrays, dyn, sizes, True, args.backend)
    per = {}
    for n in timed_sizes:
        per[n] = (_per_step(static, _tensors(aotgrad, wl, arrays, dyn, n, None), args.reps),
                  _per_step(symbolic, _tensors(aotgrad, wl, arrays, dyn, n,
                                               aotgrad.mark_dynamic), args.reps))
    rows.append(("aotgrad static (dynamic=False)", static.stats.compiles, t_static,
                 {n: p[0] for n, p in per.items()}))
    rows.append(("aotgrad symbolic (mark_dynamic)", symbolic.stats.compiles, t_sym,
                 {n: p[1] for n, p in per.items()}))
    if not args.no_torch:
        try:
            import torch  # noqa: F401
        except ImportError:
            print("  (torch not installed: no torch.compile column)")
        else:
            import torch
            tf, t_torch, graphs = _torch_run(wl, arrays, dyn, sizes)
            rows.append(("torch.compile(dynamic=True)", graphs, t_torch,
                         {n: _per_step(tf, _tensors(torch, wl, arrays, dyn, n, None), args.reps)
                          for n in timed_sizes}))
    head = f"  {'system':34s} {'compiles':>8s} {'total s':>9s} " + " ".join(
        f"{'ms/step @' + str(n):>14s}" for n in timed_sizes)
    print(head)
    for name, compiles, total, steps in rows:
        print(f"  {name:34s} {compiles!s:>8s} {total:9.2f} " + " ".join(
            f"{steps[n] * 1e3:14.3f}" for n in timed_sizes))
    ratio = ", ".join(f"@{n}: {per[n][1] / per[n][0]:.3f}" for n in timed_sizes)
    print(f"  symbolic / static per step: {ratio}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="the workloads' small sizes")
    ap.add_argument("--backend", default="numba", help="numba or interpret")
    ap.add_argument("--reps", type=int, default=10, help="timed steps per size")
    ap.add_argument("--no-torch", action="store_true")
    args = ap.parse_args(argv)
    print(f"backend: {args.backend}")
    if args.quick:
        batch, n_samples = 16, 16 * 3 + 7
        lengths = [4, 5, 6, 7, 8, 10, 11, 12, 14, 16]
    else:
        batch, n_samples = 256, 256 * 3 + 232
        lengths = [32, 42, 53, 64, 74, 85, 96, 106, 117, 128]
    epoch = [min(batch, n_samples - i) for i in range(0, n_samples, batch)]
    scenario("W2 epoch with a ragged last batch", "W2", {"x": 0, "labels": 0}, epoch,
             [batch], args)
    scenario("W4 over 10 sequence lengths", "W4", {"x": 1}, lengths,
             [lengths[0], lengths[-1]], args)


if __name__ == "__main__":
    main()
