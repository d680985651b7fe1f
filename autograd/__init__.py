"""`aotgrad.autograd`, laid out like `torch.autograd`: backward/grad, grad modes, Function,
functional, gradcheck, anomaly mode and the profiler, all on the engine in runtime/."""
from aotgrad.runtime.autograd_api import backward, grad
from aotgrad.runtime.engine import Node, SavedTensor
from aotgrad.runtime.grad_mode import (detect_anomaly, enable_grad, inference_mode,
                                       is_anomaly_enabled, is_grad_enabled, no_grad,
                                       set_detect_anomaly, set_grad_enabled)
from aotgrad.runtime.grad_mode import is_anomaly_check_nan_enabled
from aotgrad.autograd import anomaly_mode, forward_ad, function, functional, grad_mode, graph, \
    profiler
from aotgrad.autograd.function import Function, InplaceFunction, once_differentiable
from aotgrad.autograd.variable import Variable
from aotgrad.autograd.grad_mode import _unsafe_preserve_version_counter  # noqa: F401
from aotgrad.autograd.grad_mode import is_multithreading_enabled, set_multithreading_enabled
from aotgrad.autograd import profiler_util  # noqa: E402
from aotgrad.autograd.profiler import kineto_available
from aotgrad.runtime import profiling as _profiling
from aotgrad.autograd.gradcheck import gradcheck, gradgradcheck

__all__ = ["backward", "grad", "Node", "Function", "once_differentiable", "gradcheck",
           "gradgradcheck", "no_grad", "enable_grad", "set_grad_enabled", "inference_mode",
           "is_grad_enabled", "detect_anomaly", "set_detect_anomaly", "is_anomaly_enabled",
           "is_anomaly_check_nan_enabled", "anomaly_mode", "function", "functional",
           "grad_mode", "graph", "profiler", "InplaceFunction", "Variable",
           "set_multithreading_enabled", "is_multithreading_enabled", "kineto_available", "profiler_util",
           "SavedTensor"]


def _profiler_enabled():
    """Whether an autograd profiler is recording (torch.autograd._profiler_enabled)."""
    return bool(_profiling.active())
