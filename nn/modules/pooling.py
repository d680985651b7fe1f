"""torch.nn.modules.pooling's path for classes defined in aotgrad.nn.pooling."""
from aotgrad.nn.pooling import (MaxPool1d, MaxPool2d, AvgPool1d, AvgPool2d, AdaptiveMaxPool1d,
                                AdaptiveMaxPool2d, AdaptiveAvgPool2d)

__all__ = [
    "MaxPool1d", "MaxPool2d", "AvgPool1d", "AvgPool2d", "AdaptiveMaxPool1d", "AdaptiveMaxPool2d",
    "AdaptiveAvgPool2d"
]
