"""The collectives, with torch.distributed's signatures, as non-blocking MPI collectives on the
tensors' numpy arrays.

Each call starts the MPI operation (MPI_Iallreduce, MPI_Ibcast, ...) on the tensor's own
array when it is C-contiguous (no copy), or on a contiguous copy that is written back when
the operation completes. `async_op=True` returns the Work at once; otherwise the call waits.
On a tensor being traced by aotgrad.compile a collective is a graph break: communication is
not part of a compiled program, so the function runs eagerly (with a warning naming the line).
"""
import warnings

import numpy as np

from aotgrad.distributed.process_group import GroupMember, default_group, wait_requests
from aotgrad.distributed.reduce_op import BOOL_AS_UINT8, ReduceOp, mpi_op
from aotgrad.runtime import dispatch
from aotgrad.runtime.tensor import Tensor


class Work:
    """The handle of a collective started with async_op=True: `wait()` blocks until it is done
    (and the outputs are written), `is_completed()` asks without blocking, `get_future()`
    gives an aotgrad.futures.Future of its output tensors (`result()`)."""

    def __init__(self, pg, requests, what, finish=(), result=(), statuses=None):
        self._pg, self._requests, self._what = pg, requests, what
        self._finish = list(finish)   # run once, in order, when the requests are done
        self._result = list(result)   # the output tensors (PyTorch's Work.result())
        self._statuses = statuses     # MPI.Status per request, where the sender matters
        self._done = False

    def _complete(self):
        self._done = True
        for step in self._finish:
            step()
        self._finish = []
        self._requests = []

    def wait(self, timeout=None):
        """Block until the collective is done. `timeout` (a timedelta) overrides the group's;
        past it, DistBackendError."""
        if not self._done:
            seconds = None if timeout is None else timeout.total_seconds()
            wait_requests(self._requests, self._pg, self._what, seconds, self._statuses)
            self._complete()
        return True

    def is_completed(self):
        if not self._done:
            from mpi4py import MPI
            if MPI.Request.Testall(self._requests, self._statuses):
                self._complete()
        return self._done

    def is_success(self):
        return self.is_completed()

    def result(self):
        """The output tensors (the tensor reduced in place, the received tensor, ...)."""
        return list(self._result)

    def get_future(self):
        """A Future that completes with this work; its value is `result()`."""
        from aotgrad.futures import Future

        def drive():
            self.wait()
            return self.result()
        return Future._driven(drive, self.is_completed)

    def _source_rank(self):
        """The sender's rank in the default group, for a completed receive (irecv)."""
        if not self._done or not self._statuses:
            raise RuntimeError(f"aotgrad.distributed: {self._what}: the source rank is known "
                               f"once a receive has completed")
        return self._pg.ranks[self._statuses[0].Get_source()]

    def __repr__(self):
        return f"Work({self._what}, completed={self._done})"


def _finish(pg, requests, what, finish, async_op, result=()):
    work = Work(pg, requests, what, finish, result)
    if async_op:
        return work
    work.wait()
    return None


def _array(t, what, arg):
    """The numpy array of tensor `t`; a graph break while tracing; TypeError otherwise."""
    if not isinstance(t, Tensor):
        raise TypeError(f"aotgrad.distributed.{what}: {arg} must be a Tensor, got "
                        f"{type(t).__name__}")
    value = t._value
    if not isinstance(value, np.ndarray):
        dispatch.graph_break(dispatch.describe_break(
            f"aotgrad.distributed.{what}() on a traced tensor (collectives run eagerly, "
            f"between compiled programs)"), t)
    return value


class _Buffer:
    """A tensor's array as an MPI buffer: the array itself when contiguous and writable, else a
    contiguous copy; `written()` copies back (if needed) and bumps the version counter."""

    def __init__(self, t, what, arg, writes):
        self.tensor = t
        self.array = _array(t, what, arg)
        direct = self.array.flags.c_contiguous and (self.array.flags.writeable or not writes)
        self.mpi = self.array if direct else np.ascontiguousarray(self.array)
        self.copied = not direct

    def written(self):
        if self.copied:
            np.copyto(self.array, self.mpi)
        self.tensor._version_counter.v += 1


def _reduction(arr, op, what):
    """(array to reduce, the ReduceOp MPI applies, a function putting the result back)."""
    if not isinstance(op, ReduceOp):
        raise TypeError(f"aotgrad.distributed.{what}: op must be a ReduceOp, got {op!r}")
    kind = "f" if arr.dtype.name == "bfloat16" else arr.dtype.kind
    if op is ReduceOp.AVG and kind not in "fc":
        raise ValueError(f"aotgrad.distributed.{what}: ReduceOp.AVG needs a floating dtype, "
                         f"got {arr.dtype}")
    if op in (ReduceOp.BAND, ReduceOp.BOR, ReduceOp.BXOR) and kind not in "iub":
        raise ValueError(f"aotgrad.distributed.{what}: {op!r} needs an integer or bool dtype, "
                         f"got {arr.dtype}")
    if kind == "b":
        work = arr.view(np.uint8)
        return work, BOOL_AS_UINT8[op], None
    if arr.dtype.itemsize == 2 and kind == "f":
        # MPI has no 16-bit floats: reduce in float32 and round once at the end
        work = arr.astype(np.float32)
        return work, op, lambda: np.copyto(arr, work.astype(arr.dtype))
    return arr, op, None


def _then(op, reduced, pg, back, written):
    """What follows a reduction into `reduced`: AVG's division (before a 16-bit float result
    is rounded back), the copy back, the version bump."""
    steps = []
    if op is ReduceOp.AVG:
        steps.append(lambda: np.divide(reduced, pg.size(), out=reduced))
    if back is not None:
        steps.append(back)
    steps.append(written)
    return steps


def _check_same(tensors, like, what, arg):
    for i, t in enumerate(tensors):
        a = _array(t, what, f"{arg}[{i}]")
        if a.shape != like.shape or a.dtype != like.dtype:
            raise ValueError(f"aotgrad.distributed.{what}: {arg}[{i}] has shape "
                             f"{list(a.shape)} and dtype {a.dtype}, expected shape "
                             f"{list(like.shape)} and dtype {like.dtype}")


def _check_count(tensors, pg, what, arg):
    if len(tensors) != pg.size():
        raise ValueError(f"aotgrad.distributed.{what}: {arg} holds {len(tensors)} tensors, "
                         f"expected one per rank ({pg.size()})")


def _root(r, pg, what, arg):
    """The group rank of `r`, a rank of the default group (PyTorch's src/dst)."""
    if not isinstance(r, (int, np.integer)) or int(r) not in pg.ranks:
        raise ValueError(f"aotgrad.distributed.{what}: {arg}={r!r} is not a rank of the group "
                         f"(its ranks in the default group: {pg.ranks})")
    return pg.group_rank(int(r))


def _member_group(group, what):
    """The group to run on, or None (with PyTorch's warning) on a rank outside it."""
    if group is GroupMember.NON_GROUP_MEMBER:
        warnings.warn(f"Running {what} on a rank that does not belong to the given group.",
                      stacklevel=3)
        return None
    return default_group(group)


def all_reduce(tensor, op=ReduceOp.SUM, group=None, async_op=False):
    """Reduce `tensor` over all ranks, in place: every rank gets the result."""
    pg = _member_group(group, "all_reduce")
    if pg is None:
        return None
    from mpi4py import MPI
    buf = _Buffer(tensor, "all_reduce", "tensor", writes=True)
    arr, mop, back = _reduction(buf.mpi, op, "all_reduce")
    req = pg.comm.Iallreduce(MPI.IN_PLACE, arr, mpi_op(mop, MPI))
    finish = _then(op, arr, pg, back, buf.written)
    return _finish(pg, [req], "all_reduce", finish, async_op, [tensor])


def reduce(tensor, dst=0, op=ReduceOp.SUM, group=None, async_op=False):
    """Reduce `tensor` over all ranks into rank `dst`'s tensor (the others' are unchanged)."""
    pg = _member_group(group, "reduce")
    if pg is None:
        return None
    from mpi4py import MPI
    dst = _root(dst, pg, "reduce", "dst")
    mine = pg.rank() == dst
    buf = _Buffer(tensor, "reduce", "tensor", writes=mine)
    arr, mop, back = _reduction(buf.mpi, op, "reduce")
    if mine:
        req = pg.comm.Ireduce(MPI.IN_PLACE, arr, mpi_op(mop, MPI), root=dst)
        finish = _then(op, arr, pg, back, buf.written)
    else:
        req, finish = pg.comm.Ireduce(arr, None, mpi_op(mop, MPI), root=dst), []
    return _finish(pg, [req], "reduce", finish, async_op, [tensor])


def _bytes(arr):
    return arr.reshape(-1).view(np.uint8)


def broadcast(tensor, src, group=None, async_op=False):
    """Copy rank `src`'s tensor into every rank's `tensor`."""
    pg = _member_group(group, "broadcast")
    if pg is None:
        return None
    src = _root(src, pg, "broadcast", "src")
    buf = _Buffer(tensor, "broadcast", "tensor", writes=pg.rank() != src)
    req = pg.comm.Ibcast(_bytes(buf.mpi), root=src)
    finish = [buf.written] if pg.rank() != src else []
    return _finish(pg, [req], "broadcast", finish, async_op, [tensor])


def _gathered(pg, arr):
    return np.empty((pg.size(),) + arr.shape, arr.dtype)


def _scatter_into(stacked, tensors):
    def copy():
        for t, row in zip(tensors, stacked):
            np.copyto(t._value, row)
            t._version_counter.v += 1
    return copy


def all_gather(tensor_list, tensor, group=None, async_op=False):
    """tensor_list[r] = rank r's `tensor`, on every rank."""
    pg = _member_group(group, "all_gather")
    if pg is None:
        return None
    send = _Buffer(tensor, "all_gather", "tensor", writes=False).mpi
    _check_count(tensor_list, pg, "all_gather", "tensor_list")
    _check_same(tensor_list, send, "all_gather", "tensor_list")
    recv = _gathered(pg, send)
    req = pg.comm.Iallgather(_bytes(send), _bytes(recv))
    return _finish(pg, [req], "all_gather", [_scatter_into(recv, tensor_list)], async_op,
                   tensor_list)


def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False):
    """output_tensor (world size times input's first dimension, or stacked) = the ranks'
    input_tensor in rank order, gathered straight into its array."""
    pg = _member_group(group, "all_gather_into_tensor")
    if pg is None:
        return None
    send = _Buffer(input_tensor, "all_gather_into_tensor", "input_tensor", writes=False).mpi
    out = _Buffer(output_tensor, "all_gather_into_tensor", "output_tensor", writes=True)
    if out.mpi.size != send.size * pg.size() or out.mpi.dtype != send.dtype:
        raise ValueError(f"aotgrad.distributed.all_gather_into_tensor: output_tensor of shape "
                         f"{list(out.mpi.shape)} ({out.mpi.dtype}) cannot hold {pg.size()} "
                         f"inputs of shape {list(send.shape)} ({send.dtype})")
    req = pg.comm.Iallgather(_bytes(send), _bytes(out.mpi))
    return _finish(pg, [req], "all_gather_into_tensor", [out.written], async_op,
                   [output_tensor])


def reduce_scatter(output, input_list, op=ReduceOp.SUM, group=None, async_op=False):
    """output on rank r = the reduction over ranks of their input_list[r]."""
    pg = _member_group(group, "reduce_scatter")
    if pg is None:
        return None
    from mpi4py import MPI
    out = _Buffer(output, "reduce_scatter", "output", writes=True)
    _check_count(input_list, pg, "reduce_scatter", "input_list")
    _check_same(input_list, out.mpi, "reduce_scatter", "input_list")
    send = np.stack([t._value for t in input_list])
    send, mop, _ = _reduction(send, op, "reduce_scatter")
    recv, _, back = _reduction(out.mpi, op, "reduce_scatter")
    req = pg.comm.Ireduce_scatter_block(send, recv, mpi_op(mop, MPI))
    finish = _then(op, recv, pg, back, out.written)
    return _finish(pg, [req], "reduce_scatter", finish, async_op, [output])


def reduce_scatter_tensor(output, input, op=ReduceOp.SUM, group=None, async_op=False):
    """reduce_scatter with the inputs as consecutive blocks of one tensor (no copies)."""
    pg = _member_group(group, "reduce_scatter_tensor")
    if pg is None:
        return None
    from mpi4py import MPI
    out = _Buffer(output, "reduce_scatter_tensor", "output", writes=True)
    send = _Buffer(input, "reduce_scatter_tensor", "input", writes=False).mpi
    if send.size != out.mpi.size * pg.size() or send.dtype != out.mpi.dtype:
        raise ValueError(f"aotgrad.distributed.reduce_scatter_tensor: input of shape "
                         f"{list(send.shape)} ({send.dtype}) is not {pg.size()} blocks of the "
                         f"output's shape {list(out.mpi.shape)} ({out.mpi.dtype})")
    send, mop, _ = _reduction(send, op, "reduce_scatter_tensor")
    recv, _, back = _reduction(out.mpi, op, "reduce_scatter_tensor")
    req = pg.comm.Ireduce_scatter_block(send, recv, mpi_op(mop, MPI))
    finish = _then(op, recv, pg, back, out.written)
    return _finish(pg, [req], "reduce_scatter_tensor", finish, async_op, [output])


def gather(tensor, gather_list=None, dst=0, group=None, async_op=False):
    """gather_list[r] on rank `dst` = rank r's tensor; other ranks pass no gather_list."""
    pg = _member_group(group, "gather")
    if pg is None:
        return None
    dst = _root(dst, pg, "gather", "dst")
    send = _Buffer(tensor, "gather", "tensor", writes=False).mpi
    if pg.rank() != dst:
        if gather_list:
            raise ValueError("aotgrad.distributed.gather: gather_list must be given on the "
                             "destination rank only")
        req = pg.comm.Igather(_bytes(send), None, root=dst)
        return _finish(pg, [req], "gather", [], async_op)
    gather_list = gather_list if gather_list is not None else []
    _check_count(gather_list, pg, "gather", "gather_list")
    _check_same(gather_list, send, "gather", "gather_list")
    recv = _gathered(pg, send)
    req = pg.comm.Igather(_bytes(send), _bytes(recv), root=dst)
    return _finish(pg, [req], "gather", [_scatter_into(recv, gather_list)], async_op,
                   gather_list)


def scatter(tensor, scatter_list=None, src=0, group=None, async_op=False):
    """tensor on rank r = scatter_list[r] of rank `src`; other ranks pass no scatter_list."""
    pg = _member_group(group, "scatter")
    if pg is None:
        return None
    src = _root(src, pg, "scatter", "src")
    out = _Buffer(tensor, "scatter", "tensor", writes=True)
    if pg.rank() != src:
        if scatter_list:
            raise ValueError("aotgrad.distributed.scatter: scatter_list must be given on the "
                             "source rank only")
        send = None
    else:
        scatter_list = scatter_list if scatter_list is not None else []
        _check_count(scatter_list, pg, "scatter", "scatter_list")
        _check_same(scatter_list, out.mpi, "scatter", "scatter_list")
        send = _bytes(np.stack([t._value for t in scatter_list]))
    req = pg.comm.Iscatter(send, _bytes(out.mpi), root=src)
    return _finish(pg, [req], "scatter", [out.written], async_op, [tensor])


def barrier(group=None, async_op=False, device_ids=None):
    """Return (or, async, complete) once every rank of the group has called barrier."""
    pg = _member_group(group, "barrier")
    if pg is None:
        return None
    return _finish(pg, [pg.comm.Ibarrier()], "barrier", [], async_op)


def _byte_counts(arrays):
    counts = [a.nbytes for a in arrays]
    displs = [sum(counts[:i]) for i in range(len(counts))]
    return counts, displs


def all_to_all(output_tensor_list, input_tensor_list, group=None, async_op=False):
    """Rank r sends input_tensor_list[q] to rank q, which receives it in its
    output_tensor_list[r]; the tensors may differ in size from pair to pair."""
    pg = _member_group(group, "all_to_all")
    if pg is None:
        return None
    from mpi4py import MPI
    _check_count(input_tensor_list, pg, "all_to_all", "input_tensor_list")
    _check_count(output_tensor_list, pg, "all_to_all", "output_tensor_list")
    sends = [_Buffer(t, "all_to_all", f"input_tensor_list[{q}]", writes=False).mpi
             for q, t in enumerate(input_tensor_list)]
    outs = [_Buffer(t, "all_to_all", f"output_tensor_list[{q}]", writes=True)
            for q, t in enumerate(output_tensor_list)]
    send = np.concatenate([_bytes(a) for a in sends]) if sends else np.empty(0, np.uint8)
    scounts, sdispls = _byte_counts(sends)
    rcounts, rdispls = _byte_counts([o.mpi for o in outs])
    recv = np.empty(sum(rcounts), np.uint8)
    req = pg.comm.Ialltoallv([send, (scounts, sdispls), MPI.BYTE],
                             [recv, (rcounts, rdispls), MPI.BYTE])

    def copy_out():
        for o, start, n in zip(outs, rdispls, rcounts):
            _bytes(o.mpi)[...] = recv[start:start + n]
            o.written()
    return _finish(pg, [req], "all_to_all", [copy_out], async_op, output_tensor_list)


def _split_bytes(arr, sizes, pg, what, arg):
    """Byte counts and offsets of `arr`'s blocks along dim 0 (equal blocks without sizes)."""
    rows = arr.shape[0] if arr.ndim else 1
    row_bytes = arr.nbytes // rows if rows else 0
    if sizes is None:
        if rows % pg.size():
            raise ValueError(f"aotgrad.distributed.{what}: {arg}'s first dimension ({rows}) "
                             f"does not divide into {pg.size()} equal blocks (give the "
                             f"split sizes)")
        sizes = [rows // pg.size()] * pg.size()
    sizes = [int(n) for n in sizes]
    if len(sizes) != pg.size() or sum(sizes) != rows or min(sizes) < 0:
        raise ValueError(f"aotgrad.distributed.{what}: {arg} split sizes {sizes} must be "
                         f"{pg.size()} non-negative numbers summing to its first dimension "
                         f"({rows})")
    counts = [n * row_bytes for n in sizes]
    return counts, [sum(counts[:i]) for i in range(len(counts))]


def all_to_all_single(output, input, output_split_sizes=None, input_split_sizes=None,
                      group=None, async_op=False):
    """all_to_all over blocks of one tensor along dim 0: rank r's q-th input block goes to
    rank q's r-th output block (equal blocks unless the split sizes say otherwise)."""
    pg = _member_group(group, "all_to_all_single")
    if pg is None:
        return None
    from mpi4py import MPI
    send = _Buffer(input, "all_to_all_single", "input", writes=False).mpi
    out = _Buffer(output, "all_to_all_single", "output", writes=True)
    if send.dtype != out.mpi.dtype or send.shape[1:] != out.mpi.shape[1:]:
        raise ValueError(f"aotgrad.distributed.all_to_all_single: input of shape "
                         f"{list(send.shape)} ({send.dtype}) and output of shape "
                         f"{list(out.mpi.shape)} ({out.mpi.dtype}) must agree in dtype and "
                         f"in every dimension but the first")
    scounts, sdispls = _split_bytes(send, input_split_sizes, pg, "all_to_all_single", "input")
    rcounts, rdispls = _split_bytes(out.mpi, output_split_sizes, pg, "all_to_all_single",
                                    "output")
    req = pg.comm.Ialltoallv([_bytes(send), (scounts, sdispls), MPI.BYTE],
                             [_bytes(out.mpi), (rcounts, rdispls), MPI.BYTE])
    return _finish(pg, [req], "all_to_all_single", [out.written], async_op, [output])
