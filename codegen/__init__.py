"""codegen: turns an IR Graph into a fast callable over numpy arrays.

    prog = compile_graph(graph, name="forward")
    outs = prog(*arrays)        # same as ir.evaluate(graph, arrays)
    prog.source                 # the generated Numba module
    prog.report()               # kernels, refused fusions (with reasons), buffer plan

Modules, one job each:
  scheduler   groups nodes into fused kernels / BLAS / reference steps (node_kinds: how
              each node is treated; steps: Step, Kernel, Schedule; fusion: kernel merges
              and refusals; cuts: values stored instead of recomputed; blas_layout:
              strided dot operands, products written transposed)
  templates   per-prim emit templates for pointwise prims
  approx      vectorisable float32 exp/log/tanh/logistic/erf (source text) and the prelude
  inline      pastes the approximations' statements into kernel bodies
  text_cse    shares equal right-hand sides of emitted kernel text (value numbering)
  index       index terms (Const, Dim, Gathered) and the index maps of view prims
  emitter     Numba source for kernels: values and index arithmetic (emit_base: shared
              records; emit_args: a kernel's argument list; emit_state: the state the
              parts share; emit_reductions, emit_loops: reductions and loop nests)
  executor    the flat step list over planned buffers
  cache       on-disk module cache (AOTGRAD_CACHE_DIR), cache_clear(), cache_info()
  blas        products on MKL (Intel CPUs) or numpy's OpenBLAS, one single-threaded
              gemm per thread
  tiers       cold kernels run on numpy until helper processes have compiled them
  parts       a kernel's parallel loops split into parts that threads run
  program     compile_graph and CompiledGraph
  cost        a schedule's estimated time from its bytes and flops, a value's trip through
              memory (step_events: what the profiler shows of each step)
  symbols     symbols_of(graph): the symbol values a program with symbolic sizes takes
Imports only aotgrad.ir.
"""
from aotgrad.codegen.cache import cache_clear, cache_dir, cache_info
from aotgrad.codegen.program import CompiledGraph, compile_graph
from aotgrad.codegen.symbols import symbols_of
from aotgrad.codegen.tiers import wait as wait_for_parallel_kernels

__all__ = ["compile_graph", "CompiledGraph", "symbols_of", "cache_clear", "cache_info", "cache_dir",
           "wait_for_parallel_kernels"]
