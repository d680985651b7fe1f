"""torch.nn.modules.batchnorm's path for classes defined in aotgrad.nn.normalization."""
from aotgrad.nn.normalization import BatchNorm1d, BatchNorm2d

__all__ = [
    "BatchNorm1d", "BatchNorm2d"
]
