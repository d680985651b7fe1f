"""First-call compile cost against program depth: an unrolled RNN cell, a deep MLP, an LSTM.

    python benchmarks/bench_compile_depth.py [--model rnn|mlp|lstm]
                                             [--steps 50 100 200 400 1000] [--e2e] [--jax]
                                             [--json out.json]

rnn: `h = tanh(x[t] @ U + h @ W * 0.1)` unrolled over T steps (H 16, batch 8), loss h.sum(),
forward + backward with respect to x, U and W. mlp: T layers of `h = tanh(h @ W_i + b_i)`
(width 16, batch 8). lstm: the sine-wave predictor of PyTorch's examples (two LSTM cells of
51 units and a linear read-out, float64, 97 waves; the example unrolls 999 steps), its
cell written out (gates, sigmoid, tanh), MSE against the next values. Each length runs in a
fresh process with an empty kernel cache and times the stages the first call goes through,
one after another: trace (with the ahead-of-time backward), passes (ir.passes.optimize),
partition, then for the forward and the backward program together: schedule, codegen (Numba
source) and numba (loading and compiling the kernels, helper processes included). It then runs the compiled forward and
backward once and checks them against eager. `--e2e` also times the whole first call of
`aotgrad.compile` (forward and `backward()`) in another fresh process: the first call, the
next 20 calls (while the background compiles run) and the median call once they have
ended. `--jax` times the same model as `jax.jit(jax.value_and_grad(...))` in a fresh
process: its first call (trace and XLA compile) and its median call. Run it on a quiet
machine; the load average is printed with each row.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

H, BATCH = 16, 8
LSTM_H, LSTM_BATCH = 51, 97


def _model(kind, T):
    import aotgrad as ag
    rng = np.random.default_rng(0)
    if kind == "rnn":
        arrays = [rng.standard_normal((T, BATCH, H)).astype(np.float32) * 0.5,
                  rng.standard_normal((H, H)).astype(np.float32) * 0.3,
                  rng.standard_normal((H, H)).astype(np.float32) * 0.3]

        def fn(x, U, W):
            h = ag.zeros(BATCH, H)
            for t in range(T):
                h = ag.tanh(x[t] @ U + h @ W * 0.1)
            return h.sum()
    elif kind == "lstm":
        # the sine-wave predictor of PyTorch's examples: two LSTM cells of 51 units and a
        # linear read-out, float64, over T steps of 97 waves, each step's input one value
        arrays = [np.sin((np.arange(T + 1) + rng.integers(-80, 80, (LSTM_BATCH, 1))) / 20.0)]
        arrays = [arrays[0][:, :-1], arrays[0][:, 1:]]
        for n_in in (1, LSTM_H):
            bound = 1 / np.sqrt(LSTM_H)
            arrays += [rng.uniform(-bound, bound, shape)
                       for shape in ((4 * LSTM_H, n_in), (4 * LSTM_H, LSTM_H), (4 * LSTM_H,),
                                     (4 * LSTM_H,))]
        arrays += [rng.uniform(-0.14, 0.14, (1, LSTM_H)), rng.uniform(-0.14, 0.14, (1,))]

        def cell(x, h, c, w_ih, w_hh, b_ih, b_hh):
            i, f, g, o = (x @ w_ih.T + b_ih + h @ w_hh.T + b_hh).chunk(4, 1)
            c = ag.sigmoid(f) * c + ag.sigmoid(i) * ag.tanh(g)
            return ag.sigmoid(o) * ag.tanh(c), c

        def fn(x, y, *params):
            h1 = c1 = h2 = c2 = ag.zeros(x.shape[0], LSTM_H, dtype=ag.float64)
            outputs = []
            for x_t in x.split(1, dim=1):
                h1, c1 = cell(x_t, h1, c1, *params[0:4])
                h2, c2 = cell(h1, h2, c2, *params[4:8])
                outputs.append(h2 @ params[8].T + params[9])
            return ((ag.cat(outputs, dim=1) - y) ** 2).mean()
    else:
        arrays = [rng.standard_normal((BATCH, H)).astype(np.float32)]
        for _ in range(T):
            arrays += [rng.standard_normal((H, H)).astype(np.float32) * 0.3,
                       rng.standard_normal((H,)).astype(np.float32) * 0.1]

        def fn(x, *params):
            h = x
            for i in range(T):
                h = ag.tanh(h @ params[2 * i] + params[2 * i + 1])
            return h.sum()
    return fn, arrays


def _tensors(ag, kind, arrays):
    """The arrays as tensors: all requiring grad, but the LSTM's data (the first two)."""
    data = 2 if kind == "lstm" else 0
    return [ag.tensor(a, requires_grad=i >= data) for i, a in enumerate(arrays)]


def _stages(kind, T):
    """Times of each stage of one first call (run in a fresh process)."""
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 1000))
    import aotgrad as ag
    from aotgrad.codegen import compile_graph
    from aotgrad.ir import passes
    from aotgrad.ir.partition import partition
    from aotgrad.tracer.trace import trace
    fn, arrays = _model(kind, T)
    out = {"T": T, "model": kind}
    tensors = _tensors(ag, kind, arrays)
    t0 = time.perf_counter()
    tr = trace(fn, tuple(tensors), {}, want_grad=True)
    out["trace"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    joint = passes.optimize(tr.graph)
    out["passes"] = time.perf_counter() - t0
    n_fw = tr.layout.n_forward
    t0 = time.perf_counter()
    part = partition(joint, tr.n_primals, n_fw, None)
    out["partition"] = time.perf_counter() - t0
    out["nodes"] = len(part.forward.nodes) + len(part.backward.nodes)
    progs = []
    for g, name in ((part.forward, "forward"), (part.backward, "backward")):
        progs.append(compile_graph(g, name=name))
    for stage in ("schedule", "codegen", "numba"):
        out[stage] = sum(p.stage_seconds[stage] for p in progs)
    out["kernels"] = sum(len(p.kernels()) for p in progs)
    out["distinct"] = sum(len(p.module_names) for p in progs)
    # the compiled programs against eager
    fwd_out = progs[0](*arrays)
    eager = _tensors(ag, kind, arrays)
    loss = fn(*eager)
    loss.backward()
    out["loss"] = float(loss.detach().numpy())
    out["loss_matches"] = bool(np.allclose(fwd_out[0], loss.detach().numpy(), rtol=1e-4, atol=1e-5))
    out["load"] = os.getloadavg()[0]
    return out


def _e2e(kind, T):
    """Wall time of the first call of aotgrad.compile: forward and backward()."""
    import aotgrad as ag
    fn, arrays = _model(kind, T)
    tensors = _tensors(ag, kind, arrays)
    step = ag.compile(fn)
    t0 = time.perf_counter()
    loss = step(*tensors)
    loss.backward()
    first = time.perf_counter() - t0
    for t in tensors:
        t.grad = None
    t0 = time.perf_counter()
    reps = 20
    for _ in range(reps):
        loss = step(*tensors)
        loss.backward()
        for t in tensors:
            t.grad = None
    later_ms = (time.perf_counter() - t0) / reps * 1e3
    # then the programs the background compiles made: the steady call
    from aotgrad.codegen import tiers
    tiers.wait()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        loss = step(*tensors)
        loss.backward()
        times.append(time.perf_counter() - t0)
        for t in tensors:
            t.grad = None
    return {"T": T, "model": kind, "first_call": first, "later_ms": later_ms,
            "steady_ms": float(np.median(times)) * 1e3, "load": os.getloadavg()[0]}


def _jax_model(kind, T):
    """The same model in JAX: the loss of its arrays, and the arguments it differentiates."""
    import jax
    import jax.numpy as jnp
    if kind == "lstm":
        jax.config.update("jax_enable_x64", True)
    _, arrays = _model(kind, T)
    if kind == "rnn":
        def fn(x, U, W):
            h = jnp.zeros((BATCH, H), jnp.float32)
            for t in range(T):
                h = jnp.tanh(x[t] @ U + h @ W * 0.1)
            return h.sum()
        wrt = (0, 1, 2)
    elif kind == "lstm":
        def cell(x, h, c, w_ih, w_hh, b_ih, b_hh):
            i, f, g, o = jnp.split(x @ w_ih.T + b_ih + h @ w_hh.T + b_hh, 4, axis=1)
            c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
            return jax.nn.sigmoid(o) * jnp.tanh(c), c

        def fn(x, y, *params):
            h1 = c1 = h2 = c2 = jnp.zeros((x.shape[0], LSTM_H), jnp.float64)
            outputs = []
            for t in range(x.shape[1]):
                h1, c1 = cell(x[:, t:t + 1], h1, c1, *params[0:4])
                h2, c2 = cell(h1, h2, c2, *params[4:8])
                outputs.append(h2 @ params[8].T + params[9])
            return ((jnp.concatenate(outputs, axis=1) - y) ** 2).mean()
        wrt = tuple(range(2, len(arrays)))
    else:
        def fn(x, *params):
            h = x
            for i in range(T):
                h = jnp.tanh(h @ params[2 * i] + params[2 * i + 1])
            return h.sum()
        wrt = tuple(range(len(arrays)))
    return fn, [jnp.asarray(a) for a in arrays], wrt


def _jax(kind, T):
    """Wall time of jax.jit(value_and_grad)'s first call (trace and XLA compile), then the
    median of 20 calls."""
    import jax
    fn, arrays, wrt = _jax_model(kind, T)
    step = jax.jit(jax.value_and_grad(fn, argnums=wrt))
    t0 = time.perf_counter()
    loss, grads = jax.block_until_ready(step(*arrays))
    first = time.perf_counter() - t0
    times = []
    for _ in range(20):
        t0 = time.perf_counter()
        jax.block_until_ready(step(*arrays))
        times.append(time.perf_counter() - t0)
    return {"T": T, "model": kind, "first_call": first,
            "steady_ms": float(np.median(times)) * 1e3, "loss": float(loss),
            "load": os.getloadavg()[0]}


def _child(what, kind, T, timeout):
    """Run one measurement in a fresh process with an empty cache; its JSON, or an error."""
    # (a compile helper detached at the child's exit may still be writing in it)
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as cache:
        env = dict(os.environ, AOTGRAD_CACHE_DIR=cache)
        cmd = [sys.executable, os.path.abspath(__file__), "--child", what, "--model", kind,
               "--steps", str(T)]
        t0 = time.perf_counter()
        try:
            r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"T": T, "model": kind, "error": f"timed out after {timeout} s"}
        if r.returncode != 0:
            tail = (r.stderr.strip().splitlines() or ["?"])[-1]
            return {"T": T, "model": kind, "error": tail,
                    "after_s": time.perf_counter() - t0}
        return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=("rnn", "mlp", "lstm"), default="rnn")
    ap.add_argument("--steps", type=int, nargs="+", default=[50, 100, 200, 400, 1000])
    ap.add_argument("--e2e", action="store_true", help="also time aotgrad.compile's first call")
    ap.add_argument("--jax", action="store_true",
                    help="also time jax.jit(value_and_grad)'s first call of the same model")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per length")
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--child", choices=("stages", "e2e", "jax"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        row = {"stages": _stages, "e2e": _e2e, "jax": _jax}[a.child](a.model, a.steps[0])
        print(json.dumps(row))
        return
    cols = ("trace", "passes", "partition", "schedule", "codegen", "numba")
    print(f"{a.model}: first call, seconds per stage (fresh process, empty cache)")
    print(f"{'T':>5} {'nodes':>6} " + " ".join(f"{c:>9}" for c in cols) +
          f" {'total':>8} {'kernels':>8} {'load':>5}" +
          ("  e2e first s / later ms / steady ms" if a.e2e else "") +
          ("  jax.jit first s / steady ms" if a.jax else ""))
    rows = []
    for T in a.steps:
        row = _child("stages", a.model, T, a.timeout)
        if a.e2e:
            row["e2e"] = _child("e2e", a.model, T, a.timeout)
        if a.jax:
            row["jax"] = _child("jax", a.model, T, a.timeout)
        rows.append(row)
        if "error" in row:
            print(f"{T:>5} failed: {row['error']}")
            continue
        total = sum(row[c] for c in cols)
        line = (f"{T:>5} {row['nodes']:>6} " + " ".join(f"{row[c]:>9.2f}" for c in cols) +
                f" {total:>8.2f} {row['kernels']:>4}/{row['distinct']:<3} {row['load']:>5.2f}")
        if a.e2e:
            e = row["e2e"]
            line += (f"  {e['first_call']:.2f} / {e['later_ms']:.2f} / {e['steady_ms']:.2f}"
                     if "error" not in e else f"  failed: {e['error']}")
        if a.jax:
            j = row["jax"]
            line += (f"  {j['first_call']:.2f} / {j['steady_ms']:.2f}" if "error" not in j
                     else f"  jax failed: {j['error']}")
            if "error" not in j and not np.isclose(j["loss"], row["loss"], rtol=1e-4):
                line += "  JAX'S LOSS DIFFERS"
        if not row["loss_matches"]:
            line += "  LOSS DIFFERS FROM EAGER"
        print(line, flush=True)
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
