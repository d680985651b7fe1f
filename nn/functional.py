"""`nn.functional`: the stateless forms of the layers, written with aotgrad's tensor ops.

Everything here is a composition of runtime ops and prims, so it is differentiable by the
one derivative rule of each prim and traceable by the compiler.

>>> import aotgrad.nn.functional as F
>>> F.relu(aotgrad.tensor([-1., 2.]))
tensor([0., 2.])
"""
import math
import warnings

import numpy as np

from aotgrad.ir import dtypes as dt
from aotgrad.ir.symbolic import is_static_shape
from aotgrad.runtime import eager_kernels, linalg_ops, ops, shape_ops
from aotgrad.runtime import tprims as tp
from aotgrad.runtime.addmm_ops import addmm
from aotgrad.runtime.factories import rand, tensor, zeros_like
from aotgrad.runtime.grad_mode import no_grad
from aotgrad.runtime.ops import op
from aotgrad.runtime.shape_ops import one_hot  # noqa: F401  (F.one_hot)
from aotgrad.runtime.tensor import Tensor
from aotgrad.runtime.value_checks import checked, type_str
from aotgrad.nn._checks import _check_float, _check_tensor  # noqa: F401
from aotgrad.runtime.composite import composite


# ---- linear --------------------------------------------------------------------------------
@op("linear")
def linear(input, weight, bias=None):
    """y = input @ weight.T + bias, input (*, in_features), weight (out_features, in_features).

    >>> F.linear(aotgrad.ones(2, 3), aotgrad.ones(4, 3)).shape
    aotgrad.Size([2, 4])
    """
    _check_tensor("linear", input)
    if weight.ndim not in (1, 2):
        raise RuntimeError(f"linear(): weight must be 1-D or 2-D, got shape {list(weight.shape)}")
    if input.dtype is not weight.dtype:
        raise RuntimeError(f"linear(): input and weight must have the same dtype, but got "
                           f"{input.dtype.name} and {weight.dtype.name}")
    if input.ndim == 0 or input.shape[-1] != weight.shape[-1]:
        ishape = "x".join(map(str, input.shape))
        raise RuntimeError(f"linear(): mat1 and mat2 shapes cannot be multiplied ({ishape} and "
                           f"{'x'.join(map(str, reversed(tuple(weight.shape))))})")
    if linalg_ops.tracing():  # one contraction with the weight as stored, the bias added
        out = tp.dot_general(input, weight, contract=((input.ndim - 1,), (weight.ndim - 1,)))
        return out if bias is None else ops.add(out, bias)
    # the graph PyTorch records: addmm(bias, input, weight.t()), between two reshapes for an
    # input that is not a matrix; without a bias, matmul(input, weight.t())
    wt = weight.t()
    if bias is None or weight.ndim != 2:
        out = ops.matmul(input, wt)
        return out if bias is None else ops.add(out, bias)
    if input.ndim == 2:
        return addmm(bias, input, wt)
    out = addmm(bias, input.reshape(-1, input.shape[-1]), wt)
    return out.view(tuple(input.shape[:-1]) + (weight.shape[0],))


def bilinear(input1, input2, weight, bias=None):
    """y_k = x1 @ W_k @ x2 + b_k, weight (out, in1, in2)."""
    t = ops.matmul(ops.matmul(shape_ops.unsqueeze(input1, -2).unsqueeze(-3), weight),
                   shape_ops.unsqueeze(input2, -2).unsqueeze(-3).mT)
    out = t.reshape(tuple(t.shape[:-2]))
    return out if bias is None else ops.add(out, bias)


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
    """log(sigmoid(x)) = -softplus(-x), without softplus's linear threshold (PyTorch)."""
    return ops.neg(ops._softplus(ops.neg(input)))


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
    tensor([0.0000, 0.6667, 4.0000])
    """
    _check_tensor("hardswish", input)
    _check_float("hardswish", input)
    src = _source(input, inplace)
    inside = ops.logical_and(ops.gt(src, -3.0), ops.lt(src, 3.0))
    safe = ops.where(inside, src, 0.0)  # keeps a NaN out of the unused branch's gradient
    mid = ops.mul(ops.mul(safe, ops.add(safe, 3.0)), 1.0 / 6.0)
    out = ops.where(ops.le(src, -3.0), 0.0, ops.where(inside, mid, src))
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


# ---- dropout -------------------------------------------------------------------------------
@op("dropout")
def dropout(input, p=0.5, training=True, inplace=False):
    """Zero each element with probability p and scale the rest by 1/(1-p) (training only).

    The mask comes from `aotgrad.rand`, a stateless seeded prim: a compiled program draws the
    same mask as eager code for the same seed."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0.0:
        return input
    src = _source(input, inplace)
    if p == 1.0:
        out = ops.mul(src, 0.0)
    else:
        keep = ops.cast(ops.ge(rand(*input.shape, dtype=input.dtype), p), input.dtype)
        out = ops.mul(ops.mul(src, keep), 1.0 / (1.0 - p))
    return _maybe_inplace(input, out, inplace, "dropout")


# ---- normalisation -------------------------------------------------------------------------
@op("layer_norm", "NativeLayerNormBackward0")
@composite("NativeLayerNormBackward0", ("input", "weight", "bias"))
def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """Normalise over the trailing `normalized_shape` dims (two-pass mean/variance)."""
    _check_float("layer_norm", input)
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    k = len(shape)
    if k == 0 or input.ndim < k or tuple(input.shape[input.ndim - k:]) != shape:
        raise RuntimeError(f"Given normalized_shape={list(shape)}, expected input with shape "
                           f"[*, {', '.join(map(str, shape))}], but got input of size "
                           f"{list(input.shape)}")
    dims = tuple(range(input.ndim - k, input.ndim))
    out = eager_kernels.run(eager_kernels.LAYER_NORM, (input, weight, bias), _layer_norm_prims,
                            dims=dims, eps=eps)
    return out if out is not None else \
        _layer_norm_prims(input, weight, bias, dims=dims, eps=eps)


def _layer_norm_prims(input, weight, bias, *, dims, eps):
    """layer_norm as tensor ops (the reference of the eager kernel, and what a trace
    records)."""
    mu = ops.mean(input, dims, keepdim=True)
    d = ops.sub(input, mu)
    var = ops.mean(ops.mul(d, d), dims, keepdim=True)
    out = ops.mul(d, ops.rsqrt(ops.add(var, eps)))
    if weight is not None:
        out = ops.mul(out, weight)
    if bias is not None:
        out = ops.add(out, bias)
    return out


@op("rms_norm")
def rms_norm(input, normalized_shape, weight=None, eps=None):
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    dims = tuple(range(input.ndim - len(shape), input.ndim))
    eps = float(np.finfo(input.dtype.np).eps) if eps is None else eps
    out = ops.mul(input, ops.rsqrt(ops.add(ops.mean(ops.mul(input, input), dims, keepdim=True),
                                           eps)))
    return out if weight is None else ops.mul(out, weight)


@op("batch_norm", "NativeBatchNormBackward0")
def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False,
               momentum=0.1, eps=1e-5):
    """Normalise each channel (dim 1) over the batch and spatial dims.

    In training, batch statistics are used and the running statistics (when given) are
    updated in place with the unbiased variance; in eval, the running statistics are used."""
    _check_float("batch_norm", input)
    if input.ndim < 2:
        raise ValueError(f"batch_norm: expected at least 2D input (got {input.ndim}D input)")
    c = input.shape[1]
    dims = (0,) + tuple(range(2, input.ndim))
    bshape = (1, c) + (1,) * (input.ndim - 2)
    n = input.numel() // c if c else 0
    if training:
        if n <= 1:
            raise ValueError(f"Expected more than 1 value per channel when training, got input "
                             f"size {list(input.shape)}")
        mu = ops.mean(input, dims, keepdim=True)
        d = ops.sub(input, mu)
        var = ops.mean(ops.mul(d, d), dims, keepdim=True)
        if running_mean is not None or running_var is not None:
            with no_grad():
                m = 0.0 if momentum is None else momentum
                if running_mean is not None:
                    running_mean.mul_(1 - m).add_(ops.mul(mu.detach().reshape(c), m))
                if running_var is not None:
                    unbiased = ops.mul(var.detach().reshape(c), n / (n - 1))
                    running_var.mul_(1 - m).add_(ops.mul(unbiased, m))
    else:
        if running_mean is None or running_var is None:
            raise RuntimeError("batch_norm: running_mean and running_var must be given when "
                               "training=False")
        mu = running_mean.reshape(bshape)
        var = running_var.reshape(bshape)
        d = ops.sub(input, mu)
    out = ops.mul(d, ops.rsqrt(ops.add(var, eps)))
    if weight is not None:
        out = ops.mul(out, weight.reshape(bshape))
    if bias is not None:
        out = ops.add(out, bias.reshape(bshape))
    return out


def normalize(input, p=2.0, dim=1, eps=1e-12):
    n = ops.norm(input, p, dim, keepdim=True)
    return ops.div(input, ops.clamp(n, min=eps))


# ---- embedding -----------------------------------------------------------------------------
@op("embedding", "EmbeddingBackward0")
def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0,
              scale_grad_by_freq=False, sparse=False):
    """Rows of `weight` at integer `input`; the row at padding_idx gets no gradient."""
    _check_tensor("embedding", input)
    if input.dtype not in (dt.int64, dt.int32):
        raise RuntimeError(f"embedding(): expected indices of type int64 or int32, but got "
                           f"{input.dtype.name} (shape {list(input.shape)})")
    if weight.ndim != 2:
        raise RuntimeError(f"embedding(): 'weight' must be 2-D, got shape {list(weight.shape)}")
    if max_norm is not None or scale_grad_by_freq or sparse:
        raise NotImplementedError("embedding(): max_norm, scale_grad_by_freq and sparse are not "
                                  "supported")
    n = weight.shape[0]
    input = checked(input, IndexError,   # eagerly, and at run time when compiled
                    f"embedding(): index out of range in self (index {{value}}, "
                    f"num_embeddings={n}; indices {type_str(input)}, weight "
                    f"{type_str(weight)})", low=0, high=n)
    flat = shape_ops.index_select(weight, 0, input.reshape(-1))
    out = flat.reshape(tuple(input.shape) + (weight.shape[1],))
    if padding_idx is not None:
        if padding_idx < 0:
            padding_idx += n
        pad = shape_ops.unsqueeze(ops.eq(input, padding_idx), -1)
        out = ops.where(pad, out.detach(), out)
    return out


# ---- attention -----------------------------------------------------------------------------
@op("scaled_dot_product_attention")
def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, enable_gqa=False):
    """softmax(q k^T * scale + mask) v over the last two dims, (..., L, E) x (..., S, E).

    A boolean attn_mask marks the positions that may be attended (True = keep), as in
    PyTorch's SDPA; a float mask is added to the scores. is_causal masks j > i."""
    if query.ndim < 2:
        raise RuntimeError(f"scaled_dot_product_attention: query must be at least 2-D, got "
                           f"shape {list(query.shape)}")
    e = query.shape[-1]
    scale = 1.0 / math.sqrt(e) if scale is None else scale
    scores = ops.mul(ops.matmul(query, shape_ops.transpose(key, -2, -1)), scale)
    l, s = scores.shape[-2:]
    if is_causal:
        if attn_mask is not None:
            raise RuntimeError("scaled_dot_product_attention: pass either attn_mask or "
                               "is_causal=True, not both")
        attn_mask = causal_mask(l, s)
    if attn_mask is not None:
        if attn_mask.dtype is dt.bool_:
            scores = ops.where(attn_mask, scores, -math.inf)
        else:
            scores = ops.add(scores, attn_mask)
    if attn_mask is not None and not is_causal:
        # PyTorch's safe softmax: a query that may attend nowhere gets zero weights, not NaN
        # (a causal query always sees key 0: its rows need no check, which costs W4 0.4 ms)
        dead = ops.all(ops.eq(scores, -math.inf), -1, keepdim=True)
        w = ops.where(dead, 0.0, ops.softmax(ops.where(dead, 0.0, scores), -1))
    else:
        w = ops.softmax(scores, -1)
    if dropout_p > 0.0:
        w = dropout(w, dropout_p, True)
    return ops.matmul(w, value)


def causal_mask(l, s=None):
    """A boolean (L, S) mask, True where key j <= query i (what a causal query may see)."""
    s = l if s is None else s
    if not is_static_shape((l, s)):  # a symbolic length: the mask is computed by the program
        return ops.le(tp.iota(shape=(l, s), dim=1, dtype=dt.int64),
                      tp.iota(shape=(l, s), dim=0, dtype=dt.int64))
    return tensor(np.tril(np.ones((l, s), dtype=bool)))


def multi_head_attention_forward(query, key, value, num_heads, in_proj_weight, in_proj_bias,
                                 out_proj_weight, out_proj_bias, *, q_proj_weight=None,
                                 k_proj_weight=None, v_proj_weight=None, dropout_p=0.0,
                                 training=True, key_padding_mask=None, need_weights=True,
                                 attn_mask=None, average_attn_weights=True, is_causal=False):
    """Batch-first (N, L, E) multi-head attention. Masks follow nn.MultiheadAttention:
    boolean True = do NOT attend; float masks are added. Returns (output, weights or None)."""
    n, l, e = query.shape
    s = key.shape[1]
    if e % num_heads:
        raise RuntimeError(f"embed_dim {e} not divisible by num_heads {num_heads}")
    hd = e // num_heads
    if q_proj_weight is None and query is key and key is value:
        # self-attention: one (N, L, 3E) projection, split afterwards (one matmul, one bias)
        qkv = linear(query, in_proj_weight, in_proj_bias)
        q, k, v = (shape_ops.narrow(qkv, -1, i * e, e) for i in range(3))
    else:
        if q_proj_weight is None:
            wq, wk, wv = shape_ops.chunk(in_proj_weight, 3, 0)
        else:
            wq, wk, wv = q_proj_weight, k_proj_weight, v_proj_weight
        bq, bk, bv = shape_ops.chunk(in_proj_bias, 3, 0) if in_proj_bias is not None else \
            (None, None, None)
        q, k, v = linear(query, wq, bq), linear(key, wk, bk), linear(value, wv, bv)

    def heads(t, length):
        return shape_ops.transpose(t.reshape(n, length, num_heads, hd), 1, 2)  # (N, H, len, hd)

    q, k, v = heads(q, l), heads(k, s), heads(v, s)
    scores = ops.mul(ops.matmul(q, shape_ops.transpose(k, -2, -1)), 1.0 / math.sqrt(hd))
    if is_causal and attn_mask is None:
        attn_mask = ops.logical_not(causal_mask(l, s))
    if attn_mask is not None:
        if attn_mask.ndim == 3:  # (N * H, L, S)
            attn_mask = attn_mask.reshape(n, num_heads, l, s)
        scores = _apply_mask(scores, attn_mask)
    if key_padding_mask is not None:
        if tuple(key_padding_mask.shape) != (n, s):
            raise RuntimeError(f"key_padding_mask: expected shape {[n, s]}, got "
                               f"{list(key_padding_mask.shape)}")
        scores = _apply_mask(scores, key_padding_mask.reshape(n, 1, 1, s))
    w = ops.softmax(scores, -1)
    wd = dropout(w, dropout_p, training) if dropout_p > 0.0 else w
    out = ops.matmul(wd, v)                                       # (N, H, L, hd)
    out = shape_ops.transpose(out, 1, 2).reshape(n, l, e)
    out = linear(out, out_proj_weight, out_proj_bias)
    if not need_weights:
        return out, None
    return out, (ops.mean(w, 1) if average_attn_weights else w)


def _apply_mask(scores, mask):
    if mask.dtype is dt.bool_:
        return ops.where(mask, -math.inf, scores)
    return ops.add(scores, mask.to(scores.dtype))


from aotgrad.nn.functional_conv import *  # noqa: E402,F401,F403
from aotgrad.nn.functional_conv import _pair, _patches  # noqa: E402,F401
from aotgrad.nn.functional_loss import *  # noqa: E402,F401,F403
from aotgrad.nn.functional_conv_transpose import (conv3d, conv_transpose1d,  # noqa: E402,F401
                                                  conv_transpose2d)
from aotgrad.nn.functional_layers import (adaptive_max_pool1d,  # noqa: E402,F401
                                          adaptive_max_pool2d, dropout1d, dropout2d,
                                          embedding_bag, group_norm, instance_norm, interpolate,
                                          pixel_shuffle, pixel_unshuffle, upsample,
                                          upsample_bilinear, upsample_nearest)
