"""nn.functional: group and instance normalisation, channel dropout, adaptive max pooling,
pixel (un)shuffle, resampling (`interpolate`) and `embedding_bag`, all decomposed into
existing tensor ops (index tables are computed on the host from the static shapes)."""
import math
import warnings

import numpy as np

from aotgrad.ir import dtypes as dt
from aotgrad.runtime.sizes import size_list
from aotgrad.runtime import ops, shape_ops
from aotgrad.runtime import tprims as tp
from aotgrad.runtime.factories import arange, rand, tensor
from aotgrad.runtime.grad_mode import no_grad
from aotgrad.runtime.ops import op
from aotgrad.nn._checks import _check_float, _check_tensor
from aotgrad.runtime.composite import composite
from aotgrad.nn.functional_activations import _maybe_inplace, _source


# ---- normalisation ---------------------------------------------------------------------------
def _normalize(x, dims, eps):
    mu = ops.mean(x, dims, keepdim=True)
    d = ops.sub(x, mu)
    var = ops.mean(ops.mul(d, d), dims, keepdim=True)
    return ops.mul(d, ops.rsqrt(ops.add(var, eps))), mu, var


def _channel_affine(out, weight, bias):
    bshape = (1, out.shape[1]) + (1,) * (out.ndim - 2)
    if weight is not None:
        out = ops.mul(out, weight.reshape(bshape))
    if bias is not None:
        out = ops.add(out, bias.reshape(bshape))
    return out


@op("group_norm", "NativeGroupNormBackward0")
@composite("NativeGroupNormBackward0", ("input", "weight", "bias"))
def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5):
    """Normalise (N, C, *) over each group of C/num_groups channels and the spatial dims."""
    _check_float("group_norm", input)
    if input.ndim < 2:
        raise RuntimeError(f"group_norm: expected at least 2D input (N, C, *), got "
                           f"{size_list(input.shape)}")
    n, c = input.shape[:2]
    if num_groups <= 0 or c % num_groups:
        raise RuntimeError(f"Expected number of channels in input to be divisible by "
                           f"num_groups, but got input of shape {size_list(input.shape)} and "
                           f"num_groups={num_groups}")
    x = input.reshape(n, num_groups, -1)
    out, _, _ = _normalize(x, (2,), eps)
    return _channel_affine(out.reshape(tuple(input.shape)), weight, bias)


@op("instance_norm")
def instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None,
                  use_input_stats=True, momentum=0.1, eps=1e-5):
    """Normalise each (sample, channel) of (N, C, *) over its spatial dims. With input
    statistics the running statistics (when given) move towards the batch average of the
    instance means and unbiased variances; without, the running statistics are used."""
    _check_float("instance_norm", input)
    if input.ndim < 3:
        raise ValueError(f"instance_norm: expected at least 3D input (N, C, *), got "
                         f"{size_list(input.shape)}")
    c = input.shape[1]
    dims = tuple(range(2, input.ndim))
    count = math.prod(input.shape[2:])
    if use_input_stats:
        if count <= 1:
            raise ValueError(f"Expected more than 1 spatial element when training, got input "
                             f"size {size_list(input.shape)}")
        out, mu, var = _normalize(input, dims, eps)
        if running_mean is not None or running_var is not None:
            with no_grad():
                m = momentum
                if running_mean is not None:
                    batch_mean = ops.mean(mu.detach().reshape(-1, c), 0)
                    running_mean.mul_(1 - m).add_(ops.mul(batch_mean, m))
                if running_var is not None:
                    unbiased = ops.mul(var.detach().reshape(-1, c), count / (count - 1))
                    running_var.mul_(1 - m).add_(ops.mul(ops.mean(unbiased, 0), m))
    else:
        if running_mean is None or running_var is None:
            raise RuntimeError("instance_norm: running_mean and running_var must be given "
                               "when use_input_stats=False")
        bshape = (1, c) + (1,) * (input.ndim - 2)
        d = ops.sub(input, running_mean.reshape(bshape))
        out = ops.mul(d, ops.rsqrt(ops.add(running_var.reshape(bshape), eps)))
    return _channel_affine(out, weight, bias)


# ---- channel dropout ---------------------------------------------------------------------------
def _feature_dropout(input, p, training, inplace, name, unbatched):
    """Zero whole channels: one Bernoulli draw per (sample, channel) of (N, C, *) (per
    channel of an unbatched (C, *)), the kept ones scaled by 1/(1-p)."""
    _check_tensor(name, input)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0.0:
        return input
    src = _source(input, inplace)
    lead = 1 if unbatched else 2
    mask_shape = tuple(input.shape[:lead]) + (1,) * (input.ndim - lead)
    if p == 1.0:
        out = ops.mul(src, 0.0)
    else:
        keep = ops.cast(ops.ge(rand(*mask_shape, dtype=input.dtype), p), input.dtype)
        out = ops.mul(src, ops.mul(keep, 1.0 / (1.0 - p)))
    return _maybe_inplace(input, out, inplace, name)


@op("dropout1d")
def dropout1d(input, p=0.5, training=True, inplace=False):
    """Channel-wise dropout of (N, C, L) or unbatched (C, L)."""
    if input.ndim not in (2, 3):
        raise RuntimeError(f"dropout1d: Expected 2D or 3D input, but received a {input.ndim}D "
                           f"input. Note that dropout1d exists to provide channel-wise dropout "
                           f"on inputs with 1 spatial dimension, a channel dimension, and an "
                           f"optional batch dimension (i.e. 2D or 3D inputs).")
    return _feature_dropout(input, p, training, inplace, "dropout1d", input.ndim == 2)


@op("dropout2d")
def dropout2d(input, p=0.5, training=True, inplace=False):
    """Channel-wise dropout of (N, C, H, W). As in PyTorch, a 3-D input is taken as
    (N, C, L) (with a warning), not as an unbatched image."""
    if input.ndim not in (3, 4):
        warnings.warn(f"dropout2d: Received a {input.ndim}-D input to dropout2d, which is "
                      f"deprecated and will result in an error in a future release. To retain "
                      f"the behavior and silence this warning, please use dropout instead. "
                      f"Note that dropout2d exists to provide channel-wise dropout on inputs "
                      f"with 2 spatial dimensions, a channel dimension, and an optional batch "
                      f"dimension (i.e. 3D or 4D inputs).", stacklevel=3)
    if input.ndim == 3:
        warnings.warn("dropout2d: Received a 3D input to dropout2d and assuming that "
                      "channel-wise 1D dropout behavior is desired - input is interpreted as "
                      "shape (N, C, L), where C is the channel dim. This behavior will change "
                      "in a future release to interpret the input as one without a batch "
                      "dimension, i.e. shape (C, H, W). To maintain the 1D channel-wise "
                      "dropout behavior, please switch to using dropout1d instead.",
                      stacklevel=3)
    return _feature_dropout(input, p, training, inplace, "dropout2d", input.ndim < 2)


# ---- adaptive max pooling ----------------------------------------------------------------------
def _adaptive_windows(n_in, n_out):
    """(n_out, k) input positions of each adaptive window, k the longest window; shorter
    windows repeat their last position (which changes neither the max nor its first index)."""
    starts = [(i * n_in) // n_out for i in range(n_out)]
    ends = [-(-((i + 1) * n_in) // n_out) for i in range(n_out)]
    k = max(e - s for s, e in zip(starts, ends))
    return np.array([[min(s + j, e - 1) for j in range(k)] for s, e in zip(starts, ends)],
                    dtype=np.int64)


def _adaptive_size(output_size, shape):
    sizes = tuple(output_size) if isinstance(output_size, (tuple, list)) else \
        (output_size,) * len(shape)
    if len(sizes) != len(shape):
        raise ValueError(f"output_size must be an int or {len(shape)} values, got "
                         f"{output_size!r}")
    return tuple(int(n if o is None else o) for o, n in zip(sizes, shape))


@op("adaptive_max_pool2d", "AdaptiveMaxPool2DBackward0")
def adaptive_max_pool2d(input, output_size, return_indices=False):
    """Max over the adaptive windows [floor(i*H/oh), ceil((i+1)*H/oh)) of (N, C, H, W) or
    (C, H, W); with return_indices also each maximum's flat index h*W + w in its plane."""
    _check_tensor("adaptive_max_pool2d", input)
    if input.ndim not in (3, 4):
        raise RuntimeError(f"adaptive_max_pool2d(): Expected 3D or 4D tensor, but got "
                           f"{size_list(input.shape)}")
    x = shape_ops.unsqueeze(input, 0) if input.ndim == 3 else input
    n, c, h, w = x.shape
    oh, ow = _adaptive_size(output_size, (h, w))
    if h == 0 or w == 0 or oh <= 0 or ow <= 0:
        raise RuntimeError(f"adaptive_max_pool2d(): empty input {size_list(input.shape)} or output "
                           f"size {(oh, ow)}")
    rows, cols = _adaptive_windows(h, oh), _adaptive_windows(w, ow)
    kh, kw = rows.shape[1], cols.shape[1]
    g = shape_ops.index_select(x, 2, tensor(rows.reshape(-1)))
    g = shape_ops.index_select(g, 3, tensor(cols.reshape(-1)))          # (N, C, oh*kh, ow*kw)
    g = tp.transpose(tp.reshape(g, shape=(n, c, oh, kh, ow, kw)), perm=(0, 1, 2, 4, 3, 5))
    g = tp.reshape(g, shape=(n, c, oh, ow, kh * kw))
    idx = ops.argmax(g, -1, keepdim=True)
    out = shape_ops.squeeze(tp.gather(g, idx, dim=4), 4)
    if input.ndim == 3:
        out = shape_ops.squeeze(out, 0)
    if not return_indices:
        return out
    flat = rows[:, None, :, None] * w + cols[None, :, None, :]          # (oh, ow, kh, kw)
    table = tensor(flat.reshape(1, 1, oh, ow, kh * kw)).expand(n, c, oh, ow, kh * kw)
    where = shape_ops.squeeze(shape_ops.gather(table, 4, idx), 4)
    return out, (shape_ops.squeeze(where, 0) if input.ndim == 3 else where)


def adaptive_max_pool1d(input, output_size, return_indices=False):
    """Adaptive max pooling over the last dim of (N, C, L) or (C, L)."""
    size = output_size[0] if isinstance(output_size, (tuple, list)) else output_size
    out = adaptive_max_pool2d(shape_ops.unsqueeze(input, -2), (1, size), return_indices)
    if return_indices:
        return shape_ops.squeeze(out[0], -2), shape_ops.squeeze(out[1], -2)
    return shape_ops.squeeze(out, -2)


# ---- pixel shuffle -------------------------------------------------------------------------------
@op("pixel_shuffle")
def pixel_shuffle(input, upscale_factor):
    """(*, C*r*r, H, W) -> (*, C, H*r, W*r)."""
    r = int(upscale_factor)
    if input.ndim < 3:
        raise RuntimeError(f"pixel_shuffle expects input to have at least 3 dimensions, but "
                           f"got input with {input.ndim} dimension(s)")
    if r <= 0:
        raise RuntimeError(f"pixel_shuffle expects a positive upscale_factor, but got {r}")
    *lead, c, h, w = input.shape
    if c % (r * r):
        raise RuntimeError(f"pixel_shuffle expects its input's 'channel' dimension to be "
                           f"divisible by the square of upscale_factor, but input.size(-3)={c} "
                           f"is not divisible by {r * r}")
    b = len(lead)
    x = input.reshape(*lead, c // (r * r), r, r, h, w)
    perm = tuple(range(b)) + tuple(b + i for i in (0, 3, 1, 4, 2))
    return shape_ops.permute(x, perm).reshape(*lead, c // (r * r), h * r, w * r)


@op("pixel_unshuffle")
def pixel_unshuffle(input, downscale_factor):
    """(*, C, H*r, W*r) -> (*, C*r*r, H, W), the inverse of pixel_shuffle."""
    r = int(downscale_factor)
    if input.ndim < 3:
        raise RuntimeError(f"pixel_unshuffle expects input to have at least 3 dimensions, but "
                           f"got input with {input.ndim} dimension(s)")
    if r <= 0:
        raise RuntimeError(f"pixel_unshuffle expects a positive downscale_factor, but got {r}")
    *lead, c, h, w = input.shape
    if h % r or w % r:
        raise RuntimeError(f"pixel_unshuffle expects height and width to be divisible by "
                           f"downscale_factor, but input.size(-2)={h} and input.size(-1)={w} "
                           f"are not divisible by {r}")
    b = len(lead)
    x = input.reshape(*lead, c, h // r, r, w // r, r)
    perm = tuple(range(b)) + tuple(b + i for i in (0, 2, 4, 1, 3))
    return shape_ops.permute(x, perm).reshape(*lead, c * r * r, h // r, w // r)


# ---- interpolation -------------------------------------------------------------------------------
_LINEAR_MODES = {"linear": 1, "bilinear": 2}
_NEAREST_MODES = ("nearest", "nearest-exact")


def _source_scale(n_in, n_out, scale, align_corners, ftype):
    """PyTorch's source-index scale, in the input's float precision."""
    if align_corners:
        return ftype((n_in - 1) / (n_out - 1)) if n_out > 1 else ftype(0)
    if scale is not None and scale > 0:
        return ftype(1.0 / scale)
    return ftype(n_in) / ftype(n_out)


def _nearest_index(n_in, n_out, scale, exact, ftype):
    dst = np.arange(n_out)
    if not exact and n_out == n_in:
        return dst
    if not exact and n_out == 2 * n_in:
        return dst >> 1
    s = _source_scale(n_in, n_out, scale, False, ftype)
    src = (dst.astype(ftype) + ftype(0.5)) * s if exact else dst.astype(ftype) * s
    return np.minimum(np.floor(src).astype(np.int64), n_in - 1)


def _linear_weights(n_in, n_out, scale, align_corners, ftype):
    """(i0, i1, lambda1): each output position blends inputs i0 and i1."""
    s = _source_scale(n_in, n_out, scale, align_corners, ftype)
    dst = np.arange(n_out).astype(ftype)
    src = dst * s if align_corners else np.maximum((dst + ftype(0.5)) * s - ftype(0.5),
                                                   ftype(0))
    i0 = np.minimum(np.floor(src).astype(np.int64), n_in - 1)
    lam = np.clip(src - i0.astype(ftype), 0, 1).astype(ftype)
    i1 = np.where(i0 < n_in - 1, i0 + 1, i0)
    return i0, i1, lam


def _output_sizes(input, size, scale_factor, nd, recompute):
    spatial = tuple(input.shape[2:])
    if size is not None and scale_factor is not None:
        raise ValueError("only one of size or scale_factor should be defined")
    if size is not None:
        sizes = tuple(size) if isinstance(size, (tuple, list)) else (size,) * nd
        if len(sizes) != nd:
            raise ValueError(f"Input and output must have the same number of spatial "
                             f"dimensions, but got input with spatial dimensions of "
                             f"{list(spatial)} and output size of {list(sizes)}. Please provide "
                             f"input tensor in (N, C, d1, d2, ...,dK) format and output size "
                             f"in (o1, o2, ...,oK) format.")
        return tuple(int(s) for s in sizes), (None,) * nd
    if scale_factor is None:
        raise ValueError("either size or scale_factor should be defined")
    scales = tuple(scale_factor) if isinstance(scale_factor, (tuple, list)) else \
        (scale_factor,) * nd
    if len(scales) != nd:
        raise ValueError(f"Input and scale_factor must have the same number of spatial "
                         f"dimensions, but got input with spatial dimensions of {list(spatial)} "
                         f"and scale_factor of shape {list(scales)}. Please provide input "
                         f"tensor in (N, C, d1, d2, ...,dK) format and scale_factor in (s1, "
                         f"s2, ...,sK) format.")
    sizes = tuple(int(math.floor(float(n) * float(s))) for n, s in zip(spatial, scales))
    return sizes, ((None,) * nd if recompute else tuple(float(s) for s in scales))


@op("interpolate")
def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                recompute_scale_factor=None, antialias=False):
    """Resample (N, C, *spatial): modes 'nearest', 'nearest-exact' (1-3 spatial dims),
    'linear' (3-D input) and 'bilinear' (4-D input, align_corners as PyTorch). Each spatial
    dim is one gather (nearest) or two gathers and a blend (linear), so gradients are exact."""
    _check_tensor("interpolate", input)
    if mode in _NEAREST_MODES:
        if align_corners is not None:
            raise ValueError("align_corners option can only be set with the interpolating "
                             "modes: linear | bilinear | bicubic | trilinear")
    elif mode in _LINEAR_MODES:
        need = _LINEAR_MODES[mode] + 2
        if input.ndim != need:
            raise NotImplementedError(f"Got {input.ndim}D input, but {mode} mode needs {need}D "
                                      f"input")
        align_corners = bool(align_corners)
    else:
        raise NotImplementedError(f"interpolate: mode {mode!r} is not supported (only "
                                  f"'nearest', 'nearest-exact', 'linear' and 'bilinear')")
    if antialias:
        raise NotImplementedError("interpolate: antialias=True is not supported")
    if input.ndim < 3 or input.ndim > 5:
        raise NotImplementedError(f"Input Error: Only 3D, 4D and 5D input Tensors supported "
                                  f"(got {input.ndim}D) for the modes: nearest | linear | "
                                  f"bilinear (got {mode})")
    nd = input.ndim - 2
    sizes, scales = _output_sizes(input, size, scale_factor, nd, recompute_scale_factor)
    ftype = (input.dtype.np if input.dtype.is_floating_point else np.dtype(np.float32)).type
    x = input
    for k, (n_out, scale) in enumerate(zip(sizes, scales)):
        dim, n_in = 2 + k, x.shape[2 + k]
        if n_out <= 0:
            raise RuntimeError(f"interpolate: output size {sizes} must be positive (input "
                               f"{size_list(input.shape)})")
        if mode in _NEAREST_MODES:
            idx = _nearest_index(n_in, n_out, scale, mode == "nearest-exact", ftype)
            x = shape_ops.index_select(x, dim, tensor(idx))
            continue
        i0, i1, lam = _linear_weights(n_in, n_out, scale, align_corners, ftype)
        bshape = (n_out,) + (1,) * (x.ndim - dim - 1)
        lam1 = tensor(lam.reshape(bshape))
        lam0 = tensor((1 - lam).astype(ftype).reshape(bshape))
        x = ops.add(ops.mul(shape_ops.index_select(x, dim, tensor(i0)), lam0),
                    ops.mul(shape_ops.index_select(x, dim, tensor(i1)), lam1))
    return x


def upsample(input, size=None, scale_factor=None, mode="nearest", align_corners=None):
    return interpolate(input, size, scale_factor, mode, align_corners)


def upsample_nearest(input, size=None, scale_factor=None):
    return interpolate(input, size, scale_factor, mode="nearest")


def upsample_bilinear(input, size=None, scale_factor=None):
    return interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)


# ---- embedding bag -------------------------------------------------------------------------------
@op("embedding_bag", "EmbeddingBagBackward0")
def embedding_bag(input, weight, offsets=None, max_norm=None, norm_type=2, scale_grad_by_freq=False,
                  mode="mean", sparse=False, per_sample_weights=None, include_last_offset=False,
                  padding_idx=None):
    """Sum, mean or max of the embedding rows of each bag: bags are the rows of a 2-D input,
    or the runs of a 1-D input that start at `offsets`. Entries equal to padding_idx are left
    out (an empty bag gives zeros). Bag membership is a (bags, entries) mask made by
    comparisons, so the op traces without reading the indices."""
    _check_tensor("embedding_bag", input)
    if input.dtype not in (dt.int64, dt.int32):
        raise RuntimeError(f"embedding_bag: expected indices of type int64 or int32, but got "
                           f"{input.dtype.name}")
    if weight.ndim != 2:
        raise RuntimeError(f"embedding_bag: 'weight' must be 2-D, got {size_list(weight.shape)}")
    if mode not in ("sum", "mean", "max"):
        raise ValueError(f"mode has to be one of sum, mean or max, but got {mode!r}")
    if max_norm is not None or scale_grad_by_freq or sparse:
        raise NotImplementedError("embedding_bag: max_norm, scale_grad_by_freq and sparse are "
                                  "not supported")
    if per_sample_weights is not None:
        if mode != "sum":
            raise NotImplementedError(f"embedding_bag: per_sample_weights was not None. "
                                      f"per_sample_weights is only supported for mode='sum' "
                                      f"(got mode='{mode}'). Please open a feature request on "
                                      f"GitHub.")
        if tuple(per_sample_weights.shape) != tuple(input.shape):
            raise ValueError(f"embedding_bag: If per_sample_weights "
                             f"({size_list(per_sample_weights.shape)}) is not None, then it must "
                             f"have the same shape as the input ({size_list(input.shape)})")
    num = weight.shape[0]
    if padding_idx is not None:
        if not -num <= padding_idx < num:
            raise AssertionError("padding_idx must be within num_embeddings")
        padding_idx = padding_idx + num if padding_idx < 0 else padding_idx
    if input.ndim == 2:
        if offsets is not None:
            raise ValueError("if input is 2D, then offsets has to be None, as input is treated "
                             "is a mini-batch of fixed length sequences. However, found offsets "
                             f"of type {type(offsets).__name__}")
        bags, length = input.shape
        flat = input.reshape(-1)
        starts = arange(0, bags * length, length, dtype=dt.int64)
        ends = ops.add(starts, length)
        psw = None if per_sample_weights is None else per_sample_weights.reshape(-1)
    elif input.ndim == 1:
        if offsets is None:
            raise ValueError("offsets has to be a 1D Tensor but got None")
        if offsets.ndim != 1:
            raise ValueError("offsets has to be a 1D Tensor")
        flat, psw = input, per_sample_weights
        total = tensor(np.array([input.shape[0]], dtype=np.int64))
        offsets = ops.cast(offsets, dt.int64)
        if include_last_offset:
            starts, ends = offsets[:-1], offsets[1:]
        else:
            starts, ends = offsets, shape_ops.cat([offsets[1:], total])
    else:
        raise ValueError(f"input has to be 1D or 2D Tensor, but got Tensor of dimension "
                         f"{input.ndim}")
    value = getattr(flat, "_value", None)
    if isinstance(value, np.ndarray) and value.size:
        lo, hi = int(value.min()), int(value.max())
        if lo < 0 or hi >= num:
            raise IndexError(f"embedding_bag: index out of range in self (indices span "
                             f"[{lo}, {hi}], num_embeddings={num})")
    positions = arange(flat.shape[0], dtype=dt.int64)
    member = ops.logical_and(ops.ge(positions, shape_ops.unsqueeze(starts, 1)),
                             ops.lt(positions, shape_ops.unsqueeze(ends, 1)))  # (bags, T)
    if padding_idx is not None:
        member = ops.logical_and(member, ops.ne(flat, padding_idx))
    rows = shape_ops.index_select(weight, 0, flat)                             # (T, D)
    counts = ops.sum(ops.cast(member, weight.dtype), 1, keepdim=True)          # (bags, 1)
    if mode == "max":
        picked = ops.where(shape_ops.unsqueeze(member, 2), shape_ops.unsqueeze(rows, 0),
                           -math.inf)
        out = ops.amax(picked, 1) if flat.shape[0] else ops.mul(counts, 0.0)
        return ops.where(ops.eq(counts, 0), 0.0, out)
    if psw is not None:
        rows = ops.mul(rows, shape_ops.unsqueeze(psw.to(weight.dtype), 1))
    out = ops.matmul(ops.cast(member, weight.dtype), rows)
    if mode == "mean":
        out = ops.div(out, ops.clamp(counts, min=1.0))
    return out
