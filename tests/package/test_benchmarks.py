"""benchmarks/run.py in --quick mode on W5: JSON structure, checksums agree across systems,
and the reported loss/gradients match a closed form computed here in numpy. No timing
assertions."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from repo_paths import REPO_ROOT

ROOT = REPO_ROOT
BENCH = os.path.join(ROOT, "benchmarks")
SYSTEMS = ["aotgrad_eager", "aotgrad_compiled", "torch_eager"]  # torch.compile: ~30 s cold


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "w5.json"
    p = subprocess.run([sys.executable, os.path.join(BENCH, "run.py"), "--quick", "--only",
                        "W5", "--systems", ",".join(SYSTEMS), "--json", str(out)],
                       capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "W5" in p.stdout and "roofline" in p.stdout  # the printed table
    with open(out) as f:
        return json.load(f)


def _w5_closed_form():
    from aotgrad.benchmarks.workloads import WORKLOADS
    a = {k: v.astype(np.float64) for k, v in WORKLOADS["W5"].inputs(quick=True).items()}
    pre = a["x"] @ a["w1"].T + a["b1"]
    h = np.maximum(pre, 0)
    out = h @ a["w2"].T + a["b2"]
    r = out - a["y"]
    loss = np.mean(r ** 2)
    dout = 2 * r / r.size
    grads = {"b2": dout.sum(0), "w2": dout.T @ h}
    dpre = (dout @ a["w2"]) * (pre > 0)
    grads.update(b1=dpre.sum(0), w1=dpre.T @ a["x"])
    return loss, grads


def test_structure(report):
    m = report["machine"]
    assert m["copy_GBps"] > 0 and m["sgemm_GFLOPs"] > 0
    assert "blas" in m and set(m["env"]) >= {"OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"}
    assert list(report["workloads"]) == ["W5"]
    w5 = report["workloads"]["W5"]
    assert set(w5["roofline"]) >= {"bytes", "flops", "mem_floor_s", "blas_floor_s", "floor_s"}
    assert w5["roofline"]["flops"] == 3 * 2 * 4 * 16 * (8 + 1)
    assert list(w5["systems"]) == SYSTEMS
    for name in ("aotgrad_eager", "aotgrad_compiled"):
        r = w5["systems"][name]
        assert "error" not in r, r.get("traceback")
        for k in ("median_s", "first_call_s", "warm_first_call_s", "rss_delta_mb",
                  "tracemalloc_peak_mb", "reps"):
            assert isinstance(r[k], (int, float)) and r[k] >= 0, k
        assert r["reps"] >= 3
        assert set(r["checksums"]["grads"]) == {"w1", "b1", "w2", "b2"}
    targets = {t["target"]: t for t in report["targets"]}
    assert targets["W5 compiled under 30 us per step"]["status"] in ("PASS", "FAIL")


def test_checksums_agree(report):
    systems = report["workloads"]["W5"]["systems"]
    ran = [s for s, r in systems.items() if "checksums" in r]
    assert "aotgrad_eager" in ran and "aotgrad_compiled" in ran
    for s in ran:
        assert systems[s]["checksum_ok"], (s, systems[s]["max_rel_diff_at"])
        assert systems[s]["max_rel_diff"] <= report["tol"]


def test_checksums_match_closed_form(report):
    loss, grads = _w5_closed_form()
    cs = report["workloads"]["W5"]["systems"]["aotgrad_compiled"]["checksums"]
    assert cs["loss"] == pytest.approx(loss, rel=1e-5)
    for name, g in grads.items():
        c = cs["grads"][name]
        assert c["shape"] == list(g.shape) and c["dtype"] == "float32"
        assert c["norm"] == pytest.approx(np.linalg.norm(g), rel=1e-5, abs=1e-7)


def test_mismatch_is_flagged():
    from aotgrad.benchmarks.checks import max_rel_diff
    ref = {"loss": 2.0, "grads": {"w": {"norm": 1.0, "wsum": 0.5, "wabs": 1.0,
                                        "shape": [2], "dtype": "float32"}}}
    off = json.loads(json.dumps(ref))
    off["grads"]["w"]["wsum"] = 0.6
    assert max_rel_diff(ref, ref)[0] == 0
    assert max_rel_diff(off, ref) == (pytest.approx(0.1), "grad w")
    off["grads"]["w"] = None
    assert max_rel_diff(off, ref)[0] == float("inf")
