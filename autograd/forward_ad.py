"""`aotgrad.autograd.forward_ad`, as `torch.autograd.forward_ad`: forward-mode AD with dual
tensors.

>>> import aotgrad
>>> import aotgrad.autograd.forward_ad as fwAD
>>> primal, tangent = aotgrad.tensor([0.0, 1.0]), aotgrad.tensor([1.0, 1.0])
>>> with fwAD.dual_level():
...     x = fwAD.make_dual(primal, tangent)
...     y = x.sin() * 2
...     jvp = fwAD.unpack_dual(y).tangent      # 2 * cos(primal) * tangent
>>> jvp
tensor([2.0000, 1.0806])

Every op propagates tangents (J·t), derived from the reverse-mode rule of each prim
(runtime/forward_mode.py), so every differentiable op supports it, and under grad mode a
tangent is itself differentiable (reverse-over-forward). A custom `autograd.Function` given a
dual tensor uses its `jvp` staticmethod (and raises without one), which reads what
`ctx.save_for_forward` saved as `ctx.saved_tensors`, as in PyTorch.

A view's tangent is that view of its input's tangent (writing one in place writes the other),
as in PyTorch.

Limits: one dual level at a time (nesting raises); a compiled function called inside a dual
level runs eagerly; an in-place op gives the tensor it writes a new tangent (and writes it
into its base's tangent at the view's elements) instead of writing the old tangent in place,
so the tangents of other views of that base keep the values they had.
"""
import collections
import contextlib

from aotgrad.runtime import forward_mode
from aotgrad.runtime.tensor import Tensor

__all__ = ["UnpackedDualTensor", "enter_dual_level", "exit_dual_level", "make_dual",
           "unpack_dual", "dual_level"]


class UnpackedDualTensor(collections.namedtuple("UnpackedDualTensor", ["primal", "tangent"])):
    """What unpack_dual returns: the primal (a view of the dual tensor, without tangent) and
    the tangent (None if it has none)."""


def enter_dual_level():
    """Start a dual level (returns its index); tangents live until it is exited."""
    return forward_mode.enter_level()


def exit_dual_level(*, level=None):
    """End the dual level: every tensor's tangent at it is dropped."""
    forward_mode.exit_level(level)


@contextlib.contextmanager
def _suspended():
    prev, forward_mode.state.suspended = forward_mode.state.suspended, True
    try:
        yield
    finally:
        forward_mode.state.suspended = prev


def make_dual(tensor, tangent, *, level=None):
    """A view of `tensor` whose tangent is `tangent` (same shape), at the active dual level."""
    if forward_mode.state.level is None:
        raise RuntimeError("To create a dual Tensor, you must be in a dual level: use "
                           "aotgrad.autograd.forward_ad.dual_level() or enter_dual_level()")
    if not isinstance(tensor, Tensor) or not isinstance(tangent, Tensor):
        raise TypeError("make_dual expects a Tensor primal and a Tensor tangent")
    if not tensor.dtype.is_floating_point:
        raise ValueError(f"Expected primal to be floating point or complex, but got: "
                         f"{tensor.dtype}")
    if not tangent.dtype.is_floating_point:
        raise ValueError(f"Expected tangent to be floating point or complex, but got: "
                         f"{tangent.dtype}")
    if tuple(tangent.shape) != tuple(tensor.shape):
        raise RuntimeError(f"Trying to set a forward gradient that has a different size than "
                           f"that of the original Tensor, this is not supported. Tensor is of "
                           f"size {list(tensor.shape)} while the given forward gradient is of "
                           f"size {list(tangent.shape)}.")
    level = forward_mode.state.level
    if forward_mode.tangent_of(tensor) is not None:
        raise RuntimeError(f"Making a dual Tensor based on a Tensor that already has a forward "
                           f"gradient at the same level {level} is not supported.")
    if forward_mode.tangent_of(tangent) is not None:
        raise RuntimeError(f"Setting a forward grad that itself has a forward gradient at the "
                           f"same level {level} is not supported.")
    with _suspended():
        dual = tensor.view_as(tensor)
    forward_mode.set_tangent(dual, tangent)
    return dual


def unpack_dual(tensor, *, level=None):
    """(primal, tangent) of a dual tensor; tangent is None for a tensor without one."""
    if not isinstance(tensor, Tensor):
        return UnpackedDualTensor(tensor, None)
    tangent = forward_mode.tangent_of(tensor)
    if tangent is None:
        return UnpackedDualTensor(tensor, None)
    with _suspended():
        primal = tensor.view_as(tensor)
    return UnpackedDualTensor(primal, tangent)


class dual_level:
    """Context manager of a dual level: `with dual_level(): ...`."""

    def __enter__(self):
        return enter_dual_level()

    def __exit__(self, *exc):
        exit_dual_level()


def __getattr__(name):
    # `forward_ad._current_level`: the active dual level, -1 outside one (PyTorch keeps it
    # as a module global; here it is read from the engine's forward-mode state)
    if name == "_current_level":
        level = forward_mode.state.level
        return -1 if level is None else level
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
