"""The state of forward-mode AD: the active dual level and each tensor's tangent at it. A
module of its own (below the engine and the saved tensors, which read tangents) so that
runtime/forward_mode.py, which runs the backward to derive tangents, can sit above them."""
import threading
import weakref

TANGENT = "_fw_tangent"  # key of a tensor's tangent in its __dict__


class _ForwardState(threading.local):
    def __init__(self):
        self.level = None      # the active dual level (an int) or None
        self.duals = []        # weakrefs to tensors that got a tangent at this level
        self.suspended = False  # computing a tangent: the ops it runs get none


state = _ForwardState()


def tangent_of(t):
    """t's tangent at the active level, or None."""
    return t.__dict__.get(TANGENT) if state.level is not None else None


def set_tangent(t, tangent):
    """Give tensor t a tangent at the active level (None: remove it)."""
    if tangent is None:
        t.__dict__.pop(TANGENT, None)
        return
    t.__dict__[TANGENT] = tangent
    state.duals.append(weakref.ref(t))
