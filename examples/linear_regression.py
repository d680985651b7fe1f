"""The classic first workflow: fit y = 0.7 x + 0.3 with one nn.Linear, L1 loss and SGD,
with a training loop and an evaluation loop, then check the recovered weight and bias.

    python examples/linear_regression.py [--epochs 1000] [--lr 0.01]
"""
import argparse
import sys


import aotgrad
from aotgrad import nn, optim

try:
    from _common import progress
except ImportError:  # imported as aotgrad.examples.linear_regression
    from aotgrad.examples._common import progress

TRUE_WEIGHT, TRUE_BIAS = 0.7, 0.3


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=1000)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    aotgrad.manual_seed(args.seed)

    X = aotgrad.arange(0.0, 1.0, 0.02).unsqueeze(1)        # 50 points, float32
    y = TRUE_WEIGHT * X + TRUE_BIAS
    n_train = int(0.8 * len(X))
    X_train, y_train, X_test, y_test = X[:n_train], y[:n_train], X[n_train:], y[n_train:]

    model = nn.Linear(1, 1)
    loss_fn = nn.L1Loss()
    opt = optim.SGD(model.parameters(), lr=args.lr)
    print(f"data: {len(X_train)} train / {len(X_test)} test points of y = {TRUE_WEIGHT} x + "
          f"{TRUE_BIAS}")
    print(f"initial: weight={model.weight.item():.4f} bias={model.bias.item():.4f}")

    report = max(1, args.epochs // 10)
    for epoch in progress(range(args.epochs), "training", enabled=not args.no_progress):
        model.train()
        loss = loss_fn(model(X_train), y_train)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if epoch % report == 0 or epoch == args.epochs - 1:
            model.eval()
            with aotgrad.no_grad():
                test_loss = loss_fn(model(X_test), y_test)
            print(f"epoch {epoch:5d} | train L1 {loss.item():.5f} | test L1 "
                  f"{test_loss.item():.5f}")

    w, b = model.weight.item(), model.bias.item()
    print(f"learned: weight={w:.4f} bias={b:.4f} (true: weight={TRUE_WEIGHT} bias={TRUE_BIAS})")
    print(f"error: weight {abs(w - TRUE_WEIGHT):.4f}, bias {abs(b - TRUE_BIAS):.4f}")
    return {"weight": w, "bias": b, "test_loss": test_loss.item()}


if __name__ == "__main__":
    main(sys.argv[1:])
