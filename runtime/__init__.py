"""The runtime: Tensor, the op layer (runtime/*_ops.py by family, re-exported as `ops` and
`shape_ops`) with each prim's derivative rule, the autograd engine, grad/anomaly modes,
profiler hooks, and the compiled backward node (compiled_backward.py)."""
# imported for what they install: derivative rules, Tensor methods, Tensor.backward
from aotgrad.runtime import autograd_api, derivatives, linalg_rules, methods  # noqa: F401
from aotgrad.runtime.tensor import Size, Tensor
