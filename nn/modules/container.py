"""torch.nn.modules.container's path for classes defined in aotgrad.nn.container."""
from aotgrad.nn.container import Sequential, ModuleList, ModuleDict, ParameterList, ParameterDict

__all__ = [
    "Sequential", "ModuleList", "ModuleDict", "ParameterList", "ParameterDict"
]
