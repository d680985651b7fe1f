"""Instance normalisation: InstanceNorm1d over (N, C, L) and InstanceNorm2d over (N, C, H, W)
(and their unbatched forms), with PyTorch's defaults: affine=False, track_running_stats=False.

>>> nn.InstanceNorm2d(3)(aotgrad.randn(2, 3, 4, 4)).shape
aotgrad.Size([2, 3, 4, 4])
"""
import warnings

from aotgrad.nn import functional as F
from aotgrad.runtime.sizes import hint
from aotgrad.nn.normalization import _BatchNorm
from aotgrad.runtime import shape_ops


class _InstanceNorm(_BatchNorm):
    """The parameters (weight, bias) and buffers (running_mean, running_var,
    num_batches_tracked) of batch norm, with per-instance statistics."""
    _no_batch_dim = 2

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=False,
                 track_running_stats=False, device=None, dtype=None, *, bias=True):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device,
                         dtype, bias=bias)

    def _check_input_dim(self, input):
        if input.ndim not in (self._no_batch_dim, self._no_batch_dim + 1):
            raise ValueError(f"expected {self._no_batch_dim}D or {self._no_batch_dim + 1}D "
                             f"input (got {input.ndim}D input)")

    def forward(self, input):
        self._check_input_dim(input)
        feature_dim = input.ndim - self._no_batch_dim
        if input.shape[feature_dim] != self.num_features:
            if self.affine:
                raise ValueError(f"expected input's size at dim={feature_dim} to match "
                                 f"num_features ({self.num_features}), but got: "
                                 f"{hint(input.shape[feature_dim])}.")
            warnings.warn(f"input's size at dim={feature_dim} does not match num_features. You "
                          f"can silence this warning by not passing in num_features, which is "
                          f"not used because affine=False")
        unbatched = input.ndim == self._no_batch_dim
        x = shape_ops.unsqueeze(input, 0) if unbatched else input
        use_input_stats = self.training or not self.track_running_stats
        out = F.instance_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                              use_input_stats, self.momentum if self.momentum is not None
                              else 0.0, self.eps)
        return shape_ops.squeeze(out, 0) if unbatched else out

    def extra_repr(self):
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"affine={self.affine}, track_running_stats={self.track_running_stats}")


class InstanceNorm1d(_InstanceNorm):
    """Per-instance normalisation of (N, C, L) or unbatched (C, L)."""
    _no_batch_dim = 2


class InstanceNorm2d(_InstanceNorm):
    """Per-instance normalisation of (N, C, H, W) or unbatched (C, H, W)."""
    _no_batch_dim = 3



