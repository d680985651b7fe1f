"""Profiler hooks used by the op layer, the engine and the executor. Cheap when no profiler
is active (`active()` is a list truth test). The user-facing profiler is autograd.profiler.

Event kinds: "op" (user-level ops, named as PyTorch's profiler names them: `aten::mul`;
custom Functions by their class name), "prim" (prim binds), "backward" (engine nodes),
"user" (record_function ranges), "kernel" (compiled kernels).

The compiled executor reports a kernel either with `record(name, kind="kernel")` around the
call, or, when it timed the call itself, with `add_event(name, "kernel", start_ns, end_ns)`;
both only after checking `if profiling._profilers:` so they cost nothing otherwise.
"""
import contextlib
import time

_profilers = []


def active():
    return _profilers


def op_event_name(op_name):
    """The event name of a user-level op: PyTorch's operator name (`aten::linalg_inv`)."""
    return "aten::" + op_name.replace(".", "_")


@contextlib.contextmanager
def record(name, kind="op", shapes=None):
    """Time the enclosed block as one event named `name` in every active profiler
    (`shapes`: the input shapes it reports where shapes are recorded)."""
    start = time.perf_counter_ns()
    for p in _profilers:
        p._push(name, kind, start, shapes)
    try:
        yield
    finally:
        end = time.perf_counter_ns()
        for p in _profilers:
            p._pop(name, kind, end)


def add_event(name, kind, start_ns, end_ns, **details):
    """Report an already timed event (perf_counter_ns clock), e.g. one compiled kernel;
    `details` (input_shapes, fused_nodes, bytes, flops, detail) go onto the event."""
    for p in _profilers:
        p._add(name, kind, start_ns, end_ns, details)
