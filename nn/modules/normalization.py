"""torch.nn.modules.normalization's path for classes defined in aotgrad.nn.normalization."""
from aotgrad.nn.normalization import LayerNorm, GroupNorm, RMSNorm

__all__ = [
    "LayerNorm", "GroupNorm", "RMSNorm"
]
