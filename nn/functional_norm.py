"""`nn.functional` normalisation: layer_norm, rms_norm, batch_norm, normalize."""
import numpy as np

from aotgrad.runtime import eager_kernels, ops
from aotgrad.runtime.sizes import size_list
from aotgrad.runtime.grad_mode import no_grad
from aotgrad.runtime.ops import op
from aotgrad.nn._checks import _check_float
from aotgrad.runtime.composite import composite


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
                           f"{size_list(input.shape)}")
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
                             f"size {size_list(input.shape)}")
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
