"""DistributedDataParallel communication hooks (torch.distributed.algorithms.ddp_comm_hooks).

`ddp.register_comm_hook(state, hook)`: DDP calls `hook(state, bucket)` (a GradBucket) once
the bucket's gradients are in, instead of its own all-reduce; the hook returns a Future
whose value is a tensor of the bucket's size: the bucket's final gradients (a hook averages
over the ranks itself: DDP divides nothing after it).
"""
from aotgrad.distributed.algorithms.ddp_comm_hooks import default_hooks

__all__ = ["default_hooks"]
