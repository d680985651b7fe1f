"""What runs just before a tensor is written in place: every in-place write (the write-back of
an in-place op, `x[i] = v`, an in-place view op, `resize_`, a compiled program's write-back
of a mutated argument, a gradient accumulated into an existing `.grad`) calls
`before_write(t)` while t still holds its old value and version.

One watcher per thread may be installed: `autograd.graph.allow_mutation_on_saved_tensors`
uses it to copy a tensor saved for backward before it is modified.
"""
import threading


class _WriteHooks(threading.local):
    def __init__(self):
        self.watcher = None  # callable(tensor) run before each in-place write, or None


state = _WriteHooks()


def before_write(t):
    """Tell the installed watcher (if any) that tensor t is about to be written in place."""
    watcher = state.watcher
    if watcher is not None:
        watcher(t)
