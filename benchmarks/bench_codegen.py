"""Kernel-level benchmarks of aotgrad.codegen against plain numpy (steady-state medians).

    python benchmarks/bench_codegen.py [--json out.json]

Graphs are hand-built IR (forward only; the full fwd+bwd workloads of issue 6 need the
tracer). Prints compile time (cold or warm cache), median run time and speedup.
"""
import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))

from aotgrad.codegen import compile_graph  # noqa: E402
from aotgrad.ir import Aval, GraphBuilder, evaluate, prims  # noqa: E402
from aotgrad.ir import dtypes as dt  # noqa: E402

F32 = dt.float32


def median_time(fn, reps=20, warm=2):
    for _ in range(warm):
        fn()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return float(np.median(ts))


def w1_graph(n):
    b = GraphBuilder("w1")
    x = b.add_input(Aval((n,), F32), "x")

    def c(v):
        return prims.full(shape=(n,), value=v, dtype=F32)
    with b:
        t = prims.tanh(prims.add(prims.mul(c(1.5), x), c(0.5)))
        y = prims.add(prims.mul(t, prims.logistic(x)),
                      prims.mul(c(0.1), prims.exp(prims.neg(prims.mul(x, x)))))
        out = prims.reduce_sum(y, dims=(0,))
    b.graph.outputs = [out]
    return b.graph


def np_w1(x):
    return np.sum(np.tanh(np.float32(1.5) * x + np.float32(0.5)) * (1 / (1 + np.exp(-x)))
                  + np.float32(0.1) * np.exp(-x * x))


def np_softmax(x):
    e = np.exp(x - x.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def np_layernorm(x, g, b):
    mu = x.mean(1, keepdims=True)
    xc = x - mu
    rstd = 1 / np.sqrt((xc * xc).mean(1, keepdims=True) + np.float32(1e-5))
    return xc * rstd * g + b, mu[:, 0], rstd[:, 0]


def np_ce(logits, labels):
    m = logits.max(1, keepdims=True)
    z = logits - m
    lse = np.log(np.exp(z).sum(1, keepdims=True))
    n = logits.shape[0]
    loss = (lse[:, 0] - z[np.arange(n), labels]).sum() / np.float32(n)
    p = np.exp(z - lse)
    p[np.arange(n), labels] -= 1
    return loss, p / np.float32(n)


def main():
    from test_codegen import cross_entropy_graph, layernorm_graph, softmax_graph
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    cases = []
    n = 1 << 22
    x = rng.standard_normal(n).astype(np.float32)
    cases.append(("W1 fwd sum(tanh(1.5x+.5)*sigmoid(x)+.1exp(-x^2)) 4M", w1_graph(n), [x],
                  lambda: np_w1(x)))
    xs = rng.standard_normal((4096, 1000)).astype(np.float32)
    cases.append(("softmax rows 4096x1000", softmax_graph(4096, 1000), [xs],
                  lambda: np_softmax(xs)))
    xl = rng.standard_normal((8192, 1024)).astype(np.float32)
    g_, b_ = rng.standard_normal(1024).astype(np.float32), rng.standard_normal(1024).astype(
        np.float32)
    cases.append(("layernorm fwd 8192x1024", layernorm_graph(8192, 1024), [xl, g_, b_],
                  lambda: np_layernorm(xl, g_, b_)))
    lab = rng.integers(0, 1000, 4096).astype(np.int64)
    cases.append(("softmax cross-entropy fwd+grad 4096x1000", cross_entropy_graph(4096, 1000),
                  [xs, lab], lambda: np_ce(xs, lab)))
    results = []
    for name, g, arrays, npfn in cases:
        t = time.perf_counter()
        prog = compile_graph(g, name="bench")
        comp = time.perf_counter() - t
        outs = prog(*arrays)
        ref = evaluate(g, arrays)
        err = max(float(np.max(np.abs(a - r)) / max(np.max(np.abs(r)), 1e-30))
                  for a, r in zip(outs, ref))
        tc = median_time(lambda: prog(*arrays))
        tn = median_time(npfn, reps=10)
        results.append(dict(name=name, compile_s=comp, cache=prog.cache_status,
                            compiled_ms=tc * 1e3, numpy_ms=tn * 1e3, speedup=tn / tc,
                            max_rel_err=err, kernels=len(prog.kernels())))
        print(f"{name:52s} compiled {tc * 1e3:8.3f} ms  numpy {tn * 1e3:8.3f} ms  "
              f"x{tn / tc:5.1f}  compile {comp:5.2f}s [{prog.cache_status}]  "
              f"kernels {len(prog.kernels())}  max|err|/max|ref| {err:.1e}")
    import numba
    print(f"numba {numba.__version__}, threads {numba.config.NUMBA_NUM_THREADS}, "
          f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE')}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
