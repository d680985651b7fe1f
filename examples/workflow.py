"""The PyTorch workflow, end to end: data -> model -> a training loop over a DataLoader ->
evaluation under inference_mode -> a plot of the predictions and the loss curves ->
save -> load -> the same predictions.

The task: fit y = sin(x) + noise on [-3, 3] with a small MLP (Adam, MSE loss), the
tutorial's structure with a curve instead of a straight line so the plot shows something.

    python examples/workflow.py [--epochs 60] [--out-dir workflow_output]

Writes OUT_DIR/workflow.png (needs matplotlib: `pip install -e ".[examples]"`; without it the
plot is skipped with a message) and OUT_DIR/checkpoint.pt.
"""
import argparse
import math
import os
import sys

import numpy as np

import aotgrad
from aotgrad import nn, optim
from aotgrad.utils.data import DataLoader, TensorDataset, random_split


def make_data(n, noise, seed):
    """x uniform on [-3, 3], y = sin(x) + Gaussian noise; float32 tensors of shape (n, 1)."""
    gen = aotgrad.Generator().manual_seed(seed)
    x = aotgrad.rand(n, 1, generator=gen) * 6 - 3
    y = x.sin() + noise * aotgrad.randn(n, 1, generator=gen)
    return x, y


def make_model(hidden):
    return nn.Sequential(nn.Linear(1, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
                         nn.Linear(hidden, 1))


def evaluate(model, loader, loss_fn):
    """The mean loss over a loader, under inference_mode (no autograd bookkeeping)."""
    model.eval()
    total, count = 0.0, 0
    with aotgrad.inference_mode():
        for xb, yb in loader:
            total += loss_fn(model(xb), yb).item() * len(xb)
            count += len(xb)
    return total / count


def train(model, opt, loss_fn, train_loader, test_loader, epochs, report):
    history = {"train": [], "test": []}
    for epoch in range(epochs):
        model.train()
        total, count = 0.0, 0
        for xb, yb in train_loader:
            loss = loss_fn(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item() * len(xb)
            count += len(xb)
        history["train"].append(total / count)
        history["test"].append(evaluate(model, test_loader, loss_fn))
        if report and (epoch % max(1, epochs // 6) == 0 or epoch == epochs - 1):
            print(f"epoch {epoch:4d} | train MSE {history['train'][-1]:.4f} | "
                  f"test MSE {history['test'][-1]:.4f}")
    return history


def predict(model, x):
    model.eval()
    with aotgrad.inference_mode():
        return model(x).numpy().copy()


def plot(path, x_train, y_train, x_test, y_test, grid, pred, history):
    """Two panels: the data with the model's curve, and the loss curves (log scale)."""
    try:
        import matplotlib
        matplotlib.use("Agg")  # files only: no display needed
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot: skipped (install matplotlib, e.g. pip install -e \".[examples]\")")
        return None
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    ax1.scatter(x_train, y_train, s=6, c="tab:blue", alpha=0.5, label="train data")
    ax1.scatter(x_test, y_test, s=8, c="tab:green", alpha=0.8, label="test data")
    ax1.plot(grid, np.sin(grid), "k--", lw=1, label="sin(x)")
    ax1.plot(grid, pred, c="tab:red", lw=2, label="model")
    ax1.set_xlabel("x")
    ax1.set_ylabel("y")
    ax1.set_title("predictions")
    ax1.legend(loc="upper left", fontsize=8)
    epochs = np.arange(1, len(history["train"]) + 1)
    ax2.plot(epochs, history["train"], label="train loss")
    ax2.plot(epochs, history["test"], label="test loss")
    ax2.set_yscale("log")
    ax2.set_xlabel("epoch")
    ax2.set_ylabel("MSE")
    ax2.set_title("loss curves")
    ax2.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=60)
    ap.add_argument("--n", type=int, default=500, help="number of data points")
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out-dir", default="workflow_output")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    aotgrad.manual_seed(args.seed)
    os.makedirs(args.out_dir, exist_ok=True)

    # 1. data: a dataset, a seeded train/test split, loaders (shuffled training batches)
    x, y = make_data(args.n, noise=0.1, seed=args.seed)
    dataset = TensorDataset(x, y)
    split_gen = aotgrad.Generator().manual_seed(args.seed)
    train_set, test_set = random_split(dataset, [0.8, 0.2], generator=split_gen)
    train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True,
                              generator=aotgrad.Generator().manual_seed(args.seed))
    test_loader = DataLoader(test_set, batch_size=256)
    print(f"data: {len(train_set)} train / {len(test_set)} test points of y = sin(x) + noise")

    # 2. model, loss, optimizer
    model = make_model(args.hidden)
    loss_fn = nn.MSELoss()
    opt = optim.Adam(model.parameters(), lr=args.lr)
    print(model)

    # 3. the training loop, with an evaluation under inference_mode after each epoch
    history = train(model, opt, loss_fn, train_loader, test_loader, args.epochs,
                    report=not args.quiet)

    # 4. predictions on a grid, and the plot
    grid = np.linspace(-3, 3, 200, dtype=np.float32)[:, None]
    pred = predict(model, aotgrad.tensor(grid))
    tr = train_set.indices
    te = test_set.indices
    xs, ys = x.numpy()[:, 0], y.numpy()[:, 0]
    png = plot(os.path.join(args.out_dir, "workflow.png"), xs[tr], ys[tr], xs[te], ys[te],
               grid[:, 0], pred[:, 0], history)
    if png:
        print(f"plot: {png}")

    # 5. save a checkpoint, load it into a fresh model, check the predictions are the same
    path = os.path.join(args.out_dir, "checkpoint.pt")
    aotgrad.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                  "epoch": args.epochs, "history": history}, path)
    checkpoint = aotgrad.load(path)  # weights_only=True: tensors and plain data only
    restored = make_model(args.hidden)
    restored.load_state_dict(checkpoint["model"])
    pred_restored = predict(restored, aotgrad.tensor(grid))
    assert np.array_equal(pred, pred_restored), "the loaded model predicts differently"
    print(f"checkpoint: {path} ({os.path.getsize(path)} bytes); the loaded model's predictions "
          f"are identical")
    rmse = math.sqrt(float(np.mean((pred[:, 0] - np.sin(grid[:, 0])) ** 2)))
    print(f"final test MSE {history['test'][-1]:.4f}; RMS distance to sin(x) {rmse:.4f}")
    return {"history": history, "png": png, "checkpoint": path, "rmse": rmse,
            "pred": pred, "pred_restored": pred_restored, "epochs": checkpoint["epoch"]}


if __name__ == "__main__":
    main(sys.argv[1:])
