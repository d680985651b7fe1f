"""`aotgrad.nn.parallel`: DistributedDataParallel over aotgrad.distributed (MPI)."""
from aotgrad.nn.parallel.distributed import DistributedDataParallel

__all__ = ["DistributedDataParallel"]
