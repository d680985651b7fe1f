"""Testing helpers (public): assert_close with dtype-based default tolerances,
compare_with_eager (compiled vs eager outputs and gradients, with kernel bisection on a
mismatch), and the pytest plugin (aotgrad.testing.plugin, registered as an entry point)."""
from aotgrad.testing.close import DEFAULT_TOLERANCES, assert_close, default_tolerances
from aotgrad.testing.compare import CompiledPathNotRun, compare_with_eager
from aotgrad.testing.bisect import BisectReport, StepReport, bisect_compiled_graph

__all__ = ["assert_close", "default_tolerances", "DEFAULT_TOLERANCES", "compare_with_eager",
           "CompiledPathNotRun", "bisect_compiled_graph", "BisectReport", "StepReport"]
