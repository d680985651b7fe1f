"""Checks that run inside an MPI job: `mpiexec -n K python tests/mpi_checks.py SCENARIO`.

tests/distributed/test_distributed.py launches them. Every rank runs the same checks; a failed check
raises, and the excepthook of init_process_group then ends the job with the rank and the
error. "ok <scenario> <rank>" on stdout marks a rank that got through.

Scenarios: collectives (each collective against numpy), groups (new_group), ddp
(DistributedDataParallel over K ranks against one process on the whole batch), all (the
three), and the failures: raise, unused_error, timeout.
"""
import datetime
import sys
import time
import warnings

import numpy as np

import aotgrad
import aotgrad.distributed as dist
from aotgrad import nn
from aotgrad.nn.parallel import DistributedDataParallel as DDP


def close(got, want, dtype, what):
    tol = 1e-12 if dtype == aotgrad.float64 else 1e-5
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    err = np.abs(got - want).max() / max(1.0, np.abs(want).max())
    if not err <= tol:
        raise AssertionError(f"rank {dist.get_rank()}: {what}: relative error {err:.3g} > {tol}")


def equal(got, want, what):
    if not np.array_equal(np.asarray(got), np.asarray(want)):
        raise AssertionError(f"rank {dist.get_rank()}: {what}: {got} != {want}")


# ---- collectives -------------------------------------------------------------------------

def rank_data(r, shape, dtype):
    rng = np.random.default_rng(100 + r)
    if np.dtype(dtype).kind == "b":
        return rng.random(shape) < 0.5
    if np.dtype(dtype).kind in "iu":
        return rng.integers(1, 5, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


REDUCE = {dist.ReduceOp.SUM: lambda a: a.sum(0), dist.ReduceOp.PRODUCT: lambda a: a.prod(0),
          dist.ReduceOp.MIN: lambda a: a.min(0), dist.ReduceOp.MAX: lambda a: a.max(0),
          dist.ReduceOp.AVG: lambda a: a.sum(0) / len(a),
          dist.ReduceOp.BAND: lambda a: np.bitwise_and.reduce(a, 0),
          dist.ReduceOp.BOR: lambda a: np.bitwise_or.reduce(a, 0),
          dist.ReduceOp.BXOR: lambda a: np.bitwise_xor.reduce(a, 0)}


def check_collectives():
    r, k = dist.get_rank(), dist.get_world_size()
    shape = (3, 4)
    for dtype in (np.float32, np.float64, np.int64, np.bool_):
        every = np.stack([rank_data(q, shape, dtype) for q in range(k)])
        for op, ref in REDUCE.items():
            kind = np.dtype(dtype).kind
            if op is dist.ReduceOp.AVG and kind != "f" or \
                    op in (dist.ReduceOp.BAND, dist.ReduceOp.BOR, dist.ReduceOp.BXOR) and \
                    kind == "f":
                continue
            want = ref(every)
            if kind == "b":     # sum of bools = any, product = all (PyTorch's)
                want = {dist.ReduceOp.SUM: every.any(0),
                        dist.ReduceOp.PRODUCT: every.all(0)}.get(op, want)
            for async_op in (False, True):
                t = aotgrad.from_numpy(rank_data(r, shape, dtype).copy())
                work = dist.all_reduce(t, op=op, async_op=async_op)
                if async_op:
                    work.wait()
                    assert work.is_completed()
                close(t.numpy(), want, aotgrad.float32 if dtype == np.float32 else
                      aotgrad.float64, f"all_reduce {op} {np.dtype(dtype).name}")
            t = aotgrad.from_numpy(rank_data(r, shape, dtype).copy())
            dist.reduce(t, dst=k - 1, op=op)
            close(t.numpy(), want if r == k - 1 else rank_data(r, shape, dtype),
                  aotgrad.float32 if dtype == np.float32 else aotgrad.float64,
                  f"reduce {op} {np.dtype(dtype).name}")
        # broadcast: from each source, into a non-contiguous view (written through)
        for src in range(k):
            base = aotgrad.from_numpy(rank_data(r, (4, 3), dtype).copy())
            dist.broadcast(base.t(), src)
            equal(base.numpy(), rank_data(src, (4, 3), dtype), f"broadcast from {src}")
        out = [aotgrad.from_numpy(np.zeros(shape, dtype)) for _ in range(k)]
        work = dist.all_gather(out, aotgrad.from_numpy(rank_data(r, shape, dtype)),
                               async_op=True)
        work.wait()
        equal(np.stack([o.numpy() for o in out]), every, "all_gather")
        flat = aotgrad.from_numpy(np.zeros((k * 3, 4), dtype))
        dist.all_gather_into_tensor(flat, aotgrad.from_numpy(rank_data(r, shape, dtype)))
        equal(flat.numpy(), every.reshape(k * 3, 4), "all_gather_into_tensor")
        gl = [aotgrad.from_numpy(np.zeros(shape, dtype)) for _ in range(k)] if r == 1 else None
        dist.gather(aotgrad.from_numpy(rank_data(r, shape, dtype)), gl, dst=1)
        if r == 1:
            equal(np.stack([g.numpy() for g in gl]), every, "gather")
        got = aotgrad.from_numpy(np.zeros(shape, dtype))
        src_parts = [aotgrad.from_numpy(rank_data(50 + q, shape, dtype)) for q in range(k)]
        dist.scatter(got, src_parts if r == 0 else None, src=0)
        equal(got.numpy(), rank_data(50 + r, shape, dtype), "scatter")
    # 16-bit floats: MPI has none; reduced in float32 and rounded once
    import ml_dtypes
    for dtype in (np.float16, ml_dtypes.bfloat16):
        every = np.stack([rank_data(q, shape, np.float32).astype(dtype) for q in range(k)])
        for op in (dist.ReduceOp.SUM, dist.ReduceOp.AVG):
            t = aotgrad.from_numpy(every[r].copy())
            dist.all_reduce(t, op=op)
            want = every.astype(np.float32).sum(0) / (k if op is dist.ReduceOp.AVG else 1)
            assert t.numpy().dtype == dtype
            equal(t.numpy(), want.astype(dtype), f"all_reduce {op} {np.dtype(dtype).name}")
    # reduce_scatter: rank r gets the sum over ranks of their r-th input
    parts = [aotgrad.from_numpy(rank_data(10 * r + q, (5,), np.float64)) for q in range(k)]
    out = aotgrad.zeros(5, dtype=aotgrad.float64)
    work = dist.reduce_scatter(out, parts, op=dist.ReduceOp.SUM, async_op=True)
    assert work.get_future().wait() == [out]
    close(out.numpy(), sum(rank_data(10 * q + r, (5,), np.float64) for q in range(k)),
          aotgrad.float64, "reduce_scatter")
    whole = aotgrad.from_numpy(np.concatenate([p.numpy() for p in parts]))
    out = aotgrad.zeros(5, dtype=aotgrad.float64)
    dist.reduce_scatter_tensor(out, whole, op=dist.ReduceOp.AVG)
    close(out.numpy(), sum(rank_data(10 * q + r, (5,), np.float64) for q in range(k)) / k,
          aotgrad.float64, "reduce_scatter_tensor")
    # no copy for a contiguous tensor: MPI writes the tensor's own array
    t = aotgrad.ones(4)
    arr = t.numpy()
    v = t._version
    dist.all_reduce(t)
    assert np.shares_memory(arr, t.numpy()) and t.numpy()[0] == k and t._version > v
    assert dist.barrier(async_op=True).wait()
    # a traced tensor: a graph break, the function runs eagerly and communicates every call
    f = aotgrad.compile(lambda x: (dist.all_reduce(x) or x) * 2, backend="interpret")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        y = f(aotgrad.ones(2))
    assert any("all_reduce" in str(w.message) for w in caught), [str(w.message) for w in caught]
    equal(y.numpy(), [2 * k, 2 * k], "all_reduce in a compiled function")
    # bad input: a clear error naming the collective
    try:
        dist.all_gather([aotgrad.zeros(2)], aotgrad.zeros(2))
    except ValueError as e:
        assert "all_gather" in str(e) and "one per rank" in str(e), e
    else:
        raise AssertionError("all_gather with a short list did not raise")
    # DistributedSampler: the shards cover the padded index list once, the same per epoch
    from aotgrad.utils.data import DataLoader, DistributedSampler, TensorDataset
    ds = TensorDataset(aotgrad.arange(10))
    for shuffle in (False, True):
        for drop_last in (False, True):
            s = DistributedSampler(ds, shuffle=shuffle, seed=3, drop_last=drop_last)
            s.set_epoch(2)
            mine = aotgrad.tensor(list(s) + [-1] * (10 - len(s)))
            everyone = [aotgrad.zeros(10, dtype=mine.dtype) for _ in range(k)]
            dist.all_gather(everyone, mine)
            shards = [[i for i in e.tolist() if i >= 0] for e in everyone]
            assert all(len(x) == len(s) for x in shards)
            merged = sorted(i for x in shards for i in x)
            if drop_last:
                assert len(set(merged)) == len(merged) == (10 // k) * k
            else:
                assert set(merged) == set(range(10)) and len(merged) == -(-10 // k) * k
            batches = [xb.tolist() for (xb,) in DataLoader(ds, batch_size=2, sampler=s)]
            assert sum(batches, []) == shards[r]


def rank_object(r):
    """A picklable value that differs per rank, in size too (the byte counts differ)."""
    return {"rank": r, "name": "x" * (3 * r + 1), "array": np.arange(r + 2.0),
            "nested": [(r, None), {r * 1.5}]}


def same_object(got, want, what):
    ok = type(got) is type(want) and got.keys() == want.keys() and all(
        np.array_equal(got[key], want[key]) if key == "array" else got[key] == want[key]
        for key in want)
    if not ok:
        raise AssertionError(f"rank {dist.get_rank()}: {what}: {got!r} != {want!r}")


def check_object_collectives():
    """all_gather_object, broadcast_object_list, gather_object, scatter_object_list: what each
    rank gets equals what the others passed (objects of different sizes per rank), roots
    other than rank 0, and their argument errors."""
    r, k = dist.get_rank(), dist.get_world_size()
    gathered = [None] * k
    assert dist.all_gather_object(gathered, rank_object(r)) is None
    for q in range(k):
        same_object(gathered[q], rank_object(q), f"all_gather_object from rank {q}")
    for src in range(k):
        objs = [rank_object(src), "tail", src] if r == src else [None, None, None]
        dist.broadcast_object_list(objs, src=src)
        same_object(objs[0], rank_object(src), f"broadcast_object_list from {src}")
        equal(objs[1:], ["tail", src], "broadcast_object_list's other entries")
    dst = k - 1
    out = [None] * k if r == dst else None
    dist.gather_object(rank_object(r), out, dst=dst)
    if r == dst:
        for q in range(k):
            same_object(out[q], rank_object(q), f"gather_object from rank {q}")
    mine = [None]
    dist.scatter_object_list(mine, [rank_object(10 + q) for q in range(k)] if r == 1 else None,
                             src=1)
    same_object(mine[0], rank_object(10 + r), "scatter_object_list")
    mine = [None]
    dist.scatter_object_list(mine, [q * q for q in range(k)] if r == 0 else None)
    equal(mine[0], r * r, "scatter_object_list from the default root")
    for bad, call in ((ValueError, lambda: dist.all_gather_object([None] * (k + 1), r)),
                      (ValueError, lambda: dist.scatter_object_list([], None)),
                      (ValueError, lambda: dist.gather_object(r, None if r == 0 else [None],
                                                              dst=0)),
                      (ValueError, lambda: dist.broadcast_object_list([1], src=k))):
        try:
            call()
        except bad:
            pass
        else:
            raise AssertionError(f"rank {r}: a bad object collective call did not raise")
    dist.barrier()


def check_groups():
    """new_group: the members communicate among themselves (src given as a global rank); the
    others get NON_GROUP_MEMBER, and collectives on it leave their tensors alone."""
    r, k = dist.get_rank(), dist.get_world_size()
    members = list(range(1, k))
    g = dist.new_group(members)
    t = aotgrad.tensor([float(r + 1)], dtype=aotgrad.float64)
    if r in members:
        assert (dist.get_rank(g), dist.get_world_size(g)) == (members.index(r), len(members))
        assert dist.get_process_group_ranks(g) == members
        assert dist.get_global_rank(g, 0) == 1 and dist.get_group_rank(g, k - 1) == k - 2
        dist.all_reduce(t, group=g)
        equal(t.numpy(), [sum(q + 1 for q in members)], "all_reduce in a group")
        b = aotgrad.tensor([float(r)])
        dist.broadcast(b, src=k - 1, group=g)
        equal(b.numpy(), [k - 1], "broadcast in a group from a global rank")
        # DDP over the group: the members' average, rank 0's data left out
        ref = make_net(aotgrad.float64, 10 + members[0])   # the group's first rank wins
        mine = make_net(aotgrad.float64, 10 + r)
        ddp = DDP(mine, process_group=g)
        x, y = batch(aotgrad.float64, 4 * k, seed=3)
        sum(LOSS(ref(x[q * 4:(q + 1) * 4]), y[q * 4:(q + 1) * 4]) for q in members).backward()
        LOSS(ddp(x[r * 4:(r + 1) * 4]), y[r * 4:(r + 1) * 4]).backward()
        want = grads_of(ref)
        for name, got in grads_of(mine).items():
            close(got, want[name] / len(members), aotgrad.float64, f"group DDP grad {name}")
        dist.destroy_process_group(g)
    else:
        assert g is dist.GroupMember.NON_GROUP_MEMBER and dist.get_rank(g) == -1
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert dist.all_reduce(t, group=g) is None
        assert "does not belong to the given group" in str(caught[0].message)
        equal(t.numpy(), [r + 1.0], "a non-member's tensor")
    alone = dist.new_group([0], use_local_synchronization=True)
    if r == 0:
        dist.all_reduce(t, group=alone)
        assert dist.get_world_size(alone) == 1
    else:
        assert alone is dist.GroupMember.NON_GROUP_MEMBER
    dist.barrier()


# ---- DistributedDataParallel ---------------------------------------------------------------

class Net(nn.Module):
    """An MLP, and a branch whose parameters some ranks do not use (`use_extra`)."""

    def __init__(self, never=False):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(5, 16), nn.Tanh(), nn.Linear(16, 16), nn.GELU())
        self.head = nn.Linear(16, 3)
        self.extra = nn.Linear(16, 3)
        if never:
            self.never = nn.Linear(2, 2)   # no rank uses it

    def forward(self, x, use_extra=True):
        h = self.body(x)
        out = self.head(h)
        return out + self.extra(h) if use_extra else out


def make_net(dtype, seed, never=False):
    aotgrad.manual_seed(seed)
    return Net(never).to(dtype)


def batch(dtype, n, seed=0):
    rng = np.random.default_rng(seed)
    x = aotgrad.tensor(rng.standard_normal((n, 5)), dtype=dtype)
    y = aotgrad.tensor(rng.integers(0, 3, n))
    return x, y


LOSS = nn.CrossEntropyLoss()


def make_opt(kind, params):
    if kind == "sgd":
        return aotgrad.optim.SGD(params, lr=0.1, momentum=0.9)
    return aotgrad.optim.AdamW(params, lr=0.01, weight_decay=0.1)


def grads_of(model):
    return {n: p.grad.numpy().copy() for n, p in model.named_parameters()
            if p.grad is not None}


def check_ddp_case(dtype, opt_kind, bucket_cap_mb, mode, steps=3):
    """k ranks with a shard each == one process with the whole batch: grads, then params."""
    r, k = dist.get_rank(), dist.get_world_size()
    n = 4 * k
    ref = make_net(dtype, 1)
    mine = make_net(dtype, 1 + r)           # rank 0's parameters must win the broadcast
    module = aotgrad.compile(mine, backend="interpret") if mode == "compiled" else mine
    ddp = DDP(module, bucket_cap_mb=bucket_cap_mb)
    ref_opt, opt = make_opt(opt_kind, ref.parameters()), make_opt(opt_kind, ddp.parameters())
    # compile_ddp: aotgrad.compile around DDP, whose forward (no buffers) traces through
    call = aotgrad.compile(ddp, backend="interpret") if mode == "compile_ddp" else ddp
    for p, q in zip(ref.parameters(), mine.parameters()):
        close(q.detach().numpy(), p.detach().numpy(), dtype, "broadcast at construction")
    what = dtype.name
    for step in range(steps):
        x, y = batch(dtype, n, seed=step)
        ref_opt.zero_grad()
        LOSS(ref(x), y).backward()
        opt.zero_grad()
        LOSS(call(x[r * 4:(r + 1) * 4]), y[r * 4:(r + 1) * 4]).backward()
        want = grads_of(ref)
        got = grads_of(mine)
        assert set(got) == set(want), (sorted(got), sorted(want))
        for name in want:
            close(got[name], want[name], dtype,
                  f"grad {name} step {step} ({mode}, {opt_kind}, bucket {bucket_cap_mb}) {what}")
        ref_opt.step()
        opt.step()
    for (name, p), q in zip(ref.named_parameters(), mine.parameters()):
        close(q.detach().numpy(), p.detach().numpy(), dtype,
              f"param {name} after {steps} steps ({mode}, {opt_kind}, bucket {bucket_cap_mb})")
    if mode == "compile_ddp":
        assert (call.eager_calls, call.n_traces) == (0, 1), (call.eager_calls, call.n_traces)
    return ddp


def check_whole_step_compiled(dtype, opt_kind, bucket_cap_mb, backend="interpret", steps=4,
                              static=False):
    """A compiled whole training step of a DDP model (zero_grad, forward, backward, optimizer
    step in one program): the program all-reduces each bucket as a step of its own (started
    after the bucket's last gradient, waited for before the optimizer), with no graph break,
    and N steps equal one process on the whole batch. static=True: rank 1 leaves `extra`
    unused; static_graph's first iteration, run eagerly before the compiled steps, learns
    it (a compiled function whose first call breaks the graph stays eager for that key)."""
    r, k = dist.get_rank(), dist.get_world_size()
    ref, mine = make_net(dtype, 1, static), make_net(dtype, 1 + r, static)
    ddp = DDP(mine, bucket_cap_mb=bucket_cap_mb, static_graph=static)
    ref_opt, opt = make_opt(opt_kind, ref.parameters()), make_opt(opt_kind, ddp.parameters())

    def step(x, y, use_extra):
        opt.zero_grad()
        loss = LOSS(ddp(x, use_extra=use_extra), y)
        loss.backward()
        opt.step()
        return loss

    compiled = aotgrad.compile(step, backend=backend)
    what = f"({opt_kind}, {dtype.name}, bucket {bucket_cap_mb}, {backend}, static {static})"
    for s in range(steps):
        x, y = batch(dtype, 4 * k, seed=60 + s)
        ref_opt.zero_grad()
        total = sum(LOSS(ref(x[q * 4:(q + 1) * 4], use_extra=not static or q != 1),
                         y[q * 4:(q + 1) * 4]) for q in range(k)) / k
        total.backward()
        ref_opt.step()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            (step if static and s == 0 else compiled)(
                x[r * 4:(r + 1) * 4], y[r * 4:(r + 1) * 4], not static or r != 1)
        breaks = [str(w.message) for w in caught if "graph break" in str(w.message)]
        assert not breaks, (s, breaks)
        for name, g in grads_of(ref).items():
            close(grads_of(mine)[name], g, dtype, f"grad {name} step {s} of a compiled step "
                                                  f"{what}")
    for (name, p), q in zip(ref.named_parameters(), mine.parameters()):
        close(q.detach().numpy(), p.detach().numpy(), dtype,
              f"param {name} after {steps} compiled whole steps {what}")
    # traced once, and again when the optimizer's state exists (after its first step): then
    # every call runs the cached program
    assert compiled.eager_calls == 0 and compiled.n_traces <= 2, \
        (compiled.eager_calls, compiled.n_traces)
    if bucket_cap_mb is not None and bucket_cap_mb < 1e-3:
        # the program's steps: each bucket's start right after its gradients, all waits
        # after the last start (the backward's remaining work runs between them)
        x, y = batch(dtype, 4 * k, seed=60)
        text = str(compiled.ir(x[r * 4:(r + 1) * 4], y[r * 4:(r + 1) * 4],
                               not static or r != 1))
        lines = text.splitlines()
        starts = [i for i, line in enumerate(lines) if "prims.collective_start" in line]
        waits = [i for i, line in enumerate(lines) if "prims.collective_wait" in line]
        products = [i for i, line in enumerate(lines) if "dot_general" in line and " bw" in line]
        assert len(starts) == len(waits) == len(ddp.reducer.buckets), (starts, waits)
        assert max(starts) < min(waits), (starts, waits)
        assert starts[0] < max(products), "the first bucket starts after the whole backward"


def check_compiled_module_hands_out_gradients(dtype, backend="interpret"):
    """DDP(compile(model)): the compiled backward hands each parameter's gradient to DDP's
    hook as soon as the program has computed it, so the last layers' buckets start their
    all-reduces while the program still computes the first layers' gradients. Seen from a
    second hook on every parameter: the hooks fire in the order the backward finishes the
    gradients (head first), and when the head's fire, the first layer has no gradient yet
    and buckets are already in flight. The gradients equal one process's on the whole batch."""
    r, k = dist.get_rank(), dist.get_world_size()
    ref, mine = make_net(dtype, 1), make_net(dtype, 1 + r)
    ddp = DDP(aotgrad.compile(mine, backend=backend), bucket_cap_mb=1e-6)
    names = {id(p): n for n, p in mine.named_parameters()}
    first = mine.body[0].weight
    log = []
    for p in mine.parameters():
        p.register_post_accumulate_grad_hook(
            lambda t: log.append((names[id(t)], first.grad is None, ddp.reducer.next_bucket)))
    for step in range(2):
        log.clear()
        x, y = batch(dtype, 4 * k, seed=30 + step)
        ref.zero_grad()
        LOSS(ref(x), y).backward()
        ddp.zero_grad()
        out = ddp(x[r * 4:(r + 1) * 4])
        # (a hook of the compiled backward's node: it runs once the program has returned)
        out.grad_fn.register_hook(lambda *_: log.append(("returned", None, None)))
        LOSS(out, y[r * 4:(r + 1) * 4]).backward()
        fired = [n for n, _, _ in log]
        assert sorted(fired) == sorted(list(names.values()) + ["returned"]), fired
        # every gradient reached DDP before the program returned, the last layers' first
        assert fired[-1] == "returned", fired
        head = [entry for entry in log if entry[0].startswith(("head.", "extra."))]
        assert all(no_first_grad for _, no_first_grad, _ in head), log
        # (buckets start in index order, the parameters' in reverse registration order)
        assert max(started for _, _, started in head) >= 1, log
        assert fired.index("body.0.weight") > max(fired.index(n) for n, _, _ in head), fired
        assert not ddp.reducer.active
        for name, g in grads_of(ref).items():
            close(grads_of(mine)[name], g, dtype, f"grad {name} of DDP(compile(model)) step "
                                                  f"{step} ({backend})")


def check_compiled_step_with_unused_parameters():
    """A compiled step whose backward leaves parameters without gradient (a forward output
    the loss ignores; a branch not taken) breaks the graph at the end of the trace, naming
    them; eagerly, the next forward raises PyTorch's error, and so does the next call."""
    r = dist.get_rank()

    class TwoHeads(Net):
        def forward(self, x, use_extra=True):
            h = self.body(x)
            return self.head(h), self.extra(h)

    for model, first in ((make_net(aotgrad.float64, 0), lambda out: out),
                         (TwoHeads().double(), lambda out: out[0])):
        ddp = DDP(model, bucket_cap_mb=1e-4)

        def forward_backward(x, y):
            LOSS(first(ddp(x, use_extra=False)), y).backward()
        compiled = aotgrad.compile(forward_backward, backend="interpret")
        x, y = batch(aotgrad.float64, 4, seed=r)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            compiled(x, y)
        assert any("gave no gradient to extra.weight, extra.bias" in str(w.message)
                   for w in caught), [str(w.message) for w in caught]
        try:
            compiled(x, y)
        except RuntimeError as e:
            assert "Expected to have finished reduction" in str(e), e
        else:
            raise AssertionError("the second call did not raise")
        assert compiled.eager_calls == 2


def check_no_sync(dtype):
    r, k = dist.get_rank(), dist.get_world_size()
    ref, mine = make_net(dtype, 0), make_net(dtype, 0)
    ddp = DDP(mine)
    (xa, ya), (xb, yb) = batch(dtype, 4 * k, seed=7), batch(dtype, 4 * k, seed=8)
    LOSS(ref(xa), ya).backward()
    LOSS(ref(xb), yb).backward()
    shard = slice(r * 4, (r + 1) * 4)
    local = make_net(dtype, 0)
    LOSS(local(xa[shard]), ya[shard]).backward()
    with ddp.no_sync():
        LOSS(ddp(xa[shard]), ya[shard]).backward()
    local_grads = grads_of(local)
    for name, g in grads_of(mine).items():   # inside no_sync: this rank's own gradient
        close(g, local_grads[name], dtype, f"no_sync local grad {name}")
    LOSS(ddp(xb[shard]), yb[shard]).backward()
    want = grads_of(ref)
    for name, g in grads_of(mine).items():
        close(g, want[name], dtype, f"grad {name} accumulated over no_sync")


def check_unused_on_one_rank(dtype, as_view, compiled):
    """Rank 1 leaves `extra` unused: with find_unused_parameters its gradient is the mean of
    the other ranks' contributions and zero's; `never` (no rank uses it) keeps no grad."""
    r, k = dist.get_rank(), dist.get_world_size()
    ref, mine = make_net(dtype, 0, True), make_net(dtype, 0, True)
    module = aotgrad.compile(mine, backend="interpret") if compiled else mine
    ddp = DDP(module, find_unused_parameters=True, bucket_cap_mb=1e-4,
              gradient_as_bucket_view=as_view)
    ref_opt, opt = make_opt("adamw", ref.parameters()), make_opt("adamw", ddp.parameters())
    for step in range(2):
        x, y = batch(dtype, 4 * k, seed=20 + step)
        ref_opt.zero_grad()
        total = sum(LOSS(ref(x[q * 4:(q + 1) * 4], use_extra=q != 1), y[q * 4:(q + 1) * 4])
                    for q in range(k)) / k
        total.backward()
        opt.zero_grad(set_to_none=not as_view)   # as a view: zeroed in place, in the bucket
        LOSS(ddp(x[r * 4:(r + 1) * 4], use_extra=r != 1), y[r * 4:(r + 1) * 4]).backward()
        want, got = grads_of(ref), grads_of(mine)
        assert set(got) == set(want) and not any(n.startswith("never") for n in got), \
            (sorted(got), sorted(want))
        for name in want:
            close(got[name], want[name], dtype, f"grad {name} (unused on rank 1)")
        if as_view:   # every used parameter's .grad is its bucket slot itself
            for i, p in enumerate(ddp.reducer.params):
                assert p.grad is None or p.grad._value is ddp.reducer.views[i], i
        ref_opt.step()
        opt.step()
    for (name, p), q in zip(ref.named_parameters(), mine.parameters()):
        close(q.detach().numpy(), p.detach().numpy(), dtype, f"param {name} (unused on rank 1)")


def check_ddp():
    k = dist.get_world_size()
    for dtype in (aotgrad.float64, aotgrad.float32):
        for opt_kind in ("sgd", "adamw"):
            check_ddp_case(dtype, opt_kind, None, "eager")
    for bucket_cap_mb in (1e-6, 1000):      # one parameter per bucket; all in one
        ddp = check_ddp_case(aotgrad.float64, "sgd", bucket_cap_mb, "eager", steps=2)
        sizes = [len(b.params) for b in ddp.reducer.buckets]
        assert sizes == ([1] * 8 if bucket_cap_mb < 1 else [8]), sizes
        assert ddp.reducer.buckets[0].params[0] == 7   # reverse registration order
    for dtype in (aotgrad.float64, aotgrad.float32):
        check_ddp_case(dtype, "adamw", 1e-3, "compiled")
    check_ddp_case(aotgrad.float64, "sgd", 1e-3, "compile_ddp")
    for dtype in (aotgrad.float64, aotgrad.float32):
        check_compiled_module_hands_out_gradients(dtype)
    for dtype in (aotgrad.float64, aotgrad.float32):
        for opt_kind in ("sgd", "adamw"):
            check_whole_step_compiled(dtype, opt_kind, 1e-4)
    check_whole_step_compiled(aotgrad.float64, "sgd", 1000)   # one bucket
    check_whole_step_compiled(aotgrad.float64, "adamw", 1e-4, static=True)
    check_compiled_step_with_unused_parameters()
    check_no_sync(aotgrad.float64)
    for as_view, compiled in ((False, False), (True, True)):
        check_unused_on_one_rank(aotgrad.float64, as_view, compiled)
    ddp = DDP(make_net(aotgrad.float64, 0))
    keys = list(ddp.state_dict())
    assert keys[0] == "module.body.0.weight" and len(keys) == 8, keys
    ddp.load_state_dict(ddp.state_dict())
    assert k == dist.get_world_size()


# ---- point-to-point, all_to_all, futures ---------------------------------------------------

def check_point_to_point():
    """A ring of sends (blocking and not), a receive from any rank, tags, a sub-group."""
    r, k = dist.get_rank(), dist.get_world_size()
    right, left = (r + 1) % k, (r - 1) % k
    for dtype in (np.float64, np.int32):
        mine = aotgrad.from_numpy(rank_data(r, (2, 3), dtype))
        got = aotgrad.from_numpy(np.zeros((2, 3), dtype))
        # even ranks send first (blocking send and recv in a ring cannot all send at once)
        if r % 2 == 0:
            dist.send(mine, dst=right)
            src = dist.recv(got, src=left)
        else:
            src = dist.recv(got, src=left)
            dist.send(mine, dst=right)
        equal(got.numpy(), rank_data(left, (2, 3), dtype), f"recv from {left}")
        assert src == left, src
    # isend/irecv with two tags, received in the other order, into a non-contiguous view
    a, b = aotgrad.tensor([float(r), 1.0]), aotgrad.tensor([float(r), 2.0])
    sends = [dist.isend(a, right, tag=1), dist.isend(b, right, tag=2)]
    base = aotgrad.zeros(2, 2)
    w2 = dist.irecv(base[:, 0], src=left, tag=2)
    w1 = dist.irecv(base[:, 1], src=left, tag=1)
    for w in sends + [w2, w1]:
        w.wait()
        assert w.is_completed()
    equal(base.numpy(), [[left, left], [2.0, 1.0]], "irecv by tag into a view")
    # batch_isend_irecv: both directions of the ring at once
    to_left, from_right = aotgrad.tensor([float(r)]), aotgrad.zeros(1)
    to_right, from_left = aotgrad.tensor([-float(r)]), aotgrad.zeros(1)
    works = dist.batch_isend_irecv([
        dist.P2POp(dist.irecv, from_right, right), dist.P2POp(dist.irecv, from_left, left),
        dist.P2POp(dist.isend, to_left, left), dist.P2POp(dist.isend, to_right, right)])
    for w in works:
        w.wait()
    equal([from_right.item(), from_left.item()], [float(right), -float(left)],
          "batch_isend_irecv")
    # any source: rank 0 collects one message from every other rank, in arrival order
    if r == 0:
        seen = set()
        for _ in range(k - 1):
            t = aotgrad.zeros(1, dtype=aotgrad.int64)
            sender = dist.recv(t)
            assert t.item() == 10 * sender, (t.item(), sender)
            seen.add(sender)
        assert seen == set(range(1, k)), seen
    else:
        dist.send(aotgrad.tensor([10 * r]), dst=0)
    # errors: to oneself; both dst and group_dst
    for call, what in ((lambda: dist.send(a, dst=r), "should not be the same"),
                       (lambda: dist.isend(a, dst=right, group_dst=0), "not both")):
        try:
            call()
        except ValueError as e:
            assert what in str(e), e
        else:
            raise AssertionError(f"no error: {what}")
    # within a group of the ranks 1.., with group ranks
    if k > 2:
        g = dist.new_group(list(range(1, k)))
        if r >= 1:
            gr = dist.get_rank(g)
            msg = aotgrad.tensor([float(r)])
            if gr == 0:
                dist.send(msg, group=g, group_dst=1)
            elif gr == 1:
                got = aotgrad.zeros(1)
                assert dist.recv(got, group=g, group_src=0) == 1   # the global rank
                equal(got.numpy(), [1.0], "recv in a group")
            dist.destroy_process_group(g)
    dist.barrier()


def check_all_to_all():
    r, k = dist.get_rank(), dist.get_world_size()
    # rank r sends (r + 1) * (q + 1) elements to rank q: sizes differ pair by pair
    ins = [aotgrad.from_numpy(np.full((r + 1) * (q + 1), 100.0 * r + q)) for q in range(k)]
    outs = [aotgrad.zeros((q + 1) * (r + 1), dtype=aotgrad.float64) for q in range(k)]
    work = dist.all_to_all(outs, ins, async_op=True)
    assert work.wait() and work.result() == outs
    for q in range(k):
        equal(outs[q].numpy(), np.full((q + 1) * (r + 1), 100.0 * q + r),
              f"all_to_all from rank {q}")
    # all_to_all_single: equal blocks, then uneven split sizes
    x = aotgrad.from_numpy(np.arange(2 * k * 3, dtype=np.int64).reshape(2 * k, 3) + 1000 * r)
    y = aotgrad.zeros(2 * k, 3, dtype=aotgrad.int64)
    dist.all_to_all_single(y, x)
    want = np.concatenate([np.arange(2 * k * 3).reshape(2 * k, 3)[2 * r:2 * r + 2] + 1000 * q
                           for q in range(k)])
    equal(y.numpy(), want, "all_to_all_single")
    in_splits = [q + 1 for q in range(k)]                   # rank r sends q+1 rows to q
    out_splits = [r + 1] * k                                 # and gets r+1 rows from each
    x = aotgrad.from_numpy(np.repeat(np.arange(k, dtype=np.float32)[:, None] + 10 * r,
                                     in_splits, axis=0).repeat(2, 1))
    y = aotgrad.zeros(sum(out_splits), 2)
    dist.all_to_all_single(y, x, out_splits, in_splits)
    want = np.repeat(np.array([r + 10.0 * q for q in range(k)], np.float32), r + 1)
    equal(y.numpy(), np.stack([want, want], 1), "all_to_all_single with split sizes")
    # futures: get_future / then / wait_all
    t = aotgrad.ones(3) * (r + 1)
    fut = dist.all_reduce(t, async_op=True).get_future()
    doubled = fut.then(lambda f: f.value()[0] * 2)
    from aotgrad.futures import wait_all
    (res,), twice = wait_all([fut, doubled])
    assert res is t and fut.done() and doubled.done()
    equal(twice.numpy(), np.full(3, k * (k + 1)), "Future.then")


# ---- DDP: comm hooks, static_graph, Join ---------------------------------------------------

def check_comm_hooks():
    """allreduce_hook == DDP's own all-reduce; fp16/bf16 compression within their rounding;
    a custom hook sees each bucket once, in order, and its result becomes the gradient."""
    from aotgrad.distributed.algorithms.ddp_comm_hooks import default_hooks
    r, k = dist.get_rank(), dist.get_world_size()
    x, y = batch(aotgrad.float64, 4 * k, seed=11)
    shard = slice(r * 4, (r + 1) * 4)
    ref = make_net(aotgrad.float64, 0)
    LOSS(ref(x), y).backward()
    want = grads_of(ref)
    for hook, tol in ((default_hooks.allreduce_hook, 1e-12),
                      (default_hooks.fp16_compress_hook, 2e-3),
                      (default_hooks.bf16_compress_hook, 2e-2)):
        mine = make_net(aotgrad.float64, 0)
        ddp = DDP(mine, bucket_cap_mb=1e-4)
        ddp.register_comm_hook(None, hook)
        for _ in range(2):   # twice: the second backward reuses the buckets
            mine.zero_grad()
            LOSS(ddp(x[shard]), y[shard]).backward()
        for name, g in grads_of(mine).items():
            err = np.abs(g - want[name]).max() / max(1.0, np.abs(want[name]).max())
            assert err <= tol, (hook.__name__, name, err)
        try:
            ddp.register_comm_hook(None, hook)
        except RuntimeError as e:
            assert "only be called once" in str(e)
        else:
            raise AssertionError("a second comm hook was accepted")
    seen = []

    def sum_hook(state, bucket):
        # the sum, not the average: DDP divides nothing after a hook
        seen.append((bucket.index(), bucket.is_last(), len(bucket.parameters())))
        assert state == "state"
        for g, p in zip(bucket.gradients(), bucket.parameters()):
            assert g.shape == p.shape
        return dist.all_reduce(bucket.buffer(), async_op=True).get_future().then(
            lambda f: f.value()[0])
    mine = make_net(aotgrad.float64, 0)
    ddp = DDP(mine, bucket_cap_mb=1e-4)
    ddp.register_comm_hook("state", sum_hook)
    LOSS(ddp(x[shard]), y[shard]).backward()
    n = len(ddp.reducer.buckets)
    assert [s[0] for s in seen] == list(range(n)) and seen[-1][1] and not seen[0][1], seen
    for name, g in grads_of(mine).items():
        close(g, want[name] * k, aotgrad.float64, f"sum hook grad {name}")
    # a compiled forward-backward: all-reduces in the program until a hook is registered;
    # then it traces again and breaks the graph (the hook is Python): the hook's result
    mine = make_net(aotgrad.float64, 0)
    ddp = DDP(mine, bucket_cap_mb=1e-4)

    def forward_backward(x, y):
        mine.zero_grad()
        LOSS(ddp(x), y).backward()
    compiled = aotgrad.compile(forward_backward, backend="interpret")
    for with_hook in (False, True):
        if with_hook:
            ddp.register_comm_hook("state", sum_hook)
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            compiled(x[shard], y[shard])
        assert compiled.eager_calls == int(with_hook), compiled.eager_calls
        for name, g in grads_of(mine).items():
            close(g, want[name] * (k if with_hook else 1), aotgrad.float64,
                  f"compiled grad {name} (comm hook: {with_hook})")


def check_compiled_comm_hooks(backend="interpret"):
    """A compiled whole step of a DDP model with a built-in communication hook: no graph
    break, each bucket averaged in the program as the hook does it (allreduce_hook: divided,
    then summed; fp16/bf16: the gradients the program leaves are 16-bit values), equal to
    the eager DDP with the same hook."""
    import ml_dtypes
    from aotgrad.distributed.algorithms.ddp_comm_hooks import default_hooks
    r, k = dist.get_rank(), dist.get_world_size()
    shard = slice(r * 4, (r + 1) * 4)
    for hook, wire, tol in ((default_hooks.allreduce_hook, None, 1e-12),
                            (default_hooks.fp16_compress_hook, np.float16, 2e-3),
                            (default_hooks.bf16_compress_hook, ml_dtypes.bfloat16, 2e-2)):
        models, steps = [], []
        for _ in range(2):
            model = make_net(aotgrad.float64, 3)
            ddp = DDP(model, bucket_cap_mb=1e-4)
            ddp.register_comm_hook(None, hook)
            opt = make_opt("sgd", ddp.parameters())

            def step(x, y, ddp=ddp, opt=opt):
                opt.zero_grad()
                LOSS(ddp(x), y).backward()
                opt.step()
            models.append(model)
            steps.append(step)
        eager, compiled = steps[0], aotgrad.compile(steps[1], backend=backend)
        for s in range(3):
            x, y = batch(aotgrad.float64, 4 * k, seed=70 + s)
            eager(x[shard], y[shard])
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                compiled(x[shard], y[shard])
            breaks = [str(w.message) for w in caught if "graph break" in str(w.message)]
            assert not breaks, (hook.__name__, breaks)
            want, got = grads_of(models[0]), grads_of(models[1])
            for name, g in got.items():
                if wire is not None:   # compressed in the program: 16-bit values
                    equal(g.astype(wire).astype(np.float64), g, f"{hook.__name__} {name}")
                err = np.abs(g - want[name]).max() / max(1.0, np.abs(want[name]).max())
                assert err <= tol, (hook.__name__, name, s, err)
        assert compiled.eager_calls == 0, (hook.__name__, compiled.eager_calls)


class WithBuffer(Net):
    """Net with a buffer the forward reads (DDP broadcasts it from rank 0 every call)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("shift", aotgrad.zeros(16))

    def forward(self, x, use_extra=True):
        h = self.body(x) + self.shift
        return self.head(h) + self.extra(h)


def check_compiled_step_breaks():
    """What stays a graph break in a compiled whole DDP step, each with its own reason, and
    the step (run eagerly) equal to the same DDP step uncompiled."""
    from aotgrad.distributed.algorithms.join import Join
    r, k = dist.get_rank(), dist.get_world_size()
    shard = slice(r * 4, (r + 1) * 4)

    def custom_hook(state, bucket):
        return dist.all_reduce(bucket.buffer().div_(k), async_op=True).get_future().then(
            lambda f: f.value()[0])
    cases = [
        ("find_unused", dict(find_unused_parameters=True), None,
         "find_unused_parameters=True, which parameters get a gradient"),
        ("static", dict(static_graph=True), None, "static_graph's first iteration"),
        ("as_view", dict(gradient_as_bucket_view=True), None,
         "gradient_as_bucket_view=True makes each .grad a view"),
        ("join", {}, None, "under Join each iteration"),
        ("custom hook", {}, custom_hook, "a communication hook other than ddp_comm_hooks'"),
    ]
    for name, kwargs, hook, reason in cases:
        models, steps = [], []
        for _ in range(2):
            model = make_net(aotgrad.float64, 5)
            ddp = DDP(model, bucket_cap_mb=1e-4, **kwargs)
            if hook is not None:
                ddp.register_comm_hook(None, hook)

            def step(x, y, ddp=ddp, model=model):
                model.zero_grad()
                LOSS(ddp(x), y).backward()
            models.append((model, ddp))
            steps.append(step)
        compiled = aotgrad.compile(steps[1], backend="interpret")
        x, y = batch(models[0][0].body[0].weight.dtype, 4 * k, seed=90)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if name == "join":
                with Join([models[0][1]]):
                    steps[0](x[shard], y[shard])
                with Join([models[1][1]]):
                    compiled(x[shard], y[shard])
            else:
                steps[0](x[shard], y[shard])
                compiled(x[shard], y[shard])
        breaks = [str(w.message) for w in caught if "graph break" in str(w.message)]
        assert any(reason in b for b in breaks), (name, breaks)
        assert compiled.eager_calls == 1, (name, compiled.eager_calls)
        want, got = grads_of(models[0][0]), grads_of(models[1][0])
        assert set(want) == set(got), (name, sorted(want), sorted(got))
        for n in want:
            equal(got[n], want[n], f"{name}: grad {n} of the compiled step run eagerly")


def check_compiled_step_buffers(backend="interpret"):
    """A compiled whole step of a DDP model with buffers: the program broadcasts them from
    rank 0 before the forward (here each rank changed its own after construction), as the
    eager DDP does on every call: no graph break, the eager step's gradients and buffers."""
    r, k = dist.get_rank(), dist.get_world_size()
    shard = slice(r * 4, (r + 1) * 4)
    models, steps = [], []
    for _ in range(2):
        aotgrad.manual_seed(5)
        model = WithBuffer().double()
        ddp = DDP(model, bucket_cap_mb=1e-4)

        def step(x, y, ddp=ddp, model=model):
            model.zero_grad()
            LOSS(ddp(x), y).backward()
        models.append(model)
        steps.append(step)
    compiled = aotgrad.compile(steps[1], backend=backend)
    for s in range(2):
        for model in models:   # each rank's own buffer; the forward must take rank 0's
            with aotgrad.no_grad():
                model.shift.fill_(0.5 * s + r)
        x, y = batch(aotgrad.float64, 4 * k, seed=95 + s)
        steps[0](x[shard], y[shard])
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            compiled(x[shard], y[shard])
        breaks = [str(w.message) for w in caught if "graph break" in str(w.message)]
        assert not breaks, breaks
        for model in models:
            equal(model.shift.numpy(), np.full(16, 0.5 * s), "the buffer broadcast from rank 0")
        want, got = grads_of(models[0]), grads_of(models[1])
        for n in want:
            close(got[n], want[n], aotgrad.float64, f"grad {n} with buffers, step {s}")
    assert compiled.eager_calls == 0, compiled.eager_calls


def check_compiled_step_16bit(backend="interpret"):
    """A compiled whole step of a DDP model in float16 / bfloat16 (16-bit buckets, with and
    without a compression hook): no graph break, its gradients the eager DDP step's (within
    the dtype's rounding: a compiled program computes in float32 and rounds each value)."""
    from aotgrad.distributed.algorithms.ddp_comm_hooks import default_hooks
    r, k = dist.get_rank(), dist.get_world_size()
    shard = slice(r * 4, (r + 1) * 4)
    for dtype, hook, tol in ((aotgrad.float16, None, 4e-3),
                             (aotgrad.bfloat16, None, 3e-2),
                             (aotgrad.bfloat16, default_hooks.fp16_compress_hook, 3e-2),
                             (aotgrad.float16, default_hooks.allreduce_hook, 4e-3)):
        models, steps = [], []
        for _ in range(2):
            model = make_net(aotgrad.float32, 4).to(dtype)
            ddp = DDP(model, bucket_cap_mb=1e-4)
            if hook is not None:
                ddp.register_comm_hook(None, hook)

            def step(x, y, ddp=ddp, model=model):
                model.zero_grad()
                LOSS(ddp(x), y).backward()
            models.append(model)
            steps.append(step)
        compiled = aotgrad.compile(steps[1], backend=backend)
        what = f"{dtype} {getattr(hook, '__name__', 'no hook')} {backend}"
        for s in range(2):
            x, y = batch(dtype, 4 * k, seed=80 + s)
            steps[0](x[shard], y[shard])
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                compiled(x[shard], y[shard])
            breaks = [str(w.message) for w in caught if "graph break" in str(w.message)]
            assert not breaks, (what, breaks)
            for (n, p), q in zip(models[0].named_parameters(), models[1].parameters()):
                assert q.grad.dtype == dtype, (what, n, q.grad.dtype)
                want = p.grad.float().numpy().astype(np.float64)
                got = q.grad.float().numpy().astype(np.float64)
                err = np.abs(got - want).max() / max(1.0, np.abs(want).max())
                assert err <= tol, (what, n, s, err)
        assert compiled.eager_calls == 0, (what, compiled.eager_calls)


def check_static_graph(dtype):
    """static_graph=True with a branch rank 1 never uses: no find_unused_parameters needed,
    the first iteration learns it; N steps of AdamW equal one process."""
    r, k = dist.get_rank(), dist.get_world_size()
    ref, mine = make_net(dtype, 0, True), make_net(dtype, 0, True)
    ddp = DDP(mine, static_graph=True, bucket_cap_mb=1e-4)
    ref_opt, opt = make_opt("adamw", ref.parameters()), make_opt("adamw", ddp.parameters())
    for step in range(3):
        x, y = batch(dtype, 4 * k, seed=30 + step)
        ref_opt.zero_grad()
        total = sum(LOSS(ref(x[q * 4:(q + 1) * 4], use_extra=q != 1), y[q * 4:(q + 1) * 4])
                    for q in range(k)) / k
        total.backward()
        opt.zero_grad()
        LOSS(ddp(x[r * 4:(r + 1) * 4], use_extra=r != 1), y[r * 4:(r + 1) * 4]).backward()
        want, got = grads_of(ref), grads_of(mine)
        assert set(got) == set(want), (sorted(got), sorted(want))
        for name in want:
            close(got[name], want[name], dtype, f"static_graph grad {name} step {step}")
        ref_opt.step()
        opt.step()
        assert ddp.reducer.static_used is not None
    for (name, p), q in zip(ref.named_parameters(), mine.parameters()):
        close(q.detach().numpy(), p.detach().numpy(), dtype, f"static_graph param {name}")


def check_join(divide_by_initial_world_size):
    """Rank r has 2 + r batches: under Join the ranks still training average over the world
    (the joined ranks count zero) or over themselves; every rank ends with the parameters of
    the last rank to join, which equal one process doing the same steps."""
    from aotgrad.distributed.algorithms.join import Join
    r, k = dist.get_rank(), dist.get_world_size()
    dtype = aotgrad.float64
    ref, mine = make_net(dtype, 0), make_net(dtype, 0)
    ddp = DDP(mine, bucket_cap_mb=1e-4)
    ref_opt, opt = make_opt("sgd", ref.parameters()), make_opt("sgd", ddp.parameters())
    steps = 2 + k - 1
    with Join([ddp], divide_by_initial_world_size=divide_by_initial_world_size):
        for step in range(2 + r):
            x, y = batch(dtype, 4 * k, seed=40 + step)
            opt.zero_grad()
            LOSS(ddp(x[r * 4:(r + 1) * 4]), y[r * 4:(r + 1) * 4]).backward()
            opt.step()
    for step in range(steps):
        x, y = batch(dtype, 4 * k, seed=40 + step)
        active = [q for q in range(k) if step < 2 + q]
        ref_opt.zero_grad()
        div = k if divide_by_initial_world_size else len(active)
        (sum(LOSS(ref(x[q * 4:(q + 1) * 4]), y[q * 4:(q + 1) * 4]) for q in active) /
         div).backward()
        ref_opt.step()
    for (name, p), q in zip(ref.named_parameters(), mine.parameters()):
        close(q.detach().numpy(), p.detach().numpy(), dtype,
              f"param {name} after Join (divide by world: {divide_by_initial_world_size})")
    # throw_on_early_termination: every rank raises once rank 0 runs out
    raised = False
    try:
        with Join([ddp], throw_on_early_termination=True):
            for step in range(1 + 2 * (r > 0)):
                x, y = batch(dtype, 4 * k, seed=50 + step)
                LOSS(ddp(x[r * 4:(r + 1) * 4]), y[r * 4:(r + 1) * 4]).backward()
    except RuntimeError as e:
        assert "exhausted inputs" in str(e), e
        raised = True
    assert raised
    dist.barrier()


def check_surface():
    check_point_to_point()
    check_all_to_all()
    check_comm_hooks()
    check_compiled_comm_hooks()
    check_compiled_step_breaks()
    check_compiled_step_16bit()
    check_compiled_step_buffers()
    for dtype in (aotgrad.float64, aotgrad.float32):
        check_static_graph(dtype)
    check_join(True)
    check_join(False)


# ---- failures ------------------------------------------------------------------------------

def check_raise():
    """Rank 1 raises while the others wait in a collective: the job must end."""
    if dist.get_rank() == 1:
        raise ValueError("rank one fails on purpose")
    dist.barrier()
    time.sleep(60)


def check_unused_error():
    """An unused parameter without find_unused_parameters: PyTorch's error at the next forward."""
    r, k = dist.get_rank(), dist.get_world_size()
    ddp = DDP(make_net(aotgrad.float64, 0), bucket_cap_mb=1e-6)
    for step in range(2):
        x, y = batch(aotgrad.float64, 4 * k, seed=step)
        LOSS(ddp(x[r * 4:(r + 1) * 4], use_extra=r != 1), y[r * 4:(r + 1) * 4]).backward()
    time.sleep(60)   # (not reached on rank 1, whose second forward raises)


def check_timeout():
    """Rank 1 stops communicating without an error: rank 0's wait ends at the timeout."""
    if dist.get_rank() == 1:
        time.sleep(60)
    dist.all_reduce(aotgrad.ones(3))


def check_all():
    check_collectives()
    check_object_collectives()
    check_groups()
    check_ddp()
    check_surface()


SCENARIOS = {"all": check_all, "collectives": check_collectives, "groups": check_groups,
             "objects": check_object_collectives,
             "compiled_hooks": check_compiled_comm_hooks,
             "breaks": check_compiled_step_breaks,
             "16bit": check_compiled_step_16bit,
             "buffers": check_compiled_step_buffers,
             "buffers_numba": lambda: check_compiled_step_buffers("numba"),
             "16bit_numba": lambda: check_compiled_step_16bit("numba"),
             "compiled_hooks_numba": lambda: check_compiled_comm_hooks("numba"),
             "overlap": lambda: check_compiled_module_hands_out_gradients(aotgrad.float64),
             "overlap_numba": lambda: check_compiled_module_hands_out_gradients(
                 aotgrad.float32, "numba"),
             "ddp": check_ddp, "surface": check_surface,
             "raise": check_raise,
             "unused_error": check_unused_error, "timeout": check_timeout}


if __name__ == "__main__":
    scenario = sys.argv[1]
    timeout = datetime.timedelta(seconds=float(sys.argv[2])) if len(sys.argv) > 2 else None
    dist.init_process_group(backend="mpi", timeout=timeout)
    SCENARIOS[scenario]()
    print(f"ok {scenario} {dist.get_rank()}", flush=True)
    dist.destroy_process_group()
