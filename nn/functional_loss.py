"""nn.functional: losses, each with PyTorch's `reduction` semantics."""
import dataclasses
import math
import warnings

import numpy as np

from aotgrad.ir import dtypes as dt
from aotgrad.runtime.sizes import size_list
from aotgrad.ir.core import current_op
from aotgrad.runtime.value_checks import checked, hint, type_str
from aotgrad.runtime import eager_kernels, ops, shape_ops
from aotgrad.runtime import tprims as tp
from aotgrad.runtime.factories import rand, tensor
from aotgrad.runtime.grad_mode import no_grad
from aotgrad.runtime.ops import op
from aotgrad.runtime.tensor import Tensor
from aotgrad.nn._checks import _check_float, _check_tensor
from aotgrad.runtime.composite import composite, with_rule


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
        warnings.warn(f"{name}: Using a target size ({size_list(target.shape)}) that is different "
                      f"to "
                      f"the input size ({size_list(input.shape)}). This will likely lead to "
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
    # the square is taken of 0 where the linear part is used: at an infinite d the unused
    # square's gradient (its zero cotangent times 2d) would be NaN (a NaN d stays NaN, and so
    # does its gradient, as PyTorch's)
    dq = ops.where(ops.ge(d, beta), 0.0, d)
    loss = ops.where(ops.lt(d, beta), ops.div(ops.mul(ops.mul(dq, dq), 0.5), beta),
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
            raise ValueError(f"Expected input batch_size ({hint(input.shape[0])}) to match "
                             f"target batch_size ({hint(target.shape[0])}).")
        raise RuntimeError(f"expected target of shape {size_list(expect)} for input of shape "
                           f"{size_list(input.shape)}, got {size_list(target.shape)}")
    c = input.shape[cdim]
    # checked eagerly, and at run time in a compiled program (the labels are its data)
    target = checked(target, IndexError,
                     "Target {value} is out of bounds (number of classes {high}; input "
                     "{type0}, target {type1}).", low=0, high=c, exempt=ignore_index,
                     shown=(input, target))
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


def _nll_node(logp, target, weight, ignore_index, reduction, cdim, c, name, smoothing=0.0):
    """nll_loss as one node (its edge: the log-probabilities only, as PyTorch's): eagerly on
    the numpy kernel (eager_kernels.nll_forward), else on the prims (_nll)."""
    # (a weight that requires grad keeps the prims' graph: the node's edge is logp's only)
    if reduction in _REDUCTIONS and (weight is None or tuple(weight.shape) == (c,) and
                                     not weight.requires_grad):
        kernel = _NLL_SMOOTHED if smoothing > 0.0 else \
            _NLL if logp.ndim <= 2 else _NLL_2D
        out = eager_kernels.run(kernel, (logp, target, weight), _nll_reference,
                                ignore_index=ignore_index, reduction=reduction,
                                label_smoothing=float(smoothing))
        if out is not None:
            return out
    if smoothing > 0.0:     # (PyTorch records the smoothing's ops)
        return _nll(logp, target, weight, ignore_index, reduction, cdim, c, name, smoothing)
    return _nll_composite(logp, target, weight, ignore_index, reduction, cdim, c, name)


@composite(_nll_name, ("logp",))
def _nll_composite(logp, target, weight, ignore_index, reduction, cdim, c, name):
    return _nll(logp, target, weight, ignore_index, reduction, cdim, c, name)


def _nll_reference(logp, target, weight, *, ignore_index, reduction, label_smoothing):
    """The nll kernel's reference: its prims."""
    cdim = 0 if logp.ndim == 1 else 1
    return _nll(logp, target, weight, ignore_index, reduction, cdim, logp.shape[cdim],
                "nll_loss", label_smoothing)


_REDUCTIONS = ("mean", "sum", "none")
# one node, named as PyTorch's last node of the same call (its smoothed loss ends in an add)
_NLL = eager_kernels.Kernel("NllLossBackward0", eager_kernels.nll_forward,
                            eager_kernels.nll_backward, indices=(1,), edges=(0,))
_NLL_2D = dataclasses.replace(_NLL, name="NllLoss2DBackward0")
_NLL_SMOOTHED = dataclasses.replace(_NLL, name="AddBackward0")


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
                               f"{size_list(weight.shape)}")
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
                               f"{size_list(input.shape)}, got {size_list(target.shape)}")
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
    # NllLossBackward0 <- LogSoftmaxBackward0, as PyTorch records
    return _nll_node(logp, target, weight, ignore_index, reduction, cdim, c, "cross_entropy",
                     label_smoothing)


@op("binary_cross_entropy")
@with_rule("BinaryCrossEntropyBackward0", ("input", "target"), lambda ctx, g: _bce_rule(ctx, g))
def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None,
                         reduction="mean"):
    """-(t log x + (1 - t) log(1 - x)) with the logs clamped at -100, like PyTorch; its
    derivatives are PyTorch's (_bce_rule), not those of the clamped logs."""
    if tuple(input.shape) != tuple(target.shape):
        raise ValueError(f"Using a target size ({size_list(target.shape)}) that is different to "
                         f"the "
                         f"input size ({size_list(input.shape)}) is deprecated. Please ensure they "
                         f"have the same size.")
    loss = _bce_clamped_logs(_bce_checked(input), target)
    if weight is not None:
        loss = ops.mul(loss, weight)
    return _reduce(loss, reduction, "binary_cross_entropy")


_BCE_EPS = 1e-12  # PyTorch's floor of x (1 - x) in the gradient's denominator


def _bce_rule(ctx, g):
    """d/dx: g (x - t) / max(x (1 - x), 1e-12) (an op of its own, whose derivatives are
    PyTorch's double backward); d/dt: -g logit(x), infinite where x is 0 or 1. Both times
    the weight, over the element count for reduction="mean"."""
    a = ctx.args
    x, t = a["input"], a["target"]
    need = ctx.needs_input_grad
    gx = _bce_backward(g, x, t, a["weight"], a["reduction"]) if need[0] else None
    gt = None
    if need[1]:
        gt = ops.mul(_bce_spread(g, x, a["reduction"]),
                     ops.neg(ops.log(ops.div(x, ops.sub(1.0, x)))))
        if a["weight"] is not None:
            gt = ops.mul(gt, a["weight"])
    return gx, gt


def _bce_spread(g, x, reduction):
    """The loss's gradient at every element: g broadcast, over the count for a mean."""
    g = tp.broadcast_to(g, tuple(x.shape)) if reduction != "none" else g
    return ops.div(g, float(x.numel())) if reduction == "mean" else g


def _bce_backward_rule(ctx, h):
    """PyTorch's binary_cross_entropy double backward, for h the gradient of d/dx:
    in g: h (x - t) / max(x (1 - x), eps); in x: h g (x^2 - 2xt + t) / ((x + eps)^2
    (1 - x + eps)^2); in t: -h g / max(x (1 - x), eps); times the weight, over the count
    for a mean."""
    a = ctx.args
    g, x, t, w = a["grad"], a["input"], a["target"], a["weight"]
    if w is not None:
        h = ops.mul(h, w)
    h = _bce_spread_back(h, x, a["reduction"])
    denom = ops.clamp(ops.mul(ops.sub(1.0, x), x), min=_BCE_EPS)
    need = ctx.needs_input_grad
    gg = gx = gt = None
    if need[0]:
        gg = ops.div(ops.mul(h, ops.sub(x, t)), denom)
    gb = tp.broadcast_to(g, tuple(x.shape)) if a["reduction"] != "none" else g
    if need[1]:
        num = ops.add(ops.sub(ops.mul(x, x), ops.mul(ops.mul(x, t), 2.0)), t)
        den = ops.mul(ops.square(ops.add(x, _BCE_EPS)),
                      ops.square(ops.add(ops.sub(1.0, x), _BCE_EPS)))
        gx = ops.mul(ops.mul(h, gb), ops.div(num, den))
    if need[2]:
        gt = ops.neg(ops.div(ops.mul(h, gb), denom))
    return gg, gx, gt


def _bce_spread_back(h, x, reduction):
    return ops.div(h, float(x.numel())) if reduction == "mean" else h


@with_rule("BinaryCrossEntropyBackwardBackward0", ("grad", "input", "target"),
           _bce_backward_rule)
def _bce_backward(grad, input, target, weight, reduction):
    """The gradient of binary_cross_entropy in its input."""
    g = _bce_spread(grad, input, reduction)
    d = ops.div(ops.sub(input, target),
                ops.clamp(ops.mul(ops.sub(1.0, input), input), min=_BCE_EPS))
    out = ops.mul(g, d)
    return out if weight is None else ops.mul(out, weight)


def _bce_checked(x):
    """x, whose values must lie in [0, 1] (checked eagerly, and at run time compiled)."""
    return checked(x, RuntimeError, "all elements of input should be between 0 and 1 (got "
                                    "{value} in input {type0})", low=0.0, high=1.0,
                   high_inclusive=True, shown=(x,))


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
        raise ValueError(f"Target size ({size_list(target.shape)}) must be the same as input size "
                         f"({size_list(input.shape)})")
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
