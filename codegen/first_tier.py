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
runs in blocks of rows (codegen.row_blocks): each node's numpy pass over a block stays in
the CPU's cache, where a pass over the whole array streams it from memory and allocates a
fresh result each time. A GELU's backward over 1M elements (34 passes) took a third of the
time this way. Constants (`full`) are one broadcast value, not an array of their shape.

A reference kernel computes what eager mode computes: its values may differ from the
compiled kernel's in the last bits (the compiled one uses vectorisable exp/tanh and sums in
blocks), as two backends of one program may. Its runs are charged to the program's rent
(codegen.rent), which decides when the program waits for its compiles.

A kernel that keeps its rows to itself runs meanwhile on the row machine (codegen.row_vm),
and from its second call on, once LLVM has compiled its row program (codegen.row_native),
as machine code.
"""
import collections
import dataclasses
import math
import time
from typing import NamedTuple

import numpy as np

from aotgrad.codegen import cost, parts, row_machine, row_native, tiers
from aotgrad.codegen.row_blocks import numpy_impl, row_blocks
from aotgrad.codegen.row_program import address as row_address, row_program
from aotgrad.codegen.steps import Kernel
from aotgrad.ir import prims
from aotgrad.ir.tags import Tag


def _canonical_order(nodes, outputs):
    """`nodes` in the order a depth-first walk from `outputs` (in their order, each node's
    inputs in theirs) finishes them, then any not reached: the same for two kernels whose
    graphs are the same up to their vars, whatever order the schedule gave each (the layers
    of a model make one generated kernel; their row programs are then equal, and compile
    natively once). Iterative: a kernel's depth is not bounded."""
    producer = {v: n for n in nodes for v in n.outputs}
    done, order = set(), []
    roots = [producer[v] for v in outputs if v in producer] + list(nodes)
    for root in roots:
        if root in done:
            continue
        stack = [(root, iter(root.inputs))]
        done.add(root)
        while stack:
            node, inputs = stack[-1]
            for v in inputs:
                p = producer.get(v)
                if p is not None and p not in done:
                    done.add(p)
                    stack.append((p, iter(p.inputs)))
                    break
            else:
                stack.pop()
                order.append(node)
    return order


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


@dataclasses.dataclass(frozen=True)
class _Buffer:
    """Where a run's values hold the output buffer of `var` (a key of its env)."""
    var: object


@dataclasses.dataclass(frozen=True)
class _Store:
    """The value of written var `var` put into its output buffer as soon as it is made, and
    read from there after: a transposed value is then read in the buffer's order (a sum over
    it runs along memory, not across it), and it is not copied again at the end."""
    inputs: tuple           # (var, _Buffer(var))
    outputs: tuple          # (var,)

    @staticmethod
    def run(value, buffer):
        value = np.asarray(value)
        if not buffer.flags.c_contiguous:
            buffer[...] = value.reshape(buffer.shape)
            return value
        view = buffer.reshape(value.shape)
        view[...] = value
        return view


def _with_stores(steps, written):
    """`steps` with a _Store after each one that makes a var of `written`."""
    out = []
    for n in steps:
        out.append(n)
        out.extend(_Store((v, _Buffer(v)), (v,)) for v in n.outputs if v in written)
    return out


class _Kept(NamedTuple):
    """What a ReferenceKernel keeps of one way to run its nodes, from its first call on."""
    values: dict            # the values that depend on no input (made once)
    steps: "_Steps"         # the rest, run each call
    stored: frozenset       # the outputs its steps put into their buffers (_Store)


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
            if isinstance(n, (_PaddedSum, _Store)):
                self.steps.append((n.run, {}, n.inputs, n.outputs[0], False))
                continue
            impl, p = (numpy_impl(n.prim), n.params) if how is None else how(n)
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


def _addresses(args, reads, writes):
    """The address of each argument a kernel reads or writes, by its index (a list the
    length of `args`), or None where one of them is not C-contiguous (its elements are not
    one byte range from its address)."""
    out = [0] * len(args)
    for i, _ in reads:
        a = args[i]
        if not a.flags.c_contiguous:
            return None
        out[i] = row_address(a)
    for i, _ in writes:
        out[i] = row_address(args[i])
    return out


def _evaluate(nodes, env, how=None):
    """Run `nodes` once on the values in `env` (adding theirs); see _Steps."""
    _Steps(nodes, how).run(env)


# a reference kernel whose last run took longer than this holds the thread pool's workers
# polling while it runs (parts.hold): a worker asleep by its end would start the product
# that follows late
HOLD_SECONDS = 2e-4


class ReferenceKernel:
    """Callable as the compiled kernel of `spec` is (same arguments, in the same order):
    reads its "in" arrays, evaluates `step.nodes`, writes its "out" arrays; returns 0 (no
    failed index check: the reference impls raise their own errors). `seconds`: how long
    its last call took (the background compile does the kernels that cost most first)."""

    def __init__(self, step, spec):
        self.name = spec.name
        self.reads = [(i, a.var) for i, a in enumerate(spec.args) if a.kind == "in"]
        self.writes = [(i, a.var) for i, a in enumerate(spec.args) if a.kind == "out"]
        self.nodes = _canonical_order(step.nodes, [v for _, v in self.writes])
        # outputs read by other nodes of the kernel: written as soon as they are made, where
        # no output buffer overlaps an input, those nodes read them in the buffer's order
        read = {v for n in self.nodes for v in n.inputs}
        self.read_written = frozenset(v for _, v in self.writes if v in read)
        rows = row_blocks(self.nodes, self.reads, self.writes, one_block=True)
        # numpy runs in blocks where there are several; the row machine takes any rows
        self.blocks = rows if rows is not None and rows.block < rows.rows else None
        self.program = row_program(self, rows) if row_machine.enabled() and rows else None
        if self.program is not None:
            row_machine.request()
        self.seconds = 0.0
        # its fastest call so far, what each call is charged: a call slowed by other work
        # on the cores (another process, a compile) would have been slowed compiled too,
        # and charging the slowdown brought a long wait for compiles that gained nothing
        self.best_seconds = math.inf
        self.calls = 0
        self.compiled_seconds = cost.step_seconds(step)   # the compiled kernel's, estimated
        self.rent = None        # the program's Rent, where it has one
        # whether it may keep the pool's workers polling while it runs (its program's
        # compiles are held back: no helper needs the cores meanwhile)
        self.holds_workers = False
        self._constants = {}    # "whole" / "stored" / "once" / "after" -> _Kept
        self._block_steps = {}  # rows in a block -> _Steps of the per-block nodes

    def __call__(self, *args):
        t0 = time.perf_counter()
        self.calls += 1
        if self.calls == 2 and self.program is not None:
            # (not at the first: a first call stays as fast as it can be, and a kernel run
            # once needs no compile)
            row_native.request(self.program, self.seconds)
        held = parts.hold() if self.holds_workers and self.seconds > HOLD_SECONDS \
            and row_native.idle() and not tiers.pending() else None
        try:
            if self.program is not None and (self.program.native is not None
                                             or row_machine.machine() is not None):
                done = self._run_blocks(args, self.program.rb)
            else:
                done = self.blocks is not None and self._run_blocks(args, self.blocks)
            if not done:
                self._run_whole(args)
        finally:
            parts.let_go(held)
        self.seconds = time.perf_counter() - t0
        self.best_seconds = min(self.best_seconds, self.seconds)
        if self.rent is not None:
            self.rent.charge(self.best_seconds - self.compiled_seconds, self.name)
        return 0

    def _evaluate_kept(self, key, nodes, env, keep=None, store=frozenset()):
        """_evaluate(nodes, env), the values that depend on no input made at the first call
        only (the impls are deterministic and never write their inputs: a constant's value
        is the same array each call; a small kernel's constants cost as much as its work).
        `keep`: the values read after (its sums of pads are made one step, _padded_sums);
        None: every value may be. `store`: values of `keep` put into their output buffers
        as they are made, where made from the inputs (_Store; env holds the buffers).
        Returns the values so stored."""
        kept = self._constants.get(key)
        if kept is None:
            const, rest = _constant_part(nodes)
            values = {}
            _evaluate(const, values)
            if keep is not None:
                rest = _padded_sums(rest, keep)
            stored = frozenset(v for n in rest for v in n.outputs if v in store)
            if stored:
                rest = _with_stores(rest, stored)
            kept = self._constants[key] = _Kept(values, _Steps(rest), stored)
        env.update(kept.values)
        kept.steps.run(env)
        return kept.stored

    def _run_whole(self, args):
        env = {v: args[i].reshape(v.shape) for i, v in self.reads}
        writes = {v for _, v in self.writes}
        if self.read_written and self._outputs_apart(args):
            env.update((_Buffer(v), args[i]) for i, v in self.writes if v in self.read_written)
            stored = self._evaluate_kept("stored", self.nodes, env, keep=writes,
                                         store=self.read_written)
        else:
            stored = self._evaluate_kept("whole", self.nodes, env, keep=writes)
        values = [(args[i], np.asarray(env[v])) for i, v in self.writes if v not in stored]
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

    def _outputs_apart(self, args):
        """Whether no output buffer shares memory with an input or with another output (a
        value can then be written as soon as it is made: nothing read later is written)."""
        outs = [args[i] for i, _ in self.writes]
        others = [args[i] for i, _ in self.reads]
        for o in outs:
            if any(np.may_share_memory(o, x) for x in others):
                return False
            others.append(o)
        return True

    def _run_blocks(self, args, rb):
        """Run by rows (plan `rb`: on the row machine where it is loaded and runs the
        kernel, else block by block on numpy); False (nothing written) where an output
        buffer overlaps an input other than the same rows of the same layout (a block's
        writes would reach rows a later block reads)."""
        if not all(args[i].flags.c_contiguous for i, _ in self.writes):
            return False                   # (a reshape would copy: writes would be lost)
        addresses = _addresses(args, self.reads, self.writes)
        if not self._writes_apart(args, rb, addresses):
            return False
        whole = {v: args[i].reshape(v.shape) for i, v in self.reads if v not in rb.split}
        self._evaluate_kept("once", rb.once, whole)
        if self.program is not None and self.program.run(
                args, whole, self.program.native, row_machine.machine(), addresses):
            self._run_after(rb, whole, args)
            return True
        if rb.block >= rb.rows:
            return False
        rows, block = rb.rows, rb.block
        split_ins = [(v, args[i].reshape((rows,) + tuple(v.shape[rb.axes:])))
                     for i, v in self.reads if v in rb.split]
        split_outs = [(v, args[i].reshape((rows,) + tuple(v.shape[rb.axes:])))
                      for i, v in self.writes if v in rb.split]
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
        for i, v in self.writes:
            if v in rb.summed:
                args[i].reshape(v.shape)[...] = partial[v]
        whole.update((v, np.asarray(x).astype(v.dtype.np).reshape(v.shape))
                     for v, x in partial.items())
        self._run_after(rb, whole, args)
        return True

    def _writes_apart(self, args, rb, addresses):
        """Whether no output buffer overlaps an input, other than as the same rows of the
        same layout (an update in place). `addresses`: each argument's (_addresses), where
        every one is C-contiguous: an overlap is then one of their byte ranges."""
        if addresses is None:
            outs = [(v, args[i].reshape(v.shape)) for i, v in self.writes]
            ins = [(w, args[i].reshape(w.shape)) for i, w in self.reads]
            return not any(
                np.may_share_memory(o, x) and not (
                    v in rb.split and w in rb.split and o.shape == x.shape
                    and o.strides == x.strides and row_address(o) == row_address(x))
                for v, o in outs for w, x in ins)
        # (an empty array shares no memory: numpy's test says the same)
        spans = [(addresses[i], addresses[i] + args[i].nbytes, w) for i, w in self.reads
                 if args[i].nbytes]
        for j, v in self.writes:
            lo = addresses[j]
            hi = lo + args[j].nbytes
            for first, past, w in spans if hi > lo else ():
                if first < hi and lo < past and not (
                        first == lo and past == hi and v in rb.split and w in rb.split
                        and v.shape == w.shape):
                    return False
        return True

    def _run_after(self, rb, env, args):
        """Run rb.after on the sums over the rows and the whole values in `env` (each
        rounded to its value's dtype first, as the compiled kernel rounds them); write the
        outputs it makes into their buffers among `args`."""
        if not rb.after:
            return
        self._evaluate_kept("after", rb.after, env)
        for i, v in self.writes:
            if v in rb.after_values:
                args[i].reshape(v.shape)[...] = env[v]


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
