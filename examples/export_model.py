"""Train the digits MLP, export it, and serve it three ways: eagerly, from the saved package
(numpy + numba, no aotgrad needed: the package's run.py runs in a fresh interpreter here
too) and from the ONNX file in onnxruntime. Prints that all three agree and the time per
batch of each.

    python examples/export_model.py            # ~200 Adam steps, then export
    python examples/export_model.py --quick    # a few seconds of training, for CI

The ONNX half needs `pip install -e ".[export]"` (onnx, onnxruntime); without it, it is
skipped with a note.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

import aotgrad
from aotgrad import optim
import aotgrad.nn.functional as F

try:
    from _common import batches, load_digits_or_synthetic, split
    from train_mlp import make_model
except ImportError:
    from aotgrad.examples._common import batches, load_digits_or_synthetic, split
    from aotgrad.examples.train_mlp import make_model


def per_batch_ms(fn, reps):
    fn()                                   # the first call compiles / warms up
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return 1e3 * (time.perf_counter() - t0) / reps


# Runs the package in an interpreter that cannot import aotgrad: what a deployment sees.
_STANDALONE = """
import importlib.util, sys
import numpy as np
class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "aotgrad":
            raise ImportError("aotgrad is not installed here")
sys.meta_path.insert(0, Blocker())
spec = importlib.util.spec_from_file_location("served", sys.argv[1] + "/run.py")
pkg = importlib.util.module_from_spec(spec)
spec.loader.exec_module(pkg)
np.save(sys.argv[3], pkg.run(np.load(sys.argv[2])))
"""


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=None)
    ap.add_argument("--reps", type=int, default=None, help="timed batches per runner")
    ap.add_argument("--out", default=None, help="folder for the package and the ONNX file "
                                                "(default: a temporary folder)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    steps = args.steps or (40 if args.quick else 200)
    hidden = args.hidden or (64 if args.quick else 256)
    reps = args.reps or (20 if args.quick else 200)

    X, y, source = load_digits_or_synthetic(args.seed)
    Xtr, ytr, Xte, yte = split(X, y, 0.2, args.seed)
    aotgrad.manual_seed(args.seed)
    model = make_model(hidden)
    opt = optim.Adam(model.parameters(), lr=3e-3)
    for b in batches(len(Xtr), args.batch_size, steps, args.seed):
        opt.zero_grad()
        F.cross_entropy(model(aotgrad.tensor(Xtr[b])), aotgrad.tensor(ytr[b])).backward()
        opt.step()
    model.eval()
    batch = Xte[:args.batch_size]
    with aotgrad.no_grad():
        acc = float((model(aotgrad.tensor(Xte)).argmax(1).numpy() == yte).mean())
    print(f"trained: {source}, MLP 64-{hidden}-{hidden}-10, {steps} Adam steps, "
          f"test accuracy {acc:.3f}")

    out = args.out or tempfile.mkdtemp(prefix="aotgrad_export_")
    ep = aotgrad.export(model, aotgrad.tensor(batch))
    pkg = ep.save(os.path.join(out, "mlp_package"))
    print(f"exported: {len(ep.user_inputs)} input, {len(ep.state)} parameters; package in "
          f"{pkg} ({', '.join(sorted(os.listdir(pkg)))})")

    def eager():
        with aotgrad.no_grad():
            return model(aotgrad.tensor(batch)).numpy()
    want = eager()
    results = {"eager": (want, per_batch_ms(eager, reps))}

    served = aotgrad.load_exported(pkg)
    results["package"] = (served(batch), per_batch_ms(lambda: served(batch), reps))
    np.save(os.path.join(out, "batch.npy"), batch)
    proc = subprocess.run([sys.executable, "-c", _STANDALONE, pkg,
                           os.path.join(out, "batch.npy"), os.path.join(out, "served.npy")],
                          capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"the package did not run without aotgrad:\n{proc.stderr}")
    standalone = np.load(os.path.join(out, "served.npy"))
    print(f"package run by a Python that cannot import aotgrad: largest difference to eager "
          f"{float(np.max(np.abs(standalone - want))):.3e}")

    try:
        import onnxruntime as ort
        onnx_path = os.path.join(out, "mlp.onnx")
        aotgrad.onnx.export(model, (aotgrad.tensor(batch),), onnx_path,
                            input_names=["pixels"], output_names=["logits"])
        sess = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
        run_onnx = lambda: sess.run(None, {"pixels": batch})[0]  # noqa: E731
        results["onnxruntime"] = (run_onnx(), per_batch_ms(run_onnx, reps))
    except ImportError:
        print("onnxruntime: skipped (pip install -e \".[export]\" for onnx and onnxruntime)")

    worst = 0.0
    for name, (got, ms) in results.items():
        diff = float(np.max(np.abs(got - want)))
        worst = max(worst, diff)
        print(f"{name:12s} {ms:8.3f} ms/batch of {len(batch)} | largest difference to eager "
              f"{diff:.3e} | same predictions: {bool((got.argmax(1) == want.argmax(1)).all())}")
    agree = worst < 1e-4 and all((r.argmax(1) == want.argmax(1)).all()
                                 for r, _ in results.values())
    print(f"all {len(results)} agree: {agree}")
    return {"accuracy": acc, "agree": agree, "worst_diff": worst,
            "ms": {k: ms for k, (_, ms) in results.items()}, "package": pkg}


if __name__ == "__main__":
    main(sys.argv[1:])
