"""Issue 6 benchmarks: six forward+backward workloads on aotgrad (eager and compiled) and,
where installed, PyTorch eager, torch.compile and jax.jit(value_and_grad).

    python benchmarks/run.py [--quick] [--json out.json] [--only W1,W3] [--systems a,b]

Every (workload, system) runs in fresh processes (worker.py), one after another:
  main  cold first call (trace + compile; all disk caches start empty in a temp dir),
        steady-state median of forward+backward steps, loss and gradient checksums;
  warm  first call in a new process with the disk caches populated, and the peak RSS
        growth over that first call and three steps (all systems; the kernel's high-water
        mark is reset first where Linux allows, else getrusage's max RSS);
  mem   tracemalloc peak over the first call and three steps (numpy-based systems only:
        tracemalloc cannot see torch's or XLA's allocator).
Checksums of every system are compared with aotgrad eager (max relative difference).
The roofline line uses this machine's np.copyto bandwidth and np.matmul sgemm rate.

BLAS: numpy's BLAS library and kernel are reported (threadpoolctl). OPENBLAS_CORETYPE /
OPENBLAS_L2_SIZE / OPENBLAS_NUM_THREADS / OMP_NUM_THREADS are inherited from the
environment, never changed here, and printed: a forced core type can halve sgemm speed.
"""
import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from systems import REFERENCE, SYSTEMS  # noqa: E402
from workloads import WORKLOADS  # noqa: E402
from worker import MARK  # noqa: E402
from checks import max_rel_diff  # noqa: E402

ENV_VARS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
            "MKL_NUM_THREADS", "NUMBA_NUM_THREADS", "XLA_FLAGS")
OTHERS = ("torch_eager", "torch_compile", "jax_jit")


# ---- machine ----------------------------------------------------------------------------
def _median_time(fn, reps):
    fn()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return float(np.median(ts))


def machine_info(quick):
    """BLAS library/kernel, copy bandwidth (np.copyto, read+write bytes) and sgemm rate."""
    info = {"python": sys.version.split()[0], "numpy": np.__version__,
            "platform": platform.platform(), "cpus": os.cpu_count(),
            "env": {k: os.environ.get(k) for k in ENV_VARS}}
    try:
        from threadpoolctl import threadpool_info
        info["blas"] = [{k: d.get(k) for k in ("internal_api", "version", "architecture",
                                                "threading_layer", "num_threads", "filepath")}
                        for d in threadpool_info() if d.get("user_api") == "blas"]
    except ImportError:
        info["blas"] = "threadpoolctl not installed"
    try:
        import numba
        info["numba"] = numba.__version__
        info["numba_threads"] = numba.config.NUMBA_NUM_THREADS
    except ImportError:
        pass
    n = (1 << 22) if quick else (1 << 24)  # float32 elements: 16 MB / 64 MB
    src = np.random.default_rng(0).standard_normal(n, dtype=np.float32)
    dst = np.empty_like(src)
    t = _median_time(lambda: np.copyto(dst, src), 5 if quick else 15)
    info["copy_GBps"] = 2 * src.nbytes / t / 1e9
    m = 512 if quick else 2048
    a = np.random.default_rng(1).standard_normal((m, m), dtype=np.float32)
    b = np.random.default_rng(2).standard_normal((m, m), dtype=np.float32)
    c = np.empty((m, m), np.float32)
    t = _median_time(lambda: np.matmul(a, b, out=c), 3 if quick else 7)
    info["sgemm_numpy_GFLOPs"] = info["sgemm_GFLOPs"] = 2 * m ** 3 / t / 1e9
    info["sgemm_size"] = m
    mkl_rate = _mkl_sgemm_rate(a, b, c, quick)
    if mkl_rate:   # the floor uses the fastest sgemm this machine has
        info["sgemm_mkl_GFLOPs"] = mkl_rate
        info["sgemm_GFLOPs"] = max(info["sgemm_GFLOPs"], mkl_rate)
    info["loadavg_start"] = os.getloadavg()
    return info


def _mkl_sgemm_rate(a, b, c, quick):
    """MKL's sgemm rate on the same product, run as aotgrad runs it (one sequential gemm per
    thread of aotgrad's, codegen.blas), where aotgrad uses MKL; else None."""
    try:
        from aotgrad.codegen import blas, parts
    except ImportError:
        return None
    if blas.provider() != "mkl" or not blas.available():
        return None
    m = a.shape[0]
    e = np.zeros(0, np.int64)
    pieces = parts.get_num_threads()

    def run():
        blas.gemm_threads(blas.gemm_address(np.float32), blas.NO_TRANS, blas.NO_TRANS, m, m, m,
                        np.float32(1), a.reshape(-1), 0, m, b.reshape(-1), 0, m,
                        c.reshape(-1), 0, m, e, e, e, e, pieces, False)
    with blas.single_threaded():
        t = _median_time(run, 3 if quick else 7)
    return 2 * m ** 3 / t / 1e9


# ---- running workers ----------------------------------------------------------------------
def run_worker(wkey, sname, phase, quick, env, timeout):
    cmd = [sys.executable, os.path.join(HERE, "worker.py"), wkey, sname, phase]
    if quick:
        cmd.append("--quick")
    t = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timeout after {timeout} s"}
    for line in p.stdout.splitlines():
        if line.startswith(MARK):
            res = json.loads(line[len(MARK):])
            res["process_s"] = time.perf_counter() - t
            return res
    return {"error": f"worker exited {p.returncode} without a result",
            "traceback": (p.stderr or p.stdout)[-4000:]}


def measure(wkey, sname, quick, env, timeout, log):
    system = SYSTEMS[sname]
    ok, why = system.available()
    if not ok:
        return {"skipped": why}
    res = {}
    phases = ["main", "warm"] + (["mem"] if system.uses_numpy else [])
    for phase in phases:
        r = run_worker(wkey, sname, phase, quick, env, timeout)
        log(f"  {wkey} {sname:17s} {phase:4s} " + (
            f"ERROR {r['error'][:160]}" if "error" in r else
            f"first {r.get('first_call_s', 0):.3f}s"
            + (f" median {r['median_s'] * 1e3:.3f} ms" if "median_s" in r else "")))
        if phase == "main":
            res.update({k: r[k] for k in ("first_call_s", "median_s", "min_s", "p25_s",
                                          "p75_s", "reps", "checksums", "versions", "loadavg",
                                          "programs", "cpu_median_s", "settle_s",
                                          "error", "traceback", "skipped") if k in r})
            if "error" in r or "skipped" in r:
                return res
        elif phase == "warm":
            res["warm_first_call_s"] = r.get("first_call_s")
            res["warm_import_s"] = r.get("import_s")
            res["rss_delta_mb"] = r.get("rss_delta_mb")
            res["rss_method"] = r.get("rss_method")
            res["warm_programs"] = r.get("programs")
            if "error" in r:
                res["warm_error"] = r["error"]
        else:
            res["tracemalloc_peak_mb"] = r.get("tracemalloc_peak_mb")
    return res


# ---- roofline ------------------------------------------------------------------------------
def roofline(wl, quick, machine):
    b, f = wl.bytes_moved(quick), wl.matmul_flops(quick)
    mem_s = b / (machine["copy_GBps"] * 1e9)
    flop_s = f / (machine["sgemm_GFLOPs"] * 1e9)
    return {"bytes": b, "flops": f, "mem_floor_s": mem_s, "blas_floor_s": flop_s,
            "floor_s": max(mem_s, flop_s)}


# issue 19's targets: compiled aotgrad's median over the best peer's (or jax.jit's) at most
RATIO_TARGETS = {"W1": (0.4, None), "W2": (0.95, None), "W3": (0.15, None), "W4": (0.85, None),
                 "W5": (1.0, "jax_jit"), "W6": (0.9, "jax_jit")}
COLD_FIRST_CALL_MAX_S = {"W4": 2.0}


def targets(results, quick):
    """The targets (issue 6's, then issue 19's ratios to the peers), each PASS / FAIL / n.a.
    (n.a. when a figure is missing)."""
    out = []

    def med(w, s):
        r = results.get(w, {}).get("systems", {}).get(s, {})
        return r.get("median_s")

    def add(name, value, limit, ok):
        out.append({"target": name, "value": value, "limit": limit,
                    "status": "n.a." if ok is None else ("PASS" if ok else "FAIL")})

    for w, wr in results.items():
        comp = med(w, "aotgrad_compiled")
        others = {s: med(w, s) for s in OTHERS if med(w, s) is not None}
        if others:
            best = min(others, key=others.get)
            add(f"{w} compiled beats best of others ({best})", comp, others[best],
                None if comp is None else comp < others[best])
        rf = wr["roofline"]
        lim = {"W1": ("mem_floor_s", 2.5), "W3": ("mem_floor_s", 5.0),
               "W2": ("blas_floor_s", 1.5), "W4": ("blas_floor_s", 1.5)}.get(w)
        if lim:
            floor = rf[lim[0]]
            add(f"{w} compiled within {lim[1]}x of {lim[0][:-2]}", comp, lim[1] * floor,
                None if comp is None else comp <= lim[1] * floor)
        if w == "W5":
            add("W5 compiled under 30 us per step", comp, 30e-6,
                None if comp is None else comp < 30e-6)
        if w == "W6":
            j = med(w, "jax_jit")
            add("W6 compiled at least as fast as jax.jit", comp, j,
                None if comp is None or j is None else comp <= j)
        if w == "W4":
            r = wr["systems"].get("aotgrad_compiled", {})
            c, wm = r.get("first_call_s"), r.get("warm_first_call_s")
            add("W4 cold compile (first call) under 5 s", c, 5.0, None if c is None else c < 5)
            add("W4 warm-cache first call under 1 s", wm, 1.0, None if wm is None else wm < 1)
        if w in RATIO_TARGETS:
            limit, peer = RATIO_TARGETS[w]
            peers = {peer: med(w, peer)} if peer else others
            peers = {k: v for k, v in peers.items() if v is not None}
            best = min(peers, key=peers.get) if peers else (peer or "best peer")
            ref = peers.get(best)
            add(f"{w} compiled at most {limit}x {best}", comp,
                None if ref is None else limit * ref,
                None if comp is None or ref is None else comp <= limit * ref)
        if w in COLD_FIRST_CALL_MAX_S:
            c = wr["systems"].get("aotgrad_compiled", {}).get("first_call_s")
            lim = COLD_FIRST_CALL_MAX_S[w]
            add(f"{w} cold first call at most {lim:g} s", c, lim, None if c is None else c <= lim)
    return out


# ---- output --------------------------------------------------------------------------------
def fmt_t(s):
    if s is None:
        return "-"
    if s < 1e-3:
        return f"{s * 1e6:.1f} us"
    if s < 1.0:
        return f"{s * 1e3:.2f} ms"
    return f"{s:.2f} s"


_SHORT = {"forward": "fwd", "backward": "bwd", "inference": "inf"}


def fmt_mb(v):
    return "-" if v is None else f"{v:.1f}"


def table(results, machine):
    lines = []
    hdr = (f"{'system':24s} {'median':>10s} {'min':>10s} {'CPU/step':>10s} {'1st call':>10s} {'1st warm':>10s} "
           f"{'trace MB':>9s} {'RSS+ MB':>8s} {'load':>4s} {'max rel diff':>13s}  note")
    for w, wr in results.items():
        shapes = ", ".join(f"{k}{tuple(v)}" for k, v in list(wr["shapes"].items())[:2])
        lines.append(f"\n{w}: {wr['title']}  [{shapes}{', ...' if len(wr['shapes']) > 2 else ''}]")
        lines.append(hdr)
        for s, r in wr["systems"].items():
            label = SYSTEMS[s].label
            if "skipped" in r:
                lines.append(f"{label:24s} {'skipped: ' + r['skipped'][:90]}")
                continue
            if "error" in r:
                lines.append(f"{label:24s} {'ERROR: ' + r['error'].splitlines()[0][:110]}")
                continue
            d = r.get("max_rel_diff")
            note = r.get("check", "")
            if r.get("warm_error"):
                note += f" warm run error: {r['warm_error'][:60]}"
            if (r.get("settle_s") or 0) > 0.05:
                note += f"; background compiles done {r['settle_s']:.1f} s after the first call"
            wp = r.get("warm_programs")
            if isinstance(wp, dict):
                note += "; warm cache " + ",".join(f"{_SHORT.get(k, k)}:{v['cache']}"
                                                   for k, v in wp.items())
            lines.append(f"{label:24s} {fmt_t(r.get('median_s')):>10s} "
                         f"{fmt_t(r.get('min_s')):>10s} "
                         f"{fmt_t(r.get('cpu_median_s')):>10s} "
                         f"{fmt_t(r.get('first_call_s')):>10s} "
                         f"{fmt_t(r.get('warm_first_call_s')):>10s} "
                         f"{fmt_mb(r.get('tracemalloc_peak_mb')):>9s} "
                         f"{fmt_mb(r.get('rss_delta_mb')):>8s} "
                         f"{(r['loadavg'][0] if r.get('loadavg') else float('nan')):4.1f} "
                         f"{('-' if d is None else f'{d:.1e}'):>13s}  {note}")
        rf = wr["roofline"]
        comp = wr["systems"].get("aotgrad_compiled", {}).get("median_s")
        ratio = f"; compiled / floor = {comp / rf['floor_s']:.1f}x" if comp and rf[
            "floor_s"] > 0 else ""
        lines.append(f"roofline: {rf['bytes'] / 1e6:.1f} MB / {machine['copy_GBps']:.1f} GB/s = "
                     f"{fmt_t(rf['mem_floor_s'])}; {rf['flops'] / 1e9:.3f} GFLOP / "
                     f"{machine['sgemm_GFLOPs']:.0f} GFLOP/s = {fmt_t(rf['blas_floor_s'])}"
                     f"{ratio}")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="tiny sizes, few repetitions")
    ap.add_argument("--json", help="write all results to this file")
    ap.add_argument("--only", help="comma-separated workloads, e.g. W1,W3")
    ap.add_argument("--systems", help="comma-separated systems (default all): "
                    + ",".join(SYSTEMS))
    ap.add_argument("--tol", type=float, default=1e-3,
                    help="max relative checksum difference before a mismatch is flagged")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per worker process")
    args = ap.parse_args(argv)
    wkeys = args.only.split(",") if args.only else list(WORKLOADS)
    snames = args.systems.split(",") if args.systems else list(SYSTEMS)
    for k in wkeys:
        if k not in WORKLOADS:
            ap.error(f"unknown workload {k!r}; choose from {','.join(WORKLOADS)}")
    for s in snames:
        if s not in SYSTEMS:
            ap.error(f"unknown system {s!r}; choose from {','.join(SYSTEMS)}")
    if REFERENCE not in snames:
        snames.insert(0, REFERENCE)  # the cross-check needs the reference

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    t0 = time.perf_counter()
    machine = machine_info(args.quick)
    log(f"BLAS {machine['blas']}\ncopy {machine['copy_GBps']:.1f} GB/s, sgemm "
        f"{machine['sgemm_GFLOPs']:.0f} GFLOP/s, load {machine['loadavg_start']}")
    root = tempfile.mkdtemp(prefix="aotgrad_bench_")
    env = dict(os.environ, AOTGRAD_CACHE_DIR=os.path.join(root, "aotgrad"),
               TORCHINDUCTOR_CACHE_DIR=os.path.join(root, "inductor"),
               BENCH_JAX_CACHE_DIR=os.path.join(root, "jax"))
    results = {}
    try:
        for w in wkeys:
            wl = WORKLOADS[w]
            wr = results[w] = {"title": wl.title, "shapes": wl.shapes(args.quick),
                               "roofline": roofline(wl, args.quick, machine), "systems": {}}
            for s in snames:
                wr["systems"][s] = measure(w, s, args.quick, env, args.timeout, log)
            ref = wr["systems"][REFERENCE].get("checksums")
            for s, r in wr["systems"].items():
                if ref is None or "checksums" not in r:
                    continue
                d, what = max_rel_diff(r["checksums"], ref)
                r["max_rel_diff"], r["max_rel_diff_at"] = d, what
                r["checksum_ok"] = d <= args.tol
                r["check"] = "ok" if d <= args.tol else f"MISMATCH ({what})"
    finally:
        shutil.rmtree(root, ignore_errors=True)
    machine["loadavg_end"] = os.getloadavg()
    report = {"command": " ".join(["python", "benchmarks/run.py"] + (argv or sys.argv[1:])),
              "quick": args.quick, "tol": args.tol, "machine": machine,
              "peak_memory_note": "median/min: wall clock per forward+backward step (targets use "
              "the median); CPU/step: median process CPU time per step (all threads; "
              "spinning threads count); trace MB: tracemalloc peak (numpy-based systems) over the "
              "first call + 3 steps, inputs excluded; RSS+ MB: peak RSS growth over the "
              "warm-cache first call + 3 steps in a new process (all systems; VmHWM reset via "
              "/proc/self/clear_refs where possible, else getrusage max RSS); load: 1-minute "
              "load average when the timed (main) process started; warm cache: the aotgrad "
              "module cache status per program in the new process (disk = hit)",
              "workloads": results, "targets": targets(results, args.quick),
              "total_s": time.perf_counter() - t0}
    print(f"BLAS: {machine['blas']}")
    print(f"env: {machine['env']}; numba threads {machine.get('numba_threads')}; "
          f"load avg start {machine['loadavg_start']} end {machine['loadavg_end']}")
    mkl_rate = machine.get("sgemm_mkl_GFLOPs")
    print(f"copy bandwidth {machine['copy_GBps']:.1f} GB/s (np.copyto, read+write); sgemm "
          f"{machine['sgemm_GFLOPs']:.0f} GFLOP/s ({machine['sgemm_size']}^3; np.matmul "
          f"{machine['sgemm_numpy_GFLOPs']:.0f}"
          + (f", MKL as aotgrad calls it {mkl_rate:.0f}; the floor uses the faster)"
             if mkl_rate else ")"))
    print(table(results, machine))
    print(f"\n{report['peak_memory_note']}")
    print("\ntargets (issues 6 and 19):")
    for t in report["targets"]:
        v = t["value"]
        print(f"  {t['status']:5s} {t['target']}: {fmt_t(v)} (limit {fmt_t(t['limit'])})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
        print(f"\nwrote {args.json}")
    return report


if __name__ == "__main__":
    main()
