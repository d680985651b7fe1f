"""Helpers shared by the examples: data sets, a progress bar, timing, compile availability."""
import time

import numpy as np


def progress(iterable, desc, total=None, enabled=True):
    """tqdm when installed (and enabled), otherwise the plain iterable."""
    if enabled:
        try:
            from tqdm import tqdm
            return tqdm(iterable, desc=desc, total=total, leave=False, mininterval=0.5)
        except ImportError:
            pass
    return iterable


def load_digits_or_synthetic(seed=0, n_synthetic=1500):
    """(X float32 (n, 64) in [0, 1], y int64, source name): scikit-learn's 8x8 handwritten
    digits when scikit-learn is installed, else ten Gaussian blobs in 64 dimensions."""
    try:
        from sklearn.datasets import load_digits
        d = load_digits()
        return (d.data / 16.0).astype(np.float32), d.target.astype(np.int64), \
            "scikit-learn digits (8x8 images)"
    except ImportError:
        rng = np.random.default_rng(seed)
        centers = rng.uniform(0, 1, (10, 64))
        y = rng.integers(0, 10, n_synthetic)
        X = np.clip(centers[y] + 0.25 * rng.standard_normal((n_synthetic, 64)), 0, 1)
        return X.astype(np.float32), y.astype(np.int64), \
            "synthetic blobs (install scikit-learn for the digits data set)"


def split(X, y, test_fraction=0.2, seed=0):
    idx = np.random.default_rng(seed).permutation(len(X))
    n_test = int(len(X) * test_fraction)
    te, tr = idx[:n_test], idx[n_test:]
    return X[tr], y[tr], X[te], y[te]


def batches(n, batch_size, steps, seed=0):
    """`steps` index arrays of minibatches, reshuffled each epoch (the same for every run)."""
    rng = np.random.default_rng(seed)
    out, perm, pos = [], rng.permutation(n), 0
    for _ in range(steps):
        if pos + batch_size > n:
            perm, pos = rng.permutation(n), 0
        out.append(perm[pos:pos + batch_size])
        pos += batch_size
    return out


def can_compile():
    import aotgrad
    return hasattr(aotgrad, "compile")


class Timer:
    def __init__(self):
        self.times = []

    def __enter__(self):
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.times.append(time.perf_counter() - self.t0)

    def median_ms(self, skip=0):
        t = self.times[skip:] or self.times
        return 1e3 * float(np.median(t))
