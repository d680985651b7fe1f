"""nn.functional: losses, each with PyTorch's `reduction` semantics."""
import math
import warnings

import numpy as np

from aotgrad.ir import dtypes as dt
from aotgrad.ir.core import current_op
from aotgrad.runtime.value_checks import checked, type_str
from aotgrad.runtime import ops, shape_ops
from aotgrad.runtime import tprims as tp
from aotgrad.runtime.factories import rand, tensor
from aotgrad.runtime.grad_mode import no_grad
from aotgrad.runtime.grad_mode import state as _grad_mode
from aotgrad.runtime.ops import op
from aotgrad.runtime.tensor import Tensor
from aotgrad.nn._checks import _check_float, _check_tensor
from aotgrad.runtime.composite import composite


# ---- losses --------------------------------------------------------------------------------
def _reduce(loss, reduction, name):
    if reduction == "mean":
        return ops.mean(loss)
    if reduction == "sum":
        return ops.sum(loss)
    if reduction == "none":
        return loss
    msg = f"{reduction} is not a valid value for reduction"
    # inside an @op the op layer prefixes its name; the others name themselves here
    raise ValueError(msg if current_op.get() is not None else f"{name}: {msg}")


def _check_same_size(name, input, target):
    if tuple(input.shape) != tuple(target.shape):
        warnings.warn(f"{name}: Using a target size ({list(target.shape)}) that is different to "
                      f"the input size ({list(input.shape)}). This will likely lead to "
                      f"incorrect results due to broadcasting. Please ensure they have the same "
                      f"size.", stacklevel=3)


@op("mse_loss", "MseLossBackward0")
@composite("MseLossBackward0", ("input", "target"))
def mse_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    _check_same_size("mse_loss", input, target)
    d = ops.sub(input, target)
    loss = ops.mul(d, d)
    if weight is not None:
        loss = ops.mul(loss, weight)
    return _reduce(loss, reduction, "mse_loss")


@op("l1_loss")
def l1_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    _check_same_size("l1_loss", input, target)
    loss = ops.abs(ops.sub(input, target))
    if weight is not None:
        loss = ops.mul(loss, weight)
    return _reduce(loss, reduction, "l1_loss")


@op("smooth_l1_loss", "SmoothL1LossBackward0")
@composite("SmoothL1LossBackward0", ("input", "target"))
def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction="mean", beta=1.0):
    _check_same_size("smooth_l1_loss", input, target)
    d = ops.abs(ops.sub(input, target))
    if beta == 0:
        return _reduce(d, reduction, "smooth_l1_loss")
    loss = ops.where(ops.lt(d, beta), ops.div(ops.mul(ops.mul(d, d), 0.5), beta),
                     ops.sub(d, 0.5 * beta))
    return _reduce(loss, reduction, "smooth_l1_loss")


@op("huber_loss", "HuberLossBackward0")
@composite("HuberLossBackward0", ("input", "target"))
def huber_loss(input, target, reduction="mean", delta=1.0, weight=None):
    loss = ops.mul(smooth_l1_loss(input, target, reduction="none", beta=delta), delta)
    if weight is not None:
        loss = ops.mul(loss, weight)
    return _reduce(loss, reduction, "huber_loss")


def _class_targets(name, input, target, ignore_index):
    """Validate (N, C, *) input against integer (N, *) targets; return the class dim size."""
    if input.ndim == 0:
        raise ValueError(f"{name}: input must be at least 1-D, got a scalar")
    if target.dtype not in (dt.int64, dt.int32):
        raise RuntimeError(f"expected target of dtype int64 (class indices), got "
                           f"{target.dtype.name} (input {type_str(input)}, target "
                           f"{type_str(target)})")
    cdim = 0 if input.ndim == 1 else 1
    expect = tuple(input.shape[:cdim]) + tuple(input.shape[cdim + 1:])
    if tuple(target.shape) != expect:
        if input.ndim >= 2 and target.ndim >= 1 and target.shape[0] != input.shape[0]:
            raise ValueError(f"Expected input batch_size ({input.shape[0]}) to match target "
                             f"batch_size ({target.shape[0]}).")
        raise RuntimeError(f"expected target of shape {list(expect)} for input of shape "
                           f"{list(input.shape)}, got {list(target.shape)}")
    c = input.shape[cdim]
    # checked eagerly, and at run time in a compiled program (the labels are its data)
    target = checked(target, IndexError,
                     f"Target {{value}} is out of bounds (number of classes {c}; input "
                     f"{type_str(input)}, target {type_str(target)}).", low=0, high=c,
                     exempt=ignore_index)
    return cdim, c, target


@op("nll_loss")
def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
             reduction="mean"):
    """-input[i, target[i]] (times weight[target[i]]); mean divides by the summed weights of
    the targets that are not ignore_index."""
    cdim, c, target = _class_targets("nll_loss", input, target, ignore_index)
    return _nll_node(input, target, weight, ignore_index, reduction, cdim, c, "nll_loss")


def _nll_name(logp, *args, **kwargs):
    # PyTorch's kernel for spatial targets records another node
    return "NllLossBackward0" if logp.ndim <= 2 else "NllLoss2DBackward0"


@composite(_nll_name, ("logp",))
def _nll_node(logp, target, weight, ignore_index, reduction, cdim, c, name):
    """nll_loss as one node (its edge: the log-probabilities only, as PyTorch's)."""
    return _nll(logp, target, weight, ignore_index, reduction, cdim, c, name)


def _nll(logp, target, weight, ignore_index, reduction, cdim, c, name, smoothing=0.0):
    target = target.to(dt.int64)
    valid = ops.ne(target, ignore_index)
    safe = ops.where(valid, target, 0)
    picked = shape_ops.squeeze(tp.gather(logp, shape_ops.unsqueeze(safe, cdim), dim=cdim), cdim)
    picked = ops.where(valid, picked, 0.0)  # an ignored row's -inf logit must not make NaN
    zeros = ops.mul(picked, 0.0).detach()
    if weight is not None:
        if tuple(weight.shape) != (c,):
            raise RuntimeError(f"{name}: weight tensor should be defined either for all {c} "
                               f"classes or no classes but got weight tensor of shape: "
                               f"{list(weight.shape)}")
        w_t = ops.where(valid, shape_ops.index_select(weight, 0, safe.reshape(-1))
                        .reshape(tuple(safe.shape)), 0.0)
    else:
        w_t = ops.cast(valid, logp.dtype)
    loss = ops.neg(ops.mul(picked, w_t))
    if smoothing > 0.0:
        lw = logp if weight is None else ops.mul(
            logp, weight.reshape((c,) + (1,) * (logp.ndim - cdim - 1)))
        smooth = ops.where(valid, ops.neg(ops.sum(lw, cdim)), zeros)
        loss = ops.add(ops.mul(loss, 1.0 - smoothing), ops.mul(smooth, smoothing / c))
    if reduction == "mean":
        return ops.div(ops.sum(loss), ops.sum(w_t))
    return _reduce(loss, reduction, name)


@op("cross_entropy")
def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100,
                  reduce=None, reduction="mean", label_smoothing=0.0):
    """Cross entropy of logits `input` (N, C, *) against class indices (N, *) or class
    probabilities (same shape as input), with ignore_index and label smoothing.

    >>> F.cross_entropy(aotgrad.zeros(2, 4), aotgrad.tensor([0, 3]))
    tensor(1.3863)
    """
    _check_float("cross_entropy", input)
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"label_smoothing must be between 0.0 and 1.0. Got: {label_smoothing}")
    cdim = 0 if input.ndim == 1 else 1
    logp = ops.log_softmax(input, cdim)
    if target.dtype.is_floating_point:  # class probabilities
        if tuple(target.shape) != tuple(input.shape):
            raise RuntimeError(f"cross_entropy: probability targets must have the input's shape "
                               f"{list(input.shape)}, got {list(target.shape)}")
        c = input.shape[cdim]
        if label_smoothing > 0.0:
            target = ops.add(ops.mul(target, 1.0 - label_smoothing), label_smoothing / c)
        prod = ops.mul(logp, target)
        if weight is not None:
            prod = ops.mul(prod, weight.reshape((c,) + (1,) * (input.ndim - cdim - 1)))
        loss = ops.neg(ops.sum(prod, cdim))
        if reduction == "mean":
            n = input.numel() // c if input.ndim > 1 else 1
            return ops.div(ops.sum(loss), float(n))
        return _reduce(loss, reduction, "cross_entropy")
    cdim, c, target = _class_targets("cross_entropy", input, target, ignore_index)
    if label_smoothing == 0.0:  # NllLossBackward0 <- LogSoftmaxBackward0, as PyTorch records
        return _nll_node(logp, target, weight, ignore_index, reduction, cdim, c, "cross_entropy")
    return _nll(logp, target, weight, ignore_index, reduction, cdim, c, "cross_entropy",
                label_smoothing)


@op("binary_cross_entropy", "BinaryCrossEntropyBackward0")
@composite("BinaryCrossEntropyBackward0", ("input", "target"))
def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None,
                         reduction="mean"):
    """-(t log x + (1 - t) log(1 - x)) with the logs clamped at -100, like PyTorch."""
    if tuple(input.shape) != tuple(target.shape):
        raise ValueError(f"Using a target size ({list(target.shape)}) that is different to the "
                         f"input size ({list(input.shape)}) is deprecated. Please ensure they "
                         f"have the same size.")
    target_term, logs_target = None, target
    if target.requires_grad and _grad_mode.grad_enabled:
        # PyTorch's gradient in the target is -logit(input), not the clamped logs' (+-100):
        # the logs take the detached target, a zero-valued term carries that gradient
        target_term = _bce_target_term(input.detach(), target)
        logs_target = target.detach()
    if not (input.requires_grad and _grad_mode.grad_enabled):
        loss = _bce_clamped_logs(_bce_checked(input), logs_target)
    else:
        # PyTorch's derivatives in the input, not the clamped logs' (those are 0, or 1/x^2
        # overflowing, where the input saturates): first (x - t) / max(x (1 - x), 1e-12),
        # second (x^2 - 2xt + t) / ((x + 1e-12)^2 (1 - x + 1e-12)^2). The loss is the clamped
        # logs at the detached input plus the Taylor terms d1 h + d2 h^2 / 2 in h = input -
        # detached input, which are 0 in value and give exactly those two derivatives
        xd = _bce_checked(input.detach())   # the values; the gradient flows through h
        h = ops.sub(input, xd)
        one_m = ops.sub(1.0, xd)
        d1 = ops.div(ops.sub(xd, target), ops.clamp(ops.mul(one_m, xd), min=1e-12))
        num = ops.add(ops.sub(ops.mul(xd, xd), ops.mul(ops.mul(xd, target), 2.0)), target)
        d2 = ops.div(num, ops.mul(ops.square(ops.add(xd, 1e-12)),
                                  ops.square(ops.add(one_m, 1e-12))))
        taylor = ops.mul(ops.add(d1, ops.mul(ops.mul(d2, h), 0.5)), h)
        loss = ops.add(_bce_clamped_logs(xd, logs_target), taylor)
    if target_term is not None:
        loss = ops.add(loss, target_term)
    if weight is not None:
        loss = ops.mul(loss, weight)
    return _reduce(loss, reduction, "binary_cross_entropy")


def _bce_checked(x):
    """x, whose values must lie in [0, 1] (checked eagerly, and at run time compiled)."""
    return checked(x, RuntimeError, f"all elements of input should be between 0 and 1 (got "
                                    f"{{value}} in input {type_str(x)})", low=0.0, high=1.0,
                   high_inclusive=True)


def _bce_target_term(xd, target):
    """0 in value, with PyTorch's gradient in `target`: -logit(x) = -log(x / (1 - x)), which
    is +-inf where the (detached) input x is 0 or 1. h = target - target.detach() is 0 with
    gradient 1; h * c carries a finite c. Where c is infinite, h^(1/3) * sign(c) carries it:
    its value is 0 and its derivative (1/3) 0^(-2/3) infinite, so g times it is inf with g's
    sign (NaN where g is 0, as inf * 0 in PyTorch). (Not sqrt: compiled, g / (2 sqrt(0)) may
    become a reciprocal-sqrt estimate, NaN at 0.)"""
    c = ops.neg(ops.log(ops.div(xd, ops.sub(1.0, xd))))
    inf = ops.isinf(c)
    h = ops.sub(target, target.detach())
    lin = ops.mul(h, ops.where(inf, 0.0, c))
    steep = ops.mul(ops.pow(ops.where(inf, h, 1.0), 1.0 / 3.0), ops.sign(c))
    return ops.add(lin, ops.where(inf, steep, 0.0))


def _bce_clamped_logs(input, target):
    # log(0) is clamped to -100 with gradient 0: log of a masked-safe input, so the zero
    # gradient is not g / 0 = NaN at input 0 or 1 (a saturated sigmoid)
    log_x = ops.clamp(_safe_log(input), min=-100.0)
    log_1mx = ops.clamp(_safe_log(ops.sub(1.0, input)), min=-100.0)
    return ops.neg(ops.add(ops.mul(target, log_x), ops.mul(ops.sub(1.0, target), log_1mx)))


def _safe_log(x):
    pos = ops.gt(x, 0)
    return ops.where(pos, ops.log(ops.where(pos, x, 1.0)), -math.inf)


@op("binary_cross_entropy_with_logits", "BinaryCrossEntropyWithLogitsBackward0")
@composite("BinaryCrossEntropyWithLogitsBackward0", ("input", "target"))
def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None,
                                     reduce=None, reduction="mean", pos_weight=None):
    """Sigmoid + binary cross entropy in one stable formula (log1p(exp(-|x|)) form)."""
    if tuple(input.shape) != tuple(target.shape):
        raise ValueError(f"Target size ({list(target.shape)}) must be the same as input size "
                         f"({list(input.shape)})")
    sp = ops._softplus(ops.neg(input))  # log(1 + exp(-x)), stable; gradient 0.5 at x == 0
    if pos_weight is not None:
        lw = ops.add(ops.mul(ops.sub(pos_weight, 1.0), target), 1.0)
        loss = ops.add(ops.mul(ops.sub(1.0, target), input), ops.mul(lw, sp))
    else:
        loss = ops.add(ops.mul(ops.sub(1.0, target), input), sp)
    if weight is not None:
        loss = ops.mul(loss, weight)
    return _reduce(loss, reduction, "binary_cross_entropy_with_logits")


def kl_div(input, target, size_average=None, reduce=None, reduction="mean", log_target=False):
    if log_target:
        loss = ops.mul(ops.exp(target), ops.sub(target, input))
    else:
        loss = ops.where(ops.gt(target, 0), ops.mul(target, ops.sub(
            ops.log(ops.where(ops.gt(target, 0), target, 1.0)), input)), 0.0)
    if reduction == "batchmean":
        return ops.div(ops.sum(loss), float(input.shape[0]))
    return _reduce(loss, reduction, "kl_div")
