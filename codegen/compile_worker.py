"""Helper process that compiles generated kernels into numba's disk cache.

Started by `parallel_compile` as `python compile_worker.py` (so it imports neither aotgrad
nor the caller's `__main__`). Protocol, one JSON object per line: stdin gets
`{"sys_path": [...], "nice": n, "detached": b}` (n optional: added to the process's
niceness, for work in the background, which then also runs in the idle scheduling class
where the OS has one; b optional: read every task before the first compile,
as the process that wrote them may exit meanwhile) and then tasks `{"id", "file", "module", "kernel", "sig"}`; stdout
answers `{"id", "ok", "cpu"[, "error"]}` per task. It exits at the end of stdin.

`sig` describes the argument types with plain strings so the caller and the helper build
the same numba signature: `["size"]`, `["scalar", "float32"]`, `["array", "float32", 2]`:

    >>> [str(t) for t in numba_signature([["size"], ["array", "float32", 2]])]
    ['int64', 'array(float32, 2d, C)']
"""
import importlib.util
import json
import os
import sys
import time


def numba_signature(desc):
    """The tuple of numba types a signature description stands for."""
    import numba
    import numpy as np
    types = []
    for d in desc:
        if d[0] == "size":
            types.append(numba.int64)
        elif d[0] == "scalar":
            types.append(numba.from_dtype(np.dtype(d[1])))
        elif d[0] == "array":
            types.append(numba.types.Array(numba.from_dtype(np.dtype(d[1])), int(d[2]), "C"))
        else:
            raise ValueError(f"compile_worker: unknown argument kind {d[0]!r}")
    return tuple(types)


def import_file(name, path):
    """Import the generated module `name` from `path` (registered in sys.modules, which
    numba's cache=True needs)."""
    mod = sys.modules.get(name)
    if mod is not None:
        return mod
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return mod


def compile_task(task):
    t = time.process_time()
    mod = import_file(task["module"], task["file"])
    getattr(mod, task["kernel"]).compile(numba_signature(task["sig"]))
    return time.process_time() - t


def _idle_class():
    """Run in Linux's idle scheduling class (SCHED_IDLE): only on CPU time no process of a
    normal class wants. A background compile with niceness alone still took about a sixth
    of the training's step time on two cores (W4: 31 ms steps against 26)."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):     # not on this OS, or not allowed: niceness only
        pass


def main():
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="utf-8")
    sys.stdout = sys.stderr          # anything the compiler prints stays off the answer pipe
    first = sys.stdin.readline()
    if not first:
        return
    setup = json.loads(first)
    if setup.get("nice"):
        try:
            os.nice(int(setup["nice"]))
        except OSError:       # not allowed here: compile at the usual priority
            pass
        _idle_class()
    for p in reversed(setup.get("sys_path", [])):
        if p not in sys.path:
            sys.path.insert(1, p)
    lines = list(sys.stdin) if setup.get("detached") else sys.stdin
    for line in lines:
        if not line.strip():
            continue
        task = json.loads(line)
        try:
            res = {"id": task["id"], "ok": True, "cpu": compile_task(task)}
        except Exception as e:  # the caller compiles it itself and reports the error
            res = {"id": task["id"], "ok": False, "error": f"{type(e).__name__}: {e}"[:500]}
        out.write(json.dumps(res) + "\n")
        out.flush()


if __name__ == "__main__":
    sys.path.pop(0)   # this file's folder: its module names must not shadow anything
    main()
