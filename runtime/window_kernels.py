"""Eager convolution and pooling on whole-array numpy kernels (runtime/eager_kernels.py's
mechanism: one node whose backward runs the kernel's backward; the op's prims stay the
reference and the create_graph path): windows as strided views and one BLAS contraction
forward, scatter-adds by window offset backward, selections by bit masks."""
import numpy as np
from numpy.lib.stride_tricks import as_strided

from aotgrad.runtime.eager_kernels import Kernel, Layout, _keep, _select


def window_count(n, k, s, lo, hi, d, ceil_mode=False, pool=False):
    """Output size along one dim (as nn.functional's _out_size)."""
    span = n + lo + hi - (d * (k - 1) + 1)
    if span < 0:
        return 0
    out = (-(-span // s) if ceil_mode else span // s) + 1
    if ceil_mode and pool and (out - 1) * s >= n + lo:
        out -= 1
    return out


def _windows(xp, kernel, stride, dilation, oh, ow):
    """(N, C, kh, kw, oh, ow) read-only view of the windows of the padded input xp."""
    (kh, kw), (sh, sw), (dh, dw) = kernel, stride, dilation
    n, c = xp.shape[:2]
    s0, s1, s2, s3 = xp.strides
    return as_strided(xp, (n, c, kh, kw, oh, ow), (s0, s1, s2 * dh, s3 * dw, s2 * sh, s3 * sw),
                      writeable=False)


def _pad_hw(x, lo, hi, value):
    (ph, pw), (eh, ew) = lo, hi
    if not (ph or pw or eh or ew):
        return x
    out = np.full(x.shape[:2] + (x.shape[2] + ph + eh, x.shape[3] + pw + ew), value, x.dtype)
    out[:, :, ph:ph + x.shape[2], pw:pw + x.shape[3]] = x
    return out


def _scatter_windows(dwin, shape, kernel, stride, dilation, padding):
    """The adjoint of _windows: sum (N, C, kh, kw, oh, ow) window values into an (N, C, H, W)
    array (the padding cut off)."""
    (kh, kw), (sh, sw), (dh, dw), (ph, pw) = kernel, stride, dilation, padding
    n, c, h, w = shape
    oh, ow = dwin.shape[4:]
    hp = max(h + 2 * ph, (oh - 1) * sh + dh * (kh - 1) + 1)
    wp = max(w + 2 * pw, (ow - 1) * sw + dw * (kw - 1) + 1)
    out = np.zeros((n, c, hp, wp), dwin.dtype)
    for i in range(kh):
        for j in range(kw):
            out[:, :, i * dh:i * dh + (oh - 1) * sh + 1:sh,
                j * dw:j * dw + (ow - 1) * sw + 1:sw] += dwin[:, :, i, j]
    return out[:, :, ph:ph + h, pw:pw + w]


def _conv_geometry(x_shape, w_shape, stride, padding, dilation):
    (kh, kw) = w_shape[2:]
    oh = window_count(x_shape[2], kh, stride[0], padding[0], padding[0], dilation[0])
    ow = window_count(x_shape[3], kw, stride[1], padding[1], padding[1], dilation[1])
    return oh, ow


def _conv2d_forward(arrays, *, stride, padding, dilation, groups):
    x, w, b = arrays
    n, c = x.shape[:2]
    o, _, kh, kw = w.shape
    oh, ow = _conv_geometry(x.shape, w.shape, stride, padding, dilation)
    xp = _pad_hw(x, padding, padding, 0)
    win = _windows(xp, (kh, kw), stride, dilation, oh, ow)
    # (C, kh, kw, N, oh, ow) -> (K, N*L): one contraction with the (O, K) weight
    cols = np.ascontiguousarray(win.transpose(1, 2, 3, 0, 4, 5)).reshape(c * kh * kw,
                                                                          n * oh * ow)
    y = np.matmul(w.reshape(o, -1), cols)
    out = np.ascontiguousarray(y.reshape(o, n, oh, ow).transpose(1, 0, 2, 3))
    if b is not None:
        out += b.reshape(1, o, 1, 1)
    return out, cols


def _conv2d_backward(g, arrays, cols, needs, *, stride, padding, dilation, groups):
    x, w, b = arrays
    n, c = x.shape[:2]
    o, _, kh, kw = w.shape
    oh, ow = g.shape[2:]
    gm = np.ascontiguousarray(g.transpose(1, 0, 2, 3)).reshape(o, n * oh * ow)
    gx = gw = gb = None
    if needs[0] and tuple(stride) == (1, 1) and oh * ow < 256:
        # (on larger images the rows are long enough that the widened product costs more)
        gx = _conv2d_input_grad_stride1(g, w, x.shape, padding, dilation)
    elif needs[0]:
        # scattered channel-major, (C, N, ...), where each tap's slice of dcols is contiguous
        dcols = np.matmul(w.reshape(o, -1).T, gm).reshape(c, kh, kw, n, oh, ow)
        gx = _scatter_windows(dcols.transpose(0, 3, 1, 2, 4, 5), (c, n) + x.shape[2:],
                              (kh, kw), stride, dilation, padding)
        gx = np.ascontiguousarray(gx.transpose(1, 0, 2, 3))
    if needs[1]:
        # (K, N*L) @ (N*L, O), transposed: BLAS reads both operands along rows
        gw = np.matmul(cols, gm.T).T.reshape(w.shape)
    if b is not None and needs[2]:
        gb = g.sum(axis=(0, 2, 3)).astype(g.dtype, copy=False)
    return gx, gw, gb


def _conv2d_input_grad_stride1(g, w, x_shape, padding, dilation):
    """The input's gradient of a stride-1 convolution with rows as wide as the padded input:
    the window of tap (i, j) is then the flat padded image shifted by i*dh*wp + j*dw, so each
    tap's scatter is one long contiguous add per (channel, sample) instead of one per output
    row (the zero columns of the widened gradient add nothing)."""
    n, c, h, w_ = x_shape
    o, _, kh, kw = w.shape
    oh, ow = g.shape[2:]
    (ph, pw), (dh, dw) = padding, dilation
    hp, wp = h + 2 * ph, w_ + 2 * pw
    wide = np.zeros((o, n, oh, wp), g.dtype)
    wide[..., :ow] = g.transpose(1, 0, 2, 3)
    dcols = np.matmul(w.reshape(o, -1).T, wide.reshape(o, -1)).reshape(c, kh * kw, n, oh * wp)
    flat = np.zeros((c, n, hp * wp + dw * (kw - 1)), g.dtype)
    for k in range(kh * kw):
        at = k // kw * dh * wp + k % kw * dw
        flat[:, :, at:at + oh * wp] += dcols[:, k]
    img = flat[:, :, :hp * wp].reshape(c, n, hp, wp)[:, :, ph:ph + h, pw:pw + w_]
    return np.ascontiguousarray(img.transpose(1, 0, 2, 3))


def _conv2d_accepts(arrays, params):
    """One group, and at least one window (the reference raises its error otherwise)."""
    x, w, _ = arrays
    return params["groups"] == 1 and min(_conv_geometry(
        x.shape, w.shape, params["stride"], params["padding"], params["dilation"])) > 0


CONV2D = Kernel("ConvolutionBackward0", _conv2d_forward, _conv2d_backward, _conv2d_accepts)


def _max_pool2d_geometry(shape, kernel, stride, padding, dilation, ceil_mode):
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel, stride, padding, dilation
    h, w = shape[2:]
    oh = window_count(h, kh, sh, ph, ph, dh, ceil_mode, True)
    ow = window_count(w, kw, sw, pw, pw, dw, ceil_mode, True)
    eh = max(0, (oh - 1) * sh + dh * (kh - 1) + 1 - (h + 2 * ph))
    ew = max(0, (ow - 1) * sw + dw * (kw - 1) + 1 - (w + 2 * pw))
    return oh, ow, (ph + eh, pw + ew)


def _max_pool2d_forward(arrays, *, kernel, stride, padding, dilation, ceil_mode):
    """The first maximum of each window (the first NaN where there is one, as argmax picks
    it), tap by tap over strided views: numpy's argmax over a short axis is slow."""
    x, = arrays
    oh, ow, hi = _max_pool2d_geometry(x.shape, kernel, stride, padding, dilation, ceil_mode)
    win = _windows(_pad_hw(x, padding, hi, -np.inf), kernel, stride, dilation, oh, ow)
    best = win[:, :, 0, 0].copy()
    idx = np.zeros(best.shape, np.int32)
    nan = bool(np.isnan(x).any())
    better = np.empty(best.shape, bool)
    for k in range(1, kernel[0] * kernel[1]):
        v = win[:, :, k // kernel[1], k % kernel[1]]
        np.greater(v, best, out=better)
        if nan:
            better |= np.isnan(v) & ~np.isnan(best)
        best = _select(better, v, best)
        idx += better * (np.int32(k) - idx)
    return best, idx


def _max_pool2d_backward(g, arrays, idx, needs, *, kernel, stride, padding, dilation,
                         ceil_mode):
    x, = arrays
    n, c = x.shape[:2]
    oh, ow = g.shape[2:]
    (kh, kw), (sh, sw), (dh, dw) = kernel, stride, dilation
    if sh > dh * (kh - 1) and sw > dw * (kw - 1):
        # windows apart: each input element gets at most one tap's gradient, so the taps are
        # written in place (no window array, no adds)
        (ph, pw), (h, w) = padding, x.shape[2:]
        out = np.zeros((n, c, max(h + 2 * ph, (oh - 1) * sh + dh * (kh - 1) + 1),
                        max(w + 2 * pw, (ow - 1) * sw + dw * (kw - 1) + 1)), g.dtype)
        for k in range(kh * kw):
            i, j = k // kw * dh, k % kw * dw
            out[:, :, i:i + (oh - 1) * sh + 1:sh, j:j + (ow - 1) * sw + 1:sw] = _keep(idx == k, g)
        return (np.ascontiguousarray(out[:, :, ph:ph + h, pw:pw + w]),)
    dwin = np.zeros((n, c, kh, kw, oh, ow), g.dtype)
    for k in range(kh * kw):
        dwin[:, :, k // kw, k % kw] = _keep(idx == k, g)
    return (np.ascontiguousarray(_scatter_windows(dwin, x.shape, kernel, stride, dilation,
                                                  padding)),)


def _max_pool2d_accepts(arrays, params):
    return min(_max_pool2d_geometry(arrays[0].shape, **params)[:2]) > 0


def max_pool2d_layout(arrays, params):
    """A C-contiguous input without padding (none asked, none for ceil_mode) and windows of
    two taps or more: its N*C planes as rows of a generated kernel, the plane size fixed."""
    x, = arrays
    kernel = params["kernel"]
    if not x.flags.c_contiguous or kernel[0] * kernel[1] < 2 or \
            tuple(params["padding"]) != (0, 0) or \
            _max_pool2d_geometry(x.shape, **params)[2] != (0, 0):
        return None
    n, c, h, w = x.shape
    return Layout((("r", h, w),), {"r": n * c}, [x.reshape(n * c, h, w)], (0,),
                  tuple(sorted(params.items())))


def max_pool2d_ctx(outs, arrays, params):
    """The generated forward's outputs (values, tap indices) in the input's (N, C) shape."""
    best, idx = outs
    n, c = arrays[0].shape[:2]
    return best.reshape((n, c) + best.shape[1:]), idx.reshape((n, c) + idx.shape[1:])


# (nn/functional_conv.py adds the generated forward, written with the ops above this module)
MAX_POOL2D = Kernel("MaxPool2DWithIndicesBackward0", _max_pool2d_forward,
                    _max_pool2d_backward, _max_pool2d_accepts)


# ---- average pooling -------------------------------------------------------------------------
def avg_pool2d_divisor(hw, kernel, stride, padding, ceil_mode, count_include_pad):
    """Each window's divisor (float64, (oh, ow)): the elements it covers, those of the
    padding included when count_include_pad, never those of the ceil-mode overhang."""
    (h, w), (kh, kw), (sh, sw), (ph, pw) = hw, kernel, stride, padding
    oh, ow, (hh, hw_) = _max_pool2d_geometry((1, 1, h, w), kernel, stride, padding, (1, 1),
                                             ceil_mode)
    m = np.zeros((h + ph + hh, w + pw + hw_), dtype=np.float64)
    if count_include_pad:
        m[:h + 2 * ph, :w + 2 * pw] = 1
    else:
        m[ph:ph + h, pw:pw + w] = 1
    csum = np.zeros((oh, ow))
    for i in range(kh):
        for j in range(kw):
            csum += m[i:i + (oh - 1) * sh + 1:sh, j:j + (ow - 1) * sw + 1:sw]
    return csum


def _avg_divisor(x, params):
    if params["divisor_override"] is not None:
        return x.dtype.type(params["divisor_override"])
    return avg_pool2d_divisor(x.shape[2:], params["kernel"], params["stride"],
                              params["padding"], params["ceil_mode"],
                              params["count_include_pad"]).astype(x.dtype)


def _avg_geometry(shape, params):
    return _max_pool2d_geometry(shape, params["kernel"], params["stride"], params["padding"],
                                (1, 1), params["ceil_mode"])


def _avg_pool2d_forward(arrays, **params):
    """The windows' sums tap by tap over strided views, over their divisors."""
    x, = arrays
    kernel = params["kernel"]
    oh, ow, hi = _avg_geometry(x.shape, params)
    win = _windows(_pad_hw(x, params["padding"], hi, 0), kernel, params["stride"], (1, 1),
                   oh, ow)
    total = win[:, :, 0, 0].copy()
    for k in range(1, kernel[0] * kernel[1]):
        total += win[:, :, k // kernel[1], k % kernel[1]]
    total /= _avg_divisor(x, params)
    return total, ()


def _avg_pool2d_backward(g, arrays, ctx, needs, **params):
    """Each window's gradient over its divisor, added to every element it covers."""
    x, = arrays
    kernel, stride = params["kernel"], params["stride"]
    gd = g / _avg_divisor(x, params)
    (kh, kw), (sh, sw), (ph, pw) = kernel, stride, params["padding"]
    if sh >= kh and sw >= kw:
        # windows apart: each element gets at most one window's gradient, written in place
        (n, c, h, w), (oh, ow) = x.shape, gd.shape[2:]
        out = np.zeros((n, c, max(h + 2 * ph, (oh - 1) * sh + kh),
                        max(w + 2 * pw, (ow - 1) * sw + kw)), gd.dtype)
        for i in range(kh):
            for j in range(kw):
                out[:, :, i:i + (oh - 1) * sh + 1:sh, j:j + (ow - 1) * sw + 1:sw] = gd
        out = out[:, :, ph:ph + h, pw:pw + w]
        return (out if out.flags.c_contiguous else np.ascontiguousarray(out),)
    dwin = np.broadcast_to(gd[:, :, None, None], gd.shape[:2] + tuple(kernel) + gd.shape[2:])
    return (np.ascontiguousarray(_scatter_windows(dwin, x.shape, kernel, stride, (1, 1),
                                                  params["padding"])),)


def _avg_pool2d_accepts(arrays, params):
    return min(_avg_geometry(arrays[0].shape, params)[:2]) > 0


def avg_pool2d_layout(arrays, params):
    """As max_pool2d's: a C-contiguous input without padding, its planes as rows."""
    x, = arrays
    if not x.flags.c_contiguous or tuple(params["padding"]) != (0, 0) or \
            _avg_geometry(x.shape, params)[2] != (0, 0):
        return None
    n, c, h, w = x.shape
    return Layout((("r", h, w),), {"r": n * c}, [x.reshape(n * c, h, w)], (0,),
                  tuple(sorted(params.items())))


def avg_pool2d_out(outs, arrays, params):
    """The generated forward's output in the input's (N, C) shape; no ctx."""
    out, = outs
    n, c = arrays[0].shape[:2]
    return out.reshape((n, c) + out.shape[1:]), ()   # (the backward takes no ctx)


# (nn/functional_conv.py adds the generated forward)
AVG_POOL2D = Kernel("AvgPool2DBackward0", _avg_pool2d_forward, _avg_pool2d_backward,
                    _avg_pool2d_accepts)
