"""Whole training programs as users write them (benchmarks/models.py: a small GPT with AdamW,
LeNet with SGD momentum), each system in fresh processes: PyTorch eager (and torch.compile
with --torch-compile), aotgrad eager, aotgrad with `model = aotgrad.compile(model)` and the
optimizer outside, and aotgrad with the whole step compiled.

For each: the seconds from process start to the end of the first step (imports and compiles
included), on a cold compile cache (a fresh directory) and on a warm one (the same directory
again); the median ms per step after the first two (aotgrad's background compiles of
kernels may still run then); the median ms of 10 more steps once they are done
("steady"); the seconds to all steps; and the largest difference of the loss curve from the
same library's eager curve. --systems picks systems by name ("torch eager,aotgrad compiled
step"). Steps share 2 cores with whatever else runs: the load average is printed per row.

    python benchmarks/bench_models.py [--steps 50] [--models gpt,lenet] [--quick]
                                      [--torch-compile] [--json out.json]
    python benchmarks/bench_models.py --profile gpt|W4 [--steps 5] [--min] [--threads 1]
    python benchmarks/bench_models.py --interleave gpt [--steps 30] [--no-jax] [--settle 0.05]

--interleave runs PyTorch eager and aotgrad's compiled step of one model in this process,
and for the GPT, where JAX is installed, the same model and AdamW as one jax.jit step
(models_jax.py; --no-jax leaves it out), one step of each in turn (so all see the same
machine load), and prints the median ms per step of each, the ratios of aotgrad to torch
eager and to the fastest peer, and the load average before and after. Each step starts
--settle seconds (0.05 by default) after the last one ended: the threads of the library
that ran last still poll for work for a while after its step (PyTorch's OpenMP threads
for milliseconds, slowing an aotgrad step that starts right after by several per cent;
aotgrad's for about 0.1 ms), which no one running one library sees. `--settle 0` runs
them back to back.

--profile runs aotgrad's compiled step of one model (or the compiled forward and backward of
one workload of workloads.py, W1-W6) in this process under aotgrad.autograd.profiler and
prints its kernels and matrix products, slowest first (time, shapes, fused nodes, GB/s,
GFLOP/s). With --min, each kernel's and product's fastest time over the steps instead (per
call within a step, summed per step) and their median: on a shared machine the minima move
far less with the load than the means, so a change to one kernel can be compared between
two checkouts; --threads 1 takes the other processes' share of the cores out as well.
"""
import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time

START = time.perf_counter()
HERE = os.path.dirname(os.path.abspath(__file__))
MARK = "RESULT "
SYSTEMS = ["torch eager", "torch.compile(model)", "aotgrad eager", "aotgrad compile(model)",
           "aotgrad compiled step"]


def _worker(model_name, system, steps, quick, threads):
    sys.path.insert(0, HERE)
    from models import build
    if system.startswith("torch"):
        import torch as M
        M.set_num_threads(threads)
    else:
        import aotgrad as M
    model, opt, batches = build(M, model_name, quick, steps=min(steps, 8))
    if system.endswith("compile(model)"):
        model = M.compile(model)

    def step(x, y):
        opt.zero_grad()
        loss = model(x, y)
        loss.backward()
        opt.step()
        return loss

    if system == "aotgrad compiled step":
        step = M.compile(step)
    losses, times = [], []
    first = None
    for i in range(steps):
        x, y = batches[i % len(batches)]
        t0 = time.perf_counter()
        losses.append(float(step(x, y).item()))
        times.append(time.perf_counter() - t0)
        if first is None:
            first = time.perf_counter() - START
    later = sorted(times[2:]) or sorted(times)
    total = time.perf_counter() - START
    if not system.startswith("torch"):
        M.codegen.wait_for_parallel_kernels(600)
    steady = []
    for i in range(10):
        x, y = batches[i % len(batches)]
        t0 = time.perf_counter()
        step(x, y)
        steady.append(time.perf_counter() - t0)
    return dict(first_step_s=first, total_s=total, step_ms=1e3 * later[len(later) // 2],
                steady_ms=1e3 * sorted(steady)[len(steady) // 2], losses=losses)


def _compiled_step(M, name, quick):
    """A callable running one compiled step of `name`: a model of models.py (the whole
    training step compiled) or a workload of workloads.py (W1-W6: the compiled loss, then
    backward, grads set to None first), and a label for it."""
    sys.path.insert(0, HERE)
    from workloads import WORKLOADS
    if name in WORKLOADS:
        wl = WORKLOADS[name]
        arrays = wl.inputs(quick)
        tensors = [M.from_numpy(arrays[n].copy()).requires_grad_(n in wl.grad)
                   for n in wl.names]
        loss_fn = M.compile(lambda *a: wl.fn(M, *a))

        def run():
            for t in tensors:
                t.grad = None
            loss = loss_fn(*tensors)
            loss.backward()
            return loss
        return run, f"{name} {wl.title}: compiled forward + backward"
    from models import build
    model, opt, batches = build(M, name, quick, steps=4)
    calls = itertools.count()

    @M.compile
    def step(x, y):
        opt.zero_grad()
        loss = model(x, y)
        loss.backward()
        opt.step()
        return loss
    return (lambda: step(*batches[next(calls) % len(batches)])), f"{name}: compiled step"


def _step_minima(prof, steps):
    """Per kernel or product of the compiled programs: (sum over its calls within a step of
    the fastest of that call across the steps, calls per step, median per step, name),
    slowest first. The minimum is what the step takes when no other process interrupts it:
    on a shared machine it moves far less with the load than the mean."""
    import numpy as np
    times = {}
    for e in prof.events():
        if e.kind == "kernel" and e.fused_nodes:
            times.setdefault(e.name, []).append(e.cpu_time_total)
    rows = []
    for name, ts in times.items():
        per = len(ts) // steps
        if per == 0:
            continue
        a = np.array(ts[:per * steps]).reshape(steps, per)
        rows.append((float(a.min(axis=0).sum()), per, float(np.median(a.sum(axis=1))), name))
    return sorted(rows, reverse=True)


def _profile(name, steps, quick, threads, minima=False):
    """The compiled step's kernels and products under the profiler, slowest first; with
    minima, each one's fastest time over the steps (_step_minima) instead of the averages."""
    import aotgrad as M
    from aotgrad.autograd import profiler
    M.set_num_threads(threads)
    run, label = _compiled_step(M, name, quick)
    for _ in range(3):                       # compile, and a warm call
        run()
    M.codegen.wait_for_parallel_kernels(600)
    run()
    with profiler.profile() as prof:
        for _ in range(steps):
            run()
    print(f"{label}, {steps} steps, {threads} threads, load {os.getloadavg()[0]:.2f}")
    if not minima:
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=60,
                                        max_name_column_width=60))
        return
    rows = _step_minima(prof, steps)
    print(f"{'min us/step':>11s} {'median':>9s} {'calls':>5s}  kernel or product")
    for low, per, med, event in rows:
        print(f"{low:11.1f} {med:9.1f} {per:5d}  {event}")
    print(f"{sum(r[0] for r in rows) / 1e3:11.2f} {sum(r[2] for r in rows) / 1e3:9.2f}"
          f"        ms per step in kernels and products (minima, medians)")


def _interleave(model_name, steps, quick, threads, with_jax=True, settle=0.05):
    """Median ms per step of torch eager, aotgrad's compiled step and (GPT, where JAX is
    installed and with_jax) models_jax's jax.jit step, alternated, each starting `settle`
    seconds after the one before ended."""
    sys.path.insert(0, HERE)
    import aotgrad as M
    import torch
    from models import build
    torch.set_num_threads(threads)
    M.set_num_threads(threads)
    steppers = {}
    for name, lib in (("torch eager", torch), ("aotgrad compiled step", M)):
        model, opt, batches = build(lib, model_name, quick, steps=4)

        def step(x, y, model=model, opt=opt):
            opt.zero_grad()
            loss = model(x, y)
            loss.backward()
            opt.step()
            return loss
        steppers[name] = (M.compile(step) if lib is M else step), batches
    if with_jax and model_name == "gpt":
        steppers["jax.jit step"] = _jax_stepper(quick)
    for name, (step, batches) in steppers.items():   # compile, warm up
        for i in range(3):
            step(*batches[i % len(batches)])
    M.codegen.wait_for_parallel_kernels(600)
    load0 = os.getloadavg()[0]
    times = {name: [] for name in steppers}
    for i in range(steps):
        for name, (step, batches) in steppers.items():
            x, y = batches[i % len(batches)]
            time.sleep(settle)
            t0 = time.perf_counter()
            float(step(x, y).item())
            times[name].append(time.perf_counter() - t0)
    med = {name: 1e3 * sorted(t)[len(t) // 2] for name, t in times.items()}
    best = {name: 1e3 * min(t) for name, t in times.items()}
    print(f"{model_name}: {steps} steps each, interleaved, {settle * 1e3:g} ms apart; threads "
          f"{threads}; load {load0:.2f} -> {os.getloadavg()[0]:.2f}")
    for name in steppers:
        print(f"  {name:24s} median {med[name]:8.2f} ms   min {best[name]:8.2f} ms")
    a, t = med["aotgrad compiled step"], med["torch eager"]
    print(f"  ratio aotgrad/torch: median {a / t:.3f}, min "
          f"{best['aotgrad compiled step'] / best['torch eager']:.3f}")
    peer = min((n for n in steppers if not n.startswith("aotgrad")), key=med.get)
    print(f"  ratio aotgrad/best peer ({peer}): median {a / med[peer]:.3f}")


def _jax_stepper(quick):
    """models_jax's GPT step as (step(x, y) -> loss, batches): the parameters and optimizer
    state live in a closure cell, as in the other systems' stateful steps."""
    from models_jax import build_gpt
    step, params, batches = build_gpt(quick, steps=4)
    cell = [params]

    def run(x, y):
        cell[0], loss = step(cell[0], x, y)
        return loss.block_until_ready()
    return run, batches


def _jax_installed():
    import importlib.util
    return importlib.util.find_spec("jax") is not None


def _run(model_name, system, args, cache):
    env = dict(os.environ, AOTGRAD_CACHE_DIR=cache, PYTHONUNBUFFERED="1")
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", model_name, system,
           "--steps", str(args.steps), "--threads", str(args.threads)] + \
        (["--quick"] if args.quick else [])
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600)
    for line in r.stdout.splitlines():
        if line.startswith(MARK):
            return json.loads(line[len(MARK):])
    return dict(error=(r.stderr.strip().splitlines() or ["no output"])[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--worker", nargs=2, metavar=("MODEL", "SYSTEM"))
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--models", default="gpt,lenet")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--torch-compile", action="store_true")
    ap.add_argument("--json")
    ap.add_argument("--profile", metavar="MODEL",
                    help="a model (gpt, lenet) or a workload of workloads.py (W1-W6)")
    ap.add_argument("--min", action="store_true",
                    help="--profile: each kernel's fastest time over the steps")
    ap.add_argument("--interleave", metavar="MODEL")
    ap.add_argument("--systems", help="comma-separated system names (default: all)")
    ap.add_argument("--no-jax", action="store_true", help="--interleave without jax.jit")
    ap.add_argument("--settle", type=float, default=0.05,
                    help="--interleave: seconds between one step's end and the next's start")
    args = ap.parse_args(argv)
    if args.profile:
        _profile(args.profile, args.steps, args.quick, args.threads, minima=args.min)
        return 0
    if args.interleave:
        _interleave(args.interleave, args.steps, args.quick, args.threads,
                    with_jax=_jax_installed() and not args.no_jax, settle=args.settle)
        return 0
    if args.worker:
        print(MARK + json.dumps(_worker(*args.worker, args.steps, args.quick, args.threads)))
        return 0
    try:
        import torch  # noqa: F401
        systems = SYSTEMS if args.torch_compile else [s for s in SYSTEMS if s != SYSTEMS[1]]
    except ImportError:
        systems = [s for s in SYSTEMS if not s.startswith("torch")]
    if args.systems:
        systems = [s for s in systems if s in args.systems.split(",")]
    rows = []
    print(f"load average at start {os.getloadavg()[0]:.2f}; {args.steps} steps; "
          f"threads {args.threads}")
    head = (f"{'model':6s} {'system':24s} {'cache':5s} {'first step s':>12s} {'ms/step':>8s} "
            f"{'steady':>8s} {'all steps s':>11s} {'loss vs eager':>13s} {'load':>5s}")
    print(head)
    for model_name in args.models.split(","):
        eager = {}
        for system in systems:
            with tempfile.TemporaryDirectory(prefix="aotgrad-bench-") as cache:
                for cache_state in ("cold", "warm"):
                    res = _run(model_name, system, args, cache)
                    res.update(model=model_name, system=system, cache=cache_state,
                               load=os.getloadavg()[0])
                    rows.append(res)
                    if "error" in res:
                        print(f"{model_name:6s} {system:24s} {cache_state:5s} error: "
                              f"{res['error'][:100]}")
                        continue
                    lib = system.split()[0]
                    if system.endswith("eager"):
                        eager[lib] = res["losses"]
                    ref = eager.get(lib)
                    diff = max(abs(a - b) for a, b in zip(res["losses"], ref)) if ref else \
                        float("nan")
                    print(f"{model_name:6s} {system:24s} {cache_state:5s} "
                          f"{res['first_step_s']:12.2f} {res['step_ms']:8.2f} "
                          f"{res['steady_ms']:8.2f} {res['total_s']:11.2f} {diff:13.2e} "
                          f"{res['load']:5.2f}")
                    if system.endswith("eager"):
                        break     # eager has no compile cache: one run
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
