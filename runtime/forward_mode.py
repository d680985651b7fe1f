"""Forward-mode AD state and the tangent of one prim application (the engine side of
`aotgrad.autograd.forward_ad`).

A tensor's tangent at the active dual level is kept in its `__dict__`. Every prim applied
to tensors of which one has a tangent gives its output the tangent J·t, where J is the
prim's Jacobian. It is derived from the prim's one reverse-mode rule, so there is no second
set of rules: the rule maps an output cotangent u to the input cotangents J^T u, linearly in
u, and written with tensor ops; so with u a zero tensor that requires grad,
J·t = d/du sum_i <(J^T u)_i, t_i>, one more backward through the rule's own graph.

Only one dual level at a time (nesting raises).
"""
import threading
import weakref

import numpy as np

from aotgrad.runtime.backward import run_backward
from aotgrad.runtime.grad_mode import state as _mode
from aotgrad.runtime.tensor import Tensor

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


def enter_level():
    if state.level is not None:
        raise RuntimeError("aotgrad.autograd.forward_ad: nested dual levels are not supported")
    state.level = 0
    return 0


def exit_level(level=None):
    if state.level is None or (level is not None and level != state.level):
        raise RuntimeError(f"Trying to exit a forward AD level that was not the last one that "
                           f"was created (got {level}, the active level is {state.level})")
    for ref in state.duals:
        t = ref()
        if t is not None:
            t.__dict__.pop(TANGENT, None)
    state.duals = []
    state.level = None


def prim_tangent(rule, node_cls, prim, params, inputs, out, tangents):
    """J·t for one application of `prim` (inputs -> out), by a backward through its rule.
    Under grad mode the tangent is differentiable (with respect to the primals that require
    grad and to the tangents), so reverse-over-forward works."""
    differentiable = _mode.grad_enabled and (
        any(t.requires_grad for t in inputs) or
        any(t is not None and t.requires_grad for t in tangents))
    prev_suspended, prev_grad = state.suspended, _mode.grad_enabled
    state.suspended, _mode.grad_enabled = True, True
    try:
        # every float input "requires grad" so that the rule gives every cotangent; the ones
        # that really do are used as they are (the tangent's graph then reaches them)
        primals = []
        for t in inputs:
            if differentiable and t.requires_grad:
                primals.append(t)
                continue
            p = Tensor._make(t._value, False)
            p.requires_grad = t.dtype.is_floating_point
            primals.append(p)
        node = node_cls(prim, rule, params, primals, Tensor._make(out._value, False))
        u = Tensor._make(np.zeros(out._value.shape, out._value.dtype), True)  # (eager only)
        cotangents = rule.fn(node, u)
        total = None
        for c, tan in zip(cotangents, tangents):
            if c is None or tan is None:
                continue
            term = (c * tan.to(c.dtype)).sum()
            total = term if total is None else total + term
        if total is None or not total.requires_grad:
            return None
        jt, = run_backward([total], [Tensor._make(np.ones((), total._value.dtype))],
                           retain_graph=differentiable, create_graph=differentiable,
                           inputs=[u], allow_unused=True, accumulate=False)
        if jt is None:
            return None
        return jt if differentiable and jt.requires_grad else jt.detach()
    finally:
        state.suspended, _mode.grad_enabled = prev_suspended, prev_grad
