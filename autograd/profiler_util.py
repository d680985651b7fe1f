"""`aotgrad.autograd.profiler_util`, as `torch.autograd.profiler_util`: the profiler's event
classes and formatting helpers (defined in autograd/profiler.py)."""
from aotgrad.autograd.profiler import (EventList, FunctionEvent, FunctionEventAvg,  # noqa: F401
                                       Interval, _format_time)

__all__ = ["EventList", "FunctionEvent", "FunctionEventAvg", "Interval"]
