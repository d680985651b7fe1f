"""Collectives that compiled programs run: CollectiveCall objects (ir/collective_calls.py)
whose start and wait are non-blocking MPI operations on the group's communicator.

`average_call(pg, what, how)`: the average over the group's ranks, an MPI_Iallreduce SUM
started on a copy of the input, computed as `how` (a BucketAverage) says: as DDP's own
reduction does (divided by the group's size once waited for), or as one of the built-in
communication hooks does (divided before the sum; compressed to a 16-bit float). Each start
also tests the requests still in flight, since MPI moves a message on only inside MPI calls.
"""
import enum
import time

import numpy as np


class BucketAverage(enum.Enum):
    """How a bucket's average is computed, each exactly as its eager counterpart does."""
    SUM_THEN_DIVIDE = "sum, then divide"          # DDP without a communication hook
    DIVIDE_THEN_SUM = "divide, then sum"          # ddp_comm_hooks' allreduce_hook
    FLOAT16 = "float16-compressed"                # fp16_compress_hook
    BFLOAT16 = "bfloat16-compressed"              # bf16_compress_hook

    def wire_dtype(self):
        """The 16-bit dtype the bucket is compressed to (None: not compressed)."""
        if self is BucketAverage.FLOAT16:
            return np.dtype(np.float16)
        if self is BucketAverage.BFLOAT16:
            import ml_dtypes
            return np.dtype(ml_dtypes.bfloat16)
        return None

from aotgrad.ir.collective_calls import CollectiveCall
from aotgrad.distributed.process_group import wait_requests


def _progress(pending):
    from mpi4py import MPI
    for req, _ in list(pending.values()):
        MPI.Request.Test(req)


def average_call(pg, what, how=BucketAverage.SUM_THEN_DIVIDE):
    """A CollectiveCall averaging an array over the ranks of `pg` (its description: `what`)
    the way `how` says. A compressed average rounds the bucket to its 16-bit dtype, divides
    there, sums in float32 (MPI has no 16-bit floats), rounds the sum once to 16 bits and
    returns it in the bucket's dtype, as the eager hook and all_reduce do."""
    from mpi4py import MPI
    pending = pg.program_requests
    size = pg.size()
    wire = how.wire_dtype()
    mine = []   # this call's array in flight (at most one: a program waits before it ends)

    def start(x):
        if mine:
            raise RuntimeError(
                f"{what}: started again before its previous start was waited for: the "
                f"previous backward did not produce every gradient of the model (parameters "
                f"not used in producing the loss); pass find_unused_parameters=True or "
                f"static_graph=True to DistributedDataParallel")
        if x.dtype.kind != "f" or x.dtype.itemsize < 4:
            raise TypeError(f"{what}: a compiled all-reduce needs float32 or float64 "
                            f"gradients, got {x.dtype}")
        if wire is not None:
            compressed = np.asarray(x).astype(wire)
            compressed = (compressed.astype(np.float32) / np.float32(size)).astype(wire)
            buf = compressed.astype(np.float32)
        else:
            buf = np.array(x, copy=True, order="C")
            if how is BucketAverage.DIVIDE_THEN_SUM:
                np.divide(buf, size, out=buf)
        _progress(pending)
        pending[id(buf)] = (pg.comm.Iallreduce(MPI.IN_PLACE, buf, MPI.SUM), buf)
        mine.append((buf, x.dtype))
        return buf

    def wait(buf):
        entry = pending.pop(id(buf), None)
        if entry is None or entry[1] is not buf:
            raise RuntimeError(f"{what}: waited for an all-reduce this process did not start")
        dtype = mine.pop()[1]
        t = time.perf_counter()
        wait_requests([entry[0]], pg, what)
        pg.program_wait_s += time.perf_counter() - t
        if wire is not None:
            return buf.astype(wire).astype(dtype)
        if how is BucketAverage.SUM_THEN_DIVIDE:
            np.divide(buf, size, out=buf)
        return buf

    return CollectiveCall(what, start, wait)
