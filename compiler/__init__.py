"""aotgrad.compiler: `compile()` and what surrounds it, laid out by job.

- `api`: compile(), the CompiledFunction it returns (lookup, trace, build, cache, warnings),
  is_compiling() and assume_constant_result() for model code;
- `guards`: the cache key of a call and the state guards of a trace;
- `program`: Program, one compiled specialisation, and its general call;
- `call`: the straight-line call and `loss.backward()` generated per program and guard key;
- `explain`: explain(fn, *args) in words.

`cache_size_limit` (programs per compiled function before it warns and runs eagerly) is read
here at each new CompiledFunction, as torch._dynamo.config.cache_size_limit.
"""
from aotgrad.compiler.api import (BACKENDS, CompiledFunction, assume_constant_result,
                                  compile, is_compiling)
from aotgrad.compiler.dynamic import CompileStats, mark_dynamic, mark_static
from aotgrad.compiler.explain import Explanation, explain
from aotgrad.compiler import kernel_library as _kernel_library  # noqa: F401  (eager kernels)
from aotgrad.compiler.program import Program
from aotgrad.tracer.trace import GraphBreakError

cache_size_limit = 8

__all__ = ["compile", "explain", "is_compiling", "assume_constant_result", "CompiledFunction",
           "Program", "Explanation", "GraphBreakError", "BACKENDS", "cache_size_limit",
           "mark_dynamic", "mark_static", "CompileStats"]
