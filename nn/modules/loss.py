"""torch.nn.modules.loss's path for classes defined in aotgrad.nn.loss."""
from aotgrad.nn.loss import (L1Loss, NLLLoss, KLDivLoss, MSELoss, BCELoss, BCEWithLogitsLoss,
                             SmoothL1Loss, HuberLoss, CrossEntropyLoss)

__all__ = [
    "L1Loss", "NLLLoss", "KLDivLoss", "MSELoss", "BCELoss", "BCEWithLogitsLoss", "SmoothL1Loss",
    "HuberLoss", "CrossEntropyLoss"
]
