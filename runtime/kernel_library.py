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

First use: a kernel missing from memory is compiled in a background thread (the first
steps run the caller's numpy path meanwhile); AOTGRAD_EAGER_KERNELS=wait compiles it
before the first call returns, =off keeps the numpy paths.
"""
import enum
import logging
import os
import threading
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from aotgrad.ir import dtypes as dt
from aotgrad.ir.core import Aval, GraphBuilder, no_builder
from aotgrad.ir.symbolic import ShapeEnv, SymInt
from aotgrad.runtime.grad_mode import no_grad
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
    """A jitted kernel and how to call it (what the compiler answers for a Graph)."""
    fn: Callable
    args: tuple            # KernelArg per parameter, in order
    symbol: str            # the name of the length's symbol
    cache_status: str      # "new", "disk" or "memory": where its machine code came from


class EagerKernelMode(enum.Enum):
    BACKGROUND = "background"   # compile in a thread; the numpy path runs meanwhile
    WAIT = "wait"               # compile before the first call returns
    OFF = "off"                 # numpy paths only


def mode():
    value = os.environ.get("AOTGRAD_EAGER_KERNELS", "background").strip().lower()
    try:
        return EagerKernelMode(value)
    except ValueError:
        raise ValueError(f"AOTGRAD_EAGER_KERNELS must be one of "
                         f"{', '.join(m.value for m in EagerKernelMode)}; got {value!r}") from None


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


class FlatKernel:
    """A compiled FlatUpdate, called as `kernel(n, arrays, scalars)` with C-contiguous 1-D
    arrays of length n and the update's dtype (written in place) and a 1-D array of its
    scalars."""

    def __init__(self, update, compiled, writes):
        self.update, self.compiled = update, compiled
        plan = []
        for a in compiled.args:
            if a.source is ArgSource.WRITTEN:
                plan.append((ArgSource.ARRAY, writes[a.ref]))
            else:
                plan.append((a.source, a.ref))
        self._plan = plan
        self._fn = compiled.fn
        self._symbol = compiled.symbol

    def __call__(self, n, arrays, scalars):
        args = []
        for source, ref in self._plan:
            if source is ArgSource.ARRAY:
                args.append(arrays[ref])
            elif source is ArgSource.LENGTH:
                args.append(n if ref is None else ref.evaluate({self._symbol: n}))
            elif source is ArgSource.SCALARS:
                args.append(scalars)
            else:
                args.append(ref)
        self._fn(*args)


class KernelLibrary:
    """The kernels of eager work, compiled on first use and kept per key."""

    def __init__(self):
        self._compile = None          # Graph -> CompiledKernel (set by aotgrad.compiler)
        self._table = {}              # key -> FlatKernel, or None where it cannot compile
        self._pending = {}            # key -> Thread compiling it
        self._lock = threading.Lock()

    def use_compiler(self, compile_graph):
        """`compile_graph(graph)` -> CompiledKernel; raises where the graph is not one
        kernel over its flat inputs."""
        self._compile = compile_graph

    def flat_kernel(self, update):
        """The compiled kernel of `update`, or None: not ready yet (compiling in the
        background), not compilable, or kernels are off."""
        key = update.key
        try:
            return self._table[key]
        except KeyError:
            pass
        m = mode()
        if m is EagerKernelMode.OFF or self._compile is None:
            return None
        with self._lock:
            if key in self._table:
                return self._table[key]
            thread = self._pending.get(key)
            if thread is None:
                thread = self._pending[key] = threading.Thread(
                    target=self._build, args=(update,), daemon=True,
                    name=f"aotgrad-kernel-{update.name}")
                thread.start()
        if m is EagerKernelMode.WAIT:
            thread.join()
            return self._table.get(key)
        return None

    def _build(self, update):
        try:
            with no_builder():
                graph, writes = update.graph()
            kernel = FlatKernel(update, self._compile(graph), writes)
        except Exception as e:    # the numpy path stays: say why once
            log.warning("eager kernel %s (%s) did not compile; the numpy path runs: %s: %s",
                        update.name, np.dtype(update.dtype).name, type(e).__name__, e)
            kernel = None
        with self._lock:
            self._table[update.key] = kernel
            self._pending.pop(update.key, None)

    def wait(self):
        """Wait for every kernel being compiled."""
        while True:
            with self._lock:
                threads = list(self._pending.values())
            if not threads:
                return
            for t in threads:
                t.join()

    def info(self):
        """{key: where its machine code came from ("new", "disk", "memory"), or None where it
        did not compile}."""
        with self._lock:
            return {k: None if v is None else v.compiled.cache_status
                    for k, v in self._table.items()}

    def clear(self):
        """Forget the kernels in memory (the disk cache keeps their machine code)."""
        self.wait()
        with self._lock:
            self._table.clear()


library = KernelLibrary()


def flat(a):
    """The 1-D C-contiguous view of array `a`, or None where it has none."""
    if not a.flags.c_contiguous:
        return None
    return a.reshape(-1)

