"""`nn.init`: fill parameters in place (under no_grad), with PyTorch's formulas.

>>> w = nn.Parameter(aotgrad.empty(3, 5))
>>> nn.init.kaiming_uniform_(w, a=math.sqrt(5)) is w
True

Random draws come from aotgrad's global generator (`aotgrad.manual_seed`), so they are
reproducible but not the same numbers PyTorch draws. Each function writes through the tensor's
in-place ops, so their checks apply (an inference tensor is refused outside
`inference_mode`); its errors name the function.
"""
import math
import warnings

import numpy as np

from aotgrad.runtime import ops
from aotgrad.runtime.op_base import op
from aotgrad.runtime.factories import rand, randn, tensor as _tensor
from aotgrad.runtime.grad_mode import no_grad
from aotgrad.runtime.tensor import Tensor


def _write(t, value):
    with no_grad():
        t.copy_(value)
    return t


def _check(name, t):
    if not isinstance(t, Tensor):
        raise TypeError(f"nn.init.{name}: expected a Tensor, got {type(t).__name__}")


def calculate_gain(nonlinearity, param=None):
    """The recommended gain for an activation ('relu', 'tanh', 'leaky_relu', ...)."""
    linear = {"linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
              "conv_transpose3d", "sigmoid"}
    if nonlinearity in linear:
        return 1
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is None:
            slope = 0.01
        elif not isinstance(param, bool) and isinstance(param, (int, float)):
            slope = param
        else:
            raise ValueError(f"negative_slope {param} not a valid number")
        return math.sqrt(2.0 / (1 + slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"Unsupported nonlinearity {nonlinearity}")


def _calculate_fan_in_and_fan_out(t):
    if t.ndim < 2:
        raise ValueError("Fan in and fan out can not be computed for tensor with fewer than 2 "
                         "dimensions")
    receptive = int(np.prod(t.shape[2:])) if t.ndim > 2 else 1
    return t.shape[1] * receptive, t.shape[0] * receptive


def _fan(t, mode):
    mode = mode.lower()
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"Mode {mode} not supported, please use one of fan_in, fan_out")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(t)
    return fan_in if mode == "fan_in" else fan_out


@op("nn.init.uniform_")
def uniform_(tensor, a=0.0, b=1.0, generator=None):
    """Fill with U(a, b)."""
    _check("uniform_", tensor)
    u = rand(*tensor.shape, dtype=tensor.dtype, generator=generator)
    return _write(tensor, ops.add(ops.mul(u, b - a), a))


@op("nn.init.normal_")
def normal_(tensor, mean=0.0, std=1.0, generator=None):
    """Fill with N(mean, std^2)."""
    _check("normal_", tensor)
    z = randn(*tensor.shape, dtype=tensor.dtype, generator=generator)
    return _write(tensor, ops.add(ops.mul(z, std), mean))


@op("nn.init.trunc_normal_")
def trunc_normal_(tensor, mean=0.0, std=1.0, a=-2.0, b=2.0, generator=None):
    """N(mean, std^2) truncated to [a, b] (out-of-range draws are redrawn)."""
    _check("trunc_normal_", tensor)
    if mean < a - 2 * std or mean > b + 2 * std:
        warnings.warn("mean is more than 2 std from [a, b] in nn.init.trunc_normal_. The "
                      "distribution of values may be incorrect.", stacklevel=2)
    out = np.empty(tuple(tensor.shape), dtype=np.float64)
    todo = np.ones(out.shape, dtype=bool)
    for _ in range(1000):
        if not todo.any():
            break
        z = randn(*out.shape, dtype=tensor.dtype, generator=generator)._value * std + mean
        take = todo & (z >= a) & (z <= b)
        out[take] = z[take]
        todo &= ~take
    out[todo] = np.clip(mean, a, b)
    return _write(tensor, tensor_from(out, tensor))


def tensor_from(arr, like):
    return _tensor(np.asarray(arr, dtype=like.dtype.np))


@op("nn.init.constant_")
def constant_(tensor, val):
    _check("constant_", tensor)
    with no_grad():
        tensor.fill_(val)
    return tensor


@op("nn.init.ones_")
def ones_(tensor):
    return constant_(tensor, 1.0)


@op("nn.init.zeros_")
def zeros_(tensor):
    return constant_(tensor, 0.0)


@op("nn.init.eye_")
def eye_(tensor):
    if tensor.ndim != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    return _write(tensor, tensor_from(np.eye(*tensor.shape), tensor))


@op("nn.init.dirac_")
def dirac_(tensor, groups=1):
    if tensor.ndim not in (3, 4, 5):
        raise ValueError("Only tensors with 3, 4, or 5 dimensions are supported")
    shape = tuple(tensor.shape)
    if shape[0] % groups:
        raise ValueError("dim 0 must be divisible by groups")
    out_per = shape[0] // groups
    m = np.zeros(shape)
    for g in range(groups):
        for d in range(min(out_per, shape[1])):
            m[(g * out_per + d, d) + tuple(k // 2 for k in shape[2:])] = 1
    return _write(tensor, tensor_from(m, tensor))


@op("nn.init.xavier_uniform_")
def xavier_uniform_(tensor, gain=1.0, generator=None):
    """U(-a, a) with a = gain * sqrt(6 / (fan_in + fan_out)) (Glorot)."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    a = gain * math.sqrt(6.0 / float(fan_in + fan_out))
    return uniform_(tensor, -a, a, generator)


@op("nn.init.xavier_normal_")
def xavier_normal_(tensor, gain=1.0, generator=None):
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return normal_(tensor, 0.0, gain * math.sqrt(2.0 / float(fan_in + fan_out)), generator)


@op("nn.init.kaiming_uniform_")
def kaiming_uniform_(tensor, a=0.0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    """U(-b, b) with b = gain * sqrt(3 / fan) (He). Linear and Conv use a=sqrt(5)."""
    _check("kaiming_uniform_", tensor)
    if 0 in tuple(tensor.shape):
        warnings.warn("Initializing zero-element tensors is a no-op", stacklevel=2)
        return tensor
    fan = _fan(tensor, mode)
    bound = math.sqrt(3.0) * calculate_gain(nonlinearity, a) / math.sqrt(fan)
    return uniform_(tensor, -bound, bound, generator)


@op("nn.init.kaiming_normal_")
def kaiming_normal_(tensor, a=0.0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    _check("kaiming_normal_", tensor)
    if 0 in tuple(tensor.shape):
        warnings.warn("Initializing zero-element tensors is a no-op", stacklevel=2)
        return tensor
    std = calculate_gain(nonlinearity, a) / math.sqrt(_fan(tensor, mode))
    return normal_(tensor, 0.0, std, generator)


@op("nn.init.orthogonal_")
def orthogonal_(tensor, gain=1.0, generator=None):
    """A (semi-)orthogonal matrix from the QR decomposition of a normal draw."""
    if tensor.ndim < 2:
        raise ValueError("Only tensors with 2 or more dimensions are supported")
    rows = tensor.shape[0]
    cols = tensor.numel() // rows
    flat = randn(rows, cols, dtype=tensor.dtype, generator=generator)._value.astype(np.float64)
    if rows < cols:
        flat = flat.T
    q, r = np.linalg.qr(flat)
    q *= np.sign(np.diag(r))
    if rows < cols:
        q = q.T
    return _write(tensor, tensor_from(q.reshape(tuple(tensor.shape)) * gain, tensor))


__all__ = ["calculate_gain", "uniform_", "normal_", "trunc_normal_", "constant_", "ones_",
           "zeros_", "eye_", "dirac_", "xavier_uniform_", "xavier_normal_", "kaiming_uniform_",
           "kaiming_normal_", "orthogonal_"]
