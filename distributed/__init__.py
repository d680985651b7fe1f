"""`aotgrad.distributed`, torch.distributed's names on MPI (through mpi4py).

Launch with the MPI implementation's own launcher, one process per rank::

    mpiexec -n 4 python train.py

    import aotgrad.distributed as dist
    dist.init_process_group(backend="mpi")      # rank and world size come from the launcher
    t = aotgrad.ones(3) * dist.get_rank()
    dist.all_reduce(t)                           # in place: the sum over the ranks
    work = dist.all_reduce(t, op=dist.ReduceOp.AVG, async_op=True)
    work.wait()

Importing this package does not start MPI (nor import mpi4py); `init_process_group` does.
`aotgrad.nn.parallel.DistributedDataParallel` builds data-parallel training on these
collectives, and `aotgrad.utils.data.DistributedSampler` gives each rank its shard.
"""
from aotgrad.distributed.collectives import (Work, all_gather, all_gather_into_tensor,
                                             all_reduce, all_to_all, all_to_all_single,
                                             barrier, broadcast, gather, reduce,
                                             reduce_scatter, reduce_scatter_tensor, scatter)
from aotgrad.distributed.process_group import (DEFAULT_TIMEOUT, DistBackendError, DistError,
                                               GroupMember, ProcessGroup,
                                               destroy_process_group, get_backend,
                                               get_global_rank, get_group_rank,
                                               get_process_group_ranks, get_rank,
                                               get_world_size, init_process_group,
                                               is_available, is_initialized,
                                               is_mpi_available, new_group)
from aotgrad.distributed.grad_bucket import GradBucket
from aotgrad.distributed.object_collectives import (all_gather_object, broadcast_object_list,
                                                    gather_object, scatter_object_list)
from aotgrad.distributed.point_to_point import (P2POp, batch_isend_irecv, irecv, isend, recv,
                                                send)
from aotgrad.distributed.reduce_op import ReduceOp

__all__ = ["DEFAULT_TIMEOUT", "DistBackendError", "DistError", "GradBucket", "GroupMember",
           "ProcessGroup",
           "ReduceOp", "Work", "all_gather", "all_gather_into_tensor", "all_gather_object",
           "all_reduce", "broadcast_object_list", "gather_object", "scatter_object_list",
           "all_to_all", "all_to_all_single", "barrier", "batch_isend_irecv", "irecv", "isend",
           "P2POp", "recv", "send",
           "broadcast", "destroy_process_group", "gather", "get_backend", "get_global_rank",
           "get_group_rank", "get_process_group_ranks", "get_rank", "get_world_size",
           "init_process_group", "is_available", "is_initialized", "is_mpi_available",
           "new_group", "reduce", "reduce_scatter", "reduce_scatter_tensor", "scatter"]
