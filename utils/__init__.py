"""`aotgrad.utils`, laid out like torch.utils: `data` (datasets, samplers, DataLoader) and
`checkpoint` (activation checkpointing)."""
from aotgrad.utils import checkpoint, data

__all__ = ["checkpoint", "data"]
