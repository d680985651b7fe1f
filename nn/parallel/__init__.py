"""`aotgrad.nn.parallel`: DistributedDataParallel over aotgrad.distributed (MPI), and
DataParallel (one device here: the module runs as it is)."""
from aotgrad.nn.parallel.data_parallel import DataParallel, data_parallel
from aotgrad.nn.parallel.distributed import DistributedDataParallel

__all__ = ["DistributedDataParallel", "DataParallel", "data_parallel"]
