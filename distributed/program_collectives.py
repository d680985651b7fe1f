"""Collectives that compiled programs run: CollectiveCall objects (ir/collective_calls.py)
whose start and wait are non-blocking MPI operations on the group's communicator.

`average_call(pg, what)`: the average over the group's ranks (an MPI_Iallreduce SUM started
on a copy of the input, divided by the group's size when waited for). Each start also tests
the requests still in flight, since MPI moves a message on only inside MPI calls.
"""
import time

import numpy as np

from aotgrad.ir.collective_calls import CollectiveCall
from aotgrad.distributed.process_group import wait_requests


def _progress(pending):
    from mpi4py import MPI
    for req, _ in list(pending.values()):
        MPI.Request.Test(req)


def average_call(pg, what):
    """A CollectiveCall averaging an array over the ranks of `pg` (its description: `what`)."""
    from mpi4py import MPI
    pending = pg.program_requests
    size = pg.size()
    mine = []   # this call's array in flight (at most one: a program waits before it ends)

    def start(x):
        if mine:
            raise RuntimeError(
                f"{what}: started again before its previous start was waited for: the "
                f"previous backward did not produce every gradient of the model (parameters "
                f"not used in producing the loss); pass find_unused_parameters=True or "
                f"static_graph=True to DistributedDataParallel")
        buf = np.array(x, copy=True, order="C")
        if buf.dtype.kind != "f" or buf.dtype.itemsize < 4:
            raise TypeError(f"{what}: a compiled all-reduce needs float32 or float64 "
                            f"gradients, got {buf.dtype}")
        _progress(pending)
        pending[id(buf)] = (pg.comm.Iallreduce(MPI.IN_PLACE, buf, MPI.SUM), buf)
        mine.append(buf)
        return buf

    def wait(buf):
        entry = pending.pop(id(buf), None)
        if entry is None or entry[1] is not buf:
            raise RuntimeError(f"{what}: waited for an all-reduce this process did not start")
        mine.clear()
        t = time.perf_counter()
        wait_requests([entry[0]], pg, what)
        pg.program_wait_s += time.perf_counter() - t
        np.divide(buf, size, out=buf)
        return buf

    return CollectiveCall(what, start, wait)
