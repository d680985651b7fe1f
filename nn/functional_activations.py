"""`nn.functional` activations, their in-place forms, and gumbel_softmax."""
import math
import warnings

from aotgrad.runtime import eager_kernels, ops, shape_ops
from aotgrad.runtime.sizes import scalar_type_name
from aotgrad.runtime.factories import rand, zeros_like
from aotgrad.runtime.ops import op
from aotgrad.nn._checks import _check_float, _check_tensor
from aotgrad.runtime.composite import composite


# ---- activations ---------------------------------------------------------------------------
def relu(input, inplace=False):
    return _maybe_inplace(input, ops.relu(input), inplace, "relu")


def relu6(input, inplace=False):
    return hardtanh(input, 0.0, 6.0, inplace)


@op("hardtanh", "HardtanhBackward0")
@composite("HardtanhBackward0", ("input",))
def hardtanh(input, min_val=-1.0, max_val=1.0, inplace=False):
    """clamp(input, min_val, max_val), but (as in PyTorch) with gradient 0 at the bounds
    themselves, where clamp's is 1; NaN passes through with gradient 1."""
    src = _source(input, inplace)
    value = ops.clamp(src.detach(), min_val, max_val)
    inside = ops.logical_not(ops.logical_or(ops.le(src, min_val), ops.ge(src, max_val)))
    return _maybe_inplace(input, ops.where(inside, src, value), inplace, "hardtanh")


@op("leaky_relu", "LeakyReluBackward0")
@composite("LeakyReluBackward0", ("input",))
def leaky_relu(input, negative_slope=0.01, inplace=False):
    src = _source(input, inplace)
    out = ops.where(ops.gt(src, 0), src, ops.mul(src, negative_slope))
    return _maybe_inplace(input, out, inplace, "leaky_relu")


@op("elu", "EluBackward0")
@composite("EluBackward0", ("input",))
def elu(input, alpha=1.0, inplace=False):
    src = _source(input, inplace)
    neg = ops.le(src, 0)  # NaN takes the identity branch (gradient 1), as in PyTorch
    safe = ops.where(neg, src, 0.0)  # expm1 of a large x would be inf, its gradient NaN
    out = ops.where(neg, ops.mul(ops.expm1(safe), alpha), src)
    return _maybe_inplace(input, out, inplace, "elu")


@op("gelu", "GeluBackward0")
@composite("GeluBackward0", ("input",))
def gelu(input, approximate="none"):
    """GELU: x * Phi(x) exactly (erf), or the tanh approximation with approximate='tanh'."""
    _check_float("gelu", input)
    if approximate in ("none", "tanh"):
        out = eager_kernels.run(eager_kernels.GELU, (input,), _gelu_prims,
                                approximate=approximate)
        if out is not None:
            return out
    return _gelu_prims(input, approximate=approximate)


def _gelu_prims(input, *, approximate):
    """gelu as tensor ops (the reference of the eager kernel, and what a trace records)."""
    if approximate == "none":
        return ops.mul(ops.mul(input, 0.5), ops.add(ops.erf(ops.mul(input, 1 / math.sqrt(2))),
                                                    1.0))
    if approximate == "tanh":
        inner = ops.mul(ops.add(input, ops.mul(ops.mul(ops.mul(input, input), input), 0.044715)),
                        math.sqrt(2 / math.pi))
        return ops.mul(ops.mul(input, 0.5), ops.add(ops.tanh(inner), 1.0))
    raise ValueError(f"gelu(): approximate must be 'none' or 'tanh', got {approximate!r}")


@op("silu", "SiluBackward0")
@composite("SiluBackward0", ("input",))
def silu(input, inplace=False):
    src = _source(input, inplace)
    return _maybe_inplace(input, ops.mul(src, ops.sigmoid(src)), inplace, "silu")


@op("softplus", "SoftplusBackward0")
@composite("SoftplusBackward0", ("input",))
def softplus(input, beta=1.0, threshold=20.0):
    """log(1 + exp(beta x)) / beta, linear where beta x > threshold (PyTorch)."""
    bx = ops.mul(input, beta)
    return ops.where(ops.gt(bx, threshold), input, ops.div(ops._softplus(bx), beta))


@op("mish")
def mish(input, inplace=False):
    src = _source(input, inplace)
    return _maybe_inplace(input, ops.mul(src, ops.tanh(softplus(src))), inplace, "mish")


@op("logsigmoid", "LogSigmoidBackward0")
@composite("LogSigmoidBackward0", ("input",))
def logsigmoid(input):
    """log(sigmoid(x)) = -softplus(-x), without softplus's linear threshold (PyTorch); + 0.0
    makes the -0.0 of a large x +0.0, as PyTorch's min(x, 0) - log1p(exp(-|x|))."""
    return ops.add(ops.neg(ops._softplus(ops.neg(input))), 0.0)


def tanh(input):
    return ops.tanh(input)


def sigmoid(input):
    return ops.sigmoid(input)


def _softmax_dim(name, ndim):
    warnings.warn(f"Implicit dimension choice for {name} has been deprecated. Change the call "
                  f"to include dim=X as an argument.", stacklevel=3)
    return 0 if ndim in (0, 1, 3) else 1


def softmax(input, dim=None, _stacklevel=3, dtype=None):
    if dim is None:
        dim = _softmax_dim("softmax", input.ndim)
    return ops.softmax(input, dim, dtype=dtype)


def log_softmax(input, dim=None, _stacklevel=3, dtype=None):
    if dim is None:
        dim = _softmax_dim("log_softmax", input.ndim)
    return ops.log_softmax(input, dim, dtype=dtype)


def softmin(input, dim=None, _stacklevel=3, dtype=None):
    return softmax(ops.neg(input), dim, dtype=dtype)


def _source(input, inplace):
    """What an activation computes from. With inplace=True: a copy of input's current value
    that shares its history (shape_ops.snapshot), so that writing the result into input
    cannot invalidate a value the new nodes saved for backward."""
    if not inplace:
        return input
    from aotgrad.runtime.shape_ops import snapshot
    return snapshot(input)


def _maybe_inplace(input, out, inplace, name):
    if not inplace:
        return out
    from aotgrad.runtime.shape_ops import commit_inplace
    return commit_inplace(input, out, name + "_")


# in-place forms of the activations above (PyTorch's F.relu_ and friends)
def relu_(input):
    """In-place relu: `F.relu_(x)` is `F.relu(x, inplace=True)`."""
    return relu(input, inplace=True)


def elu_(input, alpha=1.0):
    return elu(input, alpha, inplace=True)


def leaky_relu_(input, negative_slope=0.01):
    return leaky_relu(input, negative_slope, inplace=True)


def hardtanh_(input, min_val=-1.0, max_val=1.0):
    return hardtanh(input, min_val, max_val, inplace=True)


@op("threshold", "ThresholdBackward0")
@composite("ThresholdBackward0", ("input",))
def threshold(input, threshold, value, inplace=False):
    """`input` where input > threshold, else `value` (NaN passes through, gradient 1).

    >>> F.threshold(aotgrad.tensor([-1., 0.5, 2.]), 1.0, 0.0)
    tensor([0., 0., 2.])
    """
    _check_tensor("threshold", input)
    src = _source(input, inplace)
    out = ops.where(ops.le(src, threshold), value, src)
    return _maybe_inplace(input, out, inplace, "threshold")


_threshold = threshold


def threshold_(input, threshold, value):
    return _threshold(input, threshold, value, inplace=True)


def _check_rrelu_bounds(lower, upper):
    if lower > upper:
        raise RuntimeError(f"rrelu: Lower bound should be less than or equal to the upper bound "
                           f"(got lower={lower}, upper={upper})")


@op("rrelu", "RreluWithNoiseBackward0")
def rrelu(input, lower=1.0 / 8, upper=1.0 / 3, training=False, inplace=False):
    """Randomized leaky ReLU: x where x > 0, else a * x with a ~ U(lower, upper) drawn per
    element in training; in eval a = (lower + upper) / 2 (a leaky ReLU).

    >>> F.rrelu(aotgrad.tensor([-3., 2.]), 0.25, 0.5)
    tensor([-1.1250,  2.0000])
    """
    _check_tensor("rrelu", input)
    _check_float("rrelu", input)
    _check_rrelu_bounds(lower, upper)
    src = _source(input, inplace)
    if not training:
        a = (lower + upper) / 2
    else:
        a = ops.add(ops.mul(rand(*input.shape, dtype=input.dtype), upper - lower), lower)
    out = ops.where(ops.gt(src, 0), src, ops.mul(src, a))
    return _maybe_inplace(input, out, inplace, "rrelu")


def rrelu_(input, lower=1.0 / 8, upper=1.0 / 3, training=False):
    return rrelu(input, lower, upper, training, inplace=True)


@op("hardsigmoid", "HardsigmoidBackward0")
@composite("HardsigmoidBackward0", ("input",))
def hardsigmoid(input, inplace=False):
    """relu6(x + 3) / 6: 0 for x <= -3, 1 for x >= 3, x / 6 + 1/2 between (gradient 1/6 strictly
    inside, 0 at the bounds and at NaN, as in PyTorch).

    >>> F.hardsigmoid(aotgrad.tensor([-4., 0., 1.5]))
    tensor([0.0000, 0.5000, 0.7500])
    """
    _check_tensor("hardsigmoid", input)
    _check_float("hardsigmoid", input)
    src = _source(input, inplace)
    lin = ops.add(ops.mul(src, 1.0 / 6.0), 0.5)
    inside = ops.logical_and(ops.gt(src, -3.0), ops.lt(src, 3.0))
    # outside: the clamped value (NaN stays NaN) without a gradient
    out = ops.where(inside, lin, ops.clamp(lin.detach(), 0.0, 1.0))
    return _maybe_inplace(input, out, inplace, "hardsigmoid")


@op("hardswish", "HardswishBackward0")
@composite("HardswishBackward0", ("input",))
def hardswish(input, inplace=False):
    """x * relu6(x + 3) / 6. The gradient follows PyTorch's piecewise rule: 0 up to -3,
    x / 3 + 1/2 strictly between -3 and 3, 1 from 3 on and at NaN.

    >>> F.hardswish(aotgrad.tensor([-4., 1., 4.]))
    tensor([-0.0000, 0.6667, 4.0000])
    """
    _check_tensor("hardswish", input)
    _check_float("hardswish", input)
    src = _source(input, inplace)
    inside = ops.logical_and(ops.gt(src, -3.0), ops.lt(src, 3.0))
    safe = ops.where(inside, src, 0.0)  # keeps a NaN out of the unused branch's gradient
    mid = ops.mul(ops.mul(safe, ops.add(safe, 3.0)), 1.0 / 6.0)
    # x * 0 / 6 up to -3 is -0.0 (PyTorch's formula)
    out = ops.where(ops.le(src, -3.0), -0.0, ops.where(inside, mid, src))
    return _maybe_inplace(input, out, inplace, "hardswish")


_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


@op("celu", "CeluBackward0")
@composite("CeluBackward0", ("input",))
def celu(input, alpha=1.0, inplace=False):
    """max(0, x) + min(0, alpha * (exp(x / alpha) - 1)).

    >>> F.celu(aotgrad.tensor([1., 0.]), alpha=2.0)
    tensor([1., 0.])
    """
    _check_tensor("celu", input)
    if alpha == 0:
        raise RuntimeError("ZeroDivisionError: alpha cannot be 0 for CELU")
    src = _source(input, inplace)
    neg = ops.le(src, 0)
    safe = ops.where(neg, src, 0.0)
    out = ops.where(neg, ops.mul(ops.expm1(ops.mul(safe, 1.0 / alpha)), alpha), src)
    return _maybe_inplace(input, out, inplace, "celu")


def celu_(input, alpha=1.0):
    return celu(input, alpha, inplace=True)


@op("selu", "EluBackward0")
@composite("EluBackward0", ("input",))
def selu(input, inplace=False):
    """scale * elu(x, alpha) with PyTorch's constants (alpha ~ 1.6733, scale ~ 1.0507).

    >>> F.selu(aotgrad.tensor([1.]))
    tensor([1.0507])
    """
    _check_tensor("selu", input)
    out = ops.mul(elu(_source(input, inplace), _SELU_ALPHA), _SELU_SCALE)
    return _maybe_inplace(input, out, inplace, "selu")


def selu_(input):
    return selu(input, inplace=True)


@op("glu", "GluBackward0")
@composite("GluBackward0", ("input",))
def glu(input, dim=-1):
    """Gated linear unit: split `input` in halves a, b along `dim`, return a * sigmoid(b).

    >>> F.glu(aotgrad.tensor([1., 2., 0., 0.]))
    tensor([0.5000, 1.0000])
    """
    _check_tensor("glu", input)
    if input.ndim == 0:
        raise RuntimeError("glu does not support scalars because halving size must be even")
    if not -input.ndim <= dim < input.ndim:
        raise IndexError(f"Dimension out of range (expected to be in range of "
                         f"[{-input.ndim}, {input.ndim - 1}], but got {dim})")
    n = input.shape[dim]
    if n % 2:
        raise RuntimeError(f"Halving dimension must be even, but dimension "
                           f"{dim % input.ndim} is size {n}")
    a = shape_ops.narrow(input, dim, 0, n // 2)
    b = shape_ops.narrow(input, dim, n // 2, n // 2)
    return ops.mul(a, ops.sigmoid(b))


@op("hardshrink", "HardshrinkBackward0")
@composite("HardshrinkBackward0", ("input",))
def hardshrink(input, lambd=0.5):
    """0 where |x| <= lambd, else x (NaN passes through).

    >>> F.hardshrink(aotgrad.tensor([-1., 0.3, 0.7]))
    tensor([-1.0000,  0.0000,  0.7000])
    """
    _check_tensor("hardshrink", input)
    inside = ops.logical_and(ops.ge(input, -lambd), ops.le(input, lambd))
    return ops.where(inside, 0.0, input)


@op("softshrink", "SoftshrinkBackward0")
@composite("SoftshrinkBackward0", ("input",))
def softshrink(input, lambd=0.5):
    """x - lambd above lambd, x + lambd below -lambd, 0 between (NaN passes through).

    >>> F.softshrink(aotgrad.tensor([-1., 0.3, 0.75]))
    tensor([-0.5000,  0.0000,  0.2500])
    """
    _check_tensor("softshrink", input)
    if not lambd >= 0:
        raise RuntimeError(f"softshrink: lambda must be greater or equal to 0, but found to be "
                           f"{lambd}")
    inside = ops.logical_and(ops.ge(input, -lambd), ops.le(input, lambd))
    shifted = ops.where(ops.gt(input, lambd), ops.sub(input, lambd), ops.add(input, lambd))
    return ops.where(inside, 0.0, shifted)


def softsign(input):
    """x / (1 + |x|).

    >>> F.softsign(aotgrad.tensor([-3., 1.]))
    tensor([-0.7500,  0.5000])
    """
    return ops.div(input, ops.add(ops.abs(input), 1))


def tanhshrink(input):
    """x - tanh(x).

    >>> F.tanhshrink(aotgrad.tensor([0.]))
    tensor([0.])
    """
    return ops.sub(input, ops.tanh(input))


@op("prelu", "PreluKernelBackward0")
@composite("PreluKernelBackward0", ("input", "weight"))
def prelu(input, weight):
    """x where x > 0, else weight * x; weight has 1 element or one per channel (dim 1).

    >>> F.prelu(aotgrad.tensor([[-2., 3.]]), aotgrad.tensor([0.25, 0.5]))
    tensor([[-0.5000,  3.0000]])
    """
    _check_tensor("prelu", input)
    _check_tensor("prelu", weight)
    if input.dtype is not weight.dtype:
        raise RuntimeError(f"prelu: Type promoting not supported. Got "
                           f"{scalar_type_name(input.dtype)} and "
                           f"{scalar_type_name(weight.dtype)}")
    if weight.ndim > 1:
        raise RuntimeError(f"prelu: Expected `weight` to be a scalar or 1D tensor, but got: "
                           f"ndim = {weight.ndim}")
    if weight.numel() != 1:
        if input.ndim == 0:
            raise RuntimeError("prelu: Not allow zero-dim input tensor.")
        channels = input.shape[1] if input.ndim >= 2 else 1
        if weight.numel() != channels:
            raise RuntimeError(f"prelu: Mismatch of parameter numbers and input channel size. "
                               f"Found parameter numbers = {weight.numel()} and channel size = "
                               f"{channels}.")
    if weight.ndim == 1 and input.ndim >= 2:
        w = weight.reshape((weight.shape[0],) + (1,) * (input.ndim - 2))
    else:
        w = weight.reshape(()) if input.ndim == 0 or weight.numel() == 1 else weight
    return ops.where(ops.gt(input, 0), input, ops.mul(input, w))


def gumbel_softmax(logits, tau=1, hard=False, eps=1e-10, dim=-1):
    """A sample of the Gumbel-softmax distribution over `dim`: softmax((logits + g) / tau) with
    g ~ Gumbel(0, 1). With hard=True the result is the one-hot of its argmax, differentiated
    as the soft sample (straight-through).

    >>> y = F.gumbel_softmax(aotgrad.zeros(2, 5), tau=0.5, hard=True)
    >>> y.sum(-1)
    tensor([1., 1.])
    """
    _check_tensor("gumbel_softmax", logits)
    if eps != 1e-10:
        warnings.warn("`eps` parameter is deprecated and has no effect.", stacklevel=2)
    u = rand(*logits.shape, dtype=logits.dtype)
    gumbels = ops.neg(ops.log(ops.neg(ops.log1p(ops.neg(u)))))  # -log(Exp(1))
    y_soft = ops.softmax(ops.div(ops.add(logits, gumbels), tau), dim)
    if not hard:
        return y_soft
    index = ops.argmax(y_soft, dim, keepdim=True)
    y_hard = shape_ops.scatter(zeros_like(logits), dim, index, value=1.0)
    return ops.add(ops.sub(y_hard, y_soft.detach()), y_soft)
