"""Forward-mode AD of a custom `autograd.Function`: its `jvp` staticmethod maps the inputs'
tangents to the outputs' tangents, and what it returns is checked as PyTorch checks it.

- `jvp(ctx, *tangents)` gets one argument per forward argument: the tangent of a tensor that
  has one, zeros for a floating tensor without one, None for a non-floating tensor or a
  non-tensor argument.
- It returns one tangent per output (or per tensor output); None where an output gets none. A
  non-differentiable output (marked with `ctx.mark_non_differentiable`, or not floating) must
  get None.
- An input modified in place (`ctx.mark_dirty`) that had a tangent: the jvp must modify that
  tangent in place and return it as is.
- An output that is a view of an input (or an input returned as is) whose tangent is given:
  the jvp must return a view of that tangent (of its base, when the input is itself a view).
"""
from aotgrad.runtime import forward_mode
from aotgrad.runtime.grad_mode import no_grad
from aotgrad.runtime.tensor import Tensor

NOT_DIFFERENTIABLE = (
    "Function's jvp returned a gradient at position {i}, but the corresponding forward output "
    "is not a differentiable Tensor. You should return None at that position instead.")
INPLACE_NOT_MODIFIED = (
    "An inplace custom Function is not modifying the forward mode gradients inplace. If the "
    "forward is modifying an input inplace, then the jvp function must modify the "
    "corresponding gradient inplace.")
INPLACE_NOT_RETURNED = (
    "An inplace custom Function is not returning the forward mode gradients as-is. If the "
    "forward is modifying an input inplace, then the jvp function must modify the gradient "
    "inplace and return it as-is.")
VIEW_NOT_A_VIEW = (
    "A custom Function's forward is returning a view (or an input as-is) but the jvp is not "
    "returning a view.")
VIEW_OF_OTHER_BASE = (
    "A custom Function is returning a view but the jvp is not returning a view of the same "
    "base as the given grad input.")
VIEW_OF_OTHER = (
    "A custom Function is returning a view but the jvp is not returning a view of the given "
    "grad input.")


def _root(t):
    return t if t._base is None else t._base


def jvp_inputs(args, tangents):
    """The arguments the jvp gets (see the module docstring)."""
    from aotgrad.runtime.factories import zeros_like
    out = []
    for a, t in zip(args, tangents):
        if not isinstance(a, Tensor) or t is not None:
            out.append(t if isinstance(a, Tensor) else None)
        else:
            out.append(zeros_like(a) if a.dtype.is_floating_point else None)
    return out


def _input_viewed_by(raw, args):
    """The position of the argument whose memory output `raw` views (or that `raw` is),
    or None."""
    for k, a in enumerate(args):
        if raw is a:
            return k
    if raw._base is None or not raw._is_view():
        return None
    for k, a in enumerate(args):
        if isinstance(a, Tensor) and _root(a) is raw._base:
            return k
    return None


def _check_view_tangent(t, inp_tangent):
    if t._base is None:
        raise RuntimeError(VIEW_NOT_A_VIEW)
    if inp_tangent._base is not None:  # a view itself: the jvp's must share its base
        if t._base is not inp_tangent._base:
            raise RuntimeError(VIEW_OF_OTHER_BASE)
    elif t._base is not inp_tangent:
        raise RuntimeError(VIEW_OF_OTHER)


def set_output_tangents(cls, ctx, args, tangents, raw_outputs, outputs):
    """Run `cls.jvp` on the tangents of `args` and give `outputs` (what apply returns for the
    forward's `raw_outputs`) their tangents, after PyTorch's checks."""
    grads_in = jvp_inputs(args, tangents)
    versions = [None if g is None else g._version_counter.v for g in grads_in]
    ctx._in_jvp = True
    prev = forward_mode.state.suspended
    forward_mode.state.suspended = True  # the jvp's own ops carry no tangents
    try:
        with no_grad():
            out_tangents = cls.jvp(ctx, *grads_in)
    finally:
        forward_mode.state.suspended = prev
        ctx._in_jvp = False
    if not isinstance(out_tangents, tuple):
        out_tangents = (out_tangents,)
    positions = list(range(len(outputs)))
    if len(out_tangents) != len(outputs):  # one per tensor output is accepted too
        positions = [i for i, o in enumerate(outputs) if isinstance(o, Tensor)]
        if len(out_tangents) != len(positions):
            raise RuntimeError(f"Function's jvp returned an invalid number of forward "
                               f"gradients (expected {len(outputs)} but got "
                               f"{len(out_tangents)}) ({cls.__name__})")
    non_diff = {id(t) for t in ctx._non_differentiable}
    dirty = {id(t) for t in ctx._dirty}
    for i, t in zip(positions, out_tangents):
        raw, out = raw_outputs[i], outputs[i]
        if not isinstance(raw, Tensor):
            continue
        if id(raw) in non_diff or not raw.dtype.is_floating_point:
            if t is not None:
                raise RuntimeError(NOT_DIFFERENTIABLE.format(i=i))
            continue
        if t is None:
            continue
        k = _input_viewed_by(raw, args)
        if id(raw) in dirty:
            k = next(j for j, a in enumerate(args) if a is raw)
            if tangents[k] is not None:
                if t._version_counter.v == versions[k]:
                    raise RuntimeError(INPLACE_NOT_MODIFIED)
                if t is not grads_in[k]:
                    raise RuntimeError(INPLACE_NOT_RETURNED)
        elif k is not None and tangents[k] is not None:
            _check_view_tangent(t, grads_in[k])
        forward_mode.set_tangent(out, t)
