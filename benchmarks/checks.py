"""The benchmark's agreement check: how far a system's loss and gradient checksums
(worker.checksums) are from the reference system's."""


def max_rel_diff(cs, ref):
    """Largest relative difference of loss and gradient checksums against the reference;
    (value, what) with value inf when a gradient is missing or its shape/dtype differs."""
    worst = (abs(cs["loss"] - ref["loss"]) / max(abs(ref["loss"]), 1e-30), "loss")
    for name, r in ref["grads"].items():
        g = cs["grads"].get(name)
        if (g is None) != (r is None):
            return float("inf"), f"grad {name} missing"
        if g is None:
            continue
        if g["shape"] != r["shape"] or g["dtype"] != r["dtype"]:
            return float("inf"), f"grad {name} {g['dtype']}{g['shape']} vs {r['dtype']}{r['shape']}"
        for d in (abs(g["norm"] - r["norm"]) / max(r["norm"], 1e-30),
                  abs(g["wsum"] - r["wsum"]) / max(r["wabs"], 1e-30)):
            if d > worst[0]:
                worst = (d, f"grad {name}")
    return worst
