"""The garbage collections of a trace, over the objects made while it runs.

A trace asks which tensors it made are still alive once its own references are gone: those
the function stored somewhere (escapes), and real tensors it wrote in place and kept. Cycles
among the dead ones (a tensor, its autograd node, the tensors the node saved) need a
collection to be freed, and a full collection walks the whole heap: every loaded module, the
compiler's and Numba's state, a test runner's. While a trace runs, the heap from before it is
frozen (`gc.freeze`), so its collections walk only what the trace made.

An object from before the trace that became cyclic garbage during it is not freed by that
walk. Whatever it still references looks alive: `collect_all` frees it too, for the answers
where that matters (a tensor that looks stored outside would become an extra output, or a
graph break for a value of the backward).
"""
import gc


class TraceHeap:
    """`with TraceHeap() as heap:` freezes the objects alive now and unfreezes them on exit.
    A freeze already in place (a server's, made before it forks) is left alone: the heap then
    collects as `gc.collect()` does, which never walks frozen objects."""

    def __enter__(self):
        self.owns_freeze = gc.get_freeze_count() == 0
        if self.owns_freeze:
            gc.freeze()
        return self

    def __exit__(self, *exc):
        if self.owns_freeze:
            gc.unfreeze()

    def collect(self):
        """Free the garbage cycles among the objects made since the trace began."""
        gc.collect()

    def collect_all(self):
        """Free every garbage cycle, in the objects from before the trace too."""
        if self.owns_freeze:
            gc.unfreeze()
            gc.collect()
            gc.freeze()
        else:
            gc.collect()
