"""`Tensor.new_zeros/new_ones/new_full/new_empty/new_tensor` and the legacy `Tensor.new`:
new tensors with the dtype of `self` unless `dtype=` says otherwise.

>>> import aotgrad
>>> aotgrad.zeros(2, dtype=aotgrad.float64).new_ones(3).dtype
aotgrad.float64
"""
import warnings

import numpy as np

from aotgrad.runtime import factories
from aotgrad.runtime.tensor import Size, Tensor


def _check_layout(layout):
    if layout is not None and str(layout) not in ("strided", "torch.strided"):
        raise RuntimeError(f"only the strided layout is supported, got {layout}")


def new_zeros(self, *size, dtype=None, device=None, requires_grad=False, layout=None,
              pin_memory=False):
    _check_layout(layout)
    return factories.zeros(*size, dtype=dtype or self.dtype, device=device,
                           requires_grad=requires_grad)


def new_ones(self, *size, dtype=None, device=None, requires_grad=False, layout=None,
             pin_memory=False):
    _check_layout(layout)
    return factories.ones(*size, dtype=dtype or self.dtype, device=device,
                          requires_grad=requires_grad)


def new_empty(self, *size, dtype=None, device=None, requires_grad=False, layout=None,
              pin_memory=False):
    """Uninitialised in PyTorch; zeros here."""
    _check_layout(layout)
    return factories.empty(*size, dtype=dtype or self.dtype, device=device,
                           requires_grad=requires_grad)


def new_full(self, size, fill_value, *, dtype=None, device=None, requires_grad=False,
             layout=None, pin_memory=False):
    """A tensor of `size` filled with fill_value, in self's dtype (not fill_value's)."""
    _check_layout(layout)
    return factories.full(size, fill_value, dtype=dtype or self.dtype, device=device,
                          requires_grad=requires_grad)


def new_tensor(self, data, *, dtype=None, device=None, requires_grad=False, layout=None,
               pin_memory=False):
    """A copy of data (a leaf, detached from any history) in self's dtype by default."""
    _check_layout(layout)
    if isinstance(data, Tensor):
        warnings.warn("To copy construct from a tensor, it is recommended to use "
                      "sourceTensor.clone().detach() or sourceTensor.clone().detach()."
                      "requires_grad_(True), rather than tensor.new_tensor(sourceTensor).",
                      UserWarning, stacklevel=2)
        data = data.detach().numpy().copy()
    return factories.tensor(data, dtype=dtype or self.dtype, device=device,
                            requires_grad=requires_grad)


def new(self, *args, device=None):
    """The legacy constructor: `t.new()` is an empty tensor, `t.new(2, 3)` or
    `t.new(Size([2, 3]))` an uninitialised (here: zero) one of that size, `t.new(data)`
    (a list, tuple, array or tensor) a copy of the data; always in t's dtype."""
    if not args:
        return factories.empty(0, dtype=self.dtype, device=device)
    ints = all(isinstance(a, (int, np.integer)) and not isinstance(a, bool) for a in args)
    if ints or (len(args) == 1 and isinstance(args[0], Size)):
        return factories.empty(*args, dtype=self.dtype, device=device)
    if len(args) == 1:
        data = args[0]
        if isinstance(data, Tensor):
            if data.dtype is not self.dtype:
                raise TypeError(f"expected {self.dtype.name} (got {data.dtype.name})")
            return data.detach()
        return factories.tensor(data, dtype=self.dtype, device=device)
    raise TypeError(f"new(): expected sizes (ints), a Size or one sequence of data, got "
                    f"{tuple(type(a).__name__ for a in args)}")
