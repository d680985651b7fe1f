"""Compile a program's kernels on several cores: helper processes fill numba's disk cache.

Numba compiles one function at a time (0.3-1 s per generated kernel), so a cold program
with tens of kernels is bound by one core. `compile_units` shares the kernels between the
calling process and up to `workers()` helper processes (`compile_worker.py`, started as a
plain script: no fork, no re-import of the caller's `__main__`). A helper imports the
generated module from the cache directory and compiles the kernel, which stores its machine
code in numba's cache; the caller later loads it from there. Helpers only warm the cache:
whatever they could not do (none started, one died or hung, the cache is not writable) the
caller compiles itself, so results never depend on them.

    n = compile_units(units, compile_here)   # units: [Unit]; compile_here(unit) compiles
                                             # in this process; n: kernels helpers compiled

Work in the background (`compile_in_helpers`: codegen.tiers) goes to helpers started with
a lower priority (BACKGROUND_NICE), so that the training steps running meanwhile keep the
cores they need. `start_detached` hands units to a helper that outlives this process: what
a process leaves queued at exit is still compiled into the disk cache, and the next
process starts warm.

Helpers stay up for LINGER seconds after a compile (a backward usually follows its forward
within that), then exit; `shutdown()` (also run at exit) stops them at once. A helper also
exits when this process dies (end of its input).

`AOTGRAD_COMPILE_WORKERS=N` caps the helpers (0: compile everything in this process).
"""
import atexit
import json
import logging
import os
import queue
import subprocess
import sys
import threading
import time

from aotgrad.codegen import compile_worker

log = logging.getLogger(__name__)

MIN_UNITS = 3          # fewer kernels than this: starting a helper costs more than it saves
MAX_WORKERS = 8
HELPER_TIMEOUT = 300   # seconds the caller waits for helpers after its own share is done
LINGER = 10.0          # seconds an idle helper waits for the next compile before it exits
BACKGROUND_NICE = 10   # niceness added to helpers that compile in the background

_lock = threading.Lock()
_idle = []             # [(process, (cwd, nice))] helpers waiting for work
_timer = None
_foreground = [0, 0.0]  # compiles in progress in this process, when the last one ended


class Unit:
    """One kernel to compile: its module's file and name, the function name, the signature
    description (see compile_worker.numba_signature) and a cost estimate for ordering."""
    __slots__ = ("file", "module", "kernel", "sig", "cost")

    def __init__(self, file, module, kernel, sig, cost=1.0):
        self.file, self.module, self.kernel, self.sig, self.cost = file, module, kernel, sig, cost


def _cpus():
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def workers():
    """How many helper processes a compile may start (AOTGRAD_COMPILE_WORKERS caps it)."""
    env = os.environ.get("AOTGRAD_COMPILE_WORKERS", "").strip()
    if env:
        try:
            return max(0, int(env))
        except ValueError:
            raise ValueError(
                f"AOTGRAD_COMPILE_WORKERS must be a whole number, got {env!r}") from None
    return max(0, min(MAX_WORKERS, _cpus() - 1))


def background_workers():
    """How many helpers `compile_in_helpers` starts for a long list of units: one per core,
    at a lower priority than the caller's (AOTGRAD_COMPILE_WORKERS caps them)."""
    if os.environ.get("AOTGRAD_COMPILE_WORKERS", "").strip():
        return workers()
    return min(MAX_WORKERS, _cpus())


def _setup_line(nice, detached=False):
    return json.dumps({"sys_path": [x for x in sys.path if isinstance(x, str)],
                       "nice": nice, "detached": detached}) + "\n"


def _start(cwd, nice=0):
    if not sys.executable or getattr(sys, "frozen", False):
        raise OSError("no Python interpreter to run compile helpers with")
    p = subprocess.Popen([sys.executable, compile_worker.__file__], cwd=cwd,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True, encoding="utf-8",
                         bufsize=1)
    try:
        p.stdin.write(_setup_line(nice))
        p.stdin.flush()
    except OSError:
        _stop(p)
        raise
    return p


def _stop(p, grace=2.0):
    """Close the helper's input (it exits at EOF); kill it if it does not; always reap it."""
    try:
        p.stdin.close()
    except OSError:
        pass
    try:
        p.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
    try:
        p.stdout.close()
    except OSError:
        pass


def shutdown():
    """Stop the idle helper processes now (and reap them)."""
    global _timer
    with _lock:
        procs = [p for p, _ in _idle]
        _idle.clear()
        if _timer is not None:
            _timer.cancel()
            _timer = None
    for p in procs:
        _stop(p)


atexit.register(shutdown)


def _take(n, cwd, nice=0):
    """Up to n idle helpers started in `cwd` with niceness `nice`, then new ones; [] where
    none can start."""
    key = (cwd, nice)
    got = []
    with _lock:
        for item in list(_idle):
            p, d = item
            if p.poll() is not None or d != key:
                continue
            if len(got) < n:
                _idle.remove(item)
                got.append(p)
        dead = [item for item in _idle if item[0].poll() is not None]
        for item in dead:
            _idle.remove(item)
    for p, _ in dead:
        _stop(p)
    while len(got) < n:
        try:
            got.append(_start(cwd, nice) if nice else _start(cwd))
        except Exception as e:  # no processes here (limits, sandbox): the caller does it all
            log.debug("could not start a compile helper process (%s: %s); compiling in this "
                      "process", type(e).__name__, e)
            break
    return got


def _give_back(procs, cwd, nice=0):
    global _timer
    if LINGER <= 0:
        for p in procs:
            _stop(p)
        return
    with _lock:
        _idle.extend((p, (cwd, nice)) for p in procs)
        if _timer is not None:
            _timer.cancel()
        _timer = threading.Timer(LINGER, shutdown)
        _timer.daemon = True
        _timer.start()


def _feed(p, todo, done, broken, background=False, on_done=None, stop=None):
    """Thread body: hand this helper one unit at a time until the shared list is empty
    or `stop()` is true (in the background: none while a compile in the foreground runs);
    `on_done(unit)` is called here after each unit the helper compiled."""
    while True:
        while background and _foreground[0] > 0:
            time.sleep(0.05)
        if stop is not None and stop():
            return
        try:
            u = todo.get_nowait()
        except queue.Empty:
            return
        try:
            p.stdin.write(json.dumps({"id": id(u), "file": u.file, "module": u.module,
                                      "kernel": u.kernel, "sig": u.sig}) + "\n")
            p.stdin.flush()
            line = p.stdout.readline()
        except (OSError, ValueError) as e:
            log.warning("compile helper process %d failed (%s: %s); compiling the rest in "
                        "this process", p.pid, type(e).__name__, e)
            broken.add(p)
            return
        if not line:                       # the helper died: the caller compiles the rest
            log.warning("compile helper process %d exited (code %s); compiling the rest in "
                        "this process", p.pid, p.poll())
            broken.add(p)
            return
        try:
            res = json.loads(line)
        except ValueError:
            log.warning("compile helper process %d answered %.200r; compiling the rest in "
                        "this process", p.pid, line)
            broken.add(p)
            return
        if res.get("ok"):
            done.append(u)
            if on_done is not None:
                on_done(u)
        else:   # compile_here compiles it again and raises if the error is real
            log.debug("compile helper failed on %s.%s: %s", u.module, u.kernel,
                      res.get("error"))


def compile_units(units, compile_here, cwd=None, max_workers=None):
    """Compile `units`, sharing them with helper processes where that pays; returns the
    number the helpers compiled (0 if none started). `compile_here(unit)` compiles one unit
    in this process; exceptions from it propagate (after the helpers are stopped)."""
    with foreground():
        return _compile_units(units, compile_here, cwd, max_workers)


class foreground:
    """Context manager marking compile work in this process (background jobs other than the
    first tier's wait for it: codegen.tiers)."""

    def __enter__(self):
        with _lock:
            _foreground[0] += 1

    def __exit__(self, *exc):
        with _lock:
            _foreground[0] -= 1
            _foreground[1] = time.monotonic()


def quiet_for():
    """Seconds since the last compile in this process ended (0 while one runs)."""
    with _lock:
        return 0.0 if _foreground[0] else time.monotonic() - _foreground[1]


def compile_in_helpers(units, cwd, on_done=None, order=None, stop=None, boosted=0):
    """Compile `units` in helper processes only (for work in the background: the caller's
    thread only waits); returns the units that were compiled. One helper per core
    (AOTGRAD_COMPILE_WORKERS caps them): the first `boosted` at the caller's priority, the
    others at a lower one (BACKGROUND_NICE, in the idle scheduling class: compile_worker).
    `on_done(unit)` is called (in a feeding thread) as each one is done; `order` is the sort
    key of the units left, read each time a helper takes its next one (so a key that reads
    measurements made meanwhile reorders the rest; default: the costliest first); `stop()`,
    read at the same time, true: no more units are taken (those left are not compiled).
    With no helpers (none can start, AOTGRAD_COMPILE_WORKERS=0) nothing is done."""
    n = min(background_workers(), len(units))
    fast = _take(min(n, boosted), cwd) if n and boosted else []
    slow = _take(n - len(fast), cwd, BACKGROUND_NICE) if n > len(fast) else []
    procs = fast + slow
    if not procs:
        return []
    todo, done, broken = _Ordered(units, order or (lambda u: -u.cost)), [], set()
    threads = [threading.Thread(target=_feed, args=(p, todo, done, broken, True, on_done,
                                                    stop),
                                daemon=True, name="aotgrad-compile-feed") for p in procs]
    for t in threads:
        t.start()
    deadline = time.monotonic() + HELPER_TIMEOUT
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    hung = any(t.is_alive() for t in threads)
    keep = [p for p in procs if not hung and p not in broken and p.poll() is None]
    for p in procs:
        if p not in keep:
            if hung:
                p.kill()
            _stop(p)
    _give_back([p for p in keep if p in fast], cwd)
    _give_back([p for p in keep if p in slow], cwd, BACKGROUND_NICE)
    return done


class _Ordered:
    """The units left to compile, taken smallest `key` first, the key read at each take
    (what queue.Queue's get_nowait is for the feeding threads)."""

    def __init__(self, units, key):
        self._units, self._key, self._lock = list(units), key, threading.Lock()

    def get_nowait(self):
        with self._lock:
            if not self._units:
                raise queue.Empty
            u = min(self._units, key=self._key)
            self._units.remove(u)
            return u


def start_detached(units, cwd):
    """Hand `units` to a new helper process that outlives this one (its own process group,
    so a Ctrl-C in the terminal does not reach it; in Linux's idle class) and compiles them
    into the disk cache in the order given (the next process may start while it works),
    then exits; returns it, or None where it cannot start. Nothing waits for it: the next
    process that needs the kernels finds them in the cache (or compiles what is not there
    yet itself). It stays in this session: where the kernel groups processes by session
    (Linux's autogroup), a helper in a session of its own got an equal share of the cores
    with the session's next training process, whatever its class, and that process's steps
    ran at half speed until the helper was done."""
    if not units or workers() == 0:
        return None
    if not sys.executable or getattr(sys, "frozen", False):
        return None
    tasks = "".join(json.dumps({"id": i, "file": u.file, "module": u.module,
                                "kernel": u.kernel, "sig": u.sig}) + "\n"
                    for i, u in enumerate(units))
    try:
        p = subprocess.Popen([sys.executable, compile_worker.__file__], cwd=cwd,
                             stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, text=True, encoding="utf-8",
                             process_group=0)
    except OSError as e:
        log.debug("could not start a detached compile helper (%s)", e)
        return None
    # a thread writes the tasks (a long list may not fit the pipe's buffer at once); the
    # helper reads them all before it compiles
    t = threading.Thread(target=_write_all,
                         args=(p, _setup_line(BACKGROUND_NICE, detached=True) + tasks),
                         daemon=True, name="aotgrad-compile-detached")
    t.start()
    t.join(5.0)
    return p


def _write_all(p, text):
    try:
        p.stdin.write(text)
        p.stdin.close()
    except OSError:
        pass


def _compile_units(units, compile_here, cwd, max_workers):
    units = sorted(units, key=lambda u: -u.cost)      # longest first: shorter tail
    n = workers() if max_workers is None else max_workers
    n = min(n, len(units) - 1)
    if len(units) < MIN_UNITS or n <= 0:
        for u in units:
            compile_here(u)
        return 0
    todo = queue.Queue()
    for u in units:
        todo.put(u)
    cwd = cwd or os.getcwd()
    procs, threads, done, broken = [], [], [], set()
    ok = False
    try:
        procs = _take(n, cwd)
        for p in procs:
            t = threading.Thread(target=_feed, args=(p, todo, done, broken), daemon=True,
                                 name="aotgrad-compile-feed")
            t.start()
            threads.append(t)
        while True:
            try:
                u = todo.get_nowait()
            except queue.Empty:
                break
            compile_here(u)
        deadline = time.monotonic() + HELPER_TIMEOUT
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        ok = not any(t.is_alive() for t in threads)
        if not ok:
            log.warning("compile helper processes did not finish within %s s; stopping them",
                        HELPER_TIMEOUT)
    finally:
        if not ok:                       # an error here or a hung helper: stop them all
            for p in procs:
                p.kill()
            for t in threads:
                t.join(5.0)
        keep = [p for p in procs if ok and p not in broken and p.poll() is None]
        for p in procs:
            if p not in keep:
                _stop(p)
        _give_back(keep, cwd)
    return len(done)
