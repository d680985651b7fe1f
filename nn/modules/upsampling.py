"""torch.nn.modules.upsampling's path for classes defined in aotgrad.nn.upsampling."""
from aotgrad.nn.upsampling import Upsample, UpsamplingNearest2d, UpsamplingBilinear2d

__all__ = [
    "Upsample", "UpsamplingNearest2d", "UpsamplingBilinear2d"
]
