"""nn.functional: transposed convolutions and the 3-D convolution, decomposed into conv2d.

conv_transpose2d = conv2d of the input dilated by the stride (interior zero padding), padded
by dilation*(k-1) - padding, with the weight's in/out channels swapped (per group) and its
window flipped. conv3d = one conv2d over the depth windows stacked into the channels."""
from aotgrad.runtime import shape_ops
from aotgrad.runtime.sizes import hint, size_list
from aotgrad.runtime import tprims as tp
from aotgrad.runtime.ops import op
from aotgrad.nn._checks import _check_tensor


def _ntuple(v, n, name):
    if isinstance(v, (tuple, list)):
        if len(v) == 1:
            return (int(v[0]),) * n
        if len(v) != n:
            raise ValueError(f"{name} must be an int or {n} values, got {v!r}")
        return tuple(int(x) for x in v)
    return (int(v),) * n


def _crop_or_pad(x, dim, lo, hi):
    """Pad dim `dim` by lo/hi zeros; a negative amount crops instead."""
    if lo < 0:
        x = shape_ops.narrow(x, dim, -lo, x.shape[dim] + lo)
        lo = 0
    if hi < 0:
        x = shape_ops.narrow(x, dim, 0, x.shape[dim] + hi)
        hi = 0
    if lo or hi:
        config = [(0, 0, 0)] * x.ndim
        config[dim] = (lo, hi, 0)
        x = tp.pad(x, config=tuple(config), value=0.0)
    return x


@op("conv_transpose2d", "ConvolutionBackward0")
def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                     dilation=1):
    """The gradient of conv2d with respect to its input, as a layer: input (N, C_in, H, W),
    weight (C_in, C_out/groups, kh, kw); output H_out = (H-1)*stride - 2*padding +
    dilation*(kh-1) + output_padding + 1."""
    from aotgrad.nn.functional_conv import conv2d
    _check_tensor("conv_transpose2d", input)
    if input.ndim not in (3, 4):
        raise RuntimeError(f"conv_transpose2d: expected 3D (unbatched) or 4D (batched) input, "
                           f"but got input of size: {size_list(input.shape)}")
    if weight.ndim != 4:
        raise RuntimeError(f"conv_transpose2d: expected 4D weight (in, out/groups, kh, kw), got "
                           f"shape {size_list(weight.shape)}")
    unbatched = input.ndim == 3
    x = shape_ops.unsqueeze(input, 0) if unbatched else input
    cin, cg, kh, kw = weight.shape
    if groups < 1 or cin % groups:
        raise RuntimeError(f"conv_transpose2d: groups={groups} must divide the weight's "
                           f"{cin} input channels")
    if x.shape[1] != cin:
        raise RuntimeError(f"Given transposed=1, weight of size {size_list(weight.shape)}, "
                           f"expected input{size_list(input.shape)} to have {hint(cin)} "
                           f"channels, but got "
                           f"{hint(x.shape[1])} channels instead")
    if x.dtype is not weight.dtype:
        raise RuntimeError(f"conv_transpose2d: input type ({x.dtype.name}) and weight type "
                           f"({weight.dtype.name}) should be the same")
    s, p = _ntuple(stride, 2, "stride"), _ntuple(padding, 2, "padding")
    op_, d = _ntuple(output_padding, 2, "output_padding"), _ntuple(dilation, 2, "dilation")
    for oi, si, di in zip(op_, s, d):
        if oi >= max(si, di) or oi < 0:
            raise RuntimeError("conv_transpose2d: output padding must be smaller than either "
                               "stride or dilation, but got output_padding=" + str(op_) +
                               f", stride={s}, dilation={d}")
    if s != (1, 1):  # insert stride-1 zeros between the input's elements
        x = tp.pad(x, config=((0, 0, 0), (0, 0, 0), (0, 0, s[0] - 1), (0, 0, s[1] - 1)),
                   value=0.0)
    for dim, k, pi, oi, di in ((2, kh, p[0], op_[0], d[0]), (3, kw, p[1], op_[1], d[1])):
        edge = di * (k - 1) - pi
        x = _crop_or_pad(x, dim, edge, edge + oi)
    # (C_in, C_out/g, kh, kw) -> (C_out, C_in/g, kh, kw), window flipped
    w = tp.reshape(weight, shape=(groups, cin // groups, cg, kh, kw))
    w = tp.transpose(w, perm=(0, 2, 1, 3, 4))
    w = tp.reshape(w, shape=(groups * cg, cin // groups, kh, kw))
    w = shape_ops.flip(w, (2, 3))
    out = conv2d(x, w, bias, 1, 0, d, groups)
    return shape_ops.squeeze(out, 0) if unbatched else out


def conv_transpose1d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                     dilation=1):
    """Transposed 1-D convolution over (N, C_in, L), as conv_transpose2d of height 1."""
    one = lambda v, name: (1, _ntuple(v, 1, name)[0])  # noqa: E731
    pad = (0, _ntuple(padding, 1, "padding")[0])
    out = conv_transpose2d(shape_ops.unsqueeze(input, -2), shape_ops.unsqueeze(weight, -2),
                           bias, one(stride, "stride"), pad,
                           (0, _ntuple(output_padding, 1, "output_padding")[0]), groups,
                           one(dilation, "dilation"))
    return shape_ops.squeeze(out, -2)


@op("conv3d", "ConvolutionBackward0")
def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """3-D convolution over (N, C_in, D, H, W), weight (C_out, C_in/groups, kd, kh, kw);
    padding int, triple, 'valid' or 'same'."""
    from aotgrad.nn.functional_conv import conv2d
    _check_tensor("conv3d", input)
    if input.ndim not in (4, 5):
        raise RuntimeError(f"conv3d: expected 4D (unbatched) or 5D (batched) input, but got "
                           f"input of size: {size_list(input.shape)}")
    if weight.ndim != 5:
        raise RuntimeError(f"conv3d: expected 5D weight (out, in/groups, kd, kh, kw), got "
                           f"shape {size_list(weight.shape)}")
    unbatched = input.ndim == 4
    x = shape_ops.unsqueeze(input, 0) if unbatched else input
    cout, cg, kd, kh, kw = weight.shape
    if groups < 1 or x.shape[1] % groups or cout % groups or cg * groups != x.shape[1]:
        raise RuntimeError(f"Given groups={groups}, weight of size {size_list(weight.shape)}, "
                           f"expected input{size_list(input.shape)} to have "
                           f"{hint(cg * groups)} channels, but got {hint(x.shape[1])} channels "
                           f"instead")
    s, d = _ntuple(stride, 3, "stride"), _ntuple(dilation, 3, "dilation")
    if isinstance(padding, str):
        if padding not in ("valid", "same"):
            raise ValueError(f"Invalid padding string {padding!r}, should be one of "
                             f"{{'valid', 'same'}}")
        if padding == "same":
            if s != (1, 1, 1):
                raise ValueError("padding='same' is not supported for strided convolutions")
            for dim, k, di in zip((2, 3, 4), (kd, kh, kw), d):
                total = di * (k - 1)  # an odd total pads the extra element at the end
                x = _crop_or_pad(x, dim, total // 2, total - total // 2)
        p = (0, 0, 0)
    else:
        p = _ntuple(padding, 3, "padding")
    x = _crop_or_pad(x, 2, p[0], p[0])
    n, c, depth = x.shape[:3]
    od = (depth - d[0] * (kd - 1) - 1) // s[0] + 1
    if od <= 0:
        raise RuntimeError(f"conv3d: calculated output depth {od} is too small for input "
                           f"{size_list(input.shape)} and kernel {size_list(weight.shape)}")
    h, w = x.shape[3:]
    # the kd depth windows, stacked next to the channels: (N, od, C * kd, H, W), channel
    # c * kd + i, which matches weight (C_out, C_in/g, kd, ...) flattened per group
    slices = [tp.slice(x, start=(0, 0, i * d[0], 0, 0),
                       limit=(n, c, i * d[0] + (od - 1) * s[0] + 1, h, w),
                       strides=(1, 1, s[0], 1, 1)) for i in range(kd)]
    stacked = shape_ops.stack(slices, 3) if kd > 1 else shape_ops.unsqueeze(slices[0], 3)
    stacked = tp.transpose(stacked, perm=(0, 2, 1, 3, 4, 5))
    planes = tp.reshape(stacked, shape=(n * od, c * kd, h, w))
    w2 = tp.reshape(weight, shape=(cout, cg * kd, kh, kw))
    y = conv2d(planes, w2, None, s[1:], p[1:], d[1:], groups)   # (N * od, C_out, oh, ow)
    oh, ow = y.shape[2:]
    y = tp.transpose(tp.reshape(y, shape=(n, od, cout, oh, ow)), perm=(0, 2, 1, 3, 4))
    if bias is not None:
        y = y + bias.reshape(1, cout, 1, 1, 1)
    return shape_ops.squeeze(y, 0) if unbatched else y
