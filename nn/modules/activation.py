"""torch.nn.modules.activation's path for classes defined in
aotgrad.nn.activation, aotgrad.nn.attention."""
from aotgrad.nn.activation import (Threshold, ReLU, RReLU, Hardtanh, ReLU6, Sigmoid, Hardsigmoid,
                                   Tanh, SiLU, Mish, Hardswish, ELU, CELU, SELU, GLU, GELU,
                                   Hardshrink, LeakyReLU, LogSigmoid, Softplus, Softshrink, PReLU,
                                   Softsign, Tanhshrink, Softmin, Softmax, Softmax2d, LogSoftmax)
from aotgrad.nn.attention import MultiheadAttention

__all__ = [
    "Threshold", "ReLU", "RReLU", "Hardtanh", "ReLU6", "Sigmoid", "Hardsigmoid", "Tanh", "SiLU",
    "Mish", "Hardswish", "ELU", "CELU", "SELU", "GLU", "GELU", "Hardshrink", "LeakyReLU",
    "LogSigmoid", "Softplus", "Softshrink", "PReLU", "Softsign", "Tanhshrink", "Softmin",
    "Softmax", "Softmax2d", "LogSoftmax", "MultiheadAttention"
]
