"""Whole training programs as users write them (benchmarks/models.py: a small GPT with AdamW,
LeNet with SGD momentum), each system in fresh processes: PyTorch eager (and torch.compile
with --torch-compile), aotgrad eager, aotgrad with `model = aotgrad.compile(model)` and the
optimizer outside, and aotgrad with the whole step compiled.

For each: the seconds from process start to the end of the first step (imports and compiles
included), on a cold compile cache (a fresh directory) and on a warm one (the same directory
again); the median ms per step after the first two (aotgrad's background compiles of
parallel kernels may still run then); the median ms of 10 more steps once they are done
("steady"); the seconds to all steps; and the largest difference of the loss curve from the
same library's eager curve. --systems picks systems by name ("torch eager,aotgrad compiled
step"). Steps share 2 cores with whatever else runs: the load average is printed per row.

    python benchmarks/bench_models.py [--steps 50] [--models gpt,lenet] [--quick]
                                      [--torch-compile] [--json out.json]
    python benchmarks/bench_models.py --profile gpt [--steps 5]
    python benchmarks/bench_models.py --interleave gpt [--steps 30] [--no-jax]

--interleave runs PyTorch eager and aotgrad's compiled step of one model in this process,
and for the GPT, where JAX is installed, the same model and AdamW as one jax.jit step
(models_jax.py; --no-jax leaves it out), one step of each in turn (so all see the same
machine load), and prints the median ms per step of each, the ratios of aotgrad to torch
eager and to the fastest peer, and the load average before and after.

--profile runs aotgrad's compiled step of one model in this process under
aotgrad.autograd.profiler and prints its kernels and matrix products, slowest first (time,
shapes, fused nodes, GB/s, GFLOP/s).
"""
import argparse
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


def _profile(model_name, steps, quick, threads):
    """The compiled step's kernels and products under the profiler, slowest first."""
    sys.path.insert(0, HERE)
    import aotgrad as M
    from aotgrad.autograd import profiler
    from models import build
    M.set_num_threads(threads)
    model, opt, batches = build(M, model_name, quick, steps=4)

    @M.compile
    def step(x, y):
        opt.zero_grad()
        loss = model(x, y)
        loss.backward()
        opt.step()
        return loss
    for i in range(3):                       # compile, and a warm call
        step(*batches[i % len(batches)])
    M.codegen.wait_for_parallel_kernels(600)
    with profiler.profile() as prof:
        for i in range(steps):
            step(*batches[i % len(batches)])
    print(f"{model_name}: compiled step, {steps} steps, load {os.getloadavg()[0]:.2f}")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=60,
                                    max_name_column_width=60))


def _interleave(model_name, steps, quick, threads, with_jax=True):
    """Median ms per step of torch eager, aotgrad's compiled step and (GPT, where JAX is
    installed and with_jax) models_jax's jax.jit step, alternated."""
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
            t0 = time.perf_counter()
            float(step(x, y).item())
            times[name].append(time.perf_counter() - t0)
    med = {name: 1e3 * sorted(t)[len(t) // 2] for name, t in times.items()}
    best = {name: 1e3 * min(t) for name, t in times.items()}
    print(f"{model_name}: {steps} steps each, interleaved; threads {threads}; load "
          f"{load0:.2f} -> {os.getloadavg()[0]:.2f}")
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
    ap.add_argument("--profile", metavar="MODEL")
    ap.add_argument("--interleave", metavar="MODEL")
    ap.add_argument("--systems", help="comma-separated system names (default: all)")
    ap.add_argument("--no-jax", action="store_true", help="--interleave without jax.jit")
    args = ap.parse_args(argv)
    if args.profile:
        _profile(args.profile, args.steps, args.quick, args.threads)
        return 0
    if args.interleave:
        _interleave(args.interleave, args.steps, args.quick, args.threads,
                    with_jax=_jax_installed() and not args.no_jax)
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
