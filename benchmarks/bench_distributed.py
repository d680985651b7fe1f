"""All-reduce bandwidth and DDP step time with and without overlap, on MPI ranks.

    mpiexec -n 2 python benchmarks/bench_distributed.py [--quick] [--json out.json]

1. all_reduce (float32 SUM, in place) by message size: median time and algorithm bandwidth
   (bytes / time), through aotgrad.distributed and through mpi4py's blocking Allreduce on
   the same array (the wrapper's cost).
2. A training step (forward, backward, SGD) of an MLP per rank:
   - `local`: the model alone, no communication (compute time);
   - `comm`: the all-reduce of the gradient buckets alone (communication time);
   - `ddp`: DistributedDataParallel, buckets all-reduced from the hooks as the backward runs;
   - `ddp, one bucket at the end`: bucket_cap_mb large enough for one bucket, so that the
     all-reduce starts only after the last gradient (no overlap);
   and the same with the module compiled (aotgrad.compile, Numba), whole and layer by
   layer. The fraction of communication hidden behind the backward is 1 - wait / comm,
   with `wait` the time the hook of the last gradient blocked waiting for the buckets
   (DDP's reducer records it). DDP around a module compiled whole: its compiled backward
   is one program, which hands each parameter's gradient to DDP's hook as soon as it has
   computed it (the last layers' first), so a bucket's all-reduce starts while the program
   computes the gradients of the layers below, as eagerly; compiled layer by layer, each
   layer's backward hands them out when it ends.
3. The whole training step compiled (aotgrad.compile around zero_grad, the DDP forward,
   backward and SGD step): one program in which each bucket's all-reduce is started as a
   step right after the bucket's last gradient and waited for before the optimizer. `wait`
   is then the time the program blocked in those waits (the process group counts it), and
   `one bucket` puts all gradients in one bucket, started after the last gradient.
Every rank runs with one BLAS thread (the ranks share the machine's cores).
"""
import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

import aotgrad
import aotgrad.distributed as dist
from aotgrad import nn, optim
from aotgrad.nn.parallel import DistributedDataParallel


def median_time(fn, reps, warm=2):
    for _ in range(warm):
        fn()
    times = []
    for _ in range(reps):
        dist.barrier()
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    # the step of the slowest rank is the step of the job
    t = aotgrad.tensor([statistics.median(times)], dtype=aotgrad.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def bench_all_reduce(sizes, reps):
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    rows = []
    for nbytes in sizes:
        t = aotgrad.ones(nbytes // 4)
        arr = np.ones(nbytes // 4, np.float32)
        n = max(3, min(reps, int(2e8 // max(nbytes, 1))))
        ours = median_time(lambda: dist.all_reduce(t), n)
        raw = median_time(lambda: comm.Allreduce(MPI.IN_PLACE, arr), n)
        rows.append({"bytes": nbytes, "aotgrad_s": ours, "mpi4py_s": raw,
                     "aotgrad_MBps": nbytes / ours / 1e6, "mpi4py_MBps": nbytes / raw / 1e6})
    return rows


def make_mlp(width, depth, seed=0):
    aotgrad.manual_seed(seed)
    layers = [nn.Linear(256, width), nn.ReLU()]
    for _ in range(depth - 1):
        layers += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(width, 10))


class CompiledPerLayer(nn.Module):
    """The MLP with each layer compiled on its own: each compiled backward ends, and its
    parameters' hooks fire, before the backward of the layer below runs."""

    def __init__(self, mlp):
        super().__init__()
        self.mlp = mlp
        object.__setattr__(self, "stages", [aotgrad.compile(layer) for layer in mlp])

    def forward(self, x):
        for stage in self.stages:
            x = stage(x)
        return x


def step_fn(model, params, x, y, whole_step=False):
    """One training step; whole_step: the step compiled as one program."""
    opt = optim.SGD(params, lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()

    def step(x, y):
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
    run = aotgrad.compile(step) if whole_step else step
    return lambda: run(x, y)


def interleaved_medians(fns, reps, warm=2):
    """Median time of each function, the functions run in turn (so that a change of the
    machine's load affects them alike); the slowest rank's median."""
    for _ in range(warm):
        for fn in fns.values():
            fn()
    times = {name: [] for name in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            dist.barrier()
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    out = {}
    for name, ts in times.items():
        t = aotgrad.tensor([statistics.median(ts)], dtype=aotgrad.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        out[name] = t.item()
    return out


def bench_ddp(width, depth, batch, bucket_cap_mb, reps, compiled):
    rng = np.random.default_rng(dist.get_rank())
    x = aotgrad.tensor(rng.standard_normal((batch, 256)), dtype=aotgrad.float32)
    y = aotgrad.tensor(rng.integers(0, 10, batch))

    def module():
        m = make_mlp(width, depth)
        if compiled == "per_layer":
            return m, CompiledPerLayer(m)
        return m, (aotgrad.compile(m) if compiled is True else m)

    whole = compiled == "whole_step"
    m, call = module()
    local = step_fn(call, m.parameters(), x, y, whole)
    m, call = module()
    ddp = DistributedDataParallel(call, bucket_cap_mb=bucket_cap_mb)
    overlapped = step_fn(ddp, ddp.parameters(), x, y, whole)
    buckets = ddp.reducer.buckets

    def comm_only():
        works = [dist.all_reduce(aotgrad.from_numpy(b.buffer), async_op=True) for b in buckets]
        for w in works:
            w.wait()
    m, call = module()
    one = DistributedDataParallel(call, bucket_cap_mb=1e6)
    serial = step_fn(one, one.parameters(), x, y, whole)
    waits = {"ddp": [], "one_bucket": []}
    pg = ddp.process_group

    def recording(step, model, key):
        def run():
            before = pg.program_wait_s
            step()
            waits[key].append(pg.program_wait_s - before if whole else
                              model.reducer.last_wait_s)
        return run
    t = interleaved_medians({"local": local, "comm": comm_only,
                             "ddp": recording(overlapped, ddp, "ddp"),
                             "one_bucket": recording(serial, one, "one_bucket")}, reps)
    grads_mb = sum(b.buffer.nbytes for b in buckets) / 2 ** 20
    wait = {k: statistics.median(v) for k, v in waits.items()}
    return {"compiled": compiled, "params_MB": grads_mb, "buckets": len(buckets),
            "local_s": t["local"], "comm_s": t["comm"], "ddp_s": t["ddp"],
            "one_bucket_s": t["one_bucket"], "ddp_wait_s": wait["ddp"],
            "one_bucket_wait_s": wait["one_bucket"],
            # the share of the communication time the backward hid: what the hook of the
            # last gradient did not have to wait for
            "hidden_fraction": max(0.0, 1 - wait["ddp"] / t["comm"]),
            "hidden_fraction_one_bucket": max(0.0, 1 - wait["one_bucket"] / t["comm"])}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", default=None)
    ap.add_argument("--width", type=int, default=None, help="default 1024 (256 with --quick)")
    ap.add_argument("--depth", type=int, default=3)
    ap.add_argument("--batch", type=int, default=128, help="per rank")
    ap.add_argument("--bucket-cap-mb", type=float, default=2.0)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--reps", type=int, default=None, help="timed steps per variant "
                    "(default 5 with --quick, else 20)")
    args = ap.parse_args(argv)
    from threadpoolctl import threadpool_limits
    threadpool_limits(1)
    dist.init_process_group(backend="mpi")
    rank, world = dist.get_rank(), dist.get_world_size()
    sizes = [2 ** k for k in range(10, 21 if args.quick else 27, 2)]
    reps = args.reps or (5 if args.quick else 20)
    width = args.width or (256 if args.quick else 1024)
    bandwidth = bench_all_reduce(sizes, 50 if args.quick else 200)
    steps = [bench_ddp(width, args.depth, args.batch, args.bucket_cap_mb, reps, False)]
    if not args.no_compile:
        for compiled in (True, "per_layer", "whole_step"):
            steps.append(bench_ddp(width, args.depth, args.batch, args.bucket_cap_mb, reps,
                                   compiled))
    if rank == 0:
        from mpi4py import MPI
        print(f"{world} ranks, {MPI.Get_library_version().splitlines()[0].strip()}, "
              f"load average {os.getloadavg()[0]:.2f}")
        print("all_reduce float32 SUM       aotgrad            mpi4py Allreduce")
        for r in bandwidth:
            print(f"  {r['bytes']:>10d} B   {r['aotgrad_s'] * 1e6:9.1f} us "
                  f"{r['aotgrad_MBps']:8.0f} MB/s   {r['mpi4py_s'] * 1e6:9.1f} us "
                  f"{r['mpi4py_MBps']:8.0f} MB/s")
        print(f"DDP step, MLP 256-{width}x{args.depth}-10, batch {args.batch} per rank, "
              f"bucket_cap_mb {args.bucket_cap_mb}")
        for s in steps:
            mode = {False: "eager", True: "compiled whole (DDP(compile(model)))",
                    "per_layer": "compiled per layer",
                    "whole_step": "whole step compiled (all-reduces as program steps)"}[
                s["compiled"]]
            print(f"  {mode}: grads {s['params_MB']:.1f} MB in {s['buckets']} buckets: step "
                  f"alone {s['local_s'] * 1e3:.1f} ms, all-reduce alone "
                  f"{s['comm_s'] * 1e3:.1f} ms")
            print(f"    ddp {s['ddp_s'] * 1e3:.1f} ms, waited "
                  f"{s['ddp_wait_s'] * 1e3:.1f} ms (hidden {s['hidden_fraction']:.0%}); one "
                  f"bucket at the end {s['one_bucket_s'] * 1e3:.1f} ms, waited "
                  f"{s['one_bucket_wait_s'] * 1e3:.1f} ms (hidden "
                  f"{s['hidden_fraction_one_bucket']:.0%})")
        if args.json:
            with open(args.json, "w", encoding="utf-8") as f:
                json.dump({"world": world, "all_reduce": bandwidth, "ddp": steps}, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
