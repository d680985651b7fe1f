"""The default process group on MPI: init_process_group, the rank and size queries, the timeout,
and the abort of the whole job when one rank fails.

mpi4py is imported here on first use only, so that `import aotgrad` (and
`import aotgrad.distributed`) stays free of MPI: `MPI_Init` runs when
`init_process_group` does.
"""
import datetime
import os
import sys
import time
import traceback

# PyTorch's default for its CPU backends: a collective that has not finished after this long
# raises (and, uncaught, aborts the job) instead of waiting forever
DEFAULT_TIMEOUT = datetime.timedelta(minutes=30)


class DistError(RuntimeError):
    """An error of aotgrad.distributed (torch.distributed.DistError)."""


class DistBackendError(DistError):
    """The communication backend failed, or a collective exceeded the group's timeout."""


def load_mpi():
    """mpi4py's MPI module (MPI_Init on first import), or a RuntimeError saying how to install."""
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise RuntimeError(
            "aotgrad.distributed needs mpi4py and an MPI library: pip install "
            "'aotgrad[distributed]' (mpi4py with MPICH's wheels), or pip install mpi4py "
            f"against the cluster's MPI ({e})") from e
    return MPI


def is_available():
    """Whether collectives can run here: mpi4py is installed (MPI is not started by asking)."""
    import importlib.util
    return importlib.util.find_spec("mpi4py") is not None


is_mpi_available = is_available


class ProcessGroup:
    """A group of ranks and its own MPI communicator (for the default group a duplicate of
    the launcher's world, so that no message of aotgrad's can match a message of other MPI
    code in the program). `ranks`: the members' ranks in the default group, in group order."""

    def __init__(self, comm, timeout, ranks):
        self.comm = comm
        self.timeout = timeout
        self.ranks = list(ranks)
        # operations compiled programs started and have not waited for yet:
        # id(array) -> (MPI request, array) (distributed/program_collectives.py)
        self.program_requests = {}
        self.program_wait_s = 0.0   # seconds compiled programs have blocked in those waits

    def group_rank(self, global_rank):
        """The rank in this group of the process with rank `global_rank` in the default
        group (PyTorch's src/dst arguments are global ranks)."""
        try:
            return self.ranks.index(global_rank)
        except ValueError:
            raise ValueError(f"rank {global_rank} is not part of the group (its ranks: "
                             f"{self.ranks})") from None

    def rank(self):
        return self.comm.Get_rank()

    def size(self):
        return self.comm.Get_size()

    def name(self):
        return "mpi"

    def __repr__(self):
        return f"ProcessGroup(backend='mpi', rank={self.rank()}, size={self.size()})"


class GroupMember:
    """What new_group returns to the ranks it leaves out (torch.distributed.GroupMember)."""
    NON_GROUP_MEMBER = object()


class _DefaultGroup:
    """What init_process_group set up: the world group and the excepthook it replaced."""

    def __init__(self):
        self.group = None
        self.previous_excepthook = None


_default = _DefaultGroup()


def _timedelta_seconds(timeout):
    if timeout is None:
        return None
    if isinstance(timeout, datetime.timedelta):
        return timeout.total_seconds()
    raise TypeError(f"init_process_group: timeout must be a datetime.timedelta, got "
                    f"{type(timeout).__name__}")


def _check_launch(MPI, comm, world_size, rank):
    """The world MPI formed must be the one the launcher meant: a mismatch is an error here
    rather than k copies of a one-process job later."""
    size = comm.Get_size()
    if world_size not in (-1, None) and world_size != size:
        raise ValueError(f"init_process_group(backend='mpi'): world_size={world_size} but the MPI "
                         f"launcher started {size} processes (the MPI backend takes the rank "
                         f"and world size from the launcher; leave them out)")
    if rank not in (-1, None) and rank != comm.Get_rank():
        raise ValueError(f"init_process_group(backend='mpi'): rank={rank} but MPI gave this "
                         f"process rank {comm.Get_rank()}")
    # srun (Slurm) starts the processes itself; with a PMI this MPI does not speak, each
    # process forms a world of its own
    tasks = os.environ.get("SLURM_STEP_NUM_TASKS")
    if size == 1 and tasks is not None and tasks.isdigit() and int(tasks) > 1 and \
            "SLURM_PROCID" in os.environ:
        raise RuntimeError(
            f"init_process_group(backend='mpi'): srun started {tasks} tasks but MPI sees a "
            f"world of 1 in each: srun's process-management interface does not match this MPI "
            f"library ({MPI.Get_library_version().splitlines()[0].strip()}); launch with "
            f"`srun --mpi=pmi2` (MPICH) or `srun --mpi=pmix` (Open MPI), or with the "
            f"library's own mpiexec inside the allocation")


def init_process_group(backend=None, init_method=None, timeout=None, world_size=-1, rank=-1,
                       store=None, group_name="", pg_options=None, device_id=None):
    """Join the job's process group. backend 'mpi' (the only one, and the default): the rank
    and world size come from the MPI launcher (`mpiexec -n 4 python train.py`, or Slurm's
    `srun`). `timeout` (a timedelta, default 30 minutes) bounds every wait on a collective:
    past it the wait raises DistBackendError. An exception that nothing catches, on any rank,
    ends the whole job (MPI_Abort) after printing the rank and the error, instead of leaving
    the other ranks waiting for it."""
    if backend is not None and str(backend).lower() != "mpi":
        raise ValueError(f"init_process_group: backend {backend!r} is not available; aotgrad "
                         f"communicates through MPI only (backend='mpi')")
    if init_method not in (None, "env://") or store is not None:
        raise ValueError("init_process_group(backend='mpi'): init_method and store are not "
                         "used: the MPI launcher connects the processes")
    if _default.group is not None:
        raise RuntimeError("trying to initialize the default process group twice!")
    seconds = _timedelta_seconds(DEFAULT_TIMEOUT if timeout is None else timeout)
    MPI = load_mpi()
    _check_launch(MPI, MPI.COMM_WORLD, world_size, rank)
    _default.group = ProcessGroup(MPI.COMM_WORLD.Dup(), seconds,
                                  range(MPI.COMM_WORLD.Get_size()))
    _default.previous_excepthook = sys.excepthook
    sys.excepthook = _abort_job


def is_initialized():
    return _default.group is not None


def default_group(group=None):
    """`group`, or the default group; an error before init_process_group."""
    if group is not None:
        return group
    if _default.group is None:
        raise ValueError("Default process group has not been initialized, please make sure to "
                         "call init_process_group.")
    return _default.group


def new_group(ranks=None, timeout=None, backend=None, pg_options=None,
              use_local_synchronization=False, group_desc=None, device_id=None):
    """A process group of the default group's `ranks` (all by default, in increasing order),
    with its own communicator. Every rank of the default group calls it (only the members
    with use_local_synchronization=True); the others get GroupMember.NON_GROUP_MEMBER, and
    collectives on it do nothing there (with a warning), as in PyTorch."""
    world = default_group()
    if backend is not None and str(backend).lower() != "mpi":
        raise ValueError(f"new_group: backend {backend!r} is not available (only 'mpi')")
    size = world.size()
    members = list(range(size)) if ranks is None else sorted(set(int(r) for r in ranks))
    bad = [r for r in members if not 0 <= r < size]
    if bad:
        raise ValueError(f"new_group: ranks {bad} are not ranks of the default group "
                         f"(0..{size - 1})")
    seconds = world.timeout if timeout is None else _timedelta_seconds(timeout)
    mine = world.rank() in members
    if use_local_synchronization and not mine:
        return GroupMember.NON_GROUP_MEMBER
    group = world.comm.Get_group().Incl(members)
    try:
        # Create: collective over the default group; Create_group: over the members only
        comm = world.comm.Create_group(group) if use_local_synchronization else \
            world.comm.Create(group)
    finally:
        group.Free()
    if not mine:
        return GroupMember.NON_GROUP_MEMBER
    return ProcessGroup(comm, seconds, members)


def get_rank(group=None):
    """This process's rank in `group` (default: the default group); -1 outside it."""
    if group is GroupMember.NON_GROUP_MEMBER:
        return -1
    return default_group(group).rank()


def get_world_size(group=None):
    """The number of ranks in `group`; -1 for a group this process is not part of."""
    if group is GroupMember.NON_GROUP_MEMBER:
        return -1
    return default_group(group).size()


def get_process_group_ranks(group):
    """The default group's ranks of `group`'s members, in group order."""
    return list(default_group(group).ranks)


def get_global_rank(group, group_rank):
    return default_group(group).ranks[group_rank]


def get_group_rank(group, global_rank):
    return default_group(group).group_rank(global_rank)


def get_backend(group=None):
    default_group(group)
    return "mpi"


def destroy_process_group(group=None):
    """Leave the default group (pending collectives must have been waited for) and put the
    previous excepthook back. MPI itself finalizes when the interpreter exits."""
    if group is GroupMember.NON_GROUP_MEMBER:
        return
    pg = default_group(group)
    if pg is not _default.group:
        pg.comm.Free()
        return
    pg.comm.Free()
    _default.group = None
    if sys.excepthook is _abort_job:
        sys.excepthook = _default.previous_excepthook
    _default.previous_excepthook = None


def _abort_job(exc_type, exc, tb):
    """sys.excepthook while a group exists: print which rank failed and why, then MPI_Abort,
    which ends every rank of the job (the others may be blocked in a collective)."""
    try:
        from mpi4py import MPI
        world = MPI.COMM_WORLD
        who = f"rank {world.Get_rank()} of {world.Get_size()}"
        # one write: the launcher may stop forwarding this rank's output once it aborts
        sys.stderr.write(f"aotgrad.distributed: {who} raised {exc_type.__name__}: {exc}\n"
                         + "".join(traceback.format_exception(exc_type, exc, tb))
                         + f"aotgrad.distributed: {who} aborts the job (MPI_Abort)\n")
        sys.stderr.flush()
        for stream in (sys.stdout, sys.stderr):
            _wait_until_read(stream)
    finally:
        MPI.COMM_WORLD.Abort(1)


def _wait_until_read(stream, limit=2.0):
    """Wait (at most `limit` seconds) until the launcher has read what this rank wrote to
    `stream`'s pipe. The launcher ends every rank as soon as it sees the abort, and output it
    had not yet read from the pipe is lost: on a busy machine, the whole error message."""
    import fcntl
    import stat
    import termios
    try:
        stream.flush()
        fd = stream.fileno()
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return
        unread = bytearray(4)
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            fcntl.ioctl(fd, termios.FIONREAD, unread)
            if int.from_bytes(unread, sys.byteorder) == 0:
                return
            time.sleep(0.005)
    except (OSError, ValueError, AttributeError):
        return      # not a pipe we can ask (a closed or replaced stream): abort at once


def wait_requests(requests, pg, what, timeout=None, statuses=None):
    """Wait for MPI requests, at most the group's timeout (or `timeout` seconds): past it,
    DistBackendError naming the collective and the rank. Polls (with short sleeps once the
    wait is long) rather than blocking in MPI_Waitall, which no timeout can interrupt.
    `statuses`: a list of MPI.Status, one per request, filled in (a receive's source)."""
    from mpi4py import MPI
    limit = pg.timeout if timeout is None else timeout
    if limit is None:
        MPI.Request.Waitall(requests, statuses)
        return
    start = time.monotonic()
    spins = 0
    while not MPI.Request.Testall(requests, statuses):
        spins += 1
        if spins < 2000:
            continue
        waited = time.monotonic() - start
        if waited > limit:
            raise DistBackendError(
                f"aotgrad.distributed: rank {pg.rank()}: {what} did not complete within the "
                f"timeout of {datetime.timedelta(seconds=limit)} (init_process_group's "
                f"timeout): another rank failed, stopped, or called different collectives")
        # a sleeping waiter leaves the core to the ranks still computing (the job may run
        # more ranks than cores); short, because MPI moves a message on only inside a call
        # such as this Testall, and a collective's latency should stay low
        time.sleep(min(2e-4, 1e-5 * (spins - 1999)))
