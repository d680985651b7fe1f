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
           "is_inference_mode_enabled"]
