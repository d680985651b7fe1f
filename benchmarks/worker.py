"""Measure one (workload, system) pair in this process and print one JSON line.

    python benchmarks/worker.py W1 aotgrad_compiled main [--quick]

Phases (each run in a fresh process by run.py, in this order, sharing the cache dirs):
  main  first call (trace + compile with the caches run.py made empty), the wait for
        compiles the system finishes in the background (`settle_s`), 12 warm-up steps and
        that wait again (a variant chosen during them), steady-state median of
        forward+backward steps (wall clock, and process CPU time summed over threads),
        loss and gradient checksums
  warm  first call in a new process with the disk caches populated by `main`; peak RSS
        growth over that first call and three more steps (the high-water mark is reset
        first where Linux allows, else getrusage's max RSS)
  mem   (numpy-based systems) tracemalloc peak from before the first call through three
        steps, the inputs excluded
"""
import time

_T_START = time.perf_counter()

import json  # noqa: E402
import os  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import traceback  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from systems import SYSTEMS  # noqa: E402
from workloads import WORKLOADS  # noqa: E402

MARK = "@@BENCH "


def _reset_peak_rss():
    """Reset the kernel's RSS high-water mark (Linux >= 4.0: write 5 to clear_refs), so the
    peak after it covers only what follows, not the imports. Returns the method used."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return "VmHWM after reset (/proc/self/clear_refs) minus VmRSS before"
    except OSError:
        return "getrusage ru_maxrss delta"


def _rss_mb(field):
    """VmRSS / VmHWM from /proc/self/status in MiB; getrusage's max RSS where absent."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def _configure_jax():
    d = os.environ.get("BENCH_JAX_CACHE_DIR")
    if d:
        import jax
        jax.config.update("jax_compilation_cache_dir", d)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


def checksums(loss, grads, seed=1234):
    """loss, and per gradient its L2 norm, a weighted sum sum(g*r) and the matching sum(|g|*r)
    with fixed weights r in [0.5, 1.5) (the last one scales the relative difference)."""
    out = {"loss": loss, "grads": {}}
    for i, (name, g) in enumerate(sorted(grads.items())):
        if g is None:
            out["grads"][name] = None
            continue
        g = np.asarray(g, dtype=np.float64).ravel()
        r = np.random.default_rng(seed + i).uniform(0.5, 1.5, g.size)
        out["grads"][name] = {"norm": float(np.sqrt(g @ g)), "wsum": float(g @ r),
                              "wabs": float(np.abs(g) @ r), "dtype": str(grads[name].dtype),
                              "shape": list(np.shape(grads[name]))}
    return out


def steady_median(step, quick):
    # (12 warm-up steps: a system may switch variants after a few steps, as aotgrad's
    # compiled loss does to its fused forward+backward after 8 calls backpropagated at once)
    warm, budget, lo, hi = (1, 0.2, 3, 50) if quick else (12, 3.0, 7, 3000)
    for _ in range(warm):
        step()
    step.settle()  # what a system compiles during the warm-up steps (a fused variant)
    ts, cpu = [], []
    t_all = time.perf_counter()
    while len(ts) < hi and (len(ts) < lo or time.perf_counter() - t_all < budget):
        c = time.process_time()
        t = time.perf_counter()
        step()
        ts.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    q = np.percentile(ts, [25, 75])
    return {"median_s": statistics.median(ts), "min_s": min(ts), "p25_s": float(q[0]),
            "p75_s": float(q[1]), "reps": len(ts), "cpu_median_s": statistics.median(cpu)}


def run(wkey, sname, phase, quick):
    wl, system = WORKLOADS[wkey], SYSTEMS[sname]
    res = {"workload": wkey, "system": sname, "phase": phase}
    ok, why = system.available()
    if not ok:
        res["skipped"] = why
        return res
    if sname == "jax_jit":
        _configure_jax()
    res["versions"] = system.versions()
    res["import_s"] = time.perf_counter() - _T_START
    arrays = wl.inputs(quick)
    if phase == "mem":
        import tracemalloc
        tracemalloc.start()
    if phase == "warm":
        res["rss_method"] = _reset_peak_rss()
        rss0 = _rss_mb("VmRSS" if "VmHWM" in res["rss_method"] else "VmHWM")
    res["loadavg"] = os.getloadavg()
    try:
        t = time.perf_counter()
        step = system.prepare(wl, arrays)
        out = step()
        res["first_call_s"] = time.perf_counter() - t
        try:
            res["programs"] = step.info()
        except Exception as e:  # informational only
            res["programs"] = f"unavailable: {type(e).__name__}: {e}"
    except Exception as e:
        res["error"] = f"{type(e).__name__}: {e}"[:2000]
        res["traceback"] = traceback.format_exc()[-6000:]
        return res
    if phase == "main":
        t = time.perf_counter()
        step.settle()                # kernels compiled in the background
        res["settle_s"] = time.perf_counter() - t
        res.update(steady_median(step, quick))
        res["checksums"] = checksums(*step.readout(step()))
    else:
        for _ in range(3):
            out = step()
        del out
        if phase == "mem":
            import tracemalloc
            res["tracemalloc_peak_mb"] = tracemalloc.get_traced_memory()[1] / 2**20
            tracemalloc.stop()
        else:
            res["rss_delta_mb"] = _rss_mb("VmHWM") - rss0
    return res


def main(argv):
    wkey, sname, phase = argv[:3]
    quick = "--quick" in argv
    try:
        res = run(wkey, sname, phase, quick)
    except Exception as e:  # report, never hang the runner
        res = {"workload": wkey, "system": sname, "phase": phase,
               "error": f"{type(e).__name__}: {e}"[:2000],
               "traceback": traceback.format_exc()[-6000:]}
    sys.stdout.write(MARK + json.dumps(res) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv[1:])
