"""A user-written `autograd.Function` (an activation with a hand-written backward) inside a
model, run eagerly and compiled.

`SquarePlus(x) = (x + sqrt(x^2 + b)) / 2` is a smooth ReLU. Its backward is written by hand;
the example checks it against the gradient autograd derives from the same formula, then
trains a small regression model that uses it, eager and compiled (the compiled backward runs
the custom backward, traced ahead of time).

    python examples/custom_function.py [--steps 100] [--quick]
"""
import argparse
import copy
import sys

import numpy as np

import aotgrad
from aotgrad import nn, optim
import aotgrad.nn.functional as F

try:
    from _common import Timer, can_compile, progress
except ImportError:
    from aotgrad.examples._common import Timer, can_compile, progress


class SquarePlus(aotgrad.autograd.Function):
    """(x + sqrt(x^2 + b)) / 2, with d/dx = (1 + x / sqrt(x^2 + b)) / 2."""

    @staticmethod
    def forward(ctx, x, b=4.0):
        r = (x * x + b).sqrt()
        ctx.save_for_backward(x, r)
        return (x + r) * 0.5

    @staticmethod
    def backward(ctx, grad):
        x, r = ctx.saved_tensors
        return grad * (1 + x / r) * 0.5, None


class SquarePlusModule(nn.Module):
    def __init__(self, b=4.0):
        super().__init__()
        self.b = b

    def forward(self, x):
        return SquarePlus.apply(x, self.b)

    def extra_repr(self):
        return f"b={self.b}"


def make_model(hidden):
    return nn.Sequential(nn.Linear(2, hidden), SquarePlusModule(), nn.Linear(hidden, hidden),
                         SquarePlusModule(), nn.Linear(hidden, 1))


def check_backward():
    """Largest difference between the hand-written backward and autograd's (float64)."""
    x = aotgrad.randn(1000, dtype=aotgrad.float64) * 3
    a = x.detach().requires_grad_()
    SquarePlus.apply(a, 4.0).sum().backward()
    b = x.detach().requires_grad_()
    ((b + (b * b + 4.0).sqrt()) * 0.5).sum().backward()
    return float((a.grad - b.grad).abs().max())


def run(model, forward, data, lr, desc, show):
    opt = optim.Adam(model.parameters(), lr=lr)
    losses, timer = [], Timer()
    for x, y in progress(data, desc, enabled=show):
        with timer:
            opt.zero_grad()
            loss = F.mse_loss(forward(aotgrad.tensor(x)), aotgrad.tensor(y))
            loss.backward()
            opt.step()
        losses.append(loss.item())
    return np.array(losses), timer


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1e-2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    steps = args.steps or (40 if args.quick else 200)
    aotgrad.manual_seed(args.seed)

    err = check_backward()
    print(f"hand-written backward vs autograd (float64): max difference {err:.3e}")

    rng = np.random.default_rng(args.seed)
    data = []
    for _ in range(steps):  # fit y = sin(x0) * cos(x1)
        x = rng.uniform(-2, 2, (128, 2)).astype(np.float32)
        data.append((x, (np.sin(x[:, :1]) * np.cos(x[:, 1:])).astype(np.float32)))
    model = make_model(args.hidden)
    init_state = copy.deepcopy(model.state_dict())
    print(model)
    losses, t = run(model, model, data, args.lr, "eager", not args.no_progress)
    print(f"eager:    {t.median_ms():7.3f} ms/step | MSE {losses[0]:.4f} -> {losses[-1]:.4f}")
    result = {"backward_error": err, "eager_losses": losses, "compiled": False}
    if args.no_compile or not can_compile():
        print("compiled: skipped" + (" (--no-compile)" if args.no_compile else
                                     " (this aotgrad has no aotgrad.compile yet)"))
        return result
    cmodel = make_model(args.hidden)
    cmodel.load_state_dict(init_state)
    compiled = aotgrad.compile(cmodel)
    closses, ct = run(cmodel, compiled, data, args.lr, "compiled", not args.no_progress)
    diff = float(np.abs(losses - closses).max())
    print(f"compiled: {ct.median_ms(skip=1):7.3f} ms/step | MSE {closses[0]:.4f} -> "
          f"{closses[-1]:.4f} (first step {ct.times[0]:.2f} s)")
    print(f"largest loss difference eager vs compiled: {diff:.3e}")
    result.update(compiled=True, compiled_losses=closses, max_loss_diff=diff)
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
