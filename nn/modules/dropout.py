"""torch.nn.modules.dropout's path for classes defined in aotgrad.nn.dropout."""
from aotgrad.nn.dropout import Dropout, Dropout1d, Dropout2d

__all__ = [
    "Dropout", "Dropout1d", "Dropout2d"
]
