"""Grad-mode switches, as in `torch.autograd.grad_mode` (defined in runtime/grad_mode.py).

>>> x = aotgrad.ones(3, requires_grad=True)
>>> with aotgrad.autograd.grad_mode.no_grad():
...     y = x * 2
>>> y.requires_grad
False
"""
from aotgrad.runtime.grad_mode import (enable_grad, inference_mode, is_grad_enabled,
                                       is_inference_mode_enabled, no_grad, set_grad_enabled)

__all__ = ["no_grad", "enable_grad", "set_grad_enabled", "inference_mode", "is_grad_enabled",
           "is_inference_mode_enabled", "set_multithreading_enabled",
           "is_multithreading_enabled"]


class set_multithreading_enabled:
    """Whether the backward pass may run on worker threads (a function or a context manager,
    as in PyTorch). aotgrad's engine always runs the backward on the calling thread, so the
    setting is recorded and restored but changes nothing."""
    _enabled = True

    def __init__(self, mode):
        self.prev = set_multithreading_enabled._enabled
        set_multithreading_enabled._enabled = bool(mode)
        self.mode = mode

    def __enter__(self):
        return None

    def __exit__(self, *exc):
        set_multithreading_enabled._enabled = self.prev

    def clone(self):
        return type(self)(self.mode)


def is_multithreading_enabled():
    """The mode `set_multithreading_enabled` last set (True by default), as in PyTorch."""
    return set_multithreading_enabled._enabled


class _unsafe_preserve_version_counter:  # noqa: N801  (PyTorch's name)
    """Inside the block, in-place changes of `tensors` (one tensor or a tuple) leave their
    version counters as they were (PyTorch's escape hatch for writes that must not
    invalidate saved tensors; unsafe by design)."""

    def __init__(self, tensors):
        self.tensors = (tensors,) if not isinstance(tensors, (tuple, list)) else tuple(tensors)
        self.versions = [int(t._version_counter) for t in self.tensors]

    def __enter__(self):
        return None

    def __exit__(self, *exc):
        for t, v in zip(self.tensors, self.versions):
            t._version_counter.v = v
        return False
