"""nn.functional: convolution, unfolding, pooling and padding, as patches + one contraction
(or a reduction), so they are differentiable and traceable like every other op."""
import dataclasses
import math
import warnings

import numpy as np

from aotgrad.ir import dtypes as dt
from aotgrad.runtime.sizes import hint, size_list
from aotgrad.runtime import eager_kernels, ops, shape_ops, window_kernels
from aotgrad.runtime import tprims as tp
from aotgrad.runtime.factories import rand, tensor
from aotgrad.runtime.grad_mode import no_grad
from aotgrad.runtime.ops import op
from aotgrad.runtime.tensor import Tensor
from aotgrad.nn._checks import _check_float, _check_tensor


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
        raise RuntimeError(f"Given input size: ({hint(c)}x{hint(h)}x{hint(w)}). Calculated "
                           f"output size: ({hint(c)}x{hint(oh)}x{hint(ow)}). Output size is "
                           f"too small")
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
                           f"input of size: {size_list(x.shape)}")


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
                           f"{size_list(weight.shape)}")
    if x.dtype is not weight.dtype:
        raise RuntimeError(f"conv2d: input type ({x.dtype.name}) and weight type "
                           f"({weight.dtype.name}) should be the same")
    n, cin, h, w = x.shape
    cout, cg, kh, kw = weight.shape
    if groups < 1 or cin % groups or cout % groups:
        raise RuntimeError(f"conv2d: groups={groups} must divide in_channels={cin} and "
                           f"out_channels={cout}")
    if cg * groups != cin:
        raise RuntimeError(f"Given groups={groups}, weight of size {size_list(weight.shape)}, "
                           f"expected input{size_list(input.shape)} to have "
                           f"{hint(cg * groups)} channels, but got {hint(cin)} channels instead")
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
    params = dict(stride=(sh, sw), padding=pad, dilation=(dh, dw), groups=groups)
    out = eager_kernels.run(window_kernels.CONV2D, (x, weight, bias), _conv2d_prims, **params)
    if out is None:
        out = _conv2d_prims(x, weight, bias, **params)
    return tp.reshape(out, shape=tuple(out.shape[1:])) if unbatched else out


def _conv2d_prims(x, weight, bias, *, stride, padding, dilation, groups):
    """conv2d of a 4-D input as prims: the patches and one contraction (the reference of
    the eager kernel, and what a trace records)."""
    n = x.shape[0]
    cout, cg, kh, kw = weight.shape
    pat, (oh, ow), _ = _patches(x, (kh, kw), stride, padding, dilation)
    k = cg * kh * kw
    cols = tp.reshape(pat, shape=(n, groups, k, oh * ow))
    wg = tp.reshape(weight, shape=(groups, cout // groups, k))
    # (groups, N, L, out/groups) with groups as the batch dim of one contraction
    y = tp.dot_general(cols, wg, contract=((2,), (2,)), batch=((1,), (0,)))
    y = tp.transpose(y, perm=(1, 0, 3, 2))
    out = tp.reshape(y, shape=(n, cout, oh, ow))
    if bias is not None:
        out = ops.add(out, bias.reshape(1, cout, 1, 1))
    return out


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
    if not return_indices:
        params = dict(kernel=k, stride=s, padding=p, dilation=d, ceil_mode=ceil_mode)
        out = eager_kernels.run(_MAX_POOL2D, (x,), _max_pool2d_prims, **params)
        if out is None:
            out = _max_pool2d_prims(x, **params)
        return shape_ops.squeeze(out, 0) if input.ndim == 3 else out
    pat, (oh, ow), _ = _patches(x, k, s, p, d, value=-math.inf, ceil_mode=ceil_mode, pool=True)
    idx = ops.argmax(pat, 2, keepdim=True)
    out = shape_ops.squeeze(tp.gather(pat, idx, dim=2), 2)
    if input.ndim == 3:
        out = shape_ops.squeeze(out, 0)
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


def _max_pool2d_prims(x, *, kernel, stride, padding, dilation, ceil_mode):
    """max_pool2d of a 4-D input as prims (the reference of the eager kernel, and what a
    trace records)."""
    pat, _, _ = _patches(x, kernel, stride, padding, dilation, value=-math.inf,
                         ceil_mode=ceil_mode, pool=True)
    idx = ops.argmax(pat, 2, keepdim=True)
    return shape_ops.squeeze(tp.gather(pat, idx, dim=2), 2)


@op("avg_pool2d", "AvgPool2DBackward0")
def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True, divisor_override=None):
    """Mean over each window; divisors follow PyTorch's count_include_pad/ceil_mode rules."""
    _check_4d("avg_pool2d", input)
    x = shape_ops.unsqueeze(input, 0) if input.ndim == 3 else input
    k, s, p, _ = _pool_args("avg_pool2d", kernel_size, stride, padding, 1)
    params = dict(kernel=k, stride=s, padding=p, ceil_mode=ceil_mode,
                  count_include_pad=count_include_pad,
                  divisor_override=None if divisor_override is None else
                  float(divisor_override))
    out = eager_kernels.run(_AVG_POOL2D, (x,), _avg_pool2d_prims, **params)
    if out is None:
        out = _avg_pool2d_prims(x, **params)
    return shape_ops.squeeze(out, 0) if input.ndim == 3 else out


def _avg_pool2d_prims(x, *, kernel, stride, padding, ceil_mode, count_include_pad,
                      divisor_override):
    """avg_pool2d of a 4-D input as prims (the reference of the eager kernel, and what a
    trace records)."""
    pat, _, _ = _patches(x, kernel, stride, padding, (1, 1), value=0.0, ceil_mode=ceil_mode,
                         pool=True)
    total = ops.sum(pat, 2)
    if divisor_override is not None:
        return ops.div(total, divisor_override)
    div = window_kernels.avg_pool2d_divisor(tuple(x.shape[2:]), kernel, stride, padding,
                                            ceil_mode, count_include_pad)
    return ops.div(total, tensor(div.astype(x.dtype.np)))


def _max_pool2d_taps(tensors, flags):
    """max_pool2d's generated forward over planes (r, H, W) without padding: each window's
    first maximum (its first NaN where there is one) and that tap's index (as a float), tap
    by tap over strided slices: the numpy kernel's selections, so the same values bit for
    bit, in one loop over the output that the code generator makes of the slices' index
    arithmetic."""
    x, = tensors
    p = dict(flags)
    (kh, kw), (sh, sw), (dh, dw) = p["kernel"], p["stride"], p["dilation"]
    h, w = x.shape[1:]
    oh = window_kernels.window_count(h, kh, sh, 0, 0, dh, p["ceil_mode"], True)
    ow = window_kernels.window_count(w, kw, sw, 0, 0, dw, p["ceil_mode"], True)
    best = idx = None
    for k in range(kh * kw):
        i, j = k // kw * dh, k % kw * dw
        v = x[:, i:i + (oh - 1) * sh + 1:sh, j:j + (ow - 1) * sw + 1:sw]
        if best is None:
            best = v
            continue
        better = ops.logical_or(ops.gt(v, best), ops.logical_and(
            ops.isnan(v), ops.logical_not(ops.isnan(best))))
        best = ops.where(better, v, best)
        idx = ops.where(better, float(k), 0.0 if idx is None else idx)
    return [best, idx]


def _avg_pool2d_taps(tensors, flags):
    """avg_pool2d's generated forward over planes (r, H, W) without padding: the windows'
    sums tap by tap over strided slices, over the window's size (or the override)."""
    x, = tensors
    p = dict(flags)
    (kh, kw), (sh, sw) = p["kernel"], p["stride"]
    h, w = x.shape[1:]
    oh = window_kernels.window_count(h, kh, sh, 0, 0, 1, p["ceil_mode"], True)
    ow = window_kernels.window_count(w, kw, sw, 0, 0, 1, p["ceil_mode"], True)
    total = None
    for i in range(kh):
        for j in range(kw):
            v = x[:, i:i + (oh - 1) * sh + 1:sh, j:j + (ow - 1) * sw + 1:sw]
            total = v if total is None else ops.add(total, v)
    div = p["divisor_override"] if p["divisor_override"] is not None else float(kh * kw)
    return [ops.div(total, div)]


# the numpy kernels, with their forwards on generated kernels (the tap indices the numpy
# backward's ctx); the backwards stay on numpy: the references' autograd (pads of strided
# slices) and a stack of the taps' selections made slower kernels
_MAX_POOL2D = dataclasses.replace(window_kernels.MAX_POOL2D, generated=eager_kernels.Generated(
    window_kernels.max_pool2d_layout, _max_pool2d_taps, window_kernels.max_pool2d_ctx,
    backward=False))
_AVG_POOL2D = dataclasses.replace(window_kernels.AVG_POOL2D, generated=eager_kernels.Generated(
    window_kernels.avg_pool2d_layout, _avg_pool2d_taps, window_kernels.avg_pool2d_out,
    backward=False))


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


def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """Max over windows of the last dim of (N, C, L) or (C, L); with return_indices also the
    position of each maximum in L."""
    out = max_pool2d(shape_ops.unsqueeze(input, -2), (1, _single(kernel_size)),
                     None if stride is None else (1, _single(stride)), (0, _single(padding)),
                     (1, _single(dilation)), ceil_mode, return_indices)
    if return_indices:  # the 2-D flat index h * L + w is w here (h = 0)
        return shape_ops.squeeze(out[0], -2), shape_ops.squeeze(out[1], -2)
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
