"""torch.nn.modules.conv's path for classes defined in aotgrad.nn.conv."""
from aotgrad.nn.conv import Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d

__all__ = [
    "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d"
]
