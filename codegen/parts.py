"""A kernel's parallel loops run as parts on threads (codegen.emit_base.ParallelForm.PARTS).

A kernel large enough for several threads is compiled once, as a serial function that
takes `(phase, part, nparts, ws)` before its arguments (emit_base.PartsLayout): each
parallel loop is a phase whose iterations are split into `nparts` contiguous ranges, and
the threads of this module's pool run one range each, at once (the kernels release the
interpreter lock). Numba's parallel backend would compile the same kernel a second time,
about 2.5x as long, and its variant could round a sum otherwise than the serial one; here
there is one machine code, so the values do not depend on the thread count.

    PartsKernel(fn, layout)(*args)   # what the driver calls in place of fn(*args)

The pool has `get_num_threads() - 1` workers (aotgrad.set_num_threads; the caller runs
part 0 itself; by default one thread per core, NUMBA_NUM_THREADS). It serves one call at a
time: a call that finds it busy (another Python thread's program) runs the whole loop as one
part on its own thread, with the same results. A worker waiting for its next part takes
the pieces of the matrix products posted on the pool's board meanwhile (codegen.board:
`run_posted`), without the interpreter lock. After a fork the child starts a new pool on its
first call: compiled programs run in forked workers (numba's OpenMP threads would not have
survived the fork).
"""
import os
import threading

import numba
import numpy as np

from aotgrad.codegen.atomics import fetch_add, load_acquire
from aotgrad.codegen.board import HOLDS, POLLING, new_board, take

# the workspace of a kernel without shared partials (also what a serial wrapper passes its
# kernel in parts, run as one part)
NO_WORKSPACE = np.zeros(0, np.uint8)


class _Threads:
    """How many threads a call's parts run on (aotgrad.set_num_threads)."""
    count = max(1, numba.config.NUMBA_NUM_THREADS)


def set_num_threads(n):
    _Threads.count = n


def get_num_threads():
    return _Threads.count


# Iterations a thread polls for the other side's signal, without the interpreter lock,
# before it sleeps on a lock: a thread asleep took 0.1-0.2 ms to wake on a 2-vCPU VM (a
# small kernel in parts ran at half the speed of numba's spinning OpenMP threads: W2's
# elementwise kernels 410 us against 189 us per step), polling covers the gaps between a
# program's steps. About 0.1 ms (an iteration also looks for a product's piece to take).
SPINS = 25_000
# Iterations a worker that saw its call still polls before it takes the interpreter lock:
# the caller holds the lock meanwhile (its own part's arguments), and a thread that finds
# the lock taken sleeps until it is let go, its core idle, which on a VM takes longer to
# wake than this wait (a few microseconds)
LINGER = 50_000


@numba.njit(nogil=True, cache=True)
def _poll(flag, spins, board, linger):
    """True as soon as flag[0] is nonzero (after `linger` more polls), False after `spins`
    polls that found no work while no one held the board (`hold`): meanwhile this thread
    takes pieces of the products posted on `board` (codegen.board; its POLLING slot counts
    the threads polling it)."""
    fetch_add(board, POLLING, 1)
    left, seen = spins, False
    while True:
        while left > 0:
            if load_acquire(flag, 0) != 0:
                seen = True
                for _ in range(linger):
                    load_acquire(flag, 0)
                break
            if take(board):
                left = spins
            elif load_acquire(board, HOLDS) == 0:
                left -= 1
        fetch_add(board, POLLING, -1)
        # (a hold taken as this thread stopped: `hold` counts the holds, then the polling
        # threads, this thread the other way round, so one of the two sees the other's)
        if seen or load_acquire(board, HOLDS) == 0:
            return seen
        fetch_add(board, POLLING, 1)
        left = spins


class _Signal:
    """A lock to sleep on, with a flag polled first (_poll, taking pieces of the products on
    `board` meanwhile): `set` by one thread, `wait`ed for by one other."""

    def __init__(self, board):
        self.lock, self.flag, self.board = threading.Lock(), np.zeros(1, np.int64), board
        self.lock.acquire()

    def set(self):
        self.flag[0] = 1
        self.lock.release()

    def wait(self):
        _poll(self.flag, SPINS, self.board, LINGER)
        self.lock.acquire()
        self.flag[0] = 0


def _empty_call():
    return 0


class _Worker:
    """A thread that runs one part at a time: `start` hands it a call, `join` waits for
    its return value (an exception it raised is raised there). While it waits for a call it
    takes pieces of the products posted on the pool's board; `wake` starts one that sleeps
    polling it again (an empty call, joined before the next)."""

    def __init__(self, board):
        self._go, self._done = _Signal(board), _Signal(new_board())
        self._call, self._result = None, None
        self._woken = False
        threading.Thread(target=self._loop, daemon=True, name="aotgrad-parts").start()

    def _loop(self):
        while True:
            self._go.wait()
            fn, args = self._call
            try:
                self._result = fn(*args)
            except BaseException as e:     # handed to the caller, which raises it
                self._result = e
            self._call = None
            self._done.set()

    def wake(self):
        """Start polling the board again if asleep: an empty call, joined before the next
        one (none while the last is still on its way)."""
        if self._woken and not self._done.flag[0]:
            return
        self.start(_empty_call, ())
        self._woken = True

    def start(self, fn, args):
        if self._woken:
            self._woken = False
            self.join()
        self._call = (fn, args)
        self._go.set()

    def join(self):
        self._done.wait()
        r, self._result = self._result, None
        if isinstance(r, BaseException):
            raise r
        return r


@numba.njit(nogil=True, cache=True)
def _add_hold(board, n):
    fetch_add(board, HOLDS, n)


class _Pool:
    def __init__(self):
        self.workers = []
        self.busy = threading.Lock()
        self.board = new_board()     # products shared without the interpreter lock

    def helpers(self, n):
        """The first n workers (started as needed)."""
        if n > 0 and not self.workers:
            _add_hold(self.board, 0)    # (compiled or loaded now, not in a later step)
        while len(self.workers) < n:
            self.workers.append(_Worker(self.board))
        return self.workers[:n]

    def wake(self, n):
        """Start the first n workers (as needed) and wake those asleep, unless all n poll
        the board already; the caller holds `busy`."""
        helpers = self.helpers(n)
        if self.board[POLLING] < n:
            for w in helpers:
                w.wake()

    def run(self, fn, phase, ws, args):
        """Phase `phase` of kernel `fn` in as many parts as there are threads; the OR of
        their return values (a nonzero one: an index check failed)."""
        n = _Threads.count
        if n < 2 or not self.busy.acquire(blocking=False):
            return fn(phase, 0, 1, ws, *args)
        try:
            helpers = self.helpers(n - 1)
            for p, w in enumerate(helpers, 1):
                w.start(fn, (phase, p, n, ws) + args)
            err, failed = 0, None
            try:
                err = fn(phase, 0, n, ws, *args)
            except BaseException as e:
                failed = e
            for w in helpers:           # every started part ends before this returns
                try:
                    err |= w.join()
                except BaseException as e:
                    failed = failed or e
            if failed is not None:
                raise failed
            return err
        finally:
            self.busy.release()


_pool = [_Pool()]


def _new_pool_in_child():
    _pool[0] = _Pool()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_pool_in_child)


def run_posted(post, args, serial):
    """`post(board, *args)`: a product posted on the pool's board, whose pieces the
    workers take while they poll for parts (codegen.board); a worker asleep is woken
    first. `serial(*args)` where there is one thread, or the pool is busy (another Python
    thread's program)."""
    pool, n = _pool[0], _Threads.count
    if n < 2 or not pool.busy.acquire(blocking=False):
        return serial(*args)
    try:
        pool.wake(n - 1)
        return post(pool.board, *args)
    finally:
        pool.busy.release()


def hold():
    """Keep the pool's workers polling its board (a worker asleep is woken) until `let_go`:
    for a stretch of work on this thread alone that a product follows (a first-tier kernel
    on numpy), which otherwise finds them asleep and starts without them (a sleeping thread
    is slow to wake, on a VM above all, and a product is cut into one piece per thread). A
    polling worker keeps its core busy: hold only while nothing else waits for that core
    (a compile). Returns the board held, or None where there are no workers: pass it to
    `let_go`."""
    pool, n = _pool[0], _Threads.count
    if n < 2:
        return None
    _add_hold(pool.board, 1)
    if pool.board[POLLING] < n - 1 and pool.busy.acquire(blocking=False):
        try:
            pool.wake(n - 1)
        finally:
            pool.busy.release()
    return pool.board


def let_go(board):
    """End a `hold` (`board`: what it returned)."""
    if board is not None:
        _add_hold(board, -1)


def run_parts(fn, args):
    """Run `fn(1, part, nparts, NO_WORKSPACE, *args)` once per thread of the pool (the
    calling convention of a parts kernel's loop); the OR of the return values."""
    return _pool[0].run(fn, 1, NO_WORKSPACE, args)


class PartsKernel:
    """The callable the driver runs for a kernel in ParallelForm.PARTS: the same arguments
    as the kernel's KernelSpec lists, the same return value (nonzero: an index check
    failed)."""
    __slots__ = ("fn", "layout")

    def __init__(self, fn, layout):
        self.fn, self.layout = fn, layout

    def __call__(self, *args):
        fn, layout, pool = self.fn, self.layout, _pool[0]
        ws = np.zeros(fn(0, 0, 1, NO_WORKSPACE, *args), np.uint8) if layout.shared \
            else NO_WORKSPACE
        err = 0
        for phase in range(1, layout.loops + 1):
            err |= pool.run(fn, phase, ws, args)
        if layout.final:
            err |= fn(layout.loops + 1, 0, 1, ws, *args)
        return err

    def __repr__(self):
        return f"PartsKernel({getattr(self.fn, '__name__', self.fn)!r}, {self.layout})"
