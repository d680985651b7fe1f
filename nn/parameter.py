"""`nn.Parameter`: a Tensor that a Module registers as a learnable parameter.

>>> w = nn.Parameter(aotgrad.zeros(3))      # shares w's storage with the zeros
>>> w.requires_grad, w.is_leaf
(True, True)
"""
import numpy as np

from aotgrad.runtime.tensor import Tensor


class Parameter(Tensor):
    """A leaf tensor that `Module.__setattr__` registers. It shares the data it is built from
    (no copy), is a leaf, and requires grad unless `requires_grad=False`. Results of ops on a
    Parameter are plain Tensors."""

    def __new__(cls, data=None, requires_grad=True):
        if data is None:
            value = np.zeros((0,), dtype=np.float32)
        elif isinstance(data, Tensor):
            value = data._concrete("nn.Parameter(traced tensor)")
        else:
            raise TypeError(f"nn.Parameter: expected a Tensor as data, got {type(data).__name__}")
        p = cls._make(value, False)
        if isinstance(data, Tensor):
            p._version_counter = data._version_counter
            p._inference = data._inference  # requires_grad_ then refuses it outside the mode
        p._is_param = True
        p.requires_grad_(requires_grad)
        return p

    def __init__(self, data=None, requires_grad=True):
        pass  # all set up in __new__

    def __repr__(self):
        return "Parameter containing:\n" + super().__repr__()

    __str__ = __repr__

    def __reduce_ex__(self, proto):
        return (_rebuild_parameter, (np.array(self._value), self.requires_grad))


def _rebuild_parameter(value, requires_grad):
    return Parameter(Tensor._make(value, False), requires_grad)


def is_parameter(x):
    return isinstance(x, Parameter)
