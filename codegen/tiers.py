"""Tiered compilation: a medium kernel starts serial; its parallel variant comes later.

Numba compiles a kernel with `prange` loops for its parallel backend in ~1 s, against ~0.4 s
serially, so compiling a transformer block's medium kernels (256K-1M elements) parallel
up front took its first call from 4.3 to 9.4 s. Instead such a kernel is first compiled
serially (same body: its prange loops run in order) and the program runs at once; its
parallel variant is compiled in the background by helper processes, once no foreground
compile has run for QUIET seconds, and then swapped into the program's driver between two
steps. Both variants run the same loops (parallel loops write disjoint rows or per-block
partials, combined in a fixed order), but LLVM may vectorise a sum differently in each, so
values may differ in the last bits after the swap (W4's gradients: 1e-10 absolute). A
parallel variant already in the disk cache is loaded up front, so a second process starts
with it.

`AOTGRAD_BACKGROUND_COMPILE=0` compiles parallel variants up front instead.
`wait(timeout)` blocks until every queued upgrade is done (benchmarks call it after warm-up).
"""
import atexit
import logging
import os
import queue
import threading
import time

from aotgrad.codegen import parallel_compile

log = logging.getLogger(__name__)

QUIET = 0.5

_jobs = queue.Queue()
_cv = threading.Condition()
_state = {"pending": 0, "thread": None, "done": 0, "failed": 0}
_load_lock = threading.Lock()    # held while a background job loads compiled code
_closing = []


def begin_load():
    """Called by a job before it loads a compiled variant in this process: False once the
    interpreter is exiting (no numba work in a daemon thread during shutdown)."""
    _load_lock.acquire()
    if _closing:
        _load_lock.release()
        return False
    return True


def end_load():
    _load_lock.release()


@atexit.register
def _close():
    _closing.append(True)
    with _load_lock:      # let a load in progress finish
        pass


def enabled():
    return os.environ.get("AOTGRAD_BACKGROUND_COMPILE", "1").strip() != "0"


def submit(job):
    """Queue `job()` (compiles and swaps in a program's parallel variants) for the
    background thread."""
    with _cv:
        _state["pending"] += 1
        if _state["thread"] is None or not _state["thread"].is_alive():
            t = threading.Thread(target=_loop, daemon=True, name="aotgrad-tier-up")
            _state["thread"] = t
            t.start()
    _jobs.put(job)


def _loop():
    while True:
        job = _jobs.get()
        while parallel_compile.quiet_for() < QUIET:   # foreground compiles go first
            time.sleep(0.05)
        ok = False
        try:
            ok = job()
        except Exception:      # an upgrade only speeds things up: the serial kernels stay
            log.warning("background compile of parallel kernels failed; the serial kernels "
                        "stay in use", exc_info=True)
            ok = False
        with _cv:
            _state["pending"] -= 1
            _state["done" if ok else "failed"] += 1
            _cv.notify_all()


def wait(timeout=None):
    """Block until the queued upgrades are done (True) or `timeout` seconds pass (False)."""
    with _cv:
        return _cv.wait_for(lambda: _state["pending"] == 0, timeout)


def pending():
    with _cv:
        return _state["pending"]
