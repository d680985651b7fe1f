"""Normalisation layers: LayerNorm, RMSNorm, BatchNorm1d, BatchNorm2d.

>>> ln = nn.LayerNorm(4)
>>> ln(aotgrad.arange(8.).reshape(2, 4)).mean(-1).abs().max() < 1e-6
tensor(True)
"""
from aotgrad.ir import dtypes as dt
from aotgrad.runtime.sizes import size_list
from aotgrad.nn import functional as F
from aotgrad.nn import init
from aotgrad.nn.module import Module
from aotgrad.nn.parameter import Parameter
from aotgrad.runtime.factories import empty, ones, tensor, zeros
from aotgrad.runtime.grad_mode import no_grad


def _dtype(dtype):
    return dt.float32 if dtype is None else dt.as_dtype(dtype)


class LayerNorm(Module):
    """Normalise over the trailing `normalized_shape`; weight ones and bias zeros."""

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True,
                 device=None, dtype=None):
        super().__init__()
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(normalized_shape)
        self.eps, self.elementwise_affine = eps, elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(empty(self.normalized_shape, dtype=_dtype(dtype)))
            if bias:
                self.bias = Parameter(empty(self.normalized_shape, dtype=_dtype(dtype)))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        if self.weight is not None:
            init.ones_(self.weight)
        if self.bias is not None:
            init.zeros_(self.bias)

    def forward(self, input):
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}, bias={self.bias is not None}")


class RMSNorm(Module):
    def __init__(self, normalized_shape, eps=None, elementwise_affine=True, device=None,
                 dtype=None):
        super().__init__()
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        self.normalized_shape, self.eps = tuple(normalized_shape), eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(ones(self.normalized_shape, dtype=_dtype(dtype)))
        else:
            self.register_parameter("weight", None)

    def forward(self, input):
        return F.rms_norm(input, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self):
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}")


class _BatchNorm(Module):
    _expected_dims = ()

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, device=None, dtype=None, *, bias=True):
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        if affine:
            self.weight = Parameter(ones(num_features, dtype=_dtype(dtype)))
            if bias:
                self.bias = Parameter(zeros(num_features, dtype=_dtype(dtype)))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if track_running_stats:
            self.register_buffer("running_mean", zeros(num_features, dtype=_dtype(dtype)))
            self.register_buffer("running_var", ones(num_features, dtype=_dtype(dtype)))
            self.register_buffer("num_batches_tracked", tensor(0, dtype=dt.int64))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)

    def reset_running_stats(self):
        if self.track_running_stats:
            with no_grad():
                self.running_mean.zero_()
                self.running_var.fill_(1.0)
                self.num_batches_tracked.zero_()

    def reset_parameters(self):
        self.reset_running_stats()
        if self.affine:
            init.ones_(self.weight)
            if self.bias is not None:
                init.zeros_(self.bias)

    def forward(self, input):
        if input.ndim not in self._expected_dims:
            raise ValueError(f"expected {' or '.join(f'{d}D' for d in self._expected_dims)} "
                             f"input (got {input.ndim}D input)")
        if input.shape[1] != self.num_features:
            raise ValueError(f"{type(self).__name__}: expected {self.num_features} channels in "
                             f"dim 1, got input of shape {size_list(input.shape)}")
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            with no_grad():
                self.num_batches_tracked.add_(1)
            if self.momentum is None:  # cumulative moving average
                factor = 1.0 / float(self.num_batches_tracked.item())
        use_batch = self.training or self.running_mean is None
        track = not use_batch or self.track_running_stats
        return F.batch_norm(input, self.running_mean if track else None,
                            self.running_var if track else None, self.weight, self.bias,
                            use_batch, factor, self.eps)

    def extra_repr(self):
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"affine={self.affine}, bias={self.bias is not None}, "
                f"track_running_stats={self.track_running_stats}")


class BatchNorm1d(_BatchNorm):
    """Batch norm over (N, C) or (N, C, L) inputs."""
    _expected_dims = (2, 3)


class BatchNorm2d(_BatchNorm):
    """Batch norm over (N, C, H, W) inputs."""
    _expected_dims = (4,)


class GroupNorm(Module):
    """Normalise (N, C, *) over groups of C/num_groups channels; weight ones, bias zeros."""

    def __init__(self, num_groups, num_channels, eps=1e-5, affine=True, device=None,
                 dtype=None, *, bias=True):
        super().__init__()
        if num_channels % num_groups:
            raise ValueError("num_channels must be divisible by num_groups")
        self.num_groups, self.num_channels = num_groups, num_channels
        self.eps, self.affine = eps, affine
        if affine:
            self.weight = Parameter(ones(num_channels, dtype=_dtype(dtype)))
            if bias:
                self.bias = Parameter(zeros(num_channels, dtype=_dtype(dtype)))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def reset_parameters(self):
        if self.affine:
            init.ones_(self.weight)
            if self.bias is not None:
                init.zeros_(self.bias)

    def forward(self, input):
        return F.group_norm(input, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}"
