"""Point-to-point messages with torch.distributed's signatures: send, recv, isend, irecv,
and batch_isend_irecv over P2POp descriptions.

Each moves a tensor's bytes with a non-blocking MPI send or receive on the group's
communicator (the tensor's own array when contiguous). `dst`/`src` are ranks of the default
group (`group_dst`/`group_src`: ranks within `group`); `recv` without a source takes the
first message from any rank and returns the sender's rank. The blocking forms wait with the
group's timeout, like the collectives.
"""
import dataclasses

from aotgrad.distributed.collectives import Work, _bytes, _Buffer, _member_group, _root


def _peer(pg, rank, group_rank, what, arg, may_be_any):
    """The peer's rank in `pg` (None: any source), from a global or a group rank."""
    if rank is not None and group_rank is not None:
        raise ValueError(f"aotgrad.distributed.{what}: give {arg} or group_{arg}, not both")
    if rank is None and group_rank is None:
        if may_be_any:
            return None
        raise ValueError(f"aotgrad.distributed.{what}: {arg} is required")
    if group_rank is not None:
        if not 0 <= int(group_rank) < pg.size():
            raise ValueError(f"aotgrad.distributed.{what}: group_{arg}={group_rank} is not a "
                             f"rank of the group (size {pg.size()})")
        peer = int(group_rank)
    else:
        peer = _root(rank, pg, what, arg)
    if peer == pg.rank():
        raise ValueError(f"aotgrad.distributed.{what}: Invalid {arg} rank {pg.ranks[peer]}: "
                         f"should not be the same as the rank of the current process.")
    return peer


def _check_tag(tag, what):
    if not isinstance(tag, int) or tag < 0:
        raise ValueError(f"aotgrad.distributed.{what}: tag must be a non-negative int, "
                         f"got {tag!r}")


def isend(tensor, dst=None, group=None, tag=0, group_dst=None):
    """Start sending `tensor` to rank `dst`; the Work completes when the buffer may be
    reused (keep the tensor unchanged until then)."""
    pg = _member_group(group, "isend")
    if pg is None:
        return None
    _check_tag(tag, "isend")
    peer = _peer(pg, dst, group_dst, "isend", "dst", may_be_any=False)
    buf = _Buffer(tensor, "isend", "tensor", writes=False)
    req = pg.comm.Isend(_bytes(buf.mpi), dest=peer, tag=tag)
    return Work(pg, [req], f"isend to rank {pg.ranks[peer]}", [], [tensor])


def irecv(tensor, src=None, group=None, tag=0, group_src=None):
    """Start receiving into `tensor` from rank `src` (None: any rank). After `wait()`,
    `work._source_rank()` is the sender's rank."""
    from mpi4py import MPI
    pg = _member_group(group, "irecv")
    if pg is None:
        return None
    _check_tag(tag, "irecv")
    peer = _peer(pg, src, group_src, "irecv", "src", may_be_any=True)
    buf = _Buffer(tensor, "irecv", "tensor", writes=True)
    req = pg.comm.Irecv(_bytes(buf.mpi), source=MPI.ANY_SOURCE if peer is None else peer,
                        tag=tag)
    who = "any rank" if peer is None else f"rank {pg.ranks[peer]}"
    return Work(pg, [req], f"irecv from {who}", [buf.written], [tensor],
                statuses=[MPI.Status()])


def send(tensor, dst=None, group=None, tag=0, group_dst=None):
    """Send `tensor` to rank `dst` and wait until its buffer may be reused."""
    work = isend(tensor, dst, group, tag, group_dst)
    if work is not None:
        work.wait()


def recv(tensor, src=None, group=None, tag=0, group_src=None):
    """Receive into `tensor` from rank `src` (None: any rank); returns the sender's rank
    (-1 on a rank outside `group`)."""
    work = irecv(tensor, src, group, tag, group_src)
    if work is None:
        return -1
    work.wait()
    return work._source_rank()


@dataclasses.dataclass
class P2POp:
    """One point-to-point operation for batch_isend_irecv: `op` is isend or irecv, `peer`
    a rank of the default group (or `group_peer` within `group`)."""
    op: object
    tensor: object
    peer: int = None
    group: object = None
    tag: int = 0
    group_peer: int = None

    def __post_init__(self):
        if self.op not in (isend, irecv):
            raise ValueError("Invalid ``op``. Expected ``op`` to be of type "
                             "``aotgrad.distributed.isend`` or ``aotgrad.distributed.irecv``.")


def batch_isend_irecv(p2p_op_list):
    """Start every operation of the list (all sends and receives are non-blocking, so their
    order does not matter); returns their Works."""
    if not p2p_op_list or not all(isinstance(p, P2POp) for p in p2p_op_list):
        raise ValueError("batch_isend_irecv: expected a non-empty list of P2POp")
    works = []
    for p in p2p_op_list:
        if p.op is isend:
            works.append(isend(p.tensor, p.peer, p.group, p.tag, p.group_peer))
        else:
            works.append(irecv(p.tensor, p.peer, p.group, p.tag, p.group_peer))
    return works
