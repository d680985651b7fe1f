"""Activation modules: thin wrappers over nn.functional.

>>> nn.GELU(approximate="tanh")(aotgrad.zeros(2))
tensor([0., 0.])
"""
from aotgrad.ir import dtypes as dt
from aotgrad.nn import functional as F
from aotgrad.nn import init
from aotgrad.nn.module import Module
from aotgrad.nn.parameter import Parameter
from aotgrad.runtime.factories import empty


class _Inplace(Module):
    def __init__(self, inplace=False):
        super().__init__()
        self.inplace = inplace

    def extra_repr(self):
        return "inplace=True" if self.inplace else ""


class ReLU(_Inplace):
    def forward(self, input):
        return F.relu(input, self.inplace)


class ReLU6(_Inplace):
    def forward(self, input):
        return F.relu6(input, self.inplace)


class SiLU(_Inplace):
    def forward(self, input):
        return F.silu(input, self.inplace)


class Mish(_Inplace):
    def forward(self, input):
        return F.mish(input, self.inplace)


class LeakyReLU(Module):
    def __init__(self, negative_slope=0.01, inplace=False):
        super().__init__()
        self.negative_slope, self.inplace = negative_slope, inplace

    def forward(self, input):
        return F.leaky_relu(input, self.negative_slope, self.inplace)

    def extra_repr(self):
        return f"negative_slope={self.negative_slope}" + (", inplace=True" if self.inplace else "")


class ELU(Module):
    def __init__(self, alpha=1.0, inplace=False):
        super().__init__()
        self.alpha, self.inplace = alpha, inplace

    def forward(self, input):
        return F.elu(input, self.alpha, self.inplace)

    def extra_repr(self):
        return f"alpha={self.alpha}" + (", inplace=True" if self.inplace else "")


class Hardtanh(Module):
    def __init__(self, min_val=-1.0, max_val=1.0, inplace=False):
        super().__init__()
        self.min_val, self.max_val, self.inplace = min_val, max_val, inplace

    def forward(self, input):
        return F.hardtanh(input, self.min_val, self.max_val, self.inplace)

    def extra_repr(self):
        return f"min_val={self.min_val}, max_val={self.max_val}" + \
            (", inplace=True" if self.inplace else "")


class GELU(Module):
    """GELU, exact (erf) by default or approximate='tanh'."""

    def __init__(self, approximate="none"):
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ValueError(f"GELU: approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def forward(self, input):
        return F.gelu(input, approximate=self.approximate)

    def extra_repr(self):
        return f"approximate={self.approximate!r}"


class Softplus(Module):
    def __init__(self, beta=1.0, threshold=20.0):
        super().__init__()
        self.beta, self.threshold = beta, threshold

    def forward(self, input):
        return F.softplus(input, self.beta, self.threshold)

    def extra_repr(self):
        return f"beta={self.beta}, threshold={self.threshold}"


class Tanh(Module):
    def forward(self, input):
        return F.tanh(input)


class Sigmoid(Module):
    def forward(self, input):
        return F.sigmoid(input)


class LogSigmoid(Module):
    def forward(self, input):
        return F.logsigmoid(input)


class _DimModule(Module):
    def __init__(self, dim=None):
        super().__init__()
        self.dim = dim

    def extra_repr(self):
        return f"dim={self.dim}"


class Softmax(_DimModule):
    def forward(self, input):
        return F.softmax(input, self.dim)


class LogSoftmax(_DimModule):
    def forward(self, input):
        return F.log_softmax(input, self.dim)


class Softmin(_DimModule):
    def forward(self, input):
        return F.softmin(input, self.dim)


def _inplace_suffix(inplace):
    return ", inplace=True" if inplace else ""


class Threshold(Module):
    """y = x where x > threshold, else value.

    >>> nn.Threshold(0.1, 20.0)(aotgrad.tensor([0., 1.]))
    tensor([20.,  1.])
    """

    def __init__(self, threshold, value, inplace=False):
        super().__init__()
        self.threshold, self.value, self.inplace = threshold, value, inplace

    def forward(self, input):
        return F.threshold(input, self.threshold, self.value, self.inplace)

    def extra_repr(self):
        return f"threshold={self.threshold}, value={self.value}{_inplace_suffix(self.inplace)}"


class RReLU(Module):
    """Randomized leaky ReLU: negative inputs scaled by a ~ U(lower, upper) per element in
    training mode, by (lower + upper) / 2 in eval mode.

    >>> nn.RReLU(0.1, 0.3).eval()(aotgrad.tensor([-1., 1.]))
    tensor([-0.2000,  1.0000])
    """

    def __init__(self, lower=1.0 / 8, upper=1.0 / 3, inplace=False):
        super().__init__()
        self.lower, self.upper, self.inplace = lower, upper, inplace

    def forward(self, input):
        return F.rrelu(input, self.lower, self.upper, self.training, self.inplace)

    def extra_repr(self):
        return f"lower={self.lower}, upper={self.upper}{_inplace_suffix(self.inplace)}"


class Hardsigmoid(_Inplace):
    """relu6(x + 3) / 6.

    >>> nn.Hardsigmoid()(aotgrad.tensor([0.]))
    tensor([0.5000])
    """

    def forward(self, input):
        return F.hardsigmoid(input, self.inplace)

    def extra_repr(self):
        return ""  # PyTorch's Hardsigmoid shows no arguments, inplace or not


class Hardswish(_Inplace):
    """x * relu6(x + 3) / 6.

    >>> nn.Hardswish()(aotgrad.tensor([3.]))
    tensor([3.])
    """

    def forward(self, input):
        return F.hardswish(input, self.inplace)

    def extra_repr(self):
        return ""  # as PyTorch's


class CELU(Module):
    """max(0, x) + min(0, alpha * (exp(x / alpha) - 1)).

    >>> nn.CELU(alpha=2.0)
    CELU(alpha=2.0)
    """

    def __init__(self, alpha=1.0, inplace=False):
        super().__init__()
        self.alpha, self.inplace = alpha, inplace

    def forward(self, input):
        return F.celu(input, self.alpha, self.inplace)

    def extra_repr(self):
        return f"alpha={self.alpha}{_inplace_suffix(self.inplace)}"


class SELU(_Inplace):
    """scale * elu(x, alpha), alpha ~ 1.6733, scale ~ 1.0507 (self-normalising networks).

    >>> nn.SELU()(aotgrad.tensor([0.]))
    tensor([0.])
    """

    def forward(self, input):
        return F.selu(input, self.inplace)


class GLU(Module):
    """Gated linear unit over `dim`: a * sigmoid(b) for the two halves a, b of the input.

    >>> nn.GLU()(aotgrad.ones(3, 4)).shape
    aotgrad.Size([3, 2])
    """

    def __init__(self, dim=-1):
        super().__init__()
        self.dim = dim

    def forward(self, input):
        return F.glu(input, self.dim)

    def extra_repr(self):
        return f"dim={self.dim}"


class Hardshrink(Module):
    """0 where |x| <= lambd, else x.

    >>> nn.Hardshrink(0.5)(aotgrad.tensor([0.4, 0.6]))
    tensor([0.0000, 0.6000])
    """

    def __init__(self, lambd=0.5):
        super().__init__()
        self.lambd = lambd

    def forward(self, input):
        return F.hardshrink(input, self.lambd)

    def extra_repr(self):
        return f"{self.lambd}"


class Softshrink(Module):
    """x - lambd above lambd, x + lambd below -lambd, 0 between.

    >>> nn.Softshrink(0.5)(aotgrad.tensor([0.4, 0.75]))
    tensor([0.0000, 0.2500])
    """

    def __init__(self, lambd=0.5):
        super().__init__()
        self.lambd = lambd

    def forward(self, input):
        return F.softshrink(input, self.lambd)

    def extra_repr(self):
        return str(self.lambd)


class PReLU(Module):
    """ReLU with a learned slope for negative inputs: one slope, or one per channel (dim 1),
    initialised to `init`.

    >>> m = nn.PReLU(3)
    >>> m.weight.shape, m(aotgrad.ones(2, 3, 4)).shape
    (aotgrad.Size([3]), aotgrad.Size([2, 3, 4]))
    """

    def __init__(self, num_parameters=1, init=0.25, device=None, dtype=None):
        super().__init__()
        self.num_parameters, self.init = num_parameters, init
        self.weight = Parameter(empty(num_parameters,
                                      dtype=dt.float32 if dtype is None else dt.as_dtype(dtype)))
        self.reset_parameters()

    def reset_parameters(self):
        init.constant_(self.weight, self.init)

    def forward(self, input):
        return F.prelu(input, self.weight)

    def extra_repr(self):
        return f"num_parameters={self.num_parameters}"


class Softsign(Module):
    """x / (1 + |x|).

    >>> nn.Softsign()(aotgrad.tensor([1.]))
    tensor([0.5000])
    """

    def forward(self, input):
        return F.softsign(input)


class Tanhshrink(Module):
    """x - tanh(x).

    >>> nn.Tanhshrink()(aotgrad.tensor([0.]))
    tensor([0.])
    """

    def forward(self, input):
        return F.tanhshrink(input)


class Softmax2d(Module):
    """Softmax over the channels (dim -3) of a (C, H, W) or (N, C, H, W) input.

    >>> nn.Softmax2d()(aotgrad.zeros(1, 2, 3, 3))[0, :, 0, 0]
    tensor([0.5000, 0.5000])
    """

    def forward(self, input):
        if input.ndim not in (3, 4):
            raise ValueError(f"Softmax2d: expected input to be 3D or 4D, got {input.ndim}D "
                             f"instead")
        return F.softmax(input, -3, _stacklevel=5)
