"""`aotgrad.amp`, laid out like `torch.amp`: `autocast` (CPU, bfloat16 or float16; see
aotgrad.runtime.autocast) and `GradScaler` (loss scaling for float16 training)."""
from aotgrad.amp.grad_scaler import GradScaler
from aotgrad.runtime.autocast import autocast, get_autocast_dtype, is_autocast_enabled

__all__ = ["autocast", "GradScaler", "get_autocast_dtype", "is_autocast_enabled"]
