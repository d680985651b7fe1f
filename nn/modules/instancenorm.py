"""torch.nn.modules.instancenorm's path for classes defined in aotgrad.nn.instancenorm."""
from aotgrad.nn.instancenorm import InstanceNorm1d, InstanceNorm2d

__all__ = [
    "InstanceNorm1d", "InstanceNorm2d"
]
