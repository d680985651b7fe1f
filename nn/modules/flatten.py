"""torch.nn.modules.flatten's path for classes defined in aotgrad.nn.linear."""
from aotgrad.nn.linear import Flatten, Unflatten

__all__ = [
    "Flatten", "Unflatten"
]
