"""Convolution layers: Conv1d and Conv2d (im2col + one contraction, see nn.functional).

>>> nn.Conv2d(1, 4, 3, padding=1)(aotgrad.ones(2, 1, 8, 8)).shape
aotgrad.Size([2, 4, 8, 8])
"""
import math

from aotgrad.ir import dtypes as dt
from aotgrad.runtime.sizes import size_list
from aotgrad.nn import functional as F
from aotgrad.nn import init
from aotgrad.nn.module import Module
from aotgrad.nn.parameter import Parameter
from aotgrad.runtime.factories import empty


class _ConvNd(Module):
    _nd = 2

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
                 groups=1, bias=True, padding_mode="zeros", device=None, dtype=None):
        super().__init__()
        if groups <= 0:
            raise ValueError("groups must be a positive integer")
        if in_channels % groups:
            raise ValueError("in_channels must be divisible by groups")
        if out_channels % groups:
            raise ValueError("out_channels must be divisible by groups")
        if padding_mode != "zeros":
            if padding_mode in ("reflect", "replicate", "circular"):
                raise NotImplementedError(f"{type(self).__name__}: padding_mode={padding_mode!r} "
                                          f"is not supported (only 'zeros')")
            raise ValueError(f"padding_mode must be one of ['zeros', 'reflect', 'replicate', "
                             f"'circular'], but got padding_mode='{padding_mode}'")
        if isinstance(padding, str) and padding not in ("same", "valid"):
            raise ValueError(f"Invalid padding string {padding!r}, should be one of "
                             f"{{'valid', 'same'}}")
        tup = self._tuple
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size, self.stride = tup(kernel_size), tup(stride)
        self.padding = padding if isinstance(padding, str) else tup(padding)
        self.dilation, self.groups, self.padding_mode = tup(dilation), groups, padding_mode
        if padding == "same" and any(s != 1 for s in self.stride):
            raise ValueError("padding='same' is not supported for strided convolutions")
        dtype = dt.as_dtype(dtype or dt.float32)
        self.weight = Parameter(empty(out_channels, in_channels // groups, *self.kernel_size,
                                      dtype=dtype))
        if bias:
            self.bias = Parameter(empty(out_channels, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def _tuple(self, v):
        if isinstance(v, (tuple, list)):
            if len(v) != self._nd:
                raise ValueError(f"{type(self).__name__}: expected an int or {self._nd} values, "
                                 f"got {v!r}")
            return tuple(int(x) for x in v)
        return (int(v),) * self._nd

    def reset_parameters(self):
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in, _ = init._calculate_fan_in_and_fan_out(self.weight)
            if fan_in:
                bound = 1 / math.sqrt(fan_in)
                init.uniform_(self.bias, -bound, bound)

    def extra_repr(self):
        s = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
             f"stride={self.stride}")
        if self.padding != (0,) * self._nd:
            s += f", padding={self.padding}"  # a string prints bare, as in PyTorch
        if self.dilation != (1,) * self._nd:
            s += f", dilation={self.dilation}"
        if getattr(self, "output_padding", (0,) * self._nd) != (0,) * self._nd:  # transposed
            s += f", output_padding={self.output_padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        return s


class Conv2d(_ConvNd):
    """2-D convolution over (N, C, H, W); weight (out, in/groups, kh, kw), PyTorch's init."""
    _nd = 2

    def forward(self, input):
        return F.conv2d(input, self.weight, self.bias, self.stride, self.padding, self.dilation,
                        self.groups)


class Conv1d(_ConvNd):
    """1-D convolution over (N, C, L)."""
    _nd = 1

    def forward(self, input):
        return F.conv1d(input, self.weight, self.bias, self.stride, self.padding, self.dilation,
                        self.groups)


class Conv3d(_ConvNd):
    """3-D convolution over (N, C, D, H, W); weight (out, in/groups, kd, kh, kw)."""
    _nd = 3

    def forward(self, input):
        return F.conv3d(input, self.weight, self.bias, self.stride, self.padding, self.dilation,
                        self.groups)


class _ConvTransposeNd(Module):
    """Transposed convolution: weight (in, out/groups, *kernel), PyTorch's init (the fan-in
    is out/groups * kernel elements, as PyTorch computes it from the weight's shape)."""
    _nd = 2

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 output_padding=0, groups=1, bias=True, dilation=1, padding_mode="zeros",
                 device=None, dtype=None):
        super().__init__()
        if groups <= 0:
            raise ValueError("groups must be a positive integer")
        if in_channels % groups:
            raise ValueError("in_channels must be divisible by groups")
        if out_channels % groups:
            raise ValueError("out_channels must be divisible by groups")
        if padding_mode != "zeros":
            raise ValueError(f'Only "zeros" padding mode is supported for {type(self).__name__}')
        if isinstance(padding, str):
            raise ValueError(f"{type(self).__name__}: padding must be an int or a tuple, not "
                             f"{padding!r}")
        tup = self._tuple
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size, self.stride, self.padding = tup(kernel_size), tup(stride), tup(padding)
        self.dilation, self.output_padding = tup(dilation), tup(output_padding)
        self.groups, self.padding_mode, self.transposed = groups, padding_mode, True
        dtype = dt.as_dtype(dtype or dt.float32)
        self.weight = Parameter(empty(in_channels, out_channels // groups, *self.kernel_size,
                                      dtype=dtype))
        if bias:
            self.bias = Parameter(empty(out_channels, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    _tuple = _ConvNd._tuple
    reset_parameters = _ConvNd.reset_parameters

    def _output_padding(self, input, output_size):
        """output_padding, or the one that gives `output_size` (its last _nd entries)."""
        if output_size is None:
            return self.output_padding
        output_size = tuple(int(s) for s in output_size)[-self._nd:]
        if len(output_size) != self._nd:
            raise ValueError(f"ConvTranspose{self._nd}D: for {input.ndim}D input, output_size "
                             f"must have {self._nd} or {self._nd + 2} elements (got "
                             f"{len(output_size)})")
        pads = []
        for i in range(self._nd):
            n = input.shape[input.ndim - self._nd + i]
            lo = ((n - 1) * self.stride[i] - 2 * self.padding[i]
                  + self.dilation[i] * (self.kernel_size[i] - 1) + 1)
            hi = lo + self.stride[i] - 1
            if not lo <= output_size[i] <= hi:
                raise ValueError(f"requested an output size of {list(output_size)}, but valid "
                                 f"sizes range from {lo} to {hi} (for an input of "
                                 f"{size_list(input.shape[2:])})")
            pads.append(output_size[i] - lo)
        return tuple(pads)

    extra_repr = _ConvNd.extra_repr


class ConvTranspose2d(_ConvTransposeNd):
    """Transposed 2-D convolution over (N, C_in, H, W); forward(input, output_size=None)."""
    _nd = 2

    def forward(self, input, output_size=None):
        return F.conv_transpose2d(input, self.weight, self.bias, self.stride, self.padding,
                                  self._output_padding(input, output_size), self.groups,
                                  self.dilation)


class ConvTranspose1d(_ConvTransposeNd):
    """Transposed 1-D convolution over (N, C_in, L); forward(input, output_size=None)."""
    _nd = 1

    def forward(self, input, output_size=None):
        return F.conv_transpose1d(input, self.weight, self.bias, self.stride, self.padding,
                                  self._output_padding(input, output_size), self.groups,
                                  self.dilation)
