"""`aotgrad.utils`, laid out like torch.utils: `data` (datasets, samplers, DataLoader)."""
from aotgrad.utils import data

__all__ = ["data"]
