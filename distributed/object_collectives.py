"""Collectives of picklable Python objects (torch.distributed's all_gather_object,
broadcast_object_list, gather_object, scatter_object_list).

Each object is pickled into bytes; the byte counts travel first, then the bytes themselves in
one variable-size MPI collective (MPI_Iallgatherv, MPI_Ibcast, MPI_Igatherv,
MPI_Iscatterv). Every wait is bounded by the group's timeout, as the tensor collectives'
are. They block (PyTorch's have no async_op either). Unpickling runs whatever the bytes say:
use them with data from ranks you trust.
"""
import pickle

import numpy as np

from aotgrad.distributed.collectives import _member_group
from aotgrad.distributed.process_group import wait_requests


def _pickled(obj):
    return np.frombuffer(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), np.uint8)


def _unpickled(data):
    return pickle.loads(data.tobytes())


def _wait(pg, request, what):
    wait_requests([request], pg, what)


def _offsets(counts):
    displs = np.zeros(len(counts), np.int64)
    np.cumsum(counts[:-1], out=displs[1:])
    return displs


def _group_root(pg, rank, group_rank, what, arg):
    """The group rank of the root: `group_<arg>` as is, or `<arg>` (a default-group rank,
    0 when neither is given), as PyTorch's object collectives take it."""
    if rank is not None and group_rank is not None:
        raise ValueError(f"aotgrad.distributed.{what}: give {arg} or group_{arg}, not both")
    if group_rank is not None:
        if not isinstance(group_rank, (int, np.integer)) or not 0 <= group_rank < pg.size():
            raise ValueError(f"aotgrad.distributed.{what}: group_{arg}={group_rank!r} is not a "
                             f"rank of the group (it has {pg.size()} ranks)")
        return int(group_rank)
    rank = 0 if rank is None else rank
    if not isinstance(rank, (int, np.integer)) or int(rank) not in pg.ranks:
        raise ValueError(f"aotgrad.distributed.{what}: {arg}={rank!r} is not a rank of the "
                         f"group (its ranks in the default group: {pg.ranks})")
    return pg.group_rank(int(rank))


def _check_list(lst, what, arg, size=None):
    if not isinstance(lst, list):
        raise TypeError(f"aotgrad.distributed.{what}: {arg} must be a list, got "
                        f"{type(lst).__name__}")
    if size is not None and len(lst) != size:
        raise ValueError(f"aotgrad.distributed.{what}: {arg} holds {len(lst)} entries, "
                         f"expected one per rank of the group ({size})")


def all_gather_object(object_list, obj, group=None):
    """object_list[r] = rank r's `obj` (unpickled), on every rank of the group.
    `object_list` must hold one entry per rank."""
    what = "all_gather_object"
    pg = _member_group(group, what)
    if pg is None:
        return None
    from mpi4py import MPI
    _check_list(object_list, what, "object_list", pg.size())
    mine = _pickled(obj)
    counts = np.zeros(pg.size(), np.int64)
    _wait(pg, pg.comm.Iallgather(np.array([mine.size], np.int64), counts), what)
    data = np.empty(int(counts.sum()), np.uint8)
    displs = _offsets(counts)
    _wait(pg, pg.comm.Iallgatherv(mine, [data, counts, displs, MPI.BYTE]), what)
    for r in range(pg.size()):
        object_list[r] = _unpickled(data[displs[r]:displs[r] + counts[r]])
    return None


def broadcast_object_list(object_list, src=None, group=None, device=None, group_src=None):
    """Every rank's `object_list` becomes (entry by entry, in place) the root's: the root is
    rank `src` (a rank of the default group) or `group_src` (a rank of `group`), 0 when
    neither is given. Every rank passes a list of the same length. `device` is accepted for
    PyTorch's signature (CPU only)."""
    what = "broadcast_object_list"
    pg = _member_group(group, what)
    if pg is None:
        return None
    root = _group_root(pg, src, group_src, what, "src")
    _check_list(object_list, what, "object_list")
    data = _pickled(list(object_list)) if pg.rank() == root else None
    count = np.array([0 if data is None else data.size], np.int64)
    _wait(pg, pg.comm.Ibcast(count, root=root), what)
    if data is None:
        data = np.empty(int(count[0]), np.uint8)
    _wait(pg, pg.comm.Ibcast(data, root=root), what)
    if pg.rank() != root:
        received = _unpickled(data)
        if len(received) != len(object_list):
            raise ValueError(f"aotgrad.distributed.{what}: the root's object_list holds "
                             f"{len(received)} entries, this rank's {len(object_list)} (every "
                             f"rank passes a list of the same length)")
        object_list[:] = received
    return None


def gather_object(obj, object_gather_list=None, dst=None, group=None, group_dst=None):
    """On the destination rank (`dst` of the default group, or `group_dst` of `group`; 0 when
    neither is given), object_gather_list[r] = rank r's `obj`. Only the destination passes
    object_gather_list (one entry per rank); the others pass None."""
    what = "gather_object"
    pg = _member_group(group, what)
    if pg is None:
        return None
    from mpi4py import MPI
    root = _group_root(pg, dst, group_dst, what, "dst")
    if pg.rank() == root:
        if not object_gather_list:
            raise ValueError(f"aotgrad.distributed.{what}: object_gather_list must be given "
                             f"on the destination rank")
        _check_list(object_gather_list, what, "object_gather_list", pg.size())
    elif object_gather_list:
        raise ValueError(f"aotgrad.distributed.{what}: object_gather_list must NOT be given "
                         f"on the ranks other than the destination")
    mine = _pickled(obj)
    counts = np.zeros(pg.size(), np.int64)
    _wait(pg, pg.comm.Igather(np.array([mine.size], np.int64), counts, root=root), what)
    if pg.rank() != root:
        _wait(pg, pg.comm.Igatherv(mine, None, root=root), what)
        return None
    data = np.empty(int(counts.sum()), np.uint8)
    displs = _offsets(counts)
    _wait(pg, pg.comm.Igatherv(mine, [data, counts, displs, MPI.BYTE], root=root), what)
    for r in range(pg.size()):
        object_gather_list[r] = _unpickled(data[displs[r]:displs[r] + counts[r]])
    return None


def scatter_object_list(scatter_object_output_list, scatter_object_input_list=None, src=None,
                        group=None, group_src=None):
    """Rank r's scatter_object_output_list[0] = the root's scatter_object_input_list[r] (the
    root: `src` of the default group or `group_src` of `group`, 0 when neither is given;
    the other ranks' input lists are not read)."""
    what = "scatter_object_list"
    pg = _member_group(group, what)
    if pg is None:
        return None
    from mpi4py import MPI
    root = _group_root(pg, src, group_src, what, "src")
    if not isinstance(scatter_object_output_list, list) or not scatter_object_output_list:
        raise ValueError(f"aotgrad.distributed.{what}: scatter_object_output_list must be a "
                         f"list of at least one entry (the scattered object goes into its "
                         f"first)")
    send, counts = None, np.zeros(pg.size(), np.int64)
    if pg.rank() == root:
        if scatter_object_input_list is None:
            raise ValueError(f"aotgrad.distributed.{what}: the source rank must give "
                             f"scatter_object_input_list")
        _check_list(list(scatter_object_input_list) if not isinstance(
            scatter_object_input_list, list) else scatter_object_input_list, what,
            "scatter_object_input_list", pg.size())
        parts = [_pickled(o) for o in scatter_object_input_list]
        counts = np.array([p.size for p in parts], np.int64)
        send = [np.concatenate(parts), counts, _offsets(counts), MPI.BYTE]
    count = np.zeros(1, np.int64)
    _wait(pg, pg.comm.Iscatter(counts, count, root=root), what)
    data = np.empty(int(count[0]), np.uint8)
    _wait(pg, pg.comm.Iscatterv(send, data, root=root), what)
    scatter_object_output_list[0] = _unpickled(data)
    return None
