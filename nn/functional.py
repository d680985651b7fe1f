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
from aotgrad.runtime import ops, shape_ops
from aotgrad.runtime import tprims as tp
from aotgrad.runtime.factories import rand, tensor
from aotgrad.runtime.grad_mode import no_grad
from aotgrad.runtime.ops import op
from aotgrad.runtime.shape_ops import one_hot  # noqa: F401  (F.one_hot)
from aotgrad.runtime.tensor import Tensor


def _check_tensor(name, x, arg="input"):
    if not isinstance(x, Tensor):
        raise TypeError(f"{name}(): argument '{arg}' must be a Tensor, not {type(x).__name__}")


def _check_float(name, x):
    _check_tensor(name, x)
    if not x.dtype.is_floating_point:
        raise RuntimeError(f"{name}(): expected a floating-point input, got {x.dtype.name} "
                           f"with shape {list(x.shape)}")


# ---- linear --------------------------------------------------------------------------------
@op("linear", "AddmmBackward0")
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
    out = tp.dot_general(input, weight, contract=((input.ndim - 1,), (weight.ndim - 1,)))
    if bias is not None:
        out = ops.add(out, bias)
    return out


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


def hardtanh(input, min_val=-1.0, max_val=1.0, inplace=False):
    return _maybe_inplace(input, ops.clamp(input, min_val, max_val), inplace, "hardtanh")


@op("leaky_relu", "LeakyReluBackward0")
def leaky_relu(input, negative_slope=0.01, inplace=False):
    out = ops.where(ops.gt(input, 0), input, ops.mul(input, negative_slope))
    return _maybe_inplace(input, out, inplace, "leaky_relu")


@op("elu", "EluBackward0")
def elu(input, alpha=1.0, inplace=False):
    out = ops.where(ops.gt(input, 0), input, ops.mul(ops.expm1(input), alpha))
    return _maybe_inplace(input, out, inplace, "elu")


@op("gelu", "GeluBackward0")
def gelu(input, approximate="none"):
    """GELU: x * Phi(x) exactly (erf), or the tanh approximation with approximate='tanh'."""
    _check_float("gelu", input)
    if approximate == "none":
        return ops.mul(ops.mul(input, 0.5), ops.add(ops.erf(ops.mul(input, 1 / math.sqrt(2))),
                                                    1.0))
    if approximate == "tanh":
        inner = ops.mul(ops.add(input, ops.mul(ops.mul(ops.mul(input, input), input), 0.044715)),
                        math.sqrt(2 / math.pi))
        return ops.mul(ops.mul(input, 0.5), ops.add(ops.tanh(inner), 1.0))
    raise ValueError(f"gelu(): approximate must be 'none' or 'tanh', got {approximate!r}")


@op("silu", "SiluBackward0")
def silu(input, inplace=False):
    return _maybe_inplace(input, ops.mul(input, ops.sigmoid(input)), inplace, "silu")


@op("softplus", "SoftplusBackward0")
def softplus(input, beta=1.0, threshold=20.0):
    """log(1 + exp(beta x)) / beta, linear where beta x > threshold (PyTorch)."""
    bx = ops.mul(input, beta)
    # log1p(exp(-|bx|)) + max(bx, 0) is stable everywhere
    soft = ops.div(ops.add(ops.log1p(ops.exp(ops.neg(ops.abs(bx)))), ops.relu(bx)), beta)
    return ops.where(ops.gt(bx, threshold), input, soft)


@op("mish")
def mish(input, inplace=False):
    return _maybe_inplace(input, ops.mul(input, ops.tanh(softplus(input))), inplace, "mish")


def logsigmoid(input):
    return ops.neg(softplus(ops.neg(input)))


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


def _maybe_inplace(input, out, inplace, name):
    if not inplace:
        return out
    from aotgrad.runtime.shape_ops import commit_inplace
    return commit_inplace(input, out, name + "_")


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
    if p == 1.0:
        out = ops.mul(input, 0.0)
    else:
        keep = ops.cast(ops.ge(rand(*input.shape, dtype=input.dtype), p), input.dtype)
        out = ops.mul(ops.mul(input, keep), 1.0 / (1.0 - p))
    return _maybe_inplace(input, out, inplace, "dropout")


# ---- normalisation -------------------------------------------------------------------------
@op("layer_norm", "NativeLayerNormBackward0")
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
    if isinstance(input._value, np.ndarray) and input.numel():
        lo, hi = int(input._value.min()), int(input._value.max())
        if lo < 0 or hi >= n:
            raise IndexError(f"embedding(): index out of range in self (indices span "
                             f"[{lo}, {hi}], num_embeddings={n})")
    flat = shape_ops.index_select(weight, 0, input.reshape(-1))
    out = flat.reshape(tuple(input.shape) + (weight.shape[1],))
    if padding_idx is not None:
        if padding_idx < 0:
            padding_idx += n
        pad = shape_ops.unsqueeze(ops.eq(input, padding_idx), -1)
        out = ops.where(pad, out.detach(), out)
    return out


# ---- convolution and pooling ---------------------------------------------------------------
def _pair(v, name="kernel_size"):
    if isinstance(v, (tuple, list)):
        if len(v) == 1:
            return (int(v[0]),) * 2
        if len(v) != 2:
            raise ValueError(f"{name} must be an int or a pair, got {v!r}")
        return int(v[0]), int(v[1])
    return int(v), int(v)


def _out_size(n, k, s, p_lo, p_hi, d, ceil_mode=False, pool=False):
    eff = d * (k - 1) + 1
    span = n + p_lo + p_hi - eff
    if span < 0:
        return 0
    out = (-(-span // s) if ceil_mode else span // s) + 1
    if ceil_mode and pool and (out - 1) * s >= n + p_lo:
        out -= 1  # the last window must start inside the input or the left padding
    return out


def _patches(x, kernel, stride, padding, dilation, value=0.0, ceil_mode=False, pool=False):
    """(N, C, H, W) -> (N, C, kh*kw, oh, ow): every window's elements, by strided slices."""
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel, stride, padding, dilation
    n, c, h, w = x.shape
    oh = _out_size(h, kh, sh, ph, ph, dh, ceil_mode, pool)
    ow = _out_size(w, kw, sw, pw, pw, dw, ceil_mode, pool)
    if oh <= 0 or ow <= 0:
        raise RuntimeError(f"Given input size: ({c}x{h}x{w}). Calculated output size: "
                           f"({c}x{oh}x{ow}). Output size is too small")
    # extra high padding so the last (ceil-mode) window fits
    eh = max(0, (oh - 1) * sh + dh * (kh - 1) + 1 - (h + 2 * ph))
    ew = max(0, (ow - 1) * sw + dw * (kw - 1) + 1 - (w + 2 * pw))
    if ph or pw or eh or ew:
        x = tp.pad(x, config=((0, 0, 0), (0, 0, 0), (ph, ph + eh, 0), (pw, pw + ew, 0)),
                   value=float(value))
    cols = []
    for i in range(kh):
        for j in range(kw):
            s = tp.slice(x, start=(0, 0, i * dh, j * dw),
                         limit=(n, c, i * dh + (oh - 1) * sh + 1, j * dw + (ow - 1) * sw + 1),
                         strides=(1, 1, sh, sw))
            cols.append(tp.reshape(s, shape=(n, c, 1, oh, ow)))
    if len(cols) == 1:
        return cols[0], (oh, ow), (eh, ew)
    return tp.concatenate(*cols, dim=2), (oh, ow), (eh, ew)


def _check_4d(name, x):
    _check_tensor(name, x)
    if x.ndim not in (3, 4):
        raise RuntimeError(f"{name}: expected 3D (unbatched) or 4D (batched) input, but got "
                           f"input of size: {list(x.shape)}")


@op("unfold", "Im2ColBackward0")
def unfold(input, kernel_size, dilation=1, padding=0, stride=1):
    """im2col: (N, C, H, W) -> (N, C*kh*kw, L), L the number of sliding windows."""
    _check_4d("unfold", input)
    x = input if input.ndim == 4 else shape_ops.unsqueeze(input, 0)
    pat, (oh, ow), _ = _patches(x, _pair(kernel_size), _pair(stride, "stride"),
                                _pair(padding, "padding"), _pair(dilation, "dilation"))
    n, c, k = pat.shape[:3]
    out = tp.reshape(pat, shape=(n, c * k, oh * ow))
    return out if input.ndim == 4 else tp.reshape(out, shape=tuple(out.shape[1:]))


@op("conv2d", "ConvolutionBackward0")
def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """2-D convolution (cross-correlation, like PyTorch) by im2col and one contraction.

    input (N, C_in, H, W), weight (C_out, C_in/groups, kh, kw); padding int, pair, 'valid'
    or 'same'."""
    _check_4d("conv2d", input)
    unbatched = input.ndim == 3
    x = shape_ops.unsqueeze(input, 0) if unbatched else input
    if weight.ndim != 4:
        raise RuntimeError(f"conv2d: expected 4D weight (out, in/groups, kh, kw), got shape "
                           f"{list(weight.shape)}")
    if x.dtype is not weight.dtype:
        raise RuntimeError(f"conv2d: input type ({x.dtype.name}) and weight type "
                           f"({weight.dtype.name}) should be the same")
    n, cin, h, w = x.shape
    cout, cg, kh, kw = weight.shape
    if groups < 1 or cin % groups or cout % groups:
        raise RuntimeError(f"conv2d: groups={groups} must divide in_channels={cin} and "
                           f"out_channels={cout}")
    if cg * groups != cin:
        raise RuntimeError(f"Given groups={groups}, weight of size {list(weight.shape)}, "
                           f"expected input{list(input.shape)} to have {cg * groups} channels, "
                           f"but got {cin} channels instead")
    sh, sw = _pair(stride, "stride")
    dh, dw = _pair(dilation, "dilation")
    if isinstance(padding, str):
        if padding == "valid":
            pad = (0, 0)
        elif padding == "same":
            if (sh, sw) != (1, 1):
                raise ValueError("padding='same' is not supported for strided convolutions")
            th, tw = dh * (kh - 1), dw * (kw - 1)
            if th % 2 or tw % 2:  # asymmetric: pad the extra row/column at the end
                x = tp.pad(x, config=((0, 0, 0), (0, 0, 0), (th // 2, th - th // 2, 0),
                                      (tw // 2, tw - tw // 2, 0)), value=0.0)
                pad = (0, 0)
            else:
                pad = (th // 2, tw // 2)
        else:
            raise ValueError(f"Invalid padding string {padding!r}, should be one of "
                             f"{{'valid', 'same'}}")
    else:
        pad = _pair(padding, "padding")
    pat, (oh, ow), _ = _patches(x, (kh, kw), (sh, sw), pad, (dh, dw))
    k = cg * kh * kw
    cols = tp.reshape(pat, shape=(n, groups, k, oh * ow))
    wg = tp.reshape(weight, shape=(groups, cout // groups, k))
    # (groups, N, L, out/groups) with groups as the batch dim of one contraction
    y = tp.dot_general(cols, wg, contract=((2,), (2,)), batch=((1,), (0,)))
    y = tp.transpose(y, perm=(1, 0, 3, 2))
    out = tp.reshape(y, shape=(n, cout, oh, ow))
    if bias is not None:
        out = ops.add(out, bias.reshape(1, cout, 1, 1))
    return tp.reshape(out, shape=tuple(out.shape[1:])) if unbatched else out


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """1-D convolution, as conv2d over a height-1 image."""
    pad = padding if isinstance(padding, str) else (0, _single(padding))
    out = conv2d(shape_ops.unsqueeze(input, -2), shape_ops.unsqueeze(weight, -2), bias,
                 (1, _single(stride)), pad, (1, _single(dilation)), groups)
    return shape_ops.squeeze(out, -2)


def _single(v):
    return int(v[0]) if isinstance(v, (tuple, list)) else int(v)


def _pool_args(name, kernel_size, stride, padding, dilation):
    k = _pair(kernel_size)
    s = k if stride is None or (isinstance(stride, (tuple, list)) and not stride) else \
        _pair(stride, "stride")
    p, d = _pair(padding, "padding"), _pair(dilation, "dilation")
    for pi, ki, di in zip(p, k, d):
        if pi > (di * (ki - 1) + 1) // 2:
            raise RuntimeError(f"{name}: pad should be at most half of effective kernel size, "
                               f"but got pad={pi}, kernel_size={ki} and dilation={di}")
    return k, s, p, d


@op("max_pool2d", "MaxPool2DWithIndicesBackward0")
def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """Max over each window; the gradient goes to the first maximal element (PyTorch)."""
    _check_4d("max_pool2d", input)
    x = shape_ops.unsqueeze(input, 0) if input.ndim == 3 else input
    k, s, p, d = _pool_args("max_pool2d", kernel_size, stride, padding, dilation)
    pat, (oh, ow), _ = _patches(x, k, s, p, d, value=-math.inf, ceil_mode=ceil_mode, pool=True)
    idx = ops.argmax(pat, 2, keepdim=True)
    out = shape_ops.squeeze(tp.gather(pat, idx, dim=2), 2)
    if input.ndim == 3:
        out = shape_ops.squeeze(out, 0)
    if not return_indices:
        return out
    # flat index h * W + w into each input plane, like PyTorch
    n, c, h, w = x.shape
    ki = shape_ops.squeeze(idx, 2)
    ri = ops.add(tensor(np.arange(oh).reshape(oh, 1) * s[0] - p[0]),
                 ops.mul(ops.floor_divide(ki, k[1]), d[0]))
    ci = ops.add(tensor(np.arange(ow).reshape(1, ow) * s[1] - p[1]),
                 ops.mul(ops.remainder(ki, k[1]), d[1]))
    flat = ops.add(ops.mul(ri, w), ci)
    if input.ndim == 3:
        flat = shape_ops.squeeze(flat, 0)
    return out, flat


@op("avg_pool2d", "AvgPool2DBackward0")
def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True, divisor_override=None):
    """Mean over each window; divisors follow PyTorch's count_include_pad/ceil_mode rules."""
    _check_4d("avg_pool2d", input)
    x = shape_ops.unsqueeze(input, 0) if input.ndim == 3 else input
    k, s, p, d = _pool_args("avg_pool2d", kernel_size, stride, padding, 1)
    pat, (oh, ow), (eh, ew) = _patches(x, k, s, p, d, value=0.0, ceil_mode=ceil_mode, pool=True)
    total = ops.sum(pat, 2)
    if divisor_override is not None:
        div = float(divisor_override)
        out = ops.div(total, div)
    else:
        h, w = x.shape[2:]
        # count the elements each window covers: ones in the input (and in the padding when
        # count_include_pad), zeros in the ceil-mode overhang
        m = np.zeros((h + 2 * p[0] + eh, w + 2 * p[1] + ew), dtype=np.float64)
        if count_include_pad:
            m[:h + 2 * p[0], :w + 2 * p[1]] = 1
        else:
            m[p[0]:p[0] + h, p[1]:p[1] + w] = 1
        csum = np.zeros((oh, ow))
        for i in range(k[0]):
            for j in range(k[1]):
                csum += m[i:i + (oh - 1) * s[0] + 1:s[0], j:j + (ow - 1) * s[1] + 1:s[1]]
        out = ops.div(total, tensor(csum.astype(x.dtype.np)))
    return shape_ops.squeeze(out, 0) if input.ndim == 3 else out


def adaptive_avg_pool2d(input, output_size):
    """Only output sizes that divide the input evenly (including 1, global pooling)."""
    _check_4d("adaptive_avg_pool2d", input)
    h, w = input.shape[-2:]
    oh, ow = _pair(output_size, "output_size")
    oh, ow = oh or h, ow or w
    if h % oh or w % ow:
        raise NotImplementedError(f"adaptive_avg_pool2d: output size ({oh}, {ow}) must divide "
                                  f"the input size ({h}, {w})")
    return avg_pool2d(input, (h // oh, w // ow))


def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
    out = max_pool2d(shape_ops.unsqueeze(input, -2), (1, _single(kernel_size)),
                     None if stride is None else (1, _single(stride)), (0, _single(padding)),
                     (1, _single(dilation)), ceil_mode)
    return shape_ops.squeeze(out, -2)


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True):
    out = avg_pool2d(shape_ops.unsqueeze(input, -2), (1, _single(kernel_size)),
                     None if stride is None else (1, _single(stride)), (0, _single(padding)),
                     ceil_mode, count_include_pad)
    return shape_ops.squeeze(out, -2)


def pad(input, pad, mode="constant", value=None):
    """F.pad: `pad` lists (left, right) pairs from the last dim backwards; constant mode."""
    if mode != "constant":
        raise NotImplementedError(f"pad: mode {mode!r} is not supported (only 'constant')")
    if len(pad) % 2 or len(pad) // 2 > input.ndim:
        raise RuntimeError(f"Padding length must be divisible by 2 and at most twice the number "
                           f"of dims ({input.ndim}), got {len(pad)}")
    config = [(0, 0, 0)] * input.ndim
    x = input
    for i in range(len(pad) // 2):
        lo, hi = int(pad[2 * i]), int(pad[2 * i + 1])
        dim = input.ndim - 1 - i
        if lo < 0:  # negative padding crops
            x = shape_ops.narrow(x, dim, -lo, x.shape[dim] + lo)
            lo = 0
        if hi < 0:
            x = shape_ops.narrow(x, dim, 0, x.shape[dim] + hi)
            hi = 0
        config[dim] = (lo, hi, 0)
    if all(c == (0, 0, 0) for c in config):
        return x
    return tp.pad(x, config=tuple(config), value=float(0.0 if value is None else value))


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
    w = ops.softmax(scores, -1)
    if dropout_p > 0.0:
        w = dropout(w, dropout_p, True)
    return ops.matmul(w, value)


def causal_mask(l, s=None):
    """A boolean (L, S) mask, True where key j <= query i (what a causal query may see)."""
    s = l if s is None else s
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


# ---- losses --------------------------------------------------------------------------------
def _reduce(loss, reduction, name):
    if reduction == "mean":
        return ops.mean(loss)
    if reduction == "sum":
        return ops.sum(loss)
    if reduction == "none":
        return loss
    raise ValueError(f"{name}: {reduction} is not a valid value for reduction")


def _check_same_size(name, input, target):
    if tuple(input.shape) != tuple(target.shape):
        warnings.warn(f"{name}: Using a target size ({list(target.shape)}) that is different to "
                      f"the input size ({list(input.shape)}). This will likely lead to "
                      f"incorrect results due to broadcasting. Please ensure they have the same "
                      f"size.", stacklevel=3)


@op("mse_loss", "MseLossBackward0")
def mse_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    _check_same_size("mse_loss", input, target)
    d = ops.sub(input, target)
    loss = ops.mul(d, d)
    if weight is not None:
        loss = ops.mul(loss, weight)
    return _reduce(loss, reduction, "mse_loss")


@op("l1_loss", "L1LossBackward0")
def l1_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    _check_same_size("l1_loss", input, target)
    loss = ops.abs(ops.sub(input, target))
    if weight is not None:
        loss = ops.mul(loss, weight)
    return _reduce(loss, reduction, "l1_loss")


@op("smooth_l1_loss", "SmoothL1LossBackward0")
def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction="mean", beta=1.0):
    _check_same_size("smooth_l1_loss", input, target)
    d = ops.abs(ops.sub(input, target))
    if beta == 0:
        return _reduce(d, reduction, "smooth_l1_loss")
    loss = ops.where(ops.lt(d, beta), ops.div(ops.mul(ops.mul(d, d), 0.5), beta),
                     ops.sub(d, 0.5 * beta))
    return _reduce(loss, reduction, "smooth_l1_loss")


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
        raise RuntimeError(f"{name}: expected target of dtype int64 (class indices), got "
                           f"{target.dtype.name}")
    cdim = 0 if input.ndim == 1 else 1
    expect = tuple(input.shape[:cdim]) + tuple(input.shape[cdim + 1:])
    if tuple(target.shape) != expect:
        if input.ndim >= 2 and target.ndim >= 1 and target.shape[0] != input.shape[0]:
            raise ValueError(f"Expected input batch_size ({input.shape[0]}) to match target "
                             f"batch_size ({target.shape[0]}).")
        raise RuntimeError(f"{name}: expected target of shape {list(expect)} for input of shape "
                           f"{list(input.shape)}, got {list(target.shape)}")
    c = input.shape[cdim]
    if isinstance(target._value, np.ndarray) and target.numel():
        v = target._value
        bad = v[(v != ignore_index) & ((v < 0) | (v >= c))]
        if bad.size:
            raise IndexError(f"{name}: Target {int(bad.flat[0])} is out of bounds (number of "
                             f"classes {c}).")
    return cdim, c


@op("nll_loss", "NllLossBackward0")
def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
             reduction="mean"):
    """-input[i, target[i]] (times weight[target[i]]); mean divides by the summed weights of
    the targets that are not ignore_index."""
    cdim, c = _class_targets("nll_loss", input, target, ignore_index)
    return _nll(input, target, weight, ignore_index, reduction, cdim, c, "nll_loss")


def _nll(logp, target, weight, ignore_index, reduction, cdim, c, name, smoothing=0.0):
    target = target.to(dt.int64)
    valid = ops.ne(target, ignore_index)
    safe = ops.where(valid, target, 0)
    picked = shape_ops.squeeze(tp.gather(logp, shape_ops.unsqueeze(safe, cdim), dim=cdim), cdim)
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


@op("cross_entropy", "NllLossBackward0")
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
    cdim, c = _class_targets("cross_entropy", input, target, ignore_index)
    return _nll(logp, target, weight, ignore_index, reduction, cdim, c, "cross_entropy",
                label_smoothing)


@op("binary_cross_entropy", "BinaryCrossEntropyBackward0")
def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None,
                         reduction="mean"):
    """-(t log x + (1 - t) log(1 - x)) with the logs clamped at -100, like PyTorch."""
    if tuple(input.shape) != tuple(target.shape):
        raise ValueError(f"Using a target size ({list(target.shape)}) that is different to the "
                         f"input size ({list(input.shape)}) is deprecated. Please ensure they "
                         f"have the same size.")
    if isinstance(input._value, np.ndarray) and input.numel():
        v = input._value
        if v.min() < 0 or v.max() > 1:
            raise RuntimeError("all elements of input should be between 0 and 1")
    log_x = ops.clamp(ops.log(input), min=-100.0)
    log_1mx = ops.clamp(ops.log(ops.sub(1.0, input)), min=-100.0)
    loss = ops.neg(ops.add(ops.mul(target, log_x), ops.mul(ops.sub(1.0, target), log_1mx)))
    if weight is not None:
        loss = ops.mul(loss, weight)
    return _reduce(loss, reduction, "binary_cross_entropy")


@op("binary_cross_entropy_with_logits", "BinaryCrossEntropyWithLogitsBackward0")
def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None,
                                     reduce=None, reduction="mean", pos_weight=None):
    """Sigmoid + binary cross entropy in one stable formula (log1p(exp(-|x|)) form)."""
    if tuple(input.shape) != tuple(target.shape):
        raise ValueError(f"Target size ({list(target.shape)}) must be the same as input size "
                         f"({list(input.shape)})")
    # softplus(-x) = log(1 + exp(-x)), computed stably
    sp = ops.add(ops.log1p(ops.exp(ops.neg(ops.abs(input)))), ops.relu(ops.neg(input)))
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
