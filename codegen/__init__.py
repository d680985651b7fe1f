"""codegen: turns an IR Graph into a fast callable over numpy arrays.

    prog = compile_graph(graph, name="forward")
    outs = prog(*arrays)        # same as ir.evaluate(graph, arrays)
    prog.source                 # the generated Numba module
    prog.report()               # kernels, refused fusions (with reasons), buffer plan

Modules, one job each:
  scheduler   groups nodes into fused kernels / BLAS / reference steps
  templates   per-prim emit templates for pointwise prims
  approx      vectorisable float32 exp/log/tanh/logistic/erf (source text)
  emitter     Numba source for kernels (index arithmetic, loops, reductions)
  executor    the flat step list over planned buffers
  cache       on-disk module cache (AOTGRAD_CACHE_DIR), cache_clear(), cache_info()
  program     compile_graph and CompiledGraph
Imports only aotgrad.ir.
"""
from aotgrad.codegen.cache import cache_clear, cache_dir, cache_info
from aotgrad.codegen.program import CompiledGraph, compile_graph

__all__ = ["compile_graph", "CompiledGraph", "cache_clear", "cache_info", "cache_dir"]
