"""torch.nn.modules.pixelshuffle's path for classes defined in aotgrad.nn.pixelshuffle."""
from aotgrad.nn.pixelshuffle import PixelShuffle, PixelUnshuffle

__all__ = [
    "PixelShuffle", "PixelUnshuffle"
]
