"""aotgrad: a tracing, ahead-of-time backward compiler for numerical model code."""
from aotgrad.ir.dtypes import bool_, float32, float64, int32, int64
from aotgrad.ir.dtypes import bool_ as bool  # noqa: A001  (torch.bool)
