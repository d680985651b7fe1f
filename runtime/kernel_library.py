"""Eager work on kernels from the code generator: an update written once with tensor ops
(the per-parameter optimizer step, for one) is recorded over flat buffers of one symbolic
length, compiled by the code generator into one Numba kernel, and called directly on the
buffers, without the Program, guard and call-path machinery of a compiled function (a
dispatcher call and its argument list: a few microseconds).

    kernel = library.flat_kernel(FlatUpdate("sgd", np.float32, 2, 1, body, flags))
    if kernel is not None:          # None: not compiled yet (or not compilable)
        kernel(n, [p, grad], scalars)   # p updated in place

The runtime lies below the code generator (DESIGN.md), so the library is handed the function
that compiles a Graph (`library.use_compiler`), by aotgrad.compiler when it is imported.
Kernels are kept per update and dtype in memory, and their machine code in the code
generator's disk cache (compiled once per installation, for every length).

First use: a kernel missing from memory is compiled in the background (a thread that waits
for helper processes, which compile the machine code into the disk cache; the caller's numpy
path runs meanwhile); AOTGRAD_EAGER_KERNELS=wait compiles it in this process before the
first call returns, =off keeps the numpy paths.

Values do not change mid-run. A generated kernel of an op (ShapedOp) may differ from its
numpy path in the last bits (other approximations, another order of summation), so in the
background mode the choice is made once per key and process, at the key's first use: the
generated kernel where it is ready then (in memory, or compiled on disk by an earlier run:
loaded now), else the numpy path for the rest of the process, while the background compile
fills the disk cache for the next run. A FlatUpdate's kernel equals its numpy path bit for
bit (the fused optimizers' contract, tested), so it takes over as soon as it is compiled.
"""
import atexit
import enum
import logging
import os
import queue
import threading
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from aotgrad.ir import dtypes as dt
from aotgrad.ir.core import Aval, GraphBuilder, no_builder
from aotgrad.ir.symbolic import ShapeEnv
from aotgrad.runtime.grad_mode import enable_grad, no_grad
from aotgrad.runtime.tensor import Tensor

log = logging.getLogger(__name__)


class ArgSource(enum.Enum):
    """Where one argument of a compiled kernel comes from on each call."""
    LENGTH = "length"      # the flat length n, or an expression of it
    NUMBER = "number"      # a number fixed when compiled (an index offset, a constant)
    ARRAY = "array"        # the flat array at an index (an input of the update)
    SCALARS = "scalars"    # the vector of the update's runtime scalars
    WRITTEN = "written"    # the array at an index, written in place (an output)


@dataclass(frozen=True)
class KernelArg:
    source: ArgSource
    ref: object = None     # the array index, the number, or the length's SymInt


@dataclass(frozen=True)
class CompiledKernel:
    """A jitted kernel and how to call it (what the compiler answers for a flat Graph)."""
    fn: Callable
    args: tuple            # KernelArg per parameter, in order
    symbol: str            # the name of the length's symbol
    cache_status: str      # "new", "disk" or "memory": where its machine code came from


@dataclass(frozen=True)
class CompiledProgram:
    """A Graph with symbolic sizes compiled to kernels (what the compiler answers for a
    shaped Graph): `fn(*arrays, symbol_values)` -> outputs."""
    fn: Callable
    symbols: tuple         # the symbol names, in the order fn takes their values
    cache_status: str


class EagerKernelMode(enum.Enum):
    BACKGROUND = "background"   # compile in a thread; the numpy path runs meanwhile
    WAIT = "wait"               # compile before the first call returns
    OFF = "off"                 # numpy paths only


def mode():
    """The setting of AOTGRAD_EAGER_KERNELS, read at each use (a test or a user may change
    it between calls)."""
    value = os.environ.get("AOTGRAD_EAGER_KERNELS", "background")
    m = _MODES.get(value)
    if m is None:
        try:
            m = _MODES[value] = EagerKernelMode(value.strip().lower())
        except ValueError:
            raise ValueError(f"AOTGRAD_EAGER_KERNELS must be one of "
                             f"{', '.join(m.value for m in EagerKernelMode)}; "
                             f"got {value!r}") from None
    return m


_MODES = {}     # the setting's text -> its mode (parsed once per distinct text)


@dataclass(frozen=True)
class FlatUpdate:
    """An in-place update of `n_arrays` flat buffers of one length and dtype with
    `n_scalars` runtime scalars, written once with tensor ops: `body(tensors, scalars, flags)`
    updates the tensors in place (tensors: 1-D, scalars: a 1-D tensor of the scalars; index
    it). `flags` (hashable) are what `body` branches on; with `name` and `dtype` they key the
    kernel."""
    name: str
    dtype: np.dtype
    n_arrays: int
    n_scalars: int
    body: Callable = field(compare=False, hash=False)
    flags: tuple = ()

    # its kernel computes the numpy path's values bit for bit: it may take over mid-run
    exact = True

    @property
    def key(self):
        return (self.name, np.dtype(self.dtype).name, self.n_arrays, self.n_scalars, self.flags)

    def graph(self):
        """The update recorded over inputs of one symbolic length ("n"): its Graph, and per
        output the index of the array it overwrites."""
        env = ShapeEnv()
        n = env.create_symbol(1024, "n")      # (a small hint: the kernel is emitted serial)
        b = GraphBuilder(self.name)
        d = dt.from_numpy(np.dtype(self.dtype))
        ins = [b.add_input(Aval((n,), d), f"x{i}") for i in range(self.n_arrays)]
        sv = b.add_input(Aval((max(1, self.n_scalars),), d), "scalars")
        with env, b, no_grad():
            tensors = [Tensor._make(v, False) for v in ins]
            self.body(tensors, Tensor._make(sv, False), self.flags)
        writes = [i for i, (t, v) in enumerate(zip(tensors, ins)) if t._value is not v]
        b.graph.outputs = [tensors[i]._value for i in writes]
        return b.graph, writes


@dataclass(frozen=True)
class ShapedOp:
    """A function of arrays with symbolic sizes, written with tensor ops: `body(tensors,
    flags)` -> its output tensors. `shapes`: per input, its shape as size names (str, one
    symbol each, shared between inputs) and ints; `grads`: the inputs recorded as requiring
    grad (a body that differentiates, with autograd.grad, records its backward: the
    derivative rules of the same ops). With `name`, `dtype` and `flags` they key the
    kernel."""
    name: str
    dtype: np.dtype
    shapes: tuple
    body: Callable = field(compare=False, hash=False)
    flags: tuple = ()
    grads: tuple = ()

    # its kernel may differ from the numpy path in the last bits: chosen once per process
    exact = False

    @property
    def key(self):
        return (self.name, np.dtype(self.dtype).name, self.shapes, self.flags, self.grads)

    def graph(self):
        """The body recorded over inputs of symbolic sizes: its Graph, and the size names
        by symbol name."""
        env = ShapeEnv()
        sizes = {}
        for shape in self.shapes:
            for s in shape:
                if isinstance(s, str) and s not in sizes:
                    sizes[s] = env.create_symbol(64, s)   # (a small hint: serial kernels)
        b = GraphBuilder(self.name)
        d = dt.from_numpy(np.dtype(self.dtype))
        ins = [b.add_input(Aval(tuple(sizes[s] if isinstance(s, str) else s for s in shape), d),
                           f"x{i}") for i, shape in enumerate(self.shapes)]
        with env, b, (enable_grad() if self.grads else no_grad()):
            outs = self.body([Tensor._make(v, i in self.grads) for i, v in enumerate(ins)],
                             self.flags)
        b.graph.outputs = [o._value for o in outs]
        return b.graph, {str(v): k for k, v in sizes.items()}


class ShapedKernel:
    """A compiled ShapedOp, called as `kernel(arrays, sizes)` with C-contiguous arrays of
    its shapes and dtype and `sizes` {size name: int}; answers its outputs (new arrays)."""

    def __init__(self, op, compiled, names):
        self.op, self.compiled = op, compiled
        self._run = compiled.fn
        self._order = tuple(names[s] for s in compiled.symbols)

    def __call__(self, arrays, sizes):
        if not self._order:                     # (all sizes fixed: no symbol values)
            return self._run(*arrays)
        return self._run(*arrays, tuple(sizes[s] for s in self._order))


class FlatKernel:
    """A compiled FlatUpdate, called as `kernel(n, arrays, scalars)` with C-contiguous 1-D
    arrays of length n and the update's dtype (written in place) and a 1-D array of its
    scalars.

    The kernel's outputs are separate arguments from its inputs; given the same buffer, its
    loop is correct (each element is read before it is written) but not vectorised (the
    compiler's overlap check fails, and the scalar loop was slower than the chunked one).
    So a long update runs chunk by chunk, the outputs written to scratch buffers that stay
    in cache and copied over the inputs after each chunk."""

    CHUNK = 32768      # elements per chunk: scratch buffers that stay in the L2 cache

    def __init__(self, update, compiled, writes):
        self.update, self.compiled = update, compiled
        self._writes = tuple(writes)
        self._fn = compiled.fn
        self._symbol = compiled.symbol
        self._args = compiled.args

    def _arguments(self, n, arrays, outs, scalars):
        args = []
        for a in self._args:
            source = a.source
            if source is ArgSource.ARRAY:
                args.append(arrays[a.ref])
            elif source is ArgSource.WRITTEN:
                args.append(outs[a.ref])
            elif source is ArgSource.LENGTH:
                args.append(n if a.ref is None else a.ref.evaluate({self._symbol: n}))
            elif source is ArgSource.SCALARS:
                args.append(scalars)
            else:
                args.append(a.ref)
        return args

    def __call__(self, n, arrays, scalars):
        if n < 4096:     # (short: the copies would cost more than the scalar loop)
            self._fn(*self._arguments(n, arrays, [arrays[i] for i in self._writes], scalars))
            return
        step = self.CHUNK
        scratch = [np.empty(min(n, step), arrays[0].dtype) for _ in self._writes]
        for lo in range(0, n, step):
            hi = min(lo + step, n)
            views = [a[lo:hi] for a in arrays]
            outs = [s[:hi - lo] for s in scratch]
            self._fn(*self._arguments(hi - lo, views, outs, scalars))
            for out, i in zip(outs, self._writes):
                np.copyto(views[i], out)


class KernelLibrary:
    """The kernels of eager work, compiled on first use and kept per key. Background
    compiles run one at a time in one worker thread (several threads would take the
    interpreter lock from the user's steps several times over)."""

    def __init__(self):
        self._compiler = None         # set by aotgrad.compiler: see use_compiler
        self._table = {}              # key -> FlatKernel, or None where it cannot compile
        # keys of inexact kernels (ShapedOp) that were not ready at their first use in this
        # process: the numpy path runs for them until clear() (in the background mode)
        self._numpy_keys = set()
        self._pending = {}            # key -> Event set when its compile is over
        self._queue = queue.Queue()   # (update, Event) for the worker
        self._worker = None
        self._lock = threading.Lock()
        self._closing = False         # the interpreter is exiting: no new compiles

    def use_compiler(self, compiler):
        """`compiler.flat(graph, in_helpers)` -> CompiledKernel (raises where the graph is not
        one kernel over its flat inputs); `compiler.program(graph, in_helpers)` ->
        CompiledProgram. in_helpers: machine code missing from the disk cache is compiled
        by helper processes (in the background mode: a compile in this process would hold
        the interpreter lock for seconds at a time while the user's steps run).
        `compiler.on_disk(key)`: did a run compile the kernel of `key` into the disk cache
        (`compiler.mark_on_disk(key)`, said after each compile)?"""
        self._compiler = compiler

    def flat_kernel(self, update):
        """The compiled kernel of FlatUpdate `update`, or None: not ready yet (compiling in
        the background), not compilable, or kernels are off."""
        return self._get(update)

    def shaped_kernel(self, op):
        """The compiled kernel(s) of ShapedOp `op` (a ShapedKernel), or None as
        flat_kernel."""
        return self._get(op)

    def _get(self, update):
        m = mode()
        if m is EagerKernelMode.OFF:
            return None
        key = update.key
        fixed = m is EagerKernelMode.BACKGROUND and not update.exact
        if fixed and key in self._numpy_keys:
            return None
        try:
            return self._table[key]
        except KeyError:
            pass
        if self._compiler is None:
            return None
        # (outside the lock: a look at the disk, and the code generator's import)
        ready = fixed and self._compiler.on_disk(key)
        with self._lock:
            if key in self._table:
                return self._table[key]
            done = self._pending.get(key)
            if done is None:
                if self._closing:
                    return None
                done = self._pending[key] = threading.Event()
                if m is EagerKernelMode.BACKGROUND and not ready:
                    if fixed:
                        self._numpy_keys.add(key)
                    self._queue.put((update, done))
                    if self._worker is None:
                        self._worker = threading.Thread(target=self._work, daemon=True,
                                                        name="aotgrad-eager-kernels")
                        self._worker.start()
                    return None
                mine = True
            else:
                mine = False
                if fixed:             # (being compiled: not ready at its first use)
                    self._numpy_keys.add(key)
        if m is EagerKernelMode.BACKGROUND and not (mine and ready):
            return None
        if mine:                      # wait mode, or on disk: compiled (loaded) here, now
            self._build(update, False, done)
        else:
            done.wait()
        return self._table.get(key)

    def _work(self):
        while True:
            update, done = self._queue.get()
            if self._closing:         # (exiting: what has not started is dropped)
                with self._lock:
                    self._pending.pop(update.key, None)
                done.set()
                continue
            self._build(update, True, done)

    def _build(self, update, in_helpers, done):
        try:
            with no_builder():
                graph, extra = update.graph()
            if isinstance(update, FlatUpdate):
                kernel = FlatKernel(update, self._compiler.flat(graph, in_helpers), extra)
            else:
                kernel = ShapedKernel(update, self._compiler.program(graph, in_helpers), extra)
        except Exception as e:    # the numpy path stays: say why once
            log.warning("eager kernel %s (%s) did not compile; the numpy path runs: %s: %s",
                        update.name, np.dtype(update.dtype).name, type(e).__name__, e)
            kernel = None
        else:
            try:
                self._compiler.mark_on_disk(update.key)
            except OSError as e:      # (the next run compiles it again: only slower)
                log.debug("eager kernel %s: not marked as compiled: %s", update.name, e)
        with self._lock:
            self._table[update.key] = kernel
            self._pending.pop(update.key, None)
        done.set()

    def wait(self):
        """Wait for every kernel being compiled."""
        while True:
            with self._lock:
                events = list(self._pending.values())
            if not events:
                return
            for e in events:
                e.wait()

    def close(self):
        """At exit: start no compile, and let the one under way finish (numba must not be
        compiling in a daemon thread while the interpreter shuts down)."""
        with self._lock:
            self._closing = True
        self.wait()

    def info(self):
        """{key: where its machine code came from ("new", "disk", "memory"), or None where it
        did not compile}."""
        with self._lock:
            return {k: None if v is None else v.compiled.cache_status
                    for k, v in self._table.items()}

    def numpy_keys(self):
        """The keys whose ops run their numpy path for the rest of this process: their
        kernels were not ready at first use (background mode)."""
        with self._lock:
            return set(self._numpy_keys)

    def clear(self):
        """Forget the kernels in memory and the choices made at first use, as a new process
        would (the disk cache keeps their machine code)."""
        self.wait()
        with self._lock:
            self._table.clear()
            self._numpy_keys.clear()


library = KernelLibrary()
atexit.register(library.close)


def flat(a):
    """The 1-D C-contiguous view of array `a`, or None where it has none."""
    if not a.flags.c_contiguous:
        return None
    return a.reshape(-1)

