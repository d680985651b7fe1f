"""Reentrant backward on a fresh stack: a backward started from inside a node's backward (a
custom Function whose backward calls `.backward()` or `autograd.grad`) nests in the running
one. Each level adds a handful of Python frames, so a chain of a few hundred levels would
exceed Python's recursion limit. As PyTorch's engine does, past a fixed depth of nested
passes in one thread the nested pass runs on a new thread (with its own stack) that takes
the caller's thread-local autograd state, while the caller waits for it."""
import contextvars
import threading

from aotgrad.runtime import dual_state, graph_breaks, grad_mode, saved_tensors

# nested backward passes one thread runs before the next one moves to a new thread (each
# level costs about 7 Python frames: 32 levels stay far below the default limit of 1000)
MAX_REENTRANT_DEPTH = 32

# the thread-local state a backward pass reads, handed to the worker as it is in the
# caller (grad/inference/anomaly mode, saved-tensor hooks, the forward-AD level, the tracer's
# graph-break handlers); the worker's list of running passes starts empty: its depth
_INHERITED = (grad_mode.state, saved_tensors.saved_hooks, dual_state.state,
              graph_breaks._handlers)


def run_on_fresh_stack(fn, *args, **kwargs):
    """fn(*args, **kwargs) on a new thread that inherits this thread's autograd state (and
    context variables); returns its result or raises its exception here."""
    states = [dict(s.__dict__) for s in _INHERITED]  # the same lists: the caller waits
    context = contextvars.copy_context()
    outcome = {}

    def work():
        for s, d in zip(_INHERITED, states):
            s.__dict__.update(d)
        try:
            outcome["result"] = context.run(fn, *args, **kwargs)
        except BaseException as e:  # handed to the caller, which re-raises it
            outcome["error"] = e

    worker = threading.Thread(target=work, name="aotgrad-reentrant-backward")
    worker.start()
    worker.join()
    if "error" in outcome:
        raise outcome.pop("error")
    return outcome.get("result")
