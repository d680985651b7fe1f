"""Tiered compilation: a cold kernel runs first on numpy; its compiled code comes later.

The first tier (AOTGRAD_FIRST_TIER):
- `reference` (the default): a kernel whose machine code is not in the disk cache runs its
  nodes with numpy's reference impls (codegen.first_tier) while helper processes compile
  it in the background; it is swapped into the program's driver as soon as it is compiled.
  A cold program's first call then costs its trace, schedule and one numpy run instead of
  tens of Numba compiles. A kernel with parallel loops is compiled once: its loops run in
  parts on threads (codegen.parts), so no second, parallel compile follows. The
  first-tier jobs (Priority.FIRST_TIER) run before any other background compile (a
  symbolic kernel's size variant, Priority.UPGRADE), of whichever program, and a job in
  progress stops taking new kernels when a more urgent one comes. Their helpers run niced,
  in the idle scheduling class, except one for a program whose run is estimated at a few
  milliseconds or more (first_tier_boosted): such a program's job is held back (`defer`)
  until its numpy runs have cost about as much as its compiles (codegen.rent.Rent), and that
  call waits for it. A smaller program waits for its job, started at once, at that point.
- `serial`: every kernel is compiled before the first call (the name is historical: the
  kernels are the same either way).

`AOTGRAD_BACKGROUND_COMPILE=0` compiles every kernel up front (no first tier, and a
symbolic kernel's size variants too).

Work still queued when the process exits is not lost: the units not yet compiled (tracked
from the moment their job is queued) are handed to a detached helper process
(parallel_compile.start_detached) that compiles them into the disk cache, so a second run
of a script starts warm.
`wait(timeout)` blocks until every queued job is done (benchmarks call it after warm-up).
"""
import atexit
import enum
import functools
import logging
import os
import queue
import threading
import time
import weakref

from aotgrad.codegen import parallel_compile

log = logging.getLogger(__name__)

QUIET = 0.5


class Priority(enum.IntEnum):
    """Which background job runs first (lowest first, whatever the order they came in)."""
    FIRST_TIER = 0    # compiles kernels that run on numpy for now
    UPGRADE = 1       # compiles a kernel that runs some other way meanwhile (a symbolic
                      # kernel's size variant)


# Helpers that compile the kernels still running on numpy (codegen.first_tier): one per
# core, in the background (niced, in the idle scheduling class: codegen.compile_worker),
# where they take only the CPU time the training leaves, except FIRST_TIER_BOOSTED of them
# at the caller's priority for a program whose run is estimated at BOOST_MIN_SECONDS or
# more (codegen.cost). Such a program's steps run on every core: its job is held back
# until its rent is due, and the call waits for it then, so the helper at full priority
# takes a core nobody else wants. A small program's helpers only slow its numpy steps at
# that priority (the README's MLP stepped at 3.1 ms against 2.3 niced).
FIRST_TIER_BOOSTED = 1
BOOST_MIN_SECONDS = 0.005


def first_tier_boosted(estimated_seconds):
    """How many first-tier helpers run at the caller's priority for a program whose run is
    estimated at `estimated_seconds` (codegen.cost)."""
    return FIRST_TIER_BOOSTED if estimated_seconds >= BOOST_MIN_SECONDS else 0

_jobs = queue.PriorityQueue()    # (priority, sequence number, job)
_cv = threading.Condition()
_state = {"thread": None, "done": 0, "failed": 0, "seq": 0}
_queued = {p: 0 for p in Priority}   # jobs waiting (not started) by priority
_unfinished = {p: 0 for p in Priority}   # jobs queued or running by priority
_load_lock = threading.Lock()    # held while a background job loads compiled code
_closing = []
_outstanding = {}                # (module, kernel) -> Unit queued or compiling in the background
_deferred = {}                   # key -> (weak method, args, priority) held back (defer)


class FirstTier(enum.Enum):
    """How a kernel without machine code in the cache runs until it is compiled."""
    REFERENCE = "reference"     # numpy's reference impls of its nodes (codegen.first_tier)
    SERIAL = "serial"           # compiled before the first call


def first_tier():
    """The first tier (AOTGRAD_FIRST_TIER; SERIAL inside `compiled_kernels()`)."""
    env = os.environ.get("AOTGRAD_FIRST_TIER", "").strip().lower() or "reference"
    try:
        tier = FirstTier(env)
    except ValueError:
        raise ValueError(f"AOTGRAD_FIRST_TIER must be one of "
                         f"{', '.join(t.value for t in FirstTier)}, got {env!r}") from None
    with _cv:
        return FirstTier.SERIAL if _compiled_only[0] else tier


_compiled_only = [0]     # compiled_kernels() blocks entered and not left


class compiled_kernels:
    """Context manager: programs built inside it compile their kernels before their first
    call (no numpy first tier), and programs still on it are waited for on entry (up to
    `timeout` seconds). For checks of the generated code (testing.compare_with_eager)."""

    def __init__(self, timeout=600):
        self.timeout = timeout

    def __enter__(self):
        with _cv:
            _compiled_only[0] += 1
        wait(self.timeout)
        return self

    def __exit__(self, *exc):
        with _cv:
            _compiled_only[0] -= 1


def track(units, priority=Priority.UPGRADE):
    """Register background units (parallel_compile.Unit) of a job of `priority` until
    `untrack`: those left at exit go to a detached helper, the most urgent first."""
    with _cv:
        for u in units:
            _outstanding[(u.module, u.kernel)] = (priority, u)


def untrack(unit):
    with _cv:
        _outstanding.pop((unit.module, unit.kernel), None)


def begin_load():
    """Called by a job before it loads a compiled variant in this process (or compiles a
    row program natively: codegen.row_native): False once the interpreter is exiting (no
    numba or LLVM work in a daemon thread during shutdown; the exit waits for the one in
    progress)."""
    _load_lock.acquire()
    if _closing:
        _load_lock.release()
        return False
    return True


def end_load():
    _load_lock.release()


def closing():
    """Is the interpreter exiting (background jobs stop starting new work)?"""
    return bool(_closing)


@atexit.register
def _close():
    _closing.append(True)
    with _load_lock:      # let a load in progress finish
        pass
    with _cv:
        # (a temporary cache directory is removed at exit: nothing to keep there)
        left = [u for _, u in sorted(_outstanding.values(), key=lambda pu: (pu[0], pu[1].cost))
                if os.path.exists(u.file)]
        _outstanding.clear()
    if left:
        parallel_compile.start_detached(left, os.path.dirname(left[0].file))


def enabled():
    return os.environ.get("AOTGRAD_BACKGROUND_COMPILE", "1").strip() != "0"


def submit(job, priority=Priority.UPGRADE):
    """Queue `job()` (compiles kernels and swaps them into a program's driver) for the
    background thread, which runs one job at a time, those of the lowest `priority` first.
    A job returns True when it did all its work, False when some failed."""
    with _cv:
        _state["seq"] += 1
        _queued[priority] += 1
        _unfinished[priority] += 1
        seq = _state["seq"]
        if _state["thread"] is None or not _state["thread"].is_alive():
            t = threading.Thread(target=_loop, daemon=True, name="aotgrad-tier-up")
            _state["thread"] = t
            t.start()
    _jobs.put((priority, seq, job))


def defer(method, *args, priority=Priority.UPGRADE):
    """Hold back the job `method(*args)`: it is submitted when the function returned is
    called (once), or by `wait()`, whichever comes first. `method` is a bound method, held
    weakly: the job of an object dropped meanwhile never runs (its units, tracked as a
    queued job's are, still go to the detached helper at exit)."""
    key = object()
    with _cv:
        for k in [k for k, (ref, _, _) in _deferred.items() if ref() is None]:
            del _deferred[k]
        _deferred[key] = (weakref.WeakMethod(method), args, priority)

    def start():
        with _cv:
            held = _deferred.pop(key, None)
        if held is not None:
            _submit_held(*held)
    return start


def _submit_held(ref, args, priority):
    method = ref()
    if method is not None:
        submit(functools.partial(method, *args), priority)


def _start_deferred():
    with _cv:
        held = list(_deferred.values())
        _deferred.clear()
    for h in held:
        _submit_held(*h)


def more_urgent(priority):
    """Is a job of a lower (more urgent) priority than `priority` waiting? A long job stops
    taking new work then, and submits the rest again (after it)."""
    with _cv:
        return any(n for p, n in _queued.items() if p < priority)


def _loop():
    while True:
        priority, _, job = _jobs.get()
        with _cv:
            _queued[priority] -= 1
        # foreground compiles go first (a backward's usually follows its forward's within
        # QUIET); kernels on numpy cost every step meanwhile: theirs only wait while one runs
        quiet = QUIET if priority > Priority.FIRST_TIER else 0.0
        while parallel_compile.quiet_for() <= quiet:
            time.sleep(0.05)
        ok = False
        try:
            ok = job()
        except Exception:      # a job only speeds things up: what runs meanwhile stays
            log.warning("a background compile failed; the kernels running meanwhile stay "
                        "in use", exc_info=True)
            ok = False
        with _cv:
            _unfinished[priority] -= 1
            _state["done" if ok else "failed"] += 1
            _cv.notify_all()


def wait(timeout=None):
    """Block until the queued jobs, and those held back (`defer`), are done (True) or
    `timeout` seconds pass (False)."""
    _start_deferred()
    with _cv:
        return _cv.wait_for(lambda: not any(_unfinished.values()), timeout)


def pending(priority=None):
    """Background jobs queued or running (of `priority` only, if given)."""
    with _cv:
        return sum(_unfinished.values()) if priority is None else _unfinished[priority]
