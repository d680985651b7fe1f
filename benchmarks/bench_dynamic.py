"""Dynamic shapes: one symbolic program against one static program per size.

Two scenarios (issue 18):
- W2 (MLP 784-1024-1024-10) for an epoch whose last batch is smaller (ragged);
- W4 (pre-LN transformer block) fed 10 sequence lengths T = 32..128.

For each: the compiles, the total wall time of the run (compiles included; then how long
the compiles it left to the background went on), and the
per-step time (forward + backward, median) of the symbolic program against the static
program at the same size; with torch installed, torch.compile(dynamic=True) beside them.

    python -m aotgrad.benchmarks.bench_dynamic [--quick] [--backend numba|interpret]
        [--no-torch] [--only W2|W4] [--cold] [--reps N] [--stat median|min]

The symbolic run marks the data dims dynamic (aotgrad.mark_dynamic: the batch of x and
labels for W2, T of x for W4); the weights stay static. The static run compiles with
dynamic=False (cache_size_limit raised so that no size runs eagerly; its recompile
warnings silenced). The per-step times take the two aotgrad programs' steps in turn at
each size, so that both see the same load on a shared machine, and torch's after them
(its threads spin on after a step and slowed the next one); the load average is printed
with each table. Compiles and total time depend on what the kernel cache already holds: --cold
gives each aotgrad system its own empty cache (numba compiles included); the kernels the
static run compiled stay loaded in this process, though, and the symbolic run (second)
takes those it shares from memory: its total is not a cold one.
"""
import argparse
import os
import statistics
import tempfile
import time
import warnings

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
    return _interleaved([(f, ts)], reps)[0]


def _interleaved(runs, reps, stat=statistics.median):
    """Seconds per step (`stat` of `reps` steps) of each (f, tensors) in runs, their steps
    taken in turn (in a rotating order) so that all of them see the same load on a shared
    machine. After a
    warm-up step each, the kernels compiled in the background (first-tier kernels, size
    variants a new size asked for) are waited for."""
    from aotgrad.codegen import wait_for_parallel_kernels
    for f, ts in runs:
        _step(f, ts)
    wait_for_parallel_kernels(600)
    times = [[] for _ in runs]
    order = list(zip(runs, times))
    for i in range(reps):
        # each system follows each other one as often
        for (f, ts), out in order[i % len(order):] + order[:i % len(order)]:
            t0 = time.perf_counter()
            _step(f, ts)
            out.append(time.perf_counter() - t0)
    return [stat(t) for t in times]


def _aotgrad_run(wl, arrays, dyn, sizes, symbolic, backend):
    """(the compiled function, seconds of the run over `sizes`, seconds its background
    compiles went on after it)."""
    import aotgrad
    from aotgrad.codegen import wait_for_parallel_kernels
    f = aotgrad.compile(lambda *a: wl.fn(aotgrad, *a), backend=backend,
                        dynamic=None if symbolic else False)
    f.cache_size_limit = 64
    mark = aotgrad.mark_dynamic if symbolic else None
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "aotgrad.compile.*recompiling", UserWarning)
        for n in sizes:
            _step(f, _tensors(aotgrad, wl, arrays, dyn, n, mark))
    t1 = time.perf_counter()
    wait_for_parallel_kernels(600)
    return f, t1 - t0, time.perf_counter() - t1


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


def _load():
    return "load %.2f %.2f %.2f" % os.getloadavg()


def _fresh_cache(args):
    """--cold: a new empty kernel cache directory for the next system (its compiles then
    include numba's), else the user's cache as configured."""
    if args.cold:
        os.environ["AOTGRAD_CACHE_DIR"] = tempfile.mkdtemp(prefix="aotgrad-bench-dynamic-")


def scenario(title, key, dyn, sizes, timed_sizes, args):
    import aotgrad
    wl = WORKLOADS[key]
    arrays = wl.inputs(quick=args.quick)
    print(f"\n{title}: sizes {list(sizes)} ({_load()})")
    rows = []
    _fresh_cache(args)
    static, t_static, bg_static = _aotgrad_run(wl, arrays, dyn, sizes, False, args.backend)
    _fresh_cache(args)
    symbolic, t_sym, bg_sym = _aotgrad_run(wl, arrays, dyn, sizes, True, args.backend)
    runs = {"static": lambda n: (static, _tensors(aotgrad, wl, arrays, dyn, n, None)),
            "symbolic": lambda n: (symbolic, _tensors(aotgrad, wl, arrays, dyn, n,
                                                      aotgrad.mark_dynamic))}
    rows.append(("aotgrad static (dynamic=False)", static.stats.compiles, t_static, bg_static))
    rows.append(("aotgrad symbolic (mark_dynamic)", symbolic.stats.compiles, t_sym, bg_sym))
    if not args.no_torch:
        try:
            import torch  # noqa: F401
        except ImportError:
            print("  (torch not installed: no torch.compile column)")
        else:
            import torch
            tf, t_torch, graphs = _torch_run(wl, arrays, dyn, sizes)
            runs["torch"] = lambda n: (tf, _tensors(torch, wl, arrays, dyn, n, None))
            rows.append(("torch.compile(dynamic=True)", graphs, t_torch, 0.0))
    # per size: every system's steps in turn (the same load for all)
    stat = {"median": statistics.median, "min": min}[args.stat]
    # aotgrad's two programs in turn; torch on its own after them (its threads spin on
    # after a step and slowed the aotgrad step that came next)
    per = {}
    for n in timed_sizes:
        pair = ("static", "symbolic")
        per[n] = dict(zip(pair, _interleaved([runs[k](n) for k in pair], args.reps, stat)))
        if "torch" in runs:
            per[n]["torch"] = _interleaved([runs["torch"](n)], args.reps, stat)[0]
    print(f"  {'system':34s} {'compiles':>8s} {'total s':>9s} {'+ background s':>15s}")
    for name, compiles, total, bg in rows:
        print(f"  {name:34s} {compiles!s:>8s} {total:9.2f} {bg:15.2f}")
    print(f"  per step, {args.stat} of {args.reps} (ms):")
    print(f"  {'size':>6s} " + " ".join(f"{k:>9s}" for k in runs) + "  symbolic/static")
    for n in timed_sizes:
        print(f"  {n:6d} " + " ".join(f"{per[n][k] * 1e3:9.3f}" for k in runs) +
              f"  {per[n]['symbolic'] / per[n]['static']:15.3f}")
    print(f"  ({_load()})")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="the workloads' small sizes")
    ap.add_argument("--backend", default="numba", help="numba or interpret")
    ap.add_argument("--reps", type=int, default=10, help="timed steps per size")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--only", choices=("W2", "W4"), help="one scenario")
    ap.add_argument("--stat", choices=("median", "min"), default="median",
                    help="of the timed steps (min: the least disturbed by other load)")
    ap.add_argument("--cold", action="store_true",
                    help="each aotgrad system compiles into its own empty kernel cache")
    args = ap.parse_args(argv)
    print(f"backend: {args.backend}")
    if args.quick:
        batch, n_samples = 16, 16 * 3 + 7
        lengths = [4, 5, 6, 7, 8, 10, 11, 12, 14, 16]
    else:
        batch, n_samples = 256, 256 * 3 + 232
        lengths = [32, 42, 53, 64, 74, 85, 96, 106, 117, 128]
    epoch = [min(batch, n_samples - i) for i in range(0, n_samples, batch)]
    if args.only in (None, "W2"):
        scenario("W2 epoch with a ragged last batch", "W2", {"x": 0, "labels": 0}, epoch,
                 sorted(set(epoch)), args)
    if args.only in (None, "W4"):
        scenario("W4 over 10 sequence lengths", "W4", {"x": 1}, lengths, lengths, args)


if __name__ == "__main__":
    main()
