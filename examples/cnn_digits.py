"""A small convolutional network (Conv2d, ReLU, MaxPool2d) on the 8x8 digit images,
trained eagerly and then compiled from the same initial weights.

    python examples/cnn_digits.py [--steps 200] [--quick]
"""
import argparse
import copy
import sys

import numpy as np

import aotgrad
from aotgrad import nn, optim
import aotgrad.nn.functional as F

try:
    from _common import Timer, batches, can_compile, load_digits_or_synthetic, progress, split
except ImportError:
    from aotgrad.examples._common import (Timer, batches, can_compile, load_digits_or_synthetic,
                                          progress, split)


def make_model(channels=8):
    c = channels
    return nn.Sequential(
        nn.Conv2d(1, c, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),          # 8x8 -> 4x4
        nn.Conv2d(c, 2 * c, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),      # 4x4 -> 2x2
        nn.Flatten(), nn.Linear(2 * c * 4, 10))


def run(model, forward, X, y, idx, lr, desc, show):
    opt = optim.Adam(model.parameters(), lr=lr)
    losses, timer = [], Timer()
    for b in progress(idx, desc, enabled=show):
        with timer:
            opt.zero_grad()
            loss = F.cross_entropy(forward(aotgrad.tensor(X[b])), aotgrad.tensor(y[b]))
            loss.backward()
            opt.step()
        losses.append(loss.item())
    return np.array(losses), timer


def accuracy(model, X, y):
    model.eval()
    with aotgrad.no_grad():
        pred = model(aotgrad.tensor(X)).argmax(1).numpy()
    return float((pred == y).mean())


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--channels", type=int, default=8)
    ap.add_argument("--lr", type=float, default=1e-2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    steps = args.steps or (40 if args.quick else 200)

    X, y, source = load_digits_or_synthetic(args.seed)
    X = X.reshape(-1, 1, 8, 8)
    Xtr, ytr, Xte, yte = split(X, y, 0.2, args.seed)
    print(f"data: {source}: images {list(Xtr.shape[1:])}, {len(Xtr)} train / {len(Xte)} test")
    aotgrad.manual_seed(args.seed)
    model = make_model(args.channels)
    print(model)
    init_state = copy.deepcopy(model.state_dict())
    idx = batches(len(Xtr), args.batch_size, steps, args.seed)

    losses, t = run(model, model, Xtr, ytr, idx, args.lr, "eager", not args.no_progress)
    acc = accuracy(model, Xte, yte)
    print(f"eager:    {t.median_ms():7.3f} ms/step | loss {losses[0]:.4f} -> {losses[-1]:.4f} "
          f"| test accuracy {acc:.3f}")
    result = {"eager_accuracy": acc, "eager_losses": losses, "compiled": False}
    if args.no_compile or not can_compile():
        print("compiled: skipped" + (" (--no-compile)" if args.no_compile else
                                     " (this aotgrad has no aotgrad.compile yet)"))
        return result
    cmodel = make_model(args.channels)
    cmodel.load_state_dict(init_state)
    closses, ct = run(cmodel, aotgrad.compile(cmodel), Xtr, ytr, idx, args.lr, "compiled",
                      not args.no_progress)
    cacc = accuracy(cmodel, Xte, yte)
    diff = float(np.abs(losses - closses).max())
    print(f"compiled: {ct.median_ms(skip=1):7.3f} ms/step | loss {closses[0]:.4f} -> "
          f"{closses[-1]:.4f} | test accuracy {cacc:.3f} (first step {ct.times[0]:.2f} s)")
    print(f"largest loss difference eager vs compiled: {diff:.3e}")
    result.update(compiled=True, compiled_accuracy=cacc, max_loss_diff=diff)
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
