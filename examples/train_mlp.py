"""Train an MLP classifier eagerly and compiled, side by side, and compare them.

Data: scikit-learn's 8x8 handwritten digits (offline, `pip install -e ".[examples]"`), or a
synthetic 10-class set when scikit-learn is absent. Both runs start from the same weights
and see the same minibatches, so each step's loss agrees to float32 rounding; over hundreds
of Adam steps those rounding differences can grow (Adam divides gradients near its eps, as
on dead ReLU units), as between any two correct float32 implementations.

    python examples/train_mlp.py            # ~300 steps, well under a minute
    python examples/train_mlp.py --quick    # a few seconds, for CI
"""
import argparse
import copy
import os
import sys
import tempfile
import time
import warnings

import numpy as np

import aotgrad
from aotgrad import nn, optim
import aotgrad.nn.functional as F

try:
    from _common import Timer, batches, can_compile, load_digits_or_synthetic, progress, split
except ImportError:
    from aotgrad.examples._common import (Timer, batches, can_compile, load_digits_or_synthetic,
                                          progress, split)


# the loss difference is also printed over these first steps, before Adam has had time to
# amplify the two runs' float32 rounding differences (the module docstring)
EARLY_STEPS = 50


def make_model(hidden, n_in=64, n_out=10):
    return nn.Sequential(nn.Linear(n_in, hidden), nn.ReLU(), nn.Linear(hidden, hidden),
                         nn.ReLU(), nn.Linear(hidden, n_out))


def accuracy(model, X, y):
    model.eval()
    with aotgrad.no_grad():
        pred = model(aotgrad.tensor(X)).argmax(1).numpy()
    model.train()
    return float((pred == y).mean())


def make_step(model, loss_fn, opt):
    """One training step: zero_grad, forward, backward, Adam update."""
    def step(x, y):
        opt.zero_grad()
        loss = loss_fn(x, y)
        loss.backward()
        opt.step()
        return loss
    return step


def train(model, loss_fn, Xtr, ytr, idx, lr, desc, show_progress, compile_step=None):
    """Adam steps; `loss_fn(x, y)` is eager or compiled (the model alone, or model + loss);
    with `compile_step(step)` the whole step (backward and optimizer included) is compiled."""
    opt = optim.Adam(model.parameters(), lr=lr)
    step = make_step(model, loss_fn, opt)
    if compile_step is not None:
        step = compile_step(step)
    losses, timer = [], Timer()
    for b in progress(idx, desc, enabled=show_progress):
        x, y = aotgrad.tensor(Xtr[b]), aotgrad.tensor(ytr[b])
        with timer:
            loss = step(x, y)
        losses.append(loss.item())
    return np.array(losses), timer


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a small, fast run (CI)")
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=None)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dump", default=None, help="directory for the IR dump (default: a temp "
                                                  "directory)")
    ap.add_argument("--no-compile", action="store_true", help="run the eager half only")
    ap.add_argument("--compile", choices=("step", "loss", "model"), default="step",
                    help="what to compile: the whole training step (forward, backward and "
                         "Adam update; the default), the loss function (model + "
                         "cross-entropy; backward and update stay outside) or the model alone")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    steps = args.steps or (60 if args.quick else 300)
    hidden = args.hidden or (64 if args.quick else 256)
    show = not args.no_progress

    X, y, source = load_digits_or_synthetic(args.seed)
    Xtr, ytr, Xte, yte = split(X, y, 0.2, args.seed)
    print(f"data: {source}: {len(Xtr)} train / {len(Xte)} test, 64 features, 10 classes")
    aotgrad.manual_seed(args.seed)
    model = make_model(hidden)
    init_state = copy.deepcopy(model.state_dict())
    print(f"model: MLP 64-{hidden}-{hidden}-10, "
          f"{sum(p.numel() for p in model.parameters())} parameters; {steps} Adam steps of "
          f"batch {args.batch_size}")
    idx = batches(len(Xtr), args.batch_size, steps, args.seed)

    eager_losses, eager_t = train(model, lambda x, y: F.cross_entropy(model(x), y), Xtr, ytr,
                                  idx, args.lr, "eager", show)
    eager_acc = accuracy(model, Xte, yte)
    print(f"eager:    {eager_t.median_ms():7.3f} ms/step | final loss {eager_losses[-1]:.4f} | "
          f"test accuracy {eager_acc:.3f}")
    result = {"eager_accuracy": eager_acc, "eager_losses": eager_losses,
              "eager_ms": eager_t.median_ms(), "compiled": False}

    if args.no_compile:
        print("compiled: skipped (--no-compile)")
        return result
    if not can_compile():
        print("compiled: skipped (this aotgrad has no aotgrad.compile yet)")
        return result

    cmodel = make_model(hidden)
    cmodel.load_state_dict(init_state)
    dump = args.dump or tempfile.mkdtemp(prefix="aotgrad_mlp_ir_")
    compile_step = None

    def mlp_loss(x, y):
        return F.cross_entropy(cmodel(x), y)
    if args.compile == "model":
        cm = aotgrad.compile(cmodel, dump=dump)
        loss_fn = lambda x, y: F.cross_entropy(cm(x), y)  # noqa: E731
    elif args.compile == "loss":
        loss_fn = aotgrad.compile(mlp_loss, dump=dump)
    else:
        loss_fn = mlp_loss
        compile_step = lambda step: aotgrad.compile(step, dump=dump)  # noqa: E731
    print(f"compiling the {args.compile}" + {
        "step": " (forward, backward and Adam update in one program)",
        "loss": " (model + cross-entropy)", "model": " (cross-entropy stays eager)"}[args.compile])
    t0 = time.perf_counter()
    with warnings.catch_warnings():  # the one retrace after Adam creates its state is expected
        warnings.filterwarnings("ignore", message=".*recompiling.*")
        comp_losses, comp_t = train(cmodel, loss_fn, Xtr, ytr, idx, args.lr, "compiled", show,
                                    compile_step)
    total = time.perf_counter() - t0
    comp_acc = accuracy(cmodel, Xte, yte)
    first = comp_t.times[0] + comp_t.times[1]
    print(f"compiled: {comp_t.median_ms(skip=2):7.3f} ms/step | final loss "
          f"{comp_losses[-1]:.4f} | test accuracy {comp_acc:.3f} (first two steps, including "
          f"tracing and compilation: {first:.2f} s; whole run {total:.2f} s)")
    speedup = eager_t.median_ms() / comp_t.median_ms(skip=2)
    gaps = np.abs(eager_losses - comp_losses)
    diff = float(np.max(gaps))
    early = min(EARLY_STEPS, len(gaps))
    print(f"speed-up per step (median, compiled vs eager): {speedup:.2f}x")
    print(f"largest loss difference eager vs compiled: {diff:.3e} (over the first {early} "
          f"steps: {float(np.max(gaps[:early])):.3e}; float32 rounding differences, which "
          f"Adam can amplify step after step)")
    print(f"IR dumped to: {os.path.abspath(dump)} "
          f"({', '.join(sorted(os.listdir(os.path.join(dump, os.listdir(dump)[0]))))})"
          if os.path.isdir(dump) and os.listdir(dump) else f"IR dump directory: {dump} (empty)")
    result.update(compiled=True, compiled_accuracy=comp_acc, compiled_losses=comp_losses,
                  compiled_ms=comp_t.median_ms(skip=2), max_loss_diff=diff, dump=dump,
                  speedup=speedup)
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
