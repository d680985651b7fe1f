"""The first tier is rented, not owned: a program whose numpy runs have cost more (each run
counted at its kernel's fastest, so that a run slowed by other work on the cores counts as
much as an unslowed one), beyond what its compiled kernels are estimated to take
(codegen.cost), than compiling its kernels still on numpy would take with every core, stops
renting and waits for those compiles. Its calls on numpy then never cost more than about
twice the better of the two choices, whether the training stops after a few steps or runs
for hours (the ski-rental rule), as long as the steps and the compiles do not compete for
the cores. A small program's steps run on one thread, and its compiles beside them on idle
cores. A program of a few milliseconds or more runs its steps on every core, so a compile
beside them slows them as much as it advances: its compiles are held back until the rent is
due, and run then while that call waits (codegen.tiers.defer)."""
import collections
import logging
import threading
import time

log = logging.getLogger(__name__)

WAIT_LIMIT = 300.0          # seconds a program waits for its first-tier compiles, at most


class Rent:
    """The account of one program's first tier: every run of one of its reference kernels
    is charged what the kernel's fastest run so far took beyond its compiled kernel's
    estimate (ReferenceKernel.best_seconds); once the charges reach
    the estimated seconds the kernels still on numpy take to compile on `workers` helpers
    (`compiled(name)` takes a kernel off as it is swapped in), the charging call waits for
    the compiles, once, until the program's first-tier job ends (`started()`,
    `finished()`): the ski-rental rule. Never in the program's first call, which stays fast
    (a kernel charged more often than it runs in one call, `runs_per_call`: its name ->
    count, 1 where absent, marks the second). A job held back (`start`: codegen.tiers.defer's
    start) is started by that call; one queued behind another is not waited for (the
    estimate holds for a job that runs now). `program`: its name (for the log); `charged`,
    `waited`: seconds charged and waited so far."""

    def __init__(self, program, compile_seconds, workers, runs_per_call=None, start=None):
        self.program = program
        self._start = start     # a held-back job's start (codegen.tiers.defer), or None
        self._runs_per_call = dict(runs_per_call or {})
        self._runs = collections.Counter()      # kernel name -> runs charged
        self._started = False
        self._left = dict(compile_seconds)      # kernel name -> its estimated compile seconds
        self._workers = max(1, workers)
        self._due = self._estimate()            # (charged on every first-tier call)
        self._lock = threading.Lock()
        self._finished = threading.Event()
        self._waited_once = False
        self.charged = 0.0
        self.waited = 0.0

    def compiled(self, name):
        with self._lock:
            self._left.pop(name, None)
            self._due = self._estimate()

    def _estimate(self):
        return sum(self._left.values()) / min(self._workers, max(1, len(self._left)))

    def started(self):
        self._started = True

    def finished(self):
        self._finished.set()

    def due(self):
        """Seconds the kernels still on numpy are estimated to take to compile now."""
        return self._due

    def charge(self, seconds, kernel):
        """Charge a run of reference kernel `kernel` (its name) `seconds` beyond its
        compiled estimate (a negative figure is no credit)."""
        self.charged += max(0.0, seconds)
        self._runs[kernel] += 1
        again = self._runs[kernel] > self._runs_per_call.get(kernel, 1)
        if self._waited_once or not again or self._finished.is_set() \
                or self.charged < self.due():
            return
        if self._start is not None:         # a job held back: it starts now, and is waited for
            start, self._start = self._start, None
            start()
        elif not self._started:
            return
        self._waited_once = True
        log.info("%s: its kernels ran on numpy for %.2f s more than compiled ones would take: "
                 "waiting for their compiles (%.2f s estimated)", self.program, self.charged,
                 self.due())
        t0 = time.perf_counter()
        self._finished.wait(WAIT_LIMIT)
        self.waited = time.perf_counter() - t0
        log.info("%s: waited %.2f s for its compiles", self.program, self.waited)
