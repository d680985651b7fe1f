"""Eager optimizer steps and gradient clipping over the parameters of a small GPT (token and
position embeddings, 4 blocks of n_embd 256, about 3.3 M parameters), aotgrad's fused path
(the default: generated kernels), its numpy multi-tensor path (`foreach=True`), its
per-parameter path (`foreach=False`) and PyTorch's foreach path, side by side in one process.

    python benchmarks/bench_optimizers.py [--reps 30] [--threads 1] [--cpu-time] [--only AdamW]

Prints the median ms per call of each and the machine's load average (--cpu-time: the
process's CPU time per call, steadier than wall time on a loaded machine). aotgrad's fused
kernels are compiled (or loaded from the disk cache) before timing."""
import argparse
import os
import sys
import time

import numpy as np


def gpt_shapes(n_embd=256, n_layer=4, vocab=512, block=128):
    shapes = [(vocab, n_embd), (block, n_embd)]
    for _ in range(n_layer):
        shapes += [(n_embd,), (n_embd,), (3 * n_embd, n_embd), (3 * n_embd,), (n_embd, n_embd),
                   (n_embd,), (n_embd,), (n_embd,), (4 * n_embd, n_embd), (4 * n_embd,),
                   (n_embd, 4 * n_embd), (n_embd,)]
    return shapes + [(n_embd,), (n_embd,)]


def _params(M):
    rng = np.random.default_rng(0)
    ps = [M.tensor(rng.standard_normal(s).astype(np.float32), requires_grad=True)
          for s in gpt_shapes()]
    for p in ps:
        p.grad = M.tensor(rng.standard_normal(p.shape).astype(np.float32))
    return ps


def _median_ms(fn, reps, clock=time.perf_counter):
    fn()
    times = []
    for _ in range(reps):
        t0 = clock()
        fn()
        times.append(clock() - t0)
    return 1e3 * float(np.median(times))


def cases(M, flags, only=None):
    """(name, a function doing one call) for library M with the optimizer flags `flags`."""
    out = []
    for name, kw in [("AdamW", dict(lr=1e-3, weight_decay=0.1)),
                     ("Adam amsgrad", dict(lr=1e-3, amsgrad=True)),
                     ("SGD momentum", dict(lr=1e-2, momentum=0.9, nesterov=True)),
                     ("RMSprop centered", dict(lr=1e-2, momentum=0.9, centered=True)),
                     ("Adagrad", dict(lr=1e-2, weight_decay=0.1)),
                     ("Adamax", dict(lr=2e-3)),
                     ("NAdam", dict(lr=2e-3)),
                     ("RAdam", dict(lr=1e-3))]:
        if only and name not in only:
            continue
        ps = _params(M)
        opt = getattr(M.optim, name.split()[0])(ps, **kw, **flags)
        out.append((name, opt.step))
    clip_flags = {"foreach": flags["foreach"]} if "foreach" in flags else {}
    # within the norm (the gradients stay) and clipping (every gradient scaled); the
    # clipping case's gradients shrink call by call (the time does not depend on them)
    for name, max_norm in [("clip_grad_norm_", 1e9), ("clip_grad_norm_ (clips)", 1e-3)]:
        if only and name not in only:
            continue
        ps = _params(M)
        out.append((name, lambda ps=ps, max_norm=max_norm:
                    M.nn.utils.clip_grad_norm_(ps, max_norm, **clip_flags)))
    if not only or "clip_grad_value_" in only:
        # the first call clamps, the later ones find the gradients within the bounds (the
        # time does not depend on it)
        ps = _params(M)
        out.append(("clip_grad_value_", lambda ps=ps:
                    M.nn.utils.clip_grad_value_(ps, 0.5, **clip_flags)))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--cpu-time", action="store_true")
    ap.add_argument("--only", action="append", help="a case's name (repeatable)")
    args = ap.parse_args(argv)
    clock = time.process_time if args.cpu_time else time.perf_counter
    os.environ.setdefault("AOTGRAD_EAGER_KERNELS", "wait")   # compiled before timing
    import aotgrad
    systems = [("aotgrad fused (default)", aotgrad, {}),
               ("aotgrad foreach (numpy)", aotgrad, {"foreach": True}),
               ("aotgrad per-parameter", aotgrad, {"foreach": False})]
    try:
        import torch
        torch.set_num_threads(args.threads)
        systems.append(("torch foreach", torch, {"foreach": True}))
    except ImportError:
        pass
    # the systems' calls interleaved, rep by rep, so that a change of the machine's load
    # falls on all of them alike
    fns = {label: cases(M, flags, args.only) for label, M, flags in systems}
    results = {}
    for k, (name, _) in enumerate(fns[systems[0][0]]):
        calls = {label: fns[label][k][1] for label in fns}
        times = {label: [] for label in calls}
        for label, fn in calls.items():
            fn()
        if "torch" in sys.modules:
            # again after aotgrad's first calls: compiling its kernels starts numba's OpenMP
            # threads from this thread, which changed torch's thread count here
            sys.modules["torch"].set_num_threads(args.threads)
        for _ in range(args.reps):
            for label, fn in calls.items():
                t0 = clock()
                fn()
                times[label].append(clock() - t0)
        results[name] = {label: 1e3 * float(np.median(t)) for label, t in times.items()}
    labels = [s[0] for s in systems]
    print(f"load average {os.getloadavg()[0]:.2f}; {sum(map(np.prod, gpt_shapes())):.0f} "
          f"parameters in {len(gpt_shapes())} tensors; median ms per call"
          f"{' (CPU time)' if args.cpu_time else ''}")
    print(f"{'':18s}" + "".join(f"{lab:>24s}" for lab in labels))
    for name, row in results.items():
        print(f"{name:18s}" + "".join(f"{row[lab]:24.2f}" for lab in labels))
    return results


if __name__ == "__main__":
    sys.exit(main() and 0)
