"""DistributedDataParallel: data-parallel training over the ranks of aotgrad.distributed.

Each rank holds a full replica and runs its own shard of the batch. At construction rank 0's
parameters and buffers are broadcast so that the replicas start equal. The parameters that
require grad are grouped into buckets (at most `bucket_cap_mb` each, in reverse registration
order, which is roughly the order in which a backward produces their gradients). A
post-accumulate-grad hook per parameter copies its gradient into its bucket; once every
gradient of a bucket is in, the bucket's non-blocking all-reduce starts, while the backward
goes on computing the gradients of earlier layers. Buckets start in index order on every rank
(MPI needs the same sequence of collectives everywhere). When the last bucket has started,
the hook waits for all of them, divides by the world size and writes the averages back into
`.grad`: after `loss.backward()` every rank holds the gradient of the mean loss over all
shards.

Inside a traced backward (aotgrad.compile around a whole training step) the same hooks run at
trace time and record the reduction into the program instead: per bucket a
`prims.collective_start` after its last gradient, then the `prims.collective_wait`s and the
averaged gradients as the new `.grad` (see reducer._TracedReduction; the buckets and the
reducer live in reducer.py).
"""
import contextlib
import itertools

import numpy as np

from aotgrad.ir.core import current_builder
from aotgrad.nn.module import Module
from aotgrad.nn.parallel.reducer import _ReadyHook, _Reducer, _assign_buckets
from aotgrad.runtime import dispatch
from aotgrad.runtime.engine import AccumulateGrad
from aotgrad.runtime.grad_mode import no_grad, state as _grad_mode
from aotgrad.runtime.tensor import Tensor

_MB = 1024 * 1024


def _output_tensors(out, found):
    if isinstance(out, Tensor):
        found.append(out)
    elif isinstance(out, (list, tuple)):
        for o in out:
            _output_tensors(o, found)
    elif isinstance(out, dict):
        for o in out.values():
            _output_tensors(o, found)
    return found


def _leaves_reached(outputs):
    """ids of the leaf tensors the autograd graph of `outputs` reaches."""
    seen, leaves = set(), set()
    stack = [t.grad_fn for t in outputs if t.grad_fn is not None]
    leaves.update(id(t) for t in outputs if t.grad_fn is None and t.requires_grad)
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        if isinstance(node, AccumulateGrad):
            leaves.add(id(node.variable))
            continue
        stack.extend(nf for nf, _ in node.next_functions if nf is not None)
    return leaves


class DistributedDataParallel(Module):
    """torch.nn.parallel.DistributedDataParallel on aotgrad.distributed (MPI).

    `module` is an nn.Module, or a module compiled with aotgrad.compile (its compiled forward
    and backward run; `.module` is then the module it compiles). Call
    `init_process_group` first. `device_ids` must be None (CPU). `bucket_cap_mb` (default
    25) bounds a bucket; `find_unused_parameters=True` handles parameters that the forward
    does not use on some ranks (their gradient counts as zero there; a parameter no rank used
    keeps its `.grad`); without it such a parameter is an error at the next forward, as in
    PyTorch. `gradient_as_bucket_view=True` makes each `.grad` a view of its bucket (no copy
    back after the reduction). `static_graph=True` promises the same graph every iteration:
    the first iteration finds the parameters the forward leaves unused (as
    find_unused_parameters does), and later iterations reuse that without searching (so the
    forward of a compiled whole step traces through). `register_comm_hook(state, hook)`
    replaces the buckets' all-reduce; `with Join([ddp]):` (or `ddp.join()`) trains on
    uneven inputs. The state dict is the module's under the prefix `module.`.
    """

    def __init__(self, module, device_ids=None, output_device=None, dim=0,
                 broadcast_buffers=True, process_group=None, bucket_cap_mb=None,
                 find_unused_parameters=False, check_reduction=False,
                 gradient_as_bucket_view=False, static_graph=False):
        super().__init__()
        from aotgrad.distributed.process_group import GroupMember, default_group
        if device_ids not in (None, [], ["cpu"]) or output_device not in (None, "cpu"):
            raise ValueError("DistributedDataParallel: device_ids and output_device must be None "
                             "for a CPU module")
        inner = module if isinstance(module, Module) else getattr(module, "module", None)
        if not isinstance(inner, Module):
            raise TypeError(f"DistributedDataParallel: module must be an nn.Module or a module "
                            f"compiled with aotgrad.compile, got {type(module).__name__}")
        self.module = inner
        object.__setattr__(self, "_call_module", module)
        if process_group is GroupMember.NON_GROUP_MEMBER:
            raise ValueError("DistributedDataParallel: this rank is not part of process_group")
        self.process_group = default_group(process_group)
        self.dim, self.broadcast_buffers = dim, broadcast_buffers
        self.find_unused_parameters = find_unused_parameters
        self.static_graph = bool(static_graph)
        self._static_graph_learned = False
        self._has_comm_hook = False
        self._serial = next(DistributedDataParallel._instances)
        from aotgrad.distributed.algorithms.join import JoinConfig
        self._join_config = JoinConfig.construct_disabled_join_config()
        self.gradient_as_bucket_view = gradient_as_bucket_view
        self.bucket_cap_mb = 25 if bucket_cap_mb is None else bucket_cap_mb
        self.require_backward_grad_sync = True
        named = [(n, p) for n, p in inner.named_parameters() if p.requires_grad]
        if not named:
            raise RuntimeError("DistributedDataParallel is not needed when a module doesn't "
                               "have any parameter that requires a gradient.")
        self._check_same_parameters(named)
        self._sync_module_states()
        params = [p for _, p in named]
        buckets = _assign_buckets(params, self.bucket_cap_mb * _MB)
        object.__setattr__(self, "reducer", _Reducer(self, params, [n for n, _ in named],
                                                     buckets))
        reducer = self.reducer
        self._hook_handles = [p.register_post_accumulate_grad_hook(_ReadyHook(reducer, i))
                              for i, p in enumerate(params)]

    def _check_same_parameters(self, named):
        """Every rank must hold the same parameters (names, shapes, dtypes, order)."""
        mine = [(n, tuple(p.shape), p.dtype.name) for n, p in named]
        everyone = self.process_group.comm.allgather(mine)
        for r, theirs in enumerate(everyone):
            if theirs != mine:
                diff = next(((a, b) for a, b in zip(mine, theirs) if a != b),
                            (f"{len(mine)} parameters", f"{len(theirs)} parameters"))
                raise RuntimeError(
                    f"DistributedDataParallel: rank {self.process_group.rank()}'s module "
                    f"differs from rank {r}'s: {diff[0]} here, {diff[1]} there")

    def _sync_module_states(self, src=None):
        """The parameters and buffers of rank `src` (default: the group's first rank)
        everywhere."""
        from aotgrad import distributed as dist
        src = self.process_group.ranks[0] if src is None else src
        states = [p for _, p in self.module.named_parameters()]
        if self.broadcast_buffers:
            states += [b for _, b in self.module.named_buffers() if b is not None]
        with no_grad():
            works = [dist.broadcast(t, src, group=self.process_group, async_op=True)
                     for t in states]
            for w in works:
                w.wait()

    def _sync_buffers(self):
        from aotgrad import distributed as dist
        buffers = [b for _, b in self.module.named_buffers() if b is not None]
        with no_grad():
            works = [dist.broadcast(b, self.process_group.ranks[0],
                                     group=self.process_group, async_op=True)
                     for b in buffers]
            for w in works:
                w.wait()

    def _set_static_graph(self):
        """static_graph=True after construction (before the first iteration)."""
        self.static_graph = self.reducer.static = True

    def register_comm_hook(self, state, hook):
        """hook(state, bucket) replaces the all-reduce of each bucket (a GradBucket): it
        returns a Future whose value is a tensor of the bucket's size holding the bucket's
        final (averaged) gradients. See aotgrad.distributed.algorithms.ddp_comm_hooks
        (allreduce_hook, fp16_compress_hook, bf16_compress_hook). Once, before the first
        backward."""
        if not callable(hook):
            raise TypeError(f"DistributedDataParallel.register_comm_hook: hook must be "
                            f"callable, got {type(hook).__name__}")
        if self.reducer.comm_hook is not None:
            raise RuntimeError("register_comm_hook or register_builtin_comm_hook can only be "
                               "called once.")
        if self.reducer.active:
            raise RuntimeError("register_comm_hook must be called before the first backward "
                               "pass that reduces gradients")
        self.reducer.comm_hook, self.reducer.comm_state = hook, state
        self.reducer.calls = None   # (a compiled step's all-reduces are the hook's from now)
        self._has_comm_hook = True   # (a module value: compiled steps guard on it)

    # ---- Join (uneven inputs): DDP is a joinable ---------------------------------------
    def join(self, divide_by_initial_world_size=True, enable=True,
             throw_on_early_termination=False):
        """`with ddp.join():` is `with Join([ddp], ...)`."""
        from aotgrad.distributed.algorithms.join import Join
        return Join([self], enable, throw_on_early_termination,
                    divide_by_initial_world_size=divide_by_initial_world_size)

    def join_hook(self, **kwargs):
        return _DDPJoinHook(self, kwargs.get("divide_by_initial_world_size", True))

    @property
    def join_device(self):
        from aotgrad.runtime.device import device
        return device("cpu")

    @property
    def join_process_group(self):
        return self.process_group

    def _has_buffers(self):
        return self.broadcast_buffers and any(
            b is not None for _, b in self.module.named_buffers())

    def _join_iteration(self):
        """Under Join: count this rank as training, then agree with the joined ranks on
        whether this iteration's backward reduces (no_sync) and by how many to divide."""
        from aotgrad import distributed as dist
        from aotgrad.distributed.algorithms.join import Join
        Join.notify_join_context(self)
        flags = Tensor._make(np.array([int(self.require_backward_grad_sync), 1], np.int64),
                             False)
        dist.all_reduce(flags, group=self.process_group)
        if not self._join_divides_by_world:
            self.reducer.divisor = int(flags._value[1])

    def forward(self, *inputs, **kwargs):
        tracing = current_builder() is not None
        if not tracing:   # (under a trace: the reduction state is no value of the program)
            self.reducer.check_finished()
        has_buffers = self._has_buffers()
        # (read here by name, so that a compiled step traces again once static_graph has
        # learned the unused parameters: from then on the forward does not communicate)
        searching = self.find_unused_parameters or \
            (self.static_graph and not self._static_graph_learned)
        if tracing:
            why = self._traced_forward_break(has_buffers, searching)
            if why is not None:
                dispatch.graph_break(dispatch.describe_break(
                    f"DistributedDataParallel.forward in a compiled step: {why}; compile the "
                    f"module inside it instead, DistributedDataParallel(aotgrad.compile("
                    f"model))"), None)
        if tracing and self._has_comm_hook and self.reducer.compiled_average() is None:
            dispatch.graph_break(dispatch.describe_break(
                "DistributedDataParallel with a communication hook other than "
                "ddp_comm_hooks' allreduce_hook, fp16_compress_hook and bf16_compress_hook "
                "(register_comm_hook): the hook runs eagerly only"), None)
        if self._join_config.enable:
            self._join_iteration()
        if has_buffers and self.process_group.size() > 1:
            self._sync_buffers()
        out = self._call_module(*inputs, **kwargs)
        if searching and _grad_mode.grad_enabled and not tracing and \
                self.require_backward_grad_sync:
            reached = _leaves_reached(_output_tensors(out, []))
            self.reducer.unused_at_forward = [i for i, p in enumerate(self.reducer.params)
                                              if id(p) not in reached]
        return out

    def _traced_forward_break(self, has_buffers, searching):
        """Why this forward cannot be part of a compiled program (None: it can)."""
        if self._join_config.enable:
            return ("under Join each iteration first agrees with the ranks that joined (an "
                    "eager all-reduce) on whether this backward reduces and by how many it "
                    "divides")
        if self.find_unused_parameters:
            return ("with find_unused_parameters=True, which parameters get a gradient "
                    "depends on what every rank's forward used (its autograd graph, then an "
                    "all-reduce of the flags), known only when the step runs")
        if searching:
            return ("static_graph's first iteration finds the unused parameters eagerly "
                    "(as find_unused_parameters does); from the second iteration on the "
                    "step compiles")
        if has_buffers:
            return ("the module's buffers are broadcast from rank 0 on every call "
                    "(broadcast_buffers=True)")
        return None

    @contextlib.contextmanager
    def no_sync(self):
        """Backward passes inside accumulate gradients locally, without communication; the
        first backward after the block all-reduces the accumulated gradients."""
        old = self.require_backward_grad_sync
        self.require_backward_grad_sync = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = old

    _join_divides_by_world = True
    _instances = itertools.count()   # numbers the instances, for their programs' steps

    def extra_repr(self):
        return (f"bucket_cap_mb={self.bucket_cap_mb}, "
                f"find_unused_parameters={self.find_unused_parameters}, "
                f"buckets={len(self.reducer.buckets)}")


class _DDPJoinHook:
    """DDP's part of Join: a joined rank shadows each iteration of the ranks still training
    (their buffer broadcast, the no_sync agreement, the buckets' all-reduces with zero
    gradients) and, at the end, takes the parameters of the last rank to join."""

    def __init__(self, ddp, divide_by_initial_world_size):
        self.ddp = ddp
        ddp._join_divides_by_world = bool(divide_by_initial_world_size)

    def main_hook(self):
        from aotgrad import distributed as dist
        ddp = self.ddp
        if ddp._has_buffers() and ddp.process_group.size() > 1:
            ddp._sync_buffers()
        flags = Tensor._make(np.zeros(2, np.int64), False)
        dist.all_reduce(flags, group=ddp.process_group)
        if flags._value[0] > 0:     # the others' backward reduces this iteration
            ddp.reducer.shadow()

    def post_hook(self, is_last_joiner):
        """Every rank takes the parameters and buffers of the last rank to join (its
        optimizer ran the most steps)."""
        from aotgrad import distributed as dist
        ddp = self.ddp
        pg = ddp.process_group
        mine = Tensor._make(np.array([pg.rank() if is_last_joiner else -1], np.int64), False)
        dist.all_reduce(mine, op=dist.ReduceOp.MAX, group=pg)
        ddp._sync_module_states(src=pg.ranks[int(mine._value[0])])
        ddp.reducer.divisor = None
