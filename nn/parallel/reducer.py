"""DDP's gradient reduction: the buckets (at most bucket_cap_mb each, in reverse
registration order), the reducer that the post-accumulate-grad hooks feed (each full bucket's
non-blocking all-reduce starts while the backward goes on; the last one waits for all and
writes the averages into .grad), and its traced form, which records the same reduction into a
compiled program as collective_start/collective_wait prims."""
import time
import weakref

import numpy as np

from aotgrad.ir.core import current_builder
from aotgrad.runtime import dispatch
from aotgrad.runtime.grad_mode import no_grad
from aotgrad.runtime.tensor import Tensor


class _Bucket:
    """Parameters whose gradients travel in one all-reduce, and their flat buffer."""
    __slots__ = ("dtype", "params", "slices", "nbytes", "buffer", "pending", "work")

    def __init__(self, dtype):
        self.dtype = dtype
        self.params = []     # indices into the reducer's parameter list
        self.slices = []     # (start, stop) of each parameter in `buffer`
        self.nbytes = 0
        self.buffer = None
        self.pending = 0     # parameters whose gradient has not arrived in this backward
        self.work = None

    def add(self, index, param):
        start = self.slices[-1][1] if self.slices else 0
        self.params.append(index)
        self.slices.append((start, start + param._value.size))
        self.nbytes += param._value.nbytes

    def allocate(self):
        self.buffer = np.zeros(self.slices[-1][1], self.dtype)

    def view(self, k, shape):
        start, stop = self.slices[k]
        return self.buffer[start:stop].reshape(shape)


def _assign_buckets(params, cap_bytes):
    """Buckets over `params` in reverse order, one dtype per bucket; a bucket closes once it
    holds `cap_bytes` (a parameter larger than that gets a bucket of its own)."""
    buckets, open_by_dtype = [], {}
    for index in reversed(range(len(params))):
        p = params[index]
        dtype = p._value.dtype
        bucket = open_by_dtype.get(dtype)
        if bucket is None:
            bucket = open_by_dtype[dtype] = _Bucket(dtype)
            buckets.append(bucket)
        bucket.add(index, p)
        if bucket.nbytes >= cap_bytes:
            del open_by_dtype[dtype]
    for b in buckets:
        b.allocate()
    return buckets


class _TracedReduction:
    """One traced backward's reduction (the reducer's eager state stays untouched): the
    traced gradients as they arrive, and the started buckets."""

    def __init__(self, reducer, builder):
        self.reducer, self.builder = reducer, builder
        self.grads = {}               # param index -> its traced gradient (None: zero)
        self.pending = [len(b.params) for b in reducer.buckets]
        self.started = []             # per started bucket: the traced array in flight
        self.next_bucket = 0
        for index in reducer.unused_at_forward:   # (static_graph's learned set)
            self.ready(index, None)

    def release(self):
        """Drop the traced values (a traced tensor still referenced after the trace would
        count as state the function stored)."""
        self.grads, self.started = {i: None for i in self.grads}, []

    def check_complete(self):
        """At the end of the trace: a backward that started the reduction must have given
        every bucket its gradients (eagerly, the next forward raises otherwise)."""
        r = self.reducer
        if self.next_bucket < len(r.buckets):
            if r.traced is self:
                r.traced = None
            missing = [r.names[i] for i in range(len(r.params)) if i not in self.grads]
            dispatch.graph_break(dispatch.describe_break(
                f"DistributedDataParallel: the traced backward gave no gradient to "
                f"{', '.join(missing)}, so their buckets' all-reduces never start (eagerly an "
                f"error at the next forward; find_unused_parameters=True handles them)"), None)

    def ready(self, index, grad):
        r = self.reducer
        self.grads[index] = grad
        bucket, _ = r.where[index]
        self.pending[r.buckets.index(bucket)] -= 1
        while self.next_bucket < len(r.buckets) and self.pending[self.next_bucket] == 0:
            self.start(self.next_bucket)
            self.next_bucket += 1

    def start(self, i):
        from aotgrad.ir import prims
        from aotgrad.runtime.join_ops import cat
        from aotgrad.runtime.tprims import zeros
        r = self.reducer
        b = r.buckets[i]
        with no_grad():
            parts = []
            for index in b.params:
                g, p = self.grads[index], r.params[index]
                parts.append(zeros((p.numel(),), p.dtype) if g is None else g.reshape(-1))
            flat = cat(parts) if len(parts) > 1 else parts[0]
            self.started.append(dispatch.apply(prims.collective_start, flat,
                                               call=r.program_call(i)))

    def averaged(self):
        """(param index, its averaged gradient) for every parameter some rank used."""
        from aotgrad.ir import prims
        r = self.reducer
        used = r.static_used   # (None unless static_graph learned it: all are used)
        for i, (b, started) in enumerate(zip(r.buckets, self.started)):
            avg = dispatch.apply(prims.collective_wait, started, call=r.program_call(i))
            for k, index in enumerate(b.params):
                if used is not None and not used[index]:
                    continue
                start, stop = b.slices[k]
                yield index, avg[start:stop].reshape(r.params[index].shape)


class _Reducer:
    """The per-backward state of the gradient all-reduce: which parameters are ready, the next
    bucket to start, the bucket works in flight. (Slots: this state changes with every
    backward and is no input of a forward, so aotgrad.compile(ddp) must not guard on it, and
    the compiler's guards do not look into objects without a __dict__.)"""
    __slots__ = ("pg", "params", "names", "buckets", "where", "views", "find_unused",
                 "as_view", "ddp", "unused_at_forward", "active", "ready", "next_bucket",
                 "locally_used", "last_wait_s", "comm_hook", "comm_state", "static",
                 "static_used", "divisor", "traced", "calls")

    def __init__(self, ddp, params, names, buckets):
        self.pg = ddp.process_group
        self.params, self.names, self.buckets = params, names, buckets
        self.where = {}   # param index -> (bucket, position in it)
        self.views = [None] * len(params)   # param index -> its slot of its bucket
        for bucket in buckets:
            for k, index in enumerate(bucket.params):
                self.where[index] = (bucket, k)
                self.views[index] = bucket.view(k, params[index].shape)
        self.find_unused = ddp.find_unused_parameters
        # static_graph: the first iteration finds the unused parameters (as
        # find_unused_parameters does); later iterations reuse what it found
        self.static = ddp.static_graph
        self.static_used = None       # which parameters some rank used, once learned
        self.comm_hook = None         # register_comm_hook's hook(state, bucket) -> Future
        self.comm_state = None
        self.divisor = None           # the ranks' count the average divides by (None: all)
        self.traced = None            # the reduction of a backward being traced
        self.calls = None             # per bucket: the CollectiveCall compiled programs run
        self.as_view = ddp.gradient_as_bucket_view
        self.ddp = weakref.ref(ddp)
        self.unused_at_forward = ()   # indices the last forward's graph does not reach
        self.active = False           # a backward's reduction has started and not finished
        self.ready = [False] * len(params)
        self.next_bucket = 0
        self.locally_used = np.zeros(len(params), np.int32)
        # seconds the last reduction blocked the backward, waiting for its buckets: the
        # communication the backward did not hide
        self.last_wait_s = 0.0

    @property
    def searches_unused(self):
        """Whether this iteration looks for parameters its forward did not use."""
        return self.find_unused or (self.static and self.static_used is None)

    def start_backward(self):
        self.active = True
        self.ready = [False] * len(self.params)
        self.next_bucket = 0
        self.locally_used[:] = 0
        for bucket in self.buckets:
            bucket.pending = len(bucket.params)
            bucket.work = None
        for index in self.unused_at_forward:   # their zero contribution is ready now
            self.views[index][...] = 0
            self._mark_ready(index)

    def hook(self, index):
        ddp = self.ddp()
        if ddp is None or not ddp.require_backward_grad_sync:
            return     # no_sync(): the gradient stays local, accumulating in .grad
        param = self.params[index]
        grad = param._grad
        if not isinstance(grad._value, np.ndarray):
            return self.traced_hook(index, grad)
        if not self.active:
            self.start_backward()
        if self.ready[index]:
            raise RuntimeError(
                f"DistributedDataParallel: parameter {self.names[index]} received its gradient "
                f"twice in one backward pass before the reduction finished (a reentrant "
                f"backward or a second backward through the same forward is not supported)")
        view = self.views[index]
        if not (self.as_view and grad._value is view):
            np.copyto(view, grad._value)
            if self.as_view:   # the gradient lives in the bucket from now on
                param._grad = Tensor._make(view, False)
        self.locally_used[index] = 1
        self._mark_ready(index)

    def _mark_ready(self, index):
        self.ready[index] = True
        bucket, _ = self.where[index]
        bucket.pending -= 1
        while self.next_bucket < len(self.buckets) and \
                self.buckets[self.next_bucket].pending == 0:
            self.start_bucket(self.next_bucket)
            self.next_bucket += 1
        for b in self.buckets[:self.next_bucket]:   # MPI progresses inside MPI calls only
            b.work.done() if self.comm_hook is not None else b.work.is_completed()
        if self.next_bucket == len(self.buckets):
            self.finish()

    # ---- a backward traced by aotgrad.compile (a compiled whole training step) ----------
    def traced_hook(self, index, grad):
        """The hook inside a traced backward: the program gets each bucket's all-reduce as
        a step. A bucket's `collective_start` is recorded right after its last gradient (so
        the all-reduce travels while the program computes the rest of the backward), and
        once every bucket has started, the `collective_wait`s and the averaged gradients
        written into `.grad` (which the rest of the step, the optimizer, reads)."""
        from aotgrad.runtime.grad_accumulation import note_grad_write
        builder = current_builder()
        why = None
        if self.comm_hook is not None and self.compiled_average() is None:
            why = ("a communication hook other than ddp_comm_hooks' allreduce_hook, "
                   "fp16_compress_hook and bf16_compress_hook (register_comm_hook) runs "
                   "eagerly only")
        elif self.as_view:
            why = ("gradient_as_bucket_view=True makes each .grad a view of its bucket's "
                   "buffer, which the .grad a compiled program writes is not")
        elif self.divisor is not None:
            why = "Join's per-iteration divisor is eager state"
        elif any(b.dtype not in (np.float32, np.float64) for b in self.buckets):
            why = ("only float32 and float64 buckets are all-reduced inside a program (a "
                   "16-bit bucket is summed in float32 and rounded eagerly, where a compiled "
                   "program keeps 16-bit values in float32 between its steps)")
        if why is not None:
            dispatch.graph_break(dispatch.describe_break(
                f"DistributedDataParallel's gradient all-reduce in a compiled step: {why}"),
                grad)
        state = self.traced
        if state is None or state.builder is not builder:
            state = self.traced = _TracedReduction(self, builder)
            if hasattr(builder, "end_checks"):
                builder.end_checks.append(state.check_complete)
        if index in state.grads:
            raise RuntimeError(
                f"DistributedDataParallel: parameter {self.names[index]} received its gradient "
                f"twice in one backward pass (a reentrant backward or a second backward "
                f"through the same forward is not supported)")
        state.ready(index, grad)
        if state.next_bucket == len(self.buckets):
            self.traced = None
            with no_grad():
                for index, g in state.averaged():
                    param = self.params[index]
                    note_grad_write(param)
                    param._grad = g
            state.release()

    def compiled_average(self):
        """How a compiled step averages the buckets: DDP's own all-reduce, or the one of a
        built-in communication hook (BucketAverage); None for another hook."""
        from aotgrad.distributed.program_collectives import BucketAverage
        if self.comm_hook is None:
            return BucketAverage.SUM_THEN_DIVIDE
        from aotgrad.distributed.algorithms.ddp_comm_hooks import default_hooks as h
        return {h.allreduce_hook: BucketAverage.DIVIDE_THEN_SUM,
                h.fp16_compress_hook: BucketAverage.FLOAT16,
                h.bf16_compress_hook: BucketAverage.BFLOAT16}.get(self.comm_hook)

    def program_call(self, i):
        """Bucket i's CollectiveCall (one per bucket: programs never merge two of them)."""
        if self.calls is None:
            from aotgrad.distributed.process_group import default_group
            from aotgrad.distributed.program_collectives import average_call
            ddp = self.ddp()
            how = self.compiled_average()
            # (a built-in hook's state is the process group it averages over)
            pg = self.pg if self.comm_hook is None else default_group(self.comm_state)
            self.calls = [average_call(
                pg, f"DDP {ddp._serial} bucket {i}: all-reduce ({how.value} average) of "
                    f"{b.buffer.size} elements over ranks {pg.ranks}", how)
                for i, b in enumerate(self.buckets)]
        return self.calls[i]

    def start_bucket(self, i):
        """Start bucket i's reduction: the all-reduce, or the registered comm hook's."""
        from aotgrad import distributed as dist
        from aotgrad.distributed.grad_bucket import GradBucket
        b = self.buckets[i]
        buffer = Tensor._make(b.buffer, False)
        if self.comm_hook is None:
            b.work = dist.all_reduce(buffer, group=self.pg, async_op=True)
            return
        grads = [Tensor._make(self.views[index], False) for index in b.params]
        bucket = GradBucket(i, buffer, grads, [self.params[index] for index in b.params],
                            i == len(self.buckets) - 1)
        b.work = self.comm_hook(self.comm_state, bucket)
        if not hasattr(b.work, "wait") or not hasattr(b.work, "done"):
            raise TypeError(f"DistributedDataParallel: the communication hook must return a "
                            f"Future (aotgrad.futures.Future), got {type(b.work).__name__}")

    def wait_bucket(self, b):
        """Wait for bucket b's reduction; its averaged gradients are then in b.buffer."""
        if self.comm_hook is None:
            b.work.wait()
            return
        result = b.work.wait()
        value = getattr(result, "_value", None)
        if not isinstance(value, np.ndarray) or value.size != b.buffer.size:
            raise ValueError(f"DistributedDataParallel: the communication hook's future must "
                             f"hold a tensor of the bucket's {b.buffer.size} elements, got "
                             f"{result!r}")
        if value is not b.buffer:
            np.copyto(b.buffer, value.reshape(b.buffer.shape))

    def used_by_some_rank(self):
        """Per parameter: did any rank's forward use it (an all-reduce of the local flags)?
        None when this iteration does not search (every parameter counts as used)."""
        from aotgrad import distributed as dist
        if self.static and self.static_used is not None:
            return self.static_used
        if not self.searches_unused:
            return None
        counts = Tensor._make(self.locally_used.copy(), False)
        dist.all_reduce(counts, group=self.pg)
        used = counts._value
        if self.static:
            self.static_used = used
            ddp = self.ddp()
            if ddp is not None:   # (a value of the module, which compiled steps guard on)
                ddp._static_graph_learned = True
        return used

    def finish(self):
        """Wait for every bucket, average, and write the gradients back."""
        start = time.perf_counter()
        for bucket in self.buckets:
            self.wait_bucket(bucket)
        self.last_wait_s = time.perf_counter() - start
        size = self.pg.size() if self.divisor is None else self.divisor
        used = self.used_by_some_rank()   # a parameter no rank used keeps its .grad
        for bucket in self.buckets:
            if self.comm_hook is None:    # (a hook averages itself)
                np.divide(bucket.buffer, size, out=bucket.buffer)
            for index in bucket.params:
                if used is None or used[index]:
                    self._write_grad(self.params[index], self.views[index])
        self.active = False

    def shadow(self):
        """A joined rank's part of one iteration of the others' reduction (Join): every
        bucket's all-reduce (or comm hook) on zeros, in order; its gradients stay."""
        for bucket in self.buckets:
            bucket.buffer[...] = 0
        for i in range(len(self.buckets)):
            self.start_bucket(i)
        for bucket in self.buckets:
            self.wait_bucket(bucket)
        self.locally_used[:] = 0
        self.used_by_some_rank()

    def _write_grad(self, param, averaged):
        grad = param._grad
        if grad is not None and grad._value is averaged:
            grad._version_counter.v += 1
            return
        if self.as_view:
            param._grad = Tensor._make(averaged, False)
        elif grad is not None and grad._value.flags.writeable and grad.grad_fn is None:
            np.copyto(grad._value, averaged)
            grad._version_counter.v += 1
        else:
            param._grad = Tensor._make(averaged.copy(), False)

    def check_finished(self):
        """At a forward: the previous backward's reduction must have completed."""
        if not self.active:
            return
        missing = [self.names[i] for i, r in enumerate(self.ready) if not r]
        raise RuntimeError(
            "Expected to have finished reduction in the prior iteration before starting a new "
            "one. This error indicates that your module has parameters that were not used in "
            "producing loss. You can enable unused parameter detection by passing the keyword "
            "argument `find_unused_parameters=True` to "
            "`aotgrad.nn.parallel.DistributedDataParallel`, and by making sure all `forward` "
            "function outputs participate in calculating loss. Parameters which did not "
            f"receive grad for rank {self.pg.rank()}: {', '.join(missing)}")


class _ReadyHook:
    """A parameter's post-accumulate-grad hook: its gradient is ready for its bucket.
    `records_into_trace`: inside a traced backward it records the bucket's all-reduce as
    steps of the compiled program (see _Reducer.traced_hook), rather than breaking the
    graph as other hooks do."""
    __slots__ = ("reducer", "index")
    records_into_trace = True

    def __init__(self, reducer, index):
        self.reducer, self.index = reducer, index

    def __call__(self, _param):
        self.reducer.hook(self.index)
