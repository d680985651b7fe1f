"""The first minute of a training run: time to the first step and to N steps from a fresh
compile cache, beside PyTorch eager, and the same run started again (warm cache).

    python benchmarks/bench_cold_start.py [--steps 300] [--models W4,gpt,lenet] [--quick]
                                          [--systems "torch eager,aotgrad compiled"]
                                          [--json out.json]
    python benchmarks/bench_cold_start.py --interleave [--steps 300] [--models W4,gpt]

Models: W4 (benchmarks/workloads.py: a pre-LN transformer block, forward + backward and a
plain SGD update of its parameters), gpt (benchmarks/models.py: the small GPT, its whole
training step with AdamW compiled) and lenet (benchmarks/models.py: LeNet, its whole training
step with SGD and momentum compiled). Systems: torch eager; aotgrad compiled (the default:
cold kernels run on numpy first while helper processes compile them in the background);
"aotgrad compiled serial-first" (AOTGRAD_FIRST_TIER=serial: every kernel compiled before
the first call, other background compiles after it); "aotgrad compiled up-front"
(AOTGRAD_BACKGROUND_COMPILE=0: nothing in the background, so its first step's time holds
every compile the run needs); "aotgrad compiled numpy-first" (AOTGRAD_ROW_MACHINE=0: cold
kernels on numpy, not on the row machine, codegen/row_vm.py). The row machine is compiled
once per installation, not per cache directory: a cold row here has it (run any cold
program once after installing, or delete codegen/_machine to see a fresh installation).

Each row is one fresh process: `cold` with an empty cache directory, `warm` the same
command again on the directory the cold run filled (after the compile work it left behind
at exit, handed to a detached helper, has finished: `--no-wait-detached` skips the wait).
Columns: seconds from process start (imports included) to the end of the first and of the
second step, to the end of all steps (and the CPU seconds of this process, its threads
included, to the end of the first step and of all steps: less sensitive to the machine's
load than the wall time; compile helpers are other processes); the median and the slowest step after the first
while background compiles were still running (and how many such steps), and the median of
the last 20 steps; how many steps after the first ran kernels on numpy (the first tier,
whether their compiles are queued, running or held back until their rent is due: `n numpy`) and the seconds from process start to the end of the last of them (`numpy s`),
and to the end of the last step while any background compile was pending (`busy s`; `-`
where they were still pending at the last step); the seconds the programs waited for their
first-tier compiles once their numpy runs had cost as much (`wait s`: codegen.rent.Rent); the load average; the calls of the
compiled function that ran eagerly (`eager`: a graph break; must be 0); the loss of the last step and its relative difference
from torch eager's in the same run (same seeded data and weights; `vs torch`).

`--interleave`: each model's steps on PyTorch eager and on aotgrad compiled (a fresh cache)
taken in turn in one process, so that both see the same moments of the machine's load:
per window of steps, each system's median step, their ratio, and in how many pairs the
aotgrad step was the slower one (the step sizes of the first minute, with its compiles,
side by side, where two processes minutes apart differ by more than the effect measured).
The two share the process: each step starts with the other's data in the caches, and
right after the other library's threads finished (their threads may still be polling for
work, PyTorch's for milliseconds): the order alternates, so each follows the other in half
its steps and itself in the other half (from the second pair on). The `own` columns take
only the steps that followed the same system's step, as in a run of one library: torch's
OpenMP threads, left polling after its step, take cores from an aotgrad step started
right after it (aotgrad's threads stop polling within about 0.1 ms), so the all-pairs
medians hold a penalty no one running one library sees.
"""
import time

START = time.perf_counter()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
MARK = "RESULT "
SYSTEMS = {"torch eager": {}, "aotgrad compiled": {},
           "aotgrad compiled serial-first": {"AOTGRAD_FIRST_TIER": "serial"},
           "aotgrad compiled up-front": {"AOTGRAD_BACKGROUND_COMPILE": "0"},
           "aotgrad compiled numpy-first": {"AOTGRAD_ROW_MACHINE": "0"}}


def _w4_step(M, quick):
    """W4's forward + backward and an SGD update of its parameters."""
    from workloads import WORKLOADS
    wl = WORKLOADS["W4"]
    arrays = wl.inputs(quick)
    tensors, params = [], []
    for name in wl.names:
        t = M.from_numpy(arrays[name].copy())
        if name in wl.grad and name != "x":
            t.requires_grad_(True)
            params.append(t)
        tensors.append(t)
    loss_fn = (lambda *a: wl.fn(M, *a))
    if M.__name__ == "aotgrad":
        loss_fn = M.compile(loss_fn)
    opt = M.optim.SGD(params, lr=1e-3)

    def step():
        opt.zero_grad()
        loss = loss_fn(*tensors)
        loss.backward()
        opt.step()
        return loss
    step.compiled = loss_fn if M.__name__ == "aotgrad" else None
    return step


def _first_tier_calls(compiled):
    """Calls of the first-tier kernels (codegen.first_tier.ReferenceKernel) of the programs
    of aotgrad compiled function `compiled` so far (0 for torch: None)."""
    if compiled is None:
        return 0
    return sum(ref.calls for p in list(compiled.cache.values())
               for k in getattr(p, "_kernels", {}).values()
               for ref in list(getattr(k, "first_tier", {}).values()))


def _model_step(M, name, quick):
    """The whole training step of benchmarks/models.py's model `name`, compiled on aotgrad."""
    from models import build
    model, opt, batches = build(M, name, quick, steps=4)

    def step_fn(x, y):
        opt.zero_grad()
        loss = model(x, y)
        loss.backward()
        opt.step()
        return loss
    run = M.compile(step_fn) if M.__name__ == "aotgrad" else step_fn
    it = iter(range(10 ** 9))

    def step():
        return run(*batches[next(it) % len(batches)])
    step.compiled = run if M.__name__ == "aotgrad" else None
    return step


def _step(M, model, quick):
    """A training step of `model` (W4 or one of benchmarks/models.py's) on library `M`."""
    return _w4_step(M, quick) if model == "W4" else _model_step(M, model, quick)


def _worker(model, system, steps, quick):
    sys.path.insert(0, HERE)
    if system.startswith("torch"):
        import torch as M
    else:
        import aotgrad as M
        from aotgrad.codegen import tiers
    step = _step(M, model, quick)
    ends, busy, on_numpy = [], [], []
    first_tier_calls = 0
    for i in range(steps):
        t0 = time.perf_counter()
        loss = float(step().item())
        ends.append(time.perf_counter())
        busy.append(not system.startswith("torch") and tiers.pending() > 0)
        ran = _first_tier_calls(step.compiled)
        on_numpy.append(ran > first_tier_calls)
        first_tier_calls = ran
        if i == 0:
            t_first, cpu_first = t0, time.process_time()
    durs = [ends[0] - t_first] + [b - a for a, b in zip(ends, ends[1:])]
    during = sorted(d for d, b in zip(durs[1:], busy[1:]) if b)
    last = sorted(durs[-20:])
    # calls of the compiled function that ran eagerly instead (a graph break): the figures
    # are not the compiled system's where this is not 0
    eager = step.compiled.eager_calls if step.compiled is not None else None

    # seconds the compiled programs waited for their first-tier compiles (codegen.first_tier
    # .Rent), once their numpy runs had cost as much as those compiles were estimated to
    waited = None
    if step.compiled is not None:
        rents = [getattr(k, "rent", None) for p in step.compiled.cache.values()
                 for k in getattr(p, "_kernels", {}).values()]
        waited = sum(r.waited for r in rents if r is not None)

    def end_of(flags):     # seconds from the start to the end of the last flagged step
        if flags[-1] or system.startswith("torch"):   # (None: not over by the last step)
            return None
        return max((e - START for e, f in zip(ends, flags) if f), default=ends[0] - START)
    return dict(numpy_n=sum(on_numpy[1:]), numpy_end_s=end_of(on_numpy),
                busy_end_s=end_of(busy), waited_s=waited, eager_calls=eager, first_s=ends[0] - START, first_cpu_s=cpu_first, all_cpu_s=time.process_time(), second_s=ends[1] - START if steps > 1 else None,
                all_s=ends[-1] - START, during_n=len(during),
                during_med_ms=1e3 * during[len(during) // 2] if during else None,
                during_max_ms=1e3 * during[-1] if during else None,
                steady_ms=1e3 * last[len(last) // 2], loss=loss, load=os.getloadavg()[0])


def _interleaved_worker(model, steps, quick):
    """Steps of `model` on torch eager and on aotgrad compiled, in turn: [(torch seconds,
    aotgrad seconds, whether the aotgrad step ran first-tier kernels)]."""
    sys.path.insert(0, HERE)
    import torch
    import aotgrad
    torch_step, aot_step = _step(torch, model, quick), _step(aotgrad, model, quick)
    pairs, calls = [], 0

    def timed(step):
        t0 = time.perf_counter()
        float(step().item())
        return time.perf_counter() - t0
    for i in range(steps):
        # (the order alternates, so that each system's step follows the other's in half the
        # pairs and its own in the other half: the threads a library leaves polling after its
        # step slow the next one, PyTorch's more than aotgrad's)
        if i % 2 == 0:
            t, a = timed(torch_step), timed(aot_step)
        else:
            a, t = timed(aot_step), timed(torch_step)
        ran = _first_tier_calls(aot_step.compiled)
        pairs.append((t, a, ran > calls))
        calls = ran
    return dict(pairs=pairs, load=os.getloadavg()[0])


def _interleave(args):
    print(f"load average at start {os.getloadavg()[0]:.2f}; {args.steps} steps, torch eager "
          f"and aotgrad compiled (cold cache) in turn in one process")
    print(f"{'model':5s} {'steps':>9s} {'torch ms':>9s} {'aotgrad ms':>10s} {'ratio':>6s} "
          f"{'aotgrad slower':>14s} {'first tier':>10s} {'own torch':>9s} {'own aotgrad':>11s} "
          f"{'own ratio':>9s}")
    out = {}
    for model in args.models.split(","):
        with tempfile.TemporaryDirectory(prefix="aotgrad-cold-") as cache:
            env = dict(os.environ, AOTGRAD_CACHE_DIR=cache, PYTHONUNBUFFERED="1")
            cmd = [sys.executable, os.path.abspath(__file__), "--interleaved-worker", model,
                   "--steps", str(args.steps)] + (["--quick"] if args.quick else [])
            r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600)
            # the compiles the run left to a detached helper are not wanted (the cache goes):
            # stopped, so they neither write into the directory being removed nor take cores
            # from the next model's run
            _stop_detached_helpers(cache)
        res = next((json.loads(line[len(MARK):]) for line in r.stdout.splitlines()
                    if line.startswith(MARK)), None)
        if res is None:
            print(f"{model:5s} error: {(r.stderr.strip().splitlines() or ['no output'])[-1]}")
            continue
        out[model] = res
        pairs = res["pairs"]
        bounds = [b for b in (1, 11, 41, len(pairs)) if b <= len(pairs)]
        for lo, hi in zip(bounds, bounds[1:]):
            window = pairs[lo:hi]
            tm = 1e3 * statistics.median(p[0] for p in window)
            am = 1e3 * statistics.median(p[1] for p in window)
            slower = sum(p[1] > p[0] for p in window)
            tier = sum(p[2] for p in window)
            # each system's steps that followed its own step: torch's in the even pairs,
            # aotgrad's in the odd ones (see _interleaved_worker)
            own_t = 1e3 * statistics.median(p[0] for i, p in enumerate(pairs[lo:hi], lo)
                                            if i % 2 == 0)
            own_a = 1e3 * statistics.median(p[1] for i, p in enumerate(pairs[lo:hi], lo)
                                            if i % 2 == 1)
            print(f"{model:5s} {f'{lo + 1}-{hi}':>9s} {tm:9.1f} {am:10.1f} {am / tm:6.3f} "
                  f"{f'{slower} of {hi - lo}':>14s} {tier:10d} {own_t:9.1f} {own_a:11.1f} "
                  f"{own_a / own_t:9.3f}", flush=True)
        t, a = sum(p[0] for p in pairs), sum(p[1] for p in pairs)
        print(f"{model:5s} {'all':>9s} {1e3 * t:9.0f} {1e3 * a:10.0f} {a / t:6.3f}   (sums, "
              f"first steps {pairs[0][0]:.2f} and {pairs[0][1]:.2f} s; load {res['load']:.2f})")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=1)
    return 0


def _detached_helpers(cache):
    """Compile helpers still working for `cache` (their working directory)."""
    out = []
    for pid in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not pid.isdigit():
            continue
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if cwd == cache and b"compile_worker.py" in cmd:
            out.append(int(pid))
    return out


def _stop_detached_helpers(cache, timeout=10.0):
    """Kill the compile helpers still working for `cache`, and wait until they are gone."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout:
        pids = _detached_helpers(cache)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.1)


def _run(model, system, args, cache):
    env = dict(os.environ, AOTGRAD_CACHE_DIR=cache, PYTHONUNBUFFERED="1", **SYSTEMS[system])
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", model, system,
           "--steps", str(args.steps)] + (["--quick"] if args.quick else [])
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600)
    for line in r.stdout.splitlines():
        if line.startswith(MARK):
            return json.loads(line[len(MARK):])
    return dict(error=(r.stderr.strip().splitlines() or ["no output"])[-1])


def _fmt(v, width, digits):
    return "-".rjust(width) if v is None else f"{v:{width}.{digits}f}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--worker", nargs=2, metavar=("MODEL", "SYSTEM"))
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--models", default="W4,gpt,lenet")
    ap.add_argument("--systems", help="comma-separated system names (default: all)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-wait-detached", action="store_true")
    ap.add_argument("--json")
    ap.add_argument("--interleave", action="store_true")
    ap.add_argument("--interleaved-worker", metavar="MODEL")
    args = ap.parse_args(argv)
    if args.worker:
        print(MARK + json.dumps(_worker(*args.worker, args.steps, args.quick)))
        return 0
    if args.interleaved_worker:
        print(MARK + json.dumps(_interleaved_worker(args.interleaved_worker, args.steps,
                                                    args.quick)))
        return 0
    if args.interleave:
        return _interleave(args)
    systems = [s for s in SYSTEMS if not args.systems or s in args.systems.split(",")]
    print(f"load average at start {os.getloadavg()[0]:.2f}; {args.steps} steps")
    print(f"{'model':5s} {'system':30s} {'cache':5s} {'1st step s':>10s} {'cpu':>5s} "
          f"{'2nd s':>6s} {'all s':>7s} {'cpu':>6s} {'n busy':>6s} {'busy med':>8s} {'busy max':>8s} {'steady':>7s} "
          f"{'n numpy':>7s} {'numpy s':>7s} {'busy s':>6s} {'wait s':>6s} "
          f"{'eager':>5s} {'loss':>10s} {'vs torch':>8s} {'load':>5s}")
    rows = []
    for model in args.models.split(","):
        torch_loss = None
        for system in systems:
            with tempfile.TemporaryDirectory(prefix="aotgrad-cold-") as cache:
                for state in ("cold", "warm"):
                    if state == "warm":
                        if system.startswith("torch"):
                            break
                        t0 = time.perf_counter()
                        while not args.no_wait_detached and _detached_helpers(cache) and \
                                time.perf_counter() - t0 < 600:
                            time.sleep(0.5)
                    res = _run(model, system, args, cache)
                    res.update(model=model, system=system, cache=state)
                    rows.append(res)
                    if "error" in res:
                        print(f"{model:5s} {system:30s} {state:5s} error: {res['error'][:100]}")
                        continue
                    if system == "torch eager":
                        torch_loss = res["loss"]
                    res["vs_torch"] = None if torch_loss is None else \
                        abs(res["loss"] - torch_loss) / max(abs(torch_loss), 1e-30)
                    vs = "-" if res["vs_torch"] is None else f"{res['vs_torch']:.1e}"
                    print(f"{model:5s} {system:30s} {state:5s} {res['first_s']:10.2f} "
                          f"{res['first_cpu_s']:5.2f} {_fmt(res['second_s'], 6, 2)} "
                          f"{res['all_s']:7.2f} {res['all_cpu_s']:6.2f} "
                          f"{res['during_n']:6d} {_fmt(res['during_med_ms'], 8, 1)} "
                          f"{_fmt(res['during_max_ms'], 8, 1)} {res['steady_ms']:7.1f} "
                          f"{res['numpy_n']:7d} {_fmt(res['numpy_end_s'], 7, 2)} "
                          f"{_fmt(res['busy_end_s'], 6, 2)} "
                          f"{_fmt(res.get('waited_s'), 6, 2)} "
                          f"{'-' if res['eager_calls'] is None else res['eager_calls']:>5} "
                          f"{res['loss']:10.5f} {vs:>8s} "
                          f"{res['load']:5.2f}", flush=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
