"""The code generator's side of the eager kernel library (runtime/kernel_library.py): a
Graph of flat buffers of one symbolic length, compiled by codegen.compile_graph, answered as
its one jitted kernel and the source of each of its arguments, so that the runtime calls the
kernel directly on its buffers."""
import os

from aotgrad.ir.symbolic import free_symbols
from aotgrad.runtime.kernel_library import (ArgSource, CompiledKernel, CompiledProgram, KernelArg,
                                            library)


class NotOneKernel(RuntimeError):
    """The graph did not compile to one kernel that writes all its outputs."""


def compile_flat(graph, in_helpers=False):
    """`graph` (inputs: flat arrays of one symbolic length, then a vector of scalars) as one
    kernel. Each output is written in place over an input by the caller, which is sound only
    when one elementwise kernel computes them all (each element read before it is written):
    any other schedule is refused. in_helpers: compiled by helper processes (a background
    compile: see codegen.CompiledGraph)."""
    # (the code generator, and numba with it, load on the first kernel, not on import)
    from aotgrad.codegen import compile_graph
    from aotgrad.codegen.scheduler import Kernel
    from aotgrad.codegen.symbols import symbols_of
    symbols = symbols_of(graph)
    if len(symbols) != 1:
        raise NotOneKernel(f"{graph.name}: one symbolic length expected, got {symbols}")
    symbol, = symbols
    prog = compile_graph(graph, name=graph.name, in_helpers=in_helpers)
    steps = prog.schedule.steps
    if len(steps) != 1 or not isinstance(steps[0], Kernel):
        raise NotOneKernel(f"{graph.name}: scheduled as {len(steps)} steps, not one kernel:\n"
                           f"{prog.report()}")
    fn, spec = prog.plan.kernel_fns[steps[0]]
    small = prog.plan.small_kernels.get(steps[0])
    if small is not None:
        # the range-loop variant (codegen.size_variants): the library runs the kernel on
        # chunks of at most FlatKernel.CHUNK elements, below the parallel variant's PAR_MIN
        # (the plan's kernel_fns holds the parallel one once both come from the disk cache)
        fn, spec = small[0], small[1].spec
    in_index = {id(v): i for i, v in enumerate(graph.inputs)}
    out_index = {id(v): i for i, v in enumerate(graph.outputs)}
    scalars = len(graph.inputs) - 1
    args = []
    for a in spec.args:
        if a.kind == "size":
            if not _has_symbols(a.value):     # an index offset
                args.append(KernelArg(ArgSource.NUMBER, int(a.value)))
            else:                             # the length itself, or an expression of it
                args.append(KernelArg(ArgSource.LENGTH,
                                      None if str(a.value) == symbol else a.value))
        elif a.kind == "const":
            if _has_symbols(a.value):
                raise NotOneKernel(f"{graph.name}: a constant depends on the length")
            args.append(KernelArg(ArgSource.NUMBER, a.dtype.np.type(a.value)))
        elif a.kind == "in":
            i = in_index[id(a.var)]
            args.append(KernelArg(ArgSource.SCALARS) if i == scalars
                        else KernelArg(ArgSource.ARRAY, i))
        else:
            args.append(KernelArg(ArgSource.WRITTEN, out_index[id(a.var)]))
    if sum(a.source is ArgSource.WRITTEN for a in args) != len(graph.outputs):
        raise NotOneKernel(f"{graph.name}: the kernel does not write every output")
    return CompiledKernel(fn, tuple(args), symbol, prog.cache_status)


def compile_program(graph, in_helpers=False):
    """`graph` (inputs of symbolic sizes) compiled by the code generator, called through its
    buffer plan's driver (the inputs trusted: the library hands C-contiguous arrays of the
    graph's dtypes)."""
    from aotgrad.codegen import compile_graph
    from aotgrad.codegen.symbols import symbols_of
    prog = compile_graph(graph, name=graph.name, in_helpers=in_helpers)
    run = prog.plan.prepared().runner(len(graph.inputs))
    return CompiledProgram(run, tuple(symbols_of(graph)), getattr(prog, "cache_status", "new"))


def _has_symbols(x):
    return bool(free_symbols(x))


def _marker(key):
    """The file that says the kernel(s) of library key `key` are in the disk cache: named by
    the key and the code generator's version key, in the cache directory (cleared with it)."""
    import hashlib
    from aotgrad.codegen import cache
    h = hashlib.sha256(f"{cache._VERSION_KEY}\n{key!r}".encode()).hexdigest()[:32]
    return os.path.join(cache.cache_dir(), "eager-library", h)


def on_disk(key):
    """Did a run compile the kernel(s) of library key `key` into the disk cache? (A marker
    outliving machine code that was removed, or made by other code under the same key, only
    costs a compile at first use.)"""
    return os.path.exists(_marker(key))


def mark_on_disk(key):
    path = _marker(key)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8"):    # (an empty file: its name says it all)
        pass


class _Compiler:
    flat = staticmethod(compile_flat)
    program = staticmethod(compile_program)
    on_disk = staticmethod(on_disk)
    mark_on_disk = staticmethod(mark_on_disk)


library.use_compiler(_Compiler)
