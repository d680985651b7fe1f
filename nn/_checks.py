"""Argument checks shared by the nn.functional modules."""
from aotgrad.runtime.tensor import Tensor
from aotgrad.runtime.sizes import size_list


def _check_tensor(name, x, arg="input"):
    if not isinstance(x, Tensor):
        raise TypeError(f"{name}(): argument '{arg}' must be a Tensor, not {type(x).__name__}")


def _check_float(name, x):
    _check_tensor(name, x)
    if not x.dtype.is_floating_point:
        raise RuntimeError(f"{name}(): expected a floating-point input, got {x.dtype.name} "
                           f"with shape {size_list(x.shape)}")
