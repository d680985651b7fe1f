"""Linear layers and shape helpers: Identity, Linear, Bilinear, Flatten, Unflatten.

>>> nn.Linear(4, 2)(aotgrad.ones(3, 4)).shape
aotgrad.Size([3, 2])
"""
import math

from aotgrad.ir import dtypes as dt
from aotgrad.nn import functional as F
from aotgrad.nn import init
from aotgrad.nn.module import Module
from aotgrad.nn.parameter import Parameter
from aotgrad.runtime import shape_ops
from aotgrad.runtime.factories import empty


def _dtype(dtype):
    return dt.float32 if dtype is None else dt.as_dtype(dtype)


class Identity(Module):
    """Returns its input; accepts and ignores any constructor arguments."""

    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, input):
        return input


class Linear(Module):
    """y = x W^T + b with W (out_features, in_features), PyTorch's default initialisation:
    W ~ kaiming_uniform(a=sqrt(5)), b ~ U(-1/sqrt(in), 1/sqrt(in))."""

    def __init__(self, in_features, out_features, bias=True, device=None, dtype=None):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = Parameter(empty(out_features, in_features, dtype=_dtype(dtype)))
        if bias:
            self.bias = Parameter(empty(out_features, dtype=_dtype(dtype)))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in, _ = init._calculate_fan_in_and_fan_out(self.weight)
            bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input):
        return F.linear(input, self.weight, self.bias)

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")


class Bilinear(Module):
    """y_k = x1^T A_k x2 + b_k."""

    def __init__(self, in1_features, in2_features, out_features, bias=True, device=None,
                 dtype=None):
        super().__init__()
        self.in1_features, self.in2_features = in1_features, in2_features
        self.out_features = out_features
        self.weight = Parameter(empty(out_features, in1_features, in2_features,
                                      dtype=_dtype(dtype)))
        if bias:
            self.bias = Parameter(empty(out_features, dtype=_dtype(dtype)))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        bound = 1 / math.sqrt(self.weight.shape[1])
        init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input1, input2):
        return F.bilinear(input1, input2, self.weight, self.bias)

    def extra_repr(self):
        return (f"in1_features={self.in1_features}, in2_features={self.in2_features}, "
                f"out_features={self.out_features}, bias={self.bias is not None}")


class Flatten(Module):
    """Flatten dims start_dim..end_dim (default: all but the batch dim)."""

    def __init__(self, start_dim=1, end_dim=-1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, input):
        return shape_ops.flatten(input, self.start_dim, self.end_dim)

    def extra_repr(self):
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Unflatten(Module):
    def __init__(self, dim, unflattened_size):
        super().__init__()
        self.dim, self.unflattened_size = dim, tuple(unflattened_size)

    def forward(self, input):
        return shape_ops.unflatten(input, self.dim, self.unflattened_size)

    def extra_repr(self):
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"
