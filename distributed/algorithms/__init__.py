"""torch.distributed.algorithms' names: `join` (uneven inputs) and `ddp_comm_hooks`."""
from aotgrad.distributed.algorithms.join import Join, Joinable, JoinHook

__all__ = ["Join", "JoinHook", "Joinable"]
