"""`aotgrad.futures`: torch.futures' Future, the result of an asynchronous operation.

A Future made by `Work.get_future()` (aotgrad.distributed) completes when its collective
does: `wait()` drives it (MPI moves messages on only inside MPI calls, so there is no
background thread to complete it), `done()` asks without blocking. A Future made with
`Future()` completes with `set_result` / `set_exception`. `then(callback)` returns the
Future of `callback(this_future)`, run once this one has completed.
"""
import threading

__all__ = ["Future", "collect_all", "wait_all"]


class Future:
    """torch.futures.Future: `wait()`, `value()`, `done()`, `then(cb)`,
    `add_done_callback(cb)`, `set_result(v)`, `set_exception(e)`."""

    def __init__(self, *, devices=None):
        self._done = False
        self._value = None
        self._error = None
        self._callbacks = []          # add_done_callback's, run once at completion
        self._drive = None            # completes the future (a wait on its communication)
        self._poll = None             # True once the communication has completed
        self._lock = threading.RLock()

    @classmethod
    def _driven(cls, drive, poll):
        """A future that `drive()` completes (returns the value) and `poll()` says is ready."""
        f = cls()
        f._drive, f._poll = drive, poll
        return f

    def done(self):
        """Whether the future has a value or an error (never blocks)."""
        if not self._done and self._poll is not None and self._poll():
            self._run_drive()
        return self._done

    def _run_drive(self):
        with self._lock:
            if self._done:
                return
            drive, self._drive, self._poll = self._drive, None, None
            try:
                value = drive()
            except Exception as e:   # the future holds the error; wait() raises it
                self.set_exception(e)
            else:
                self.set_result(value)

    def wait(self):
        """Block until the future completes; its value, or raise its error."""
        if not self._done:
            if self._drive is None:
                raise RuntimeError("Future.wait(): this future is completed by set_result, "
                                   "which nothing has called (there is no other thread here "
                                   "to call it)")
            self._run_drive()
        return self.value()

    def value(self):
        """The value of a completed future (raises its error)."""
        if not self._done:
            raise RuntimeError("Future.value(): the future has not completed yet")
        if self._error is not None:
            raise self._error
        return self._value

    def set_result(self, result):
        with self._lock:
            if self._done:
                raise RuntimeError("Future.set_result(): the future is already completed")
            self._value, self._done = result, True
        self._fire()

    def set_exception(self, result):
        if not isinstance(result, BaseException):
            raise TypeError(f"Future.set_exception(): expected an exception, got "
                            f"{type(result).__name__}")
        with self._lock:
            if self._done:
                raise RuntimeError("Future.set_exception(): the future is already completed")
            self._error, self._done = result, True
        self._fire()

    def _fire(self):
        callbacks, self._callbacks = self._callbacks, []
        for cb in callbacks:
            cb(self)

    def add_done_callback(self, callback):
        """Run callback(self) when the future completes (now, if it has)."""
        if self._done:
            callback(self)
        else:
            self._callbacks.append(callback)

    def then(self, callback):
        """The future of callback(self), run once this future has completed."""
        parent = self

        def drive():
            parent.wait() if not parent._done else None
            return callback(parent)

        return Future._driven(drive, parent.done)

    def __repr__(self):
        return f"Future(done={self._done})"


def collect_all(futures):
    """A future whose value is the list of `futures`, once all of them have completed."""
    futures = list(futures)

    def drive():
        for f in futures:
            if not f.done():
                f._run_drive() if f._drive is not None else f.wait()
        return futures

    return Future._driven(drive, lambda: all(f.done() for f in futures))


def wait_all(futures):
    """Wait for every future; the list of their values (the first error is raised)."""
    return [f.wait() for f in futures]
