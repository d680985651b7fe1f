"""Eager training steps of the two whole programs (benchmarks/models.py: the small GPT with
AdamW, LeNet with SGD momentum), aotgrad eager and PyTorch eager in one process, their steps
interleaved so that both see the same load on a shared machine. Optionally aotgrad with its
eager kernels off (runtime/eager_kernels.py: the ops run their prims), to see what the
kernels bring.

    python benchmarks/bench_eager_models.py [--models gpt,lenet] [--steps 20] [--threads 1]
                                            [--no-kernels] [--cpu-time] [--cold]

Prints the median and fastest ms per step (the first two steps left out), the ratio of the
medians, the last losses (equal up to float32 rounding) and the load average. `--threads`
sets torch's threads; numpy's BLAS threads are what the environment says (set
OPENBLAS_NUM_THREADS to match for a like-for-like comparison). `--cpu-time` times each step
by this process's CPU time instead of the wall clock: on a loaded machine a single-threaded
step's CPU time leaves out the time other processes held the core (set the threads to 1).
`--cold` starts from an empty compile cache (a new temporary AOTGRAD_CACHE_DIR): the eager
kernel library (runtime/kernel_library.py) compiles its kernels in the background while the
numpy kernels run, and the first step's time and the time of all steps are printed too."""
import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def _steppers(model_name, libs):
    sys.path.insert(0, HERE)
    from models import build
    out = {}
    for label, M, kernels in libs:
        model, opt, batches = build(M, model_name, False, steps=4)

        def step(i, model=model, opt=opt, batches=batches):
            x, y = batches[i % len(batches)]
            opt.zero_grad()
            loss = model(x, y)
            loss.backward()
            opt.step()
            return float(loss.item())
        out[label] = (step, kernels)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="gpt,lenet")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--no-kernels", action="store_true",
                    help="also run aotgrad with its eager kernels off")
    ap.add_argument("--cpu-time", action="store_true",
                    help="time steps by process CPU time (single-threaded runs on a busy machine)")
    ap.add_argument("--cold", action="store_true",
                    help="an empty compile cache: time to the first step and to all steps")
    args = ap.parse_args(argv)
    if args.cold:
        import tempfile
        os.environ["AOTGRAD_CACHE_DIR"] = tempfile.mkdtemp(prefix="aotgrad-bench-cold-")
    import aotgrad
    from aotgrad.runtime import eager_kernels
    libs = [("aotgrad", aotgrad, True)]
    if args.no_kernels:
        libs.append(("aotgrad prims only", aotgrad, False))
    try:
        import torch
        torch.set_num_threads(args.threads)
        libs.insert(0, ("torch", torch, True))
    except ImportError:
        pass
    run = eager_kernels.run
    clock = time.process_time if args.cpu_time else time.perf_counter
    print(f"{'cpu' if args.cpu_time else 'wall'} time; torch threads {args.threads}; "
          f"OPENBLAS_NUM_THREADS="
          f"{os.environ.get('OPENBLAS_NUM_THREADS', '(unset)')}; {args.steps} steps")
    for model_name in args.models.split(","):
        steppers = _steppers(model_name, libs)
        times = {label: [] for label in steppers}
        losses = {}
        load = os.getloadavg()[0]
        for i in range(args.steps):
            for label, (step, kernels) in steppers.items():
                eager_kernels.run = run if kernels else (lambda *a, **k: None)
                try:
                    t0 = clock()
                    losses[label] = step(i)
                    times[label].append(clock() - t0)
                finally:
                    eager_kernels.run = run
            if i == 0 and "torch" in sys.modules:
                # again after aotgrad's first step: compiling its kernels starts numba's
                # OpenMP threads from this thread, which changed torch's thread count here
                sys.modules["torch"].set_num_threads(args.threads)
        medians = {}
        for label, ts in times.items():
            ts = sorted(ts[2:] or ts)
            medians[label] = ts[len(ts) // 2]
            print(f"{model_name:6s} {label:20s} median {1e3 * medians[label]:9.2f} ms  fastest "
                  f"{1e3 * ts[0]:9.2f} ms  last loss {losses[label]:.5f}")
            if args.cold:
                print(f"{model_name:6s} {label:20s} first step {1e3 * times[label][0]:9.2f} ms  "
                      f"all {len(times[label])} steps {sum(times[label]):7.2f} s")
        if "torch" in medians:
            print(f"{model_name:6s} aotgrad / torch (medians) "
                  f"{medians['aotgrad'] / medians['torch']:.2f}; load {load:.2f} -> "
                  f"{os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
