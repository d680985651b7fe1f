"""torch.nn.modules.linear's path for classes defined in aotgrad.nn.linear."""
from aotgrad.nn.linear import Identity, Linear, Bilinear

__all__ = [
    "Identity", "Linear", "Bilinear"
]
