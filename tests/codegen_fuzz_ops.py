"""Differential fuzzing of compiled forward and backward programs: small random functions
over aotgrad tensor ops, compiled with backend="numba" and backend="interpret"; outputs and
input gradients compared.

    python tests/codegen_fuzz_ops.py 0 100     # seeds 0..99; prints each mismatch
"""
import random
import sys
import traceback

import numpy as np

import aotgrad as ag
import aotgrad.nn.functional as F

from codegen_fuzz import compare  # noqa: E402

# op name -> fn(x, r) where r is a random.Random; each keeps float dtype
def _dim(x, r):
    return r.randrange(x.ndim) if x.ndim else None


def _ops():
    def red(fn):
        def f(x, r):
            if x.ndim == 0:
                return fn(x)
            d = _dim(x, r)
            k = r.random() < 0.5
            return fn(x, d, k)
        return f
    return {
        "exp": lambda x, r: ag.exp(x * 0.5),
        "tanh": lambda x, r: ag.tanh(x),
        "sigmoid": lambda x, r: ag.sigmoid(x),
        "relu": lambda x, r: ag.relu(x),
        "gelu": lambda x, r: F.gelu(x),
        "sin": lambda x, r: ag.sin(x),
        "square": lambda x, r: x * x,
        "logabs": lambda x, r: ag.log(ag.abs(x) + 1.0),
        "sqrtabs": lambda x, r: ag.sqrt(ag.abs(x) + 0.1),
        "erf": lambda x, r: ag.erf(x),
        "clamp": lambda x, r: ag.clamp(x, -0.5, 0.7),
        "softmax": lambda x, r: ag.softmax(x, dim=_dim(x, r)) if x.ndim else x,
        "log_softmax": lambda x, r: ag.log_softmax(x, dim=_dim(x, r)) if x.ndim else x,
        "sum": red(lambda x, d=None, k=False: x.sum() if d is None else x.sum(d, keepdim=k)),
        "mean": red(lambda x, d=None, k=False: x.mean() if d is None else x.mean(d, keepdim=k)),
        "amax": red(lambda x, d=None, k=False: x.amax() if d is None else x.amax(d, keepdim=k)),
        "maxval": red(lambda x, d=None, k=False: x.max() if d is None else
                      x.max(d, keepdim=k).values),
        "var": red(lambda x, d=None, k=False: x.var() if d is None else x.var(d, keepdim=k)),
        "logsumexp": lambda x, r: ag.logsumexp(x, dim=_dim(x, r)) if x.ndim else x,
        "t": lambda x, r: x.transpose(-1, -2) if x.ndim >= 2 else x,
        "flat": lambda x, r: x.reshape(-1),
        "unsq": lambda x, r: x.unsqueeze(0),
        "slice": lambda x, r: x[..., 1:] if x.ndim and x.shape[-1] > 1 else x,
        "slice0": lambda x, r: x[::2] if x.ndim else x,
        "flip": lambda x, r: ag.flip(x, (0,)) if x.ndim else x,
        "cumsum": lambda x, r: ag.cumsum(x, _dim(x, r)) if x.ndim else x,
        "where": lambda x, r: ag.where(x > 0.1, x, x * -2.0),
        "pow3": lambda x, r: x ** 3,
        "layer_norm": lambda x, r: F.layer_norm(x, x.shape[-1:]) if x.ndim else x,
        "normalize": lambda x, r: x / (x.norm(dim=-1, keepdim=True) + 1.0) if x.ndim else x,
    }


OPS = _ops()


class Case:
    def __init__(self, seed):
        r = self.r = random.Random(seed)
        self.dtype = r.choice((ag.float32, ag.float32, ag.float64))
        nd = r.choice((1, 2, 2, 3))
        big = r.random() < 0.15
        sizes = (1, 2, 3, 5, 7, 33) + ((129, 1025) if big else ())
        self.shape = tuple(r.choice(sizes) for _ in range(nd))
        while np.prod(self.shape) > 300_000:
            self.shape = self.shape[1:]
        self.nin = r.randint(1, 2)
        self.steps = []
        for _ in range(r.randint(1, 6)):
            kind = r.random()
            if kind < 0.65:
                self.steps.append(("un", r.choice(sorted(OPS)), r.randrange(1 << 30)))
            elif kind < 0.85:
                self.steps.append(("bin", r.choice(("add", "mul", "sub", "div")),
                                   r.randrange(1 << 30)))
            else:
                self.steps.append(("mm", None, r.randrange(1 << 30)))
        self.nout = r.randint(1, 2)

    def describe(self):
        return f"shape {self.shape} {self.dtype} nin {self.nin}: " + \
            " -> ".join(f"{k}:{n}" if n else k for k, n, _ in self.steps)

    def fn(self, *xs):
        vals = list(xs)
        for kind, name, s in self.steps:
            r = random.Random(s)
            x = vals[-1] if r.random() < 0.7 else r.choice(vals)
            if kind == "un":
                y = OPS[name](x, r)
            elif kind == "bin":
                z = r.choice(vals)
                try:
                    ag.broadcast_tensors(x, z)
                except Exception:
                    z = z.sum()      # a scalar always broadcasts
                if name == "div":
                    z = ag.abs(z) + 0.5
                y = getattr(ag, name)(x, z)
            else:
                if x.ndim == 0:
                    continue
                w = ag.ones(x.shape[-1], 3, dtype=x.dtype) * 0.1 + \
                    xs[0].reshape(-1)[:1].sum() * 0.0
                w = w + ag.arange(3, dtype=x.dtype) * 0.05
                y = x @ w
            vals.append(y)
        outs = vals[len(xs):] or [xs[0] * 1.0]
        return tuple(outs[-self.nout:])

    def inputs(self):
        rng = np.random.default_rng(self.r.randrange(1 << 30))
        return [rng.standard_normal(self.shape).astype(self.dtype.name if hasattr(
            self.dtype, "name") else "float32") for _ in range(self.nin)]


def run(case, backend, arrays):
    xs = [ag.tensor(a, requires_grad=True) for a in arrays]
    f = ag.compile(case.fn, backend=backend, fullgraph=True)
    outs = f(*xs)
    loss = sum(((o * o).sum() if o.ndim else o * o) for o in outs)
    loss.backward()
    return [o.detach().numpy() for o in outs] + \
        [x.grad.numpy() if x.grad is not None else np.zeros_like(a) for x, a in zip(xs, arrays)]


def check(seed):
    case = Case(seed)
    arrays = case.inputs()
    try:
        ref = run(case, "interpret", arrays)
    except Exception:
        return None, case   # the case itself is invalid (shapes) or the reference fails
    try:
        got = run(case, "numba", arrays)
    except Exception:
        return "numba backend raised:\n" + traceback.format_exc(limit=8), case
    for i, (a, b) in enumerate(zip(ref, got)):
        a = np.asarray(a)
        tol = (3e-3, 3e-4) if a.dtype == np.float32 else (1e-6, 1e-8)
        msg = compare(a, np.asarray(b), tol=tol)
        if msg:
            what = f"output {i}" if i < len(ref) - case.nin else f"grad {i - len(ref) + case.nin}"
            return f"{what}: {msg}", case
    return None, case


def main(argv):
    lo, hi = int(argv[0]), int(argv[1])
    bad = 0
    for seed in range(lo, hi):
        msg, case = check(seed)
        if msg:
            bad += 1
            print(f"=== seed {seed}: {case.describe()}\n{msg}")
            sys.stdout.flush()
    print(f"done {lo}..{hi}: {bad} failing")


if __name__ == "__main__":
    main(sys.argv[1:])
