"""Forward-mode AD state and the tangent of one prim application (the engine side of
`aotgrad.autograd.forward_ad`).

A tensor's tangent at the active dual level is kept in its `__dict__`. Every prim applied
to tensors of which one has a tangent gives its output the tangent J·t, where J is the
prim's Jacobian. It is derived from the prim's one reverse-mode rule, so there is no second
set of rules: the rule maps an output cotangent u to the input cotangents J^T u, linearly in
u, and written with tensor ops; so with u a zero tensor that requires grad,
J·t = d/du sum_i <(J^T u)_i, t_i>, one more backward through the rule's own graph.

A view's tangent is the same view of its input's tangent (one prim application on the
tangent, which is J·t for a linear prim), as in PyTorch.

Only one dual level at a time (nesting raises).
"""
import numpy as np

from aotgrad.ir.tags import Tag
from aotgrad.runtime.backward import run_backward
from aotgrad.runtime.dual_state import TANGENT, set_tangent, state, tangent_of  # noqa: F401
from aotgrad.runtime.grad_mode import state as _mode
from aotgrad.runtime.tensor import Tensor

def enter_level():
    if state.level is not None:
        raise RuntimeError("Nested forward mode AD is not supported at the moment (dual "
                           "levels cannot be nested: exit the active one before entering another)")
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
    if _is_view(prim, inputs, out, tangents):
        return _view_tangent(prim, params, tangents[0], differentiable)
    prev_suspended, prev_grad = state.suspended, _mode.grad_enabled
    state.suspended, _mode.grad_enabled = True, True
    try:
        # every float input with a tangent "requires grad" so that the rule gives its
        # cotangent; the ones that really do are used as they are (the tangent's graph then
        # reaches them)
        primals = []
        for t, tan in zip(inputs, tangents):
            if differentiable and t.requires_grad:
                primals.append(t)
                continue
            p = Tensor._make(t._value, False)
            # only the cotangents of inputs with a tangent are needed (an input without one,
            # a weight in jvp of a matmul, would cost an outer product for nothing)
            p.requires_grad = t.dtype.is_floating_point and tan is not None
            primals.append(p)
        node = node_cls(prim, rule, params, primals, Tensor._make(out._value, False))
        u = Tensor._make(np.zeros(tuple(out.shape), out.dtype.np), True)  # (eager only)
        cotangents = rule.fn(node, u)
        total = None
        for c, tan in zip(cotangents, tangents):
            if c is None or tan is None:
                continue
            term = (c * tan.to(c.dtype)).sum()
            total = term if total is None else total + term
        if total is None or not total.requires_grad:  # J = 0 (floor, sign, round, ...):
            return _zeros_like(out)                   # a zero tangent, as PyTorch's
        jt, = run_backward([total], [Tensor._make(np.ones((), total.dtype.np))],
                           retain_graph=differentiable, create_graph=differentiable,
                           inputs=[u], allow_unused=True, accumulate=False)
        if jt is None:
            return _zeros_like(out)
        return jt if differentiable and jt.requires_grad else jt.detach()
    finally:
        state.suspended, _mode.grad_enabled = prev_suspended, prev_grad


def _zeros_like(out):
    return Tensor._make(np.zeros(tuple(out.shape), out.dtype.np))


def _is_view(prim, inputs, out, tangents):
    """Whether `out` is (eagerly) a view of its one input, whose tangent has its layout."""
    return Tag.SHARES_MEMORY in prim.tags and len(inputs) == 1 and tangents[0] is not None \
        and type(out._value) is np.ndarray and type(tangents[0]._value) is np.ndarray \
        and tangents[0].dtype is inputs[0].dtype \
        and np.may_share_memory(out._value, inputs[0]._value)


def _view_tangent(prim, params, tangent, differentiable):
    """The tangent of a view is the same view of its input's tangent (as PyTorch's: writing
    one in place writes the other). The prim is linear: applying it to the tangent is J·t."""
    # late: dispatch (which calls prim_tangent) and view_ops lie above this module; a view's
    # tangent is the one place forward mode applies a prim itself
    from aotgrad.runtime.dispatch import apply
    from aotgrad.runtime.view_ops import _view_of
    prev_suspended, prev_grad = state.suspended, _mode.grad_enabled
    state.suspended, _mode.grad_enabled = True, differentiable
    try:
        return _view_of(apply(prim, tangent, **params), tangent)
    finally:
        state.suspended, _mode.grad_enabled = prev_suspended, prev_grad
