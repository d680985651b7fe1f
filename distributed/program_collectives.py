"""Collectives that compiled programs run: CollectiveCall objects (ir/collective_calls.py)
whose start and wait are non-blocking MPI operations on the group's communicator.

`broadcast_call(pg, root, what)`: a rank's array on every rank (DDP's buffers, before each
forward). `average_call(pg, what, how)`: the average over the group's ranks, an MPI_Iallreduce SUM
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


def _divided(values, size, dtype):
    """values / size rounded to the 16-bit `dtype`, as numpy's (and ml_dtypes') 16-bit
    division does: in float32, rounded once."""
    return (values.astype(np.float32) / np.float32(size)).astype(dtype)


def average_call(pg, what, how=BucketAverage.SUM_THEN_DIVIDE, dtype=None):
    """A CollectiveCall averaging an array over the ranks of `pg` (its description: `what`)
    the way `how` says. `dtype`: the bucket's dtype (None: the arrays'). A compiled program
    may hold a 16-bit bucket's values in float32 (its kernels compute in float32); the
    average is then computed as eagerly on the 16-bit values and returned in the array's
    own dtype. MPI has no 16-bit floats: a 16-bit bucket is summed in float32 and rounded
    once, as the eager all_reduce does; a compressed average rounds the bucket to its wire
    dtype, divides there, sums in float32, rounds once and casts back to the bucket's
    dtype, as the eager hook does."""
    from mpi4py import MPI
    pending = pg.program_requests
    size = pg.size()
    wire = how.wire_dtype()
    bucket_dtype = None if dtype is None else np.dtype(dtype)
    mine = []   # this call's array in flight (at most one: a program waits before it ends)

    def start(x):
        if mine:
            raise RuntimeError(
                f"{what}: started again before its previous start was waited for: the "
                f"previous backward did not produce every gradient of the model (parameters "
                f"not used in producing the loss); pass find_unused_parameters=True or "
                f"static_graph=True to DistributedDataParallel")
        x = np.asarray(x)
        logical = bucket_dtype or x.dtype
        if x.dtype.kind != "f" and x.dtype.name != "bfloat16":
            raise TypeError(f"{what}: a compiled all-reduce needs floating-point gradients, "
                            f"got {x.dtype}")
        if wire is not None:
            buf = _divided(x.astype(logical).astype(wire), size, wire).astype(np.float32)
        elif logical.itemsize == 2:
            values = x.astype(logical)
            if how is BucketAverage.DIVIDE_THEN_SUM:
                values = _divided(values, size, logical)
            buf = values.astype(np.float32)
        else:
            buf = np.array(x, copy=True, order="C")
            if how is BucketAverage.DIVIDE_THEN_SUM:
                np.divide(buf, size, out=buf)
        _progress(pending)
        pending[id(buf)] = (pg.comm.Iallreduce(MPI.IN_PLACE, buf, MPI.SUM), buf)
        mine.append((buf, x.dtype, logical))
        return buf

    def wait(_started):
        # (the call's one operation in flight: the program may hand back a converted copy
        # of what start returned, e.g. a 16-bit value rounded after it was made)
        if not mine:
            raise RuntimeError(f"{what}: waited for an all-reduce this process did not start")
        buf, given, logical = mine.pop()
        entry = pending.pop(id(buf))
        t = time.perf_counter()
        wait_requests([entry[0]], pg, what)
        pg.program_wait_s += time.perf_counter() - t
        if wire is not None:
            return buf.astype(wire).astype(logical).astype(given)
        if logical.itemsize == 2:
            values = buf.astype(logical)
            if how is BucketAverage.SUM_THEN_DIVIDE:
                values = _divided(values, size, logical)
            return values.astype(given)
        if how is BucketAverage.SUM_THEN_DIVIDE:
            np.divide(buf, size, out=buf)
        return buf

    return CollectiveCall(what, start, wait)


def broadcast_call(pg, root, what):
    """A CollectiveCall giving every rank of `pg` the array of its group rank `root` (an
    MPI_Ibcast of a copy's bytes; each rank's program holds the same dtype)."""
    pending = pg.program_requests
    mine = []   # this call's array in flight

    def start(x):
        if mine:
            raise RuntimeError(f"{what}: started again before its previous start was waited "
                               f"for")
        buf = np.array(x, copy=True, order="C")
        _progress(pending)
        pending[id(buf)] = (pg.comm.Ibcast(buf.reshape(-1).view(np.uint8), root=root), buf)
        mine.append(buf)
        return buf

    def wait(_started):
        if not mine:
            raise RuntimeError(f"{what}: waited for a broadcast this process did not start")
        buf = mine.pop()
        request, _ = pending.pop(id(buf))
        t = time.perf_counter()
        wait_requests([request], pg, what)
        pg.program_wait_s += time.perf_counter() - t
        return buf

    return CollectiveCall(what, start, wait)

