"""`aotgrad.autograd`, laid out like `torch.autograd`: backward/grad, grad modes, Function,
functional, gradcheck, anomaly mode and the profiler, all on the engine in runtime/."""
from aotgrad.runtime.autograd_api import backward, grad
from aotgrad.runtime.engine import Node
from aotgrad.runtime.grad_mode import (detect_anomaly, enable_grad, inference_mode,
                                       is_anomaly_enabled, is_grad_enabled, no_grad,
                                       set_detect_anomaly, set_grad_enabled)
from aotgrad.runtime.grad_mode import is_anomaly_check_nan_enabled
from aotgrad.autograd import anomaly_mode, forward_ad, function, functional, grad_mode, graph, \
    profiler
from aotgrad.autograd.function import Function, InplaceFunction, once_differentiable
from aotgrad.autograd.variable import Variable
from aotgrad.autograd.grad_mode import set_multithreading_enabled
from aotgrad.autograd.gradcheck import gradcheck, gradgradcheck

__all__ = ["backward", "grad", "Node", "Function", "once_differentiable", "gradcheck",
           "gradgradcheck", "no_grad", "enable_grad", "set_grad_enabled", "inference_mode",
           "is_grad_enabled", "detect_anomaly", "set_detect_anomaly", "is_anomaly_enabled",
           "is_anomaly_check_nan_enabled", "anomaly_mode", "function", "functional",
           "grad_mode", "graph", "profiler", "InplaceFunction", "Variable",
           "set_multithreading_enabled"]
