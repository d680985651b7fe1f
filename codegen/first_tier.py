"""The first tier of a cold kernel: its IR nodes run with numpy's reference impls.

Numba compiles a generated kernel in 0.3-1.5 s, so a cold program of tens of kernels spent
seconds compiling before its first call could run. Instead, a kernel whose machine code is
not in the cache runs as a `ReferenceKernel` first: a Python callable with the compiled
kernel's arguments that evaluates the kernel's nodes with the same numpy impls eager mode
uses and writes the results into the kernel's output buffers. Products stay on the
program's BLAS calls. The kernel is compiled in the background meanwhile (codegen.tiers)
and swapped into the driver between two calls.

A kernel whose nodes keep each row of the leading axis to itself (pointwise chains, row
reductions, broadcasts of per-row or per-column values: a GELU, a layer norm, a softmax)
runs in blocks of rows (`RowBlocks`): each node's numpy pass over a block stays in the
CPU's cache, where a pass over the whole array streams it from memory and allocates a
fresh result each time. A GELU's backward over 1M elements (34 passes) took a third of the
time this way. Constants (`full`) are one broadcast value, not an array of their shape.

A reference kernel computes what eager mode computes: its values may differ from the
compiled kernel's in the last bits (the compiled one uses vectorisable exp/tanh and sums in
blocks), as two backends of one program may.

The first tier is rented, not owned (`Rent`): a program whose numpy runs have cost more
(each run counted at its kernel's fastest, so that a run slowed by other work on the cores
counts as much as an unslowed one), beyond what its compiled kernels are estimated to take
(codegen.cost), than compiling its
kernels still on numpy would take with every core, stops renting and waits for those
compiles. Its calls on numpy then never cost more than about twice the better of the two
choices, whether the training stops after a few steps or runs for hours (the ski-rental
rule), as long as the steps and the compiles do not compete for the cores. A small
program's steps run on one thread, and its compiles beside them on idle cores. A program
of a few milliseconds or more runs its steps on every core, so a compile beside them slows
them as much as it advances: its compiles are held back until the rent is due, and run
then while that call waits (codegen.tiers.defer).

A kernel that keeps its rows to itself runs meanwhile on the row machine (codegen.row_vm),
and from its second call on, once LLVM has compiled its row program (codegen.row_native),
as machine code close to the compiled kernel's speed.
"""
import collections
import dataclasses
import functools
import logging
import math
import threading
import time

import numpy as np

from aotgrad.codegen import cost, row_native, row_vm
from aotgrad.codegen.row_program import row_program
from aotgrad.codegen.steps import Kernel
from aotgrad.ir import prims
from aotgrad.ir.tags import Tag

log = logging.getLogger(__name__)

BLOCK_ELEMENTS = 1 << 15    # elements of the widest value per block of rows (L2-sized)
WAIT_LIMIT = 300.0          # seconds a program waits for its first-tier compiles, at most


class Rent:
    """The account of one program's first tier: every run of one of its reference kernels
    is charged what the kernel's fastest run so far took beyond its compiled kernel's
    estimate (ReferenceKernel.best_seconds); once the charges reach
    the estimated seconds the kernels still on numpy take to compile on `workers` helpers
    (`compiled(name)` takes a kernel off as it is swapped in), the charging call waits for
    the compiles, once, until the program's first-tier job ends (`started()`,
    `finished()`): the ski-rental rule. Never in the program's first call, which stays fast
    (a kernel charged more often than it runs in one call, `runs_per_call`: its name ->
    count, 1 where absent, marks the second). A job held back (`start`: codegen.tiers.defer's
    start) is started by that call; one queued behind another is not waited for (the
    estimate holds for a job that runs now). `program`: its name (for the log); `charged`,
    `waited`: seconds charged and waited so far."""

    def __init__(self, program, compile_seconds, workers, runs_per_call=None, start=None):
        self.program = program
        self._start = start     # a held-back job's start (codegen.tiers.defer), or None
        self._runs_per_call = dict(runs_per_call or {})
        self._runs = collections.Counter()      # kernel name -> runs charged
        self._started = False
        self._left = dict(compile_seconds)      # kernel name -> its estimated compile seconds
        self._workers = max(1, workers)
        self._due = self._estimate()            # (charged on every first-tier call)
        self._lock = threading.Lock()
        self._finished = threading.Event()
        self._waited_once = False
        self.charged = 0.0
        self.waited = 0.0

    def compiled(self, name):
        with self._lock:
            self._left.pop(name, None)
            self._due = self._estimate()

    def _estimate(self):
        return sum(self._left.values()) / min(self._workers, max(1, len(self._left)))

    def started(self):
        self._started = True

    def finished(self):
        self._finished.set()

    def due(self):
        """Seconds the kernels still on numpy are estimated to take to compile now."""
        return self._due

    def charge(self, seconds, kernel):
        """Charge a run of reference kernel `kernel` (its name) `seconds` beyond its
        compiled estimate (a negative figure is no credit)."""
        self.charged += max(0.0, seconds)
        self._runs[kernel] += 1
        again = self._runs[kernel] > self._runs_per_call.get(kernel, 1)
        if self._waited_once or not again or self._finished.is_set() \
                or self.charged < self.due():
            return
        if self._start is not None:         # a job held back: it starts now, and is waited for
            start, self._start = self._start, None
            start()
        elif not self._started:
            return
        self._waited_once = True
        log.info("%s: its kernels ran on numpy for %.2f s more than compiled ones would take: "
                 "waiting for their compiles (%.2f s estimated)", self.program, self.charged,
                 self.due())
        t0 = time.perf_counter()
        self._finished.wait(WAIT_LIMIT)
        self.waited = time.perf_counter() - t0
        log.info("%s: waited %.2f s for its compiles", self.program, self.waited)


def _full(*, shape, value, dtype):
    """`prims.full` as a broadcast of one value (read-only: the impls never write their
    inputs, and the kernel's results are copied into its buffers), made once per shape,
    dtype and value (a small kernel's call made several, each as dear as a node)."""
    return _constant(tuple(shape), dtype.np, repr(value), value)


@functools.lru_cache(maxsize=4096)
def _constant(shape, np_dtype, value_repr, value):
    # (value_repr in the key: 0.0 == -0.0 and 1 == True, but their arrays differ)
    return np.broadcast_to(np.full((), value, dtype=np_dtype), shape)


def _impl(prim):
    return _full if prim is prims.full else prim.impl


@dataclasses.dataclass
class RowBlocks:
    """How a kernel runs in blocks of rows: the rows are the flattened leading `axes` axes
    (`rows` of them), shared by every value cut into blocks (`split`); a block of n rows of
    such a value is its (n, *rest) view; the other values are read whole. `once`: the nodes
    that read only whole values (run once per call); `per_block`: the rest, with their params
    for a block (`params[node]`: dims remapped, a "shape" or a slice's "limit" without its
    leading entry, filled in per block size); `summed`: values reduced over the rows (sum,
    max or min), combined across blocks (sums in float64); `after`: the nodes run once
    after the rows, on those combined values and whole ones (a loss's mean: its sum over
    the rows divided by their count)."""
    axes: int
    rows: int
    block: int
    split: frozenset
    once: list
    per_block: list
    params: dict
    summed: dict            # var -> the numpy function combining two partials
    squeeze: dict           # broadcast node -> the shape its whole input takes in a block
    after: list

    @functools.cached_property
    def after_values(self):
        return frozenset(v for n in self.after for v in n.outputs)

    def block_steps(self, n):
        """node -> (impl, params) for a block of n rows."""
        out = {}
        for node in self.per_block:
            p = self.params[node]
            for key in _PER_BLOCK_SIZE.intersection(p):
                p = dict(p, **{key: (n,) + p[key]})
            impl = _impl(node.prim)
            if node in self.squeeze:
                impl = functools.partial(_broadcast_reshaped, self.squeeze[node])
            out[node] = (impl, p)
        return out


# the params whose leading entry is the block's rows (a block's params hold the rest)
_PER_BLOCK_SIZE = frozenset({"shape", "limit"})


def _broadcast_reshaped(shape_in, x, *, shape, dims):
    return prims.broadcast_in_dim.impl(x.reshape(shape_in), shape=shape, dims=dims)


# a reduction over the rows, per block: how two blocks' partial results combine
_COMBINE = {prims.reduce_sum: np.add, prims.reduce_max: np.maximum,
            prims.reduce_min: np.minimum}


def row_blocks(nodes, reads, writes, one_block=False):
    """A RowBlocks plan for `nodes` (reads, writes: the kernel's (index, var) pairs), or
    None where a node mixes rows (a transpose, a pad...) or, unless `one_block`, the kernel
    is one block anyway. The most leading axes that work are taken (the finest blocks)."""
    values = [v for n in nodes for v in n.outputs]
    if not writes or not values:
        return None
    widest = max(values, key=lambda v: math.prod(v.shape))   # the kernel's domain
    for axes in range(len(widest.shape), 0, -1):
        plan = _plan(nodes, writes, widest.shape[:axes], one_block)
        if plan is not None:
            return plan
    return None


def _plan(nodes, writes, prefix, one_block):
    k, rows = len(prefix), math.prod(prefix)
    if rows < 2:
        return None

    def is_split(v):
        return tuple(v.shape[:k]) == tuple(prefix)

    def over_rows(n):       # a reduction over every row axis of a value cut into rows
        return (n.prim in _COMBINE and set(range(k)) <= set(n.params["dims"])
                and is_split(n.inputs[0]))
    after = _after_rows(nodes, over_rows, is_split)
    if after is None:
        return None
    late = {v for n in after for v in n.outputs}
    nodes = [n for n in nodes if n not in after]
    consumed = {v for n in nodes for v in n.inputs}
    if late & consumed:
        return None             # a value of the rows made from their sum (not in rows)
    split, params, summed, squeeze = {}, {}, {}, {}   # split: var -> True / False (whole)

    def need(v, s):
        if s and not is_split(v) or split.setdefault(v, s) != s:
            raise _Mixed
    sums = {n.outputs[0] for n in nodes if over_rows(n)}
    try:
        for _, v in writes:
            if v in late or v not in consumed and not is_split(v):
                continue                   # maybe a reduction over the rows (below)
            need(v, True)
        for n in after:                    # they read sums over the rows and whole values
            for v in n.inputs:
                if v not in late and v not in sums:
                    need(v, False)
        for n in reversed(nodes):
            out = n.outputs[0]
            if over_rows(n) and out not in split and out not in consumed:
                split[out] = False
                summed[out] = _COMBINE[n.prim]
                need(n.inputs[0], True)
                params[n] = dict(n.params, dims=(0,) + tuple(
                    d - k + 1 for d in n.params["dims"] if d >= k))
                continue
            s = {split.get(v) for v in n.outputs} - {None}
            if len(s) != 1:
                raise _Mixed              # (an output nothing reads: not worth the case)
            if not s.pop():
                for v in n.inputs:
                    need(v, False)
                continue
            if n.prim.multiple_results:
                raise _Mixed
            params[n] = _block_params(n, k, need, squeeze)
    except _Mixed:
        return None
    read_after = {v for n in after for v in n.inputs} - late
    if any(v not in split for _, v in writes if v not in late) or any(
            split[v] is False and v not in summed for _, v in writes if v not in late) or \
            any(v in sums and v not in summed for v in read_after):
        return None
    widest = max(math.prod(v.shape[k:]) for v, s in split.items() if s)
    block = max(1, BLOCK_ELEMENTS // max(1, widest))
    if block >= rows and not one_block:
        return None
    per_block = [n for n in nodes if n in params]
    once = [n for n in nodes if n not in params]
    return RowBlocks(k, rows, block, frozenset(v for v, s in split.items() if s), once,
                     per_block, params, summed, squeeze, after)


def _after_rows(nodes, over_rows, is_split):
    """The nodes that can run after the rows: each reads a reduction over the rows
    (`over_rows`) or another such node's value, and no other value cut into rows; None where
    a node reads both kinds (then the kernel does not run by rows)."""
    late, after = set(), []
    for n in nodes:
        if over_rows(n):
            late.update(n.outputs)
            continue
        if not any(v in late for v in n.inputs):
            continue
        if n.prim.multiple_results or any(is_split(v) for v in n.inputs if v not in late):
            return None
        after.append(n)
        late.update(n.outputs)
    return after


def _block_params(n, k, need, squeeze):
    """The params of split node n over a block (dims remapped to the block's axes; "shape"
    without its leading dim); calls need(var, split) for its inputs; sets squeeze[n] to the
    shape its whole input takes in a block (without axes of length 1 that fall on the rows)
    where it differs; raises _Mixed where n mixes rows."""
    out = n.outputs[0]
    if Tag.POINTWISE in n.prim.tags:
        for v in n.inputs:
            if v.shape != out.shape:
                raise _Mixed
            need(v, True)
        return n.params
    if n.prim is prims.full:
        return dict(n.params, shape=tuple(out.shape[k:]))
    if n.prim is prims.reshape:
        need(n.inputs[0], True)
        return dict(n.params, shape=tuple(out.shape[k:]))
    if n.prim is prims.broadcast_in_dim:
        x, dims = n.inputs[0], tuple(n.params["dims"])
        if dims[:k] == tuple(range(k)) and tuple(x.shape[:k]) == tuple(out.shape[:k]):
            need(x, True)                  # its rows are the output's rows
            dims = (0,) + tuple(d - k + 1 for d in dims[k:])
        elif all(d >= k or x.shape[i] == 1 for i, d in enumerate(dims)):
            need(x, False)                 # repeated along the rows
            keep = tuple(i for i, d in enumerate(dims) if d >= k)
            dims = tuple(dims[i] - k + 1 for i in keep)
            if len(keep) < len(x.shape):   # its axes of length 1 that fall on the rows
                squeeze[n] = tuple(x.shape[i] for i in keep)
        else:
            raise _Mixed
        return dict(n.params, dims=dims, shape=tuple(out.shape[k:]))
    if Tag.AXIS_REDUCTION in n.prim.tags and all(d >= k for d in n.params["dims"]):
        need(n.inputs[0], True)
        return dict(n.params, dims=tuple(d - k + 1 for d in n.params["dims"]))
    # a value's elements rearranged within each row (a chunk of the last axis, its
    # reversal, a transpose of the axes past the rows): each row from the same row
    x = n.inputs[0]
    if n.prim is prims.slice:
        strides = n.params.get("strides") or (1,) * len(x.shape)
        start, limit = n.params["start"], n.params["limit"]
        if (tuple(start[:k]) == (0,) * k and tuple(limit[:k]) == tuple(x.shape[:k])
                and tuple(strides[:k]) == (1,) * k):
            need(x, True)
            p = dict(n.params, start=(0,) + tuple(start[k:]), limit=tuple(limit[k:]))
            if n.params.get("strides") is not None:
                p["strides"] = (1,) + tuple(strides[k:])
            return p
    elif n.prim is prims.transpose and tuple(n.params["perm"][:k]) == tuple(range(k)):
        need(x, True)
        return dict(n.params, perm=(0,) + tuple(d - k + 1 for d in n.params["perm"][k:]))
    elif n.prim is prims.rev and all(d >= k for d in n.params["dims"]):
        need(x, True)
        return dict(n.params, dims=tuple(d - k + 1 for d in n.params["dims"]))
    raise _Mixed


class _Mixed(Exception):
    """A node mixes rows: the kernel runs whole."""


def _constant_part(nodes):
    """`nodes` split in two: those whose values depend on none of the kernel's inputs
    (`full`, and what only constants feed; never a communication), and the rest."""
    known, const, rest = set(), [], []
    for n in nodes:
        if Tag.COMMUNICATION not in n.prim.tags and all(v in known for v in n.inputs):
            const.append(n)
            known.update(n.outputs)
        else:
            rest.append(n)
    return const, rest


@dataclasses.dataclass(frozen=True)
class _PaddedSum:
    """Values padded with zeros into regions that do not overlap, added up (a stack or
    concatenation written as pads added, as a split's gradient is), as one step: zeros,
    then each value plus zero written into its region. The same values, bit for bit (each
    element is one value plus zeros, and x + 0 + 0 is x + 0: -0.0 becomes 0.0 as in the
    sum), without a full-size array per pad and per add."""
    inputs: tuple
    outputs: tuple
    regions: tuple          # per input, its slices in the sum
    shape: tuple
    dtype: np.dtype

    def run(self, *xs):
        out = np.zeros(self.shape, self.dtype)
        zero = self.dtype.type(0)
        for x, region in zip(xs, self.regions):
            np.add(x, zero, out=out[region])
        return out


def _padded_sums(nodes, keep):
    """`nodes` with each sum of zero pads whose regions do not overlap made one _PaddedSum
    (its pads and inner sums read by nothing else and not in `keep`, the values written
    out)."""
    uses = collections.Counter(v for n in nodes for v in n.inputs)
    parts = {}      # a pad's or a sum's var -> [(padded value, its region)]
    sums = set()
    for n in nodes:
        out = n.outputs[0]
        fill = n.params.get("value", 0.0) if n.prim is prims.pad else None
        if fill is not None and fill == 0 and not np.signbit(fill) and \
                np.dtype(out.dtype.np).kind in "fiu":
            parts[out] = [(n.inputs[0], prims.pad_region(n.params["config"],
                                                         n.inputs[0].shape))]
        elif n.prim is prims.add and len(set(n.inputs)) == 2 and all(
                v in parts and uses[v] == 1 and v not in keep
                for v in n.inputs):
            both = parts[n.inputs[0]] + parts[n.inputs[1]]
            if _apart([r for _, r in both], out.shape):
                parts[out] = both
                sums.add(out)
    if not sums:
        return nodes
    folded = {v for n in nodes if n.outputs[0] in sums for v in n.inputs}
    steps = []
    for n in nodes:
        out = n.outputs[0]
        if out in folded:
            continue            # (computed by the sum that reads it)
        if out in sums:
            steps.append(_PaddedSum(tuple(x for x, _ in parts[out]), (out,),
                                    tuple(r for _, r in parts[out]), tuple(out.shape),
                                    np.dtype(out.dtype.np)))
        else:
            steps.append(n)
    return steps


def _apart(regions, shape):
    """Whether no two of `regions` (slices per axis of an array of `shape`) share an
    element."""
    axes = [[range(*s.indices(n)) for s, n in zip(r, shape)] for r in regions]
    return all(any(_no_common(a, b) for a, b in zip(axes[i], axes[j]))
               for i in range(len(axes)) for j in range(i))


def _no_common(a, b):
    """Whether ranges `a` and `b` (of steps >= 1) surely have no element in common (False
    may also be a strided range's elements between the other's: then nothing is fused)."""
    if not a or not b or a[-1] < b[0] or b[-1] < a[0]:
        return True
    if a.step == 1 or b.step == 1:
        return False
    return not set(a).intersection(b)


class _Steps:
    """`nodes` made ready to run on every call: each one's impl, params and vars looked up
    once (`how(node)`: the impl and params to run it with; default its reference impl and
    its params). A run turns numpy's floating-point warnings off once for all its nodes and
    calls the quiet impls' functions bare (entering the warnings' context costs more than a
    small node's work)."""
    __slots__ = ("steps",)

    def __init__(self, nodes, how=None):
        self.steps = []
        for n in nodes:
            if isinstance(n, _PaddedSum):
                self.steps.append((n.run, {}, n.inputs, n.outputs[0], False))
                continue
            impl, p = (_impl(n.prim), n.params) if how is None else how(n)
            if isinstance(impl, prims.Quiet):
                impl = impl.fn
            out = n.outputs if n.prim.multiple_results else n.outputs[0]
            self.steps.append((impl, p, n.inputs, out, n.prim.multiple_results))

    def run(self, env):
        """Run on the values in `env`, adding theirs."""
        if not self.steps:
            return
        with np.errstate(all="ignore"):
            for impl, p, inputs, out, multiple in self.steps:
                r = impl(*[env[v] for v in inputs], **p)
                if multiple:
                    env.update(zip(out, r))
                else:
                    env[out] = r


def _evaluate(nodes, env, how=None):
    """Run `nodes` once on the values in `env` (adding theirs); see _Steps."""
    _Steps(nodes, how).run(env)


class ReferenceKernel:
    """Callable as the compiled kernel of `spec` is (same arguments, in the same order):
    reads its "in" arrays, evaluates `step.nodes`, writes its "out" arrays; returns 0 (no
    failed index check: the reference impls raise their own errors). `seconds`: how long
    its last call took (the background compile does the kernels that cost most first)."""

    def __init__(self, step, spec):
        self.name = spec.name
        self.nodes = list(step.nodes)
        self.reads = [(i, a.var) for i, a in enumerate(spec.args) if a.kind == "in"]
        self.writes = [(i, a.var) for i, a in enumerate(spec.args) if a.kind == "out"]
        rows = row_blocks(self.nodes, self.reads, self.writes, one_block=True)
        # numpy runs in blocks where there are several; the row machine takes any rows
        self.blocks = rows if rows is not None and rows.block < rows.rows else None
        self.program = row_program(self, rows) if row_vm.enabled() and rows else None
        if self.program is not None:
            row_vm.request()
        self.seconds = 0.0
        # its fastest call so far, what each call is charged: a call slowed by other work
        # on the cores (another process, a compile) would have been slowed compiled too,
        # and charging the slowdown brought a long wait for compiles that gained nothing
        self.best_seconds = math.inf
        self.calls = 0
        self.compiled_seconds = cost.step_seconds(step)   # the compiled kernel's, estimated
        self.rent = None        # the program's Rent, where it has one
        self._constants = {}    # "whole" / "once" -> (constant values, _Steps of the rest)
        self._block_steps = {}  # rows in a block -> _Steps of the per-block nodes

    def __call__(self, *args):
        t0 = time.perf_counter()
        self.calls += 1
        if self.calls == 2 and self.program is not None:
            # (not at the first: a first call stays as fast as it can be, and a kernel run
            # once needs no compile)
            row_native.request(self.program, self.seconds)
        if self.program is not None and (self.program.native is not None
                                         or row_vm.machine() is not None):
            done = self._run_blocks(args, self.program.rb)
        else:
            done = self.blocks is not None and self._run_blocks(args, self.blocks)
        if not done:
            self._run_whole(args)
        self.seconds = time.perf_counter() - t0
        self.best_seconds = min(self.best_seconds, self.seconds)
        if self.rent is not None:
            self.rent.charge(self.best_seconds - self.compiled_seconds, self.name)
        return 0

    def _evaluate_kept(self, key, nodes, env, keep=None):
        """_evaluate(nodes, env), the values that depend on no input made at the first call
        only (the impls are deterministic and never write their inputs: a constant's value
        is the same array each call; a small kernel's constants cost as much as its work).
        `keep`: the values read after (its sums of pads are made one step, _padded_sums);
        None: every value may be."""
        kept = self._constants.get(key)
        if kept is None:
            const, rest = _constant_part(nodes)
            values = {}
            _evaluate(const, values)
            if keep is not None:
                rest = _padded_sums(rest, keep)
            kept = self._constants[key] = (values, _Steps(rest))
        env.update(kept[0])
        kept[1].run(env)

    def _run_whole(self, args):
        env = {v: args[i].reshape(v.shape) for i, v in self.reads}
        self._evaluate_kept("whole", self.nodes, env, keep={v for _, v in self.writes})
        values = [(args[i], np.asarray(env[v])) for i, v in self.writes]
        # an output buffer may be an input's buffer (the plan reuses dead buffers): every
        # value that could read from an output buffer is copied before the first write
        outs = [o for o, _ in values]
        values = [(o, val.copy() if any(np.may_share_memory(val, x) for x in outs) else val)
                  for o, val in values]
        for o, val in values:
            # (into a view of the buffer in the value's shape: a transposed value reshaped
            # would be copied once more first)
            if o.flags.c_contiguous:
                o.reshape(val.shape)[...] = val
            else:
                o[...] = val.reshape(o.shape)

    def _run_blocks(self, args, rb):
        """Run by rows (plan `rb`: on the row machine where it is loaded and runs the
        kernel, else block by block on numpy); False (nothing written) where an output
        buffer overlaps an input other than the same rows of the same layout (a block's
        writes would reach rows a later block reads)."""
        if not all(args[i].flags.c_contiguous for i, _ in self.writes):
            return False                   # (a reshape would copy: writes would be lost)
        ins = {v: args[i].reshape(v.shape) for i, v in self.reads}
        outs = [(v, args[i].reshape(v.shape)) for i, v in self.writes]
        for v, o in outs:
            for w, x in ins.items():
                if np.may_share_memory(o, x) and not (
                        v in rb.split and w in rb.split and o.shape == x.shape
                        and o.strides == x.strides and o.__array_interface__["data"][0]
                        == x.__array_interface__["data"][0]):
                    return False
        whole = {v: x for v, x in ins.items() if v not in rb.split}
        self._evaluate_kept("once", rb.once, whole)
        if self.program is not None and self.program.run(args, whole, self.program.native,
                                                         row_vm.machine()):
            self._run_after(rb, whole, outs)
            return True
        if rb.block >= rb.rows:
            return False
        rows, block = rb.rows, rb.block
        split_ins = [(v, x.reshape((rows,) + x.shape[rb.axes:]))
                     for v, x in ins.items() if v in rb.split]
        split_outs = [(v, o.reshape((rows,) + o.shape[rb.axes:]))
                      for v, o in outs if v in rb.split]
        partial = {}
        for lo in range(0, rows, block):
            hi = min(rows, lo + block)
            steps = self._block_steps.get(hi - lo)
            if steps is None:
                steps = self._block_steps[hi - lo] = _Steps(
                    rb.per_block, rb.block_steps(hi - lo).__getitem__)
            env = dict(whole)
            env.update((v, x[lo:hi]) for v, x in split_ins)
            steps.run(env)
            for v, o in split_outs:
                o[lo:hi] = env[v]
            for v, combine in rb.summed.items():
                val = np.asarray(env[v])
                if combine is np.add and val.dtype.kind == "f":
                    val = val.astype(np.float64)
                partial[v] = val if v not in partial else combine(partial[v], val)
        for v, o in outs:
            if v in rb.summed:
                o[...] = partial[v]
        whole.update((v, np.asarray(x).astype(v.dtype.np).reshape(v.shape))
                     for v, x in partial.items())
        self._run_after(rb, whole, outs)
        return True

    def _run_after(self, rb, env, outs):
        """Run rb.after on the sums over the rows and the whole values in `env` (each
        rounded to its value's dtype first, as the compiled kernel rounds them); write the
        outputs it makes into `outs`' buffers."""
        if not rb.after:
            return
        self._evaluate_kept("after", rb.after, env)
        for v, o in outs:
            if v in rb.after_values:
                o[...] = env[v]


def reference_kernel(step, spec):
    """A ReferenceKernel for the Kernel step `step` emitted as `spec`, or None where its
    nodes read a value that is neither one of its arrays nor computed in it (then it is
    compiled up front)."""
    if not isinstance(step, Kernel):
        return None
    known = {a.var for a in spec.args if a.kind == "in"}
    for n in step.nodes:
        if any(v not in known for v in n.inputs):
            return None
        known.update(n.outputs)
    if any(a.var not in known for a in spec.args if a.kind == "out"):
        return None
    return ReferenceKernel(step, spec)
