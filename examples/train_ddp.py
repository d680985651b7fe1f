"""Data-parallel training of the digits MLP with DistributedDataParallel on MPI.

Each rank trains a replica on its own shard of every batch (DistributedSampler); DDP averages
the gradients, so the replicas stay equal and the run matches one process trained on the
whole batches. Rank 0 replays that one-process run at the end and prints both loss curves.

    pip install -e ".[distributed,examples]"
    mpiexec -n 2 python examples/train_ddp.py              # eager
    mpiexec -n 2 python examples/train_ddp.py --compile    # the module compiled (Numba)
    mpiexec -n 2 python examples/train_ddp.py --compile-step   # the whole step compiled:
                                          # one program, each bucket's all-reduce a step of it
    python examples/train_ddp.py --quick                   # one rank works too
"""
import argparse
import copy
import os
import sys

import numpy as np

import aotgrad
import aotgrad.distributed as dist
from aotgrad import nn, optim
from aotgrad.nn.parallel import DistributedDataParallel
from aotgrad.utils.data import DataLoader, DistributedSampler, TensorDataset

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import load_digits_or_synthetic, split  # noqa: E402


def make_model(hidden):
    return nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, hidden),
                         nn.ReLU(), nn.Linear(hidden, 10))


def shard_loaders(dataset, world, per_rank, seed, epoch):
    """The loader of every rank for one epoch (rank r's is the one rank r trains on)."""
    loaders = []
    for r in range(world):
        sampler = DistributedSampler(dataset, num_replicas=world, rank=r, seed=seed,
                                     drop_last=True)
        sampler.set_epoch(epoch)
        loaders.append(DataLoader(dataset, batch_size=per_rank, sampler=sampler,
                                  drop_last=True))
    return loaders


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one short epoch (CI)")
    ap.add_argument("--epochs", type=int, default=None)
    ap.add_argument("--batch-size", type=int, default=64, help="the global batch")
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--compile", action="store_true", help="DDP around aotgrad.compile(model)")
    ap.add_argument("--compile-step", action="store_true",
                    help="aotgrad.compile around the whole training step of the DDP model")
    ap.add_argument("--backend", default="numba", help="compile backend (numba, interpret)")
    args = ap.parse_args(argv)
    epochs = args.epochs or (1 if args.quick else 5)

    dist.init_process_group(backend="mpi")
    rank, world = dist.get_rank(), dist.get_world_size()
    if args.batch_size % world:
        raise SystemExit(f"--batch-size {args.batch_size} must divide among {world} ranks")
    per_rank = args.batch_size // world
    X, y, source = load_digits_or_synthetic(seed=args.seed)
    Xtr, ytr, Xte, yte = split(X, y, seed=args.seed)
    if args.quick:
        Xtr, ytr = Xtr[:256], ytr[:256]
    train_set = TensorDataset(aotgrad.tensor(Xtr), aotgrad.tensor(ytr))

    aotgrad.manual_seed(args.seed)
    model = make_model(args.hidden)
    reference = copy.deepcopy(model)           # the one-process run starts from the same weights
    inner = aotgrad.compile(model, backend=args.backend) if args.compile else model
    ddp = DistributedDataParallel(inner)
    opt = optim.Adam(ddp.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()

    def train_step(xb, yb):
        opt.zero_grad()
        loss = loss_fn(ddp(xb), yb)
        loss.backward()
        opt.step()
        return loss

    step = aotgrad.compile(train_step, backend=args.backend) if args.compile_step else \
        train_step
    curve = []
    for epoch in range(epochs):
        for xb, yb in shard_loaders(train_set, world, per_rank, args.seed, epoch)[rank]:
            loss = step(xb, yb)
            mean = loss.detach().clone()
            dist.all_reduce(mean, op=dist.ReduceOp.AVG)   # the global batch's loss
            curve.append(mean.item())

    result = None
    if rank == 0:
        ref_opt = optim.Adam(reference.parameters(), lr=args.lr)
        ref_curve = []
        for epoch in range(epochs):
            for shards in zip(*shard_loaders(train_set, world, per_rank, args.seed, epoch)):
                xb = aotgrad.cat([s[0] for s in shards])
                yb = aotgrad.cat([s[1] for s in shards])
                ref_opt.zero_grad()
                loss = loss_fn(reference(xb), yb)
                loss.backward()
                ref_opt.step()
                ref_curve.append(loss.item())
        curve, ref_curve = np.array(curve), np.array(ref_curve)
        with aotgrad.no_grad():
            acc = float((model(aotgrad.tensor(Xte)).argmax(1).numpy() == yte).mean())
        diff = float(np.abs(curve - ref_curve).max())
        params = max(float(np.abs(p.detach().numpy() - q.detach().numpy()).max())
                     for p, q in zip(model.parameters(), reference.parameters()))
        mode = f"compiled ({args.backend})" if args.compile else \
            f"in a compiled whole step ({args.backend}, {step.eager_calls} eager calls)" \
            if args.compile_step else "eager"
        print(f"data: {source}, {len(Xtr)} training samples; {world} ranks x {per_rank} "
              f"samples per step, {len(curve)} steps, DDP {mode}")
        every = max(1, len(curve) // 8)
        print("step   loss (DDP)   loss (1 process)")
        for i in sorted(set(range(0, len(curve), every)) | {len(curve) - 1}):
            print(f"{i:4d}   {curve[i]:.6f}     {ref_curve[i]:.6f}")
        print(f"largest loss difference {diff:.2e}, largest parameter difference "
              f"{params:.2e}, test accuracy {acc:.3f}")
        result = {"curve": curve, "reference": ref_curve, "loss_diff": diff,
                  "param_diff": params, "accuracy": acc, "world": world}
    dist.destroy_process_group()
    return result


if __name__ == "__main__":
    main()
