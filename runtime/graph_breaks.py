"""Graph breaks: where traced code needs a concrete tensor value (`Tensor.item()`, Python
control flow on a tensor, ...), the op calls `graph_break(what, tensor)`, which raises
`GraphBreak`. Whoever traces decides what a break says and does by registering a handler
for the time of its trace (`on_graph_break`): the tracer names the user's line."""
import os
import threading

from aotgrad.ir.core import user_location


class GraphBreak(Exception):
    """Raised while tracing when the code needs a concrete tensor value."""


class _Handlers(threading.local):
    def __init__(self):
        self.stack = []  # handler(what, tensor), innermost last


_handlers = _Handlers()


def graph_break(what, tensor):
    """Traced code needs a concrete value (`what` says why; `tensor` is the traced tensor,
    or None): the innermost registered handler raises, else a plain GraphBreak. A batched
    value of vmap refuses first: that is vmap's error (eagerly too), not a break."""
    refuse = getattr(getattr(tensor, "_value", None), "refuse_concrete", None)
    if refuse is not None:
        refuse(what)
    if _handlers.stack:
        _handlers.stack[-1](what, tensor)
    raise GraphBreak(what)


class BreakHandler:
    """A registered graph-break handler; `remove()` (or leaving a `with` block) unregisters
    it."""

    def __init__(self, handler):
        self.handler = handler
        _handlers.stack.append(handler)

    def remove(self):
        stack = _handlers.stack
        for i in range(len(stack) - 1, -1, -1):
            if stack[i] is self.handler:
                del stack[i]
                break

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


def on_graph_break(handler):
    """Call `handler(what, tensor)` (which should raise) on every graph break in this thread
    until the returned BreakHandler is removed."""
    return BreakHandler(handler)


def describe_break(what):
    """`model.py:12: Tensor.item()  [`source text`]`: where user code needs a concrete value."""
    file, line, src = user_location()
    where = f"{os.path.basename(file)}:{line}" if file else "<unknown>"
    return f"{where}: {what}" + (f"  [`{src}`]" if src else "")
