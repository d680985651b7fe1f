"""`nn.functional` linear maps: linear and bilinear."""
from aotgrad.runtime import linalg_ops, ops, shape_ops
from aotgrad.runtime.sizes import size_list
from aotgrad.runtime import tprims as tp
from aotgrad.runtime.addmm_ops import addmm
from aotgrad.runtime.ops import op
from aotgrad.runtime.op_base import broadcast_shapes
from aotgrad.runtime.view_ops import expanded_shape
from aotgrad.runtime.value_checks import hints
from aotgrad.nn._checks import _check_tensor


# ---- linear --------------------------------------------------------------------------------
@op("linear")
def linear(input, weight, bias=None):
    """y = input @ weight.T + bias, input (*, in_features), weight (out_features, in_features).

    >>> F.linear(aotgrad.ones(2, 3), aotgrad.ones(4, 3)).shape
    aotgrad.Size([2, 4])
    """
    _check_tensor("linear", input)
    if weight.ndim not in (1, 2):
        raise RuntimeError(f"linear(): weight must be 1-D or 2-D, got shape "
                           f"{size_list(weight.shape)}")
    if input.dtype is not weight.dtype:
        raise RuntimeError(f"linear(): input and weight must have the same dtype, but got "
                           f"{input.dtype.name} and {weight.dtype.name}")
    if input.ndim == 0 or input.shape[-1] != weight.shape[-1]:
        ishape = "x".join(map(str, hints(input.shape)))
        raise RuntimeError(f"linear(): mat1 and mat2 shapes cannot be multiplied ({ishape} and "
                           f"{'x'.join(map(str, reversed(hints(weight.shape))))})")
    if bias is not None:
        _check_bias(input, weight, bias)
    if linalg_ops.tracing():  # one contraction with the weight as stored, the bias added
        out = tp.dot_general(input, weight, contract=((input.ndim - 1,), (weight.ndim - 1,)))
        return out if bias is None else ops.add(out, bias)
    # the graph PyTorch records: addmm(bias, input, weight.t()), between two reshapes for an
    # input that is not a matrix; without a bias, matmul(input, weight.t())
    wt = weight.t()
    if bias is None or weight.ndim != 2 or (input.ndim > 2 and bias.ndim > 1):
        out = ops.matmul(input, wt)
        return out if bias is None else ops.add(out, bias)
    if input.ndim == 2:
        return addmm(bias, input, wt)
    out = addmm(bias, input.reshape(-1, input.shape[-1]), wt)
    return out.view(tuple(input.shape[:-1]) + (weight.shape[0],))


def _check_bias(input, weight, bias):
    """The bias expands to the output's shape, else PyTorch's message: a matrix input (or a
    1-D bias) meets addmm's expand over the output's rows (the input's leading dims
    flattened, one row for a vector input); otherwise the bias is added to the output."""
    out_shape = tuple(input.shape[:-1]) + tuple(weight.shape[:-1])
    if bias.ndim <= len(out_shape) and \
            all(b == 1 or b == o for b, o in zip(reversed(bias.shape), reversed(out_shape))):
        return
    if input.ndim == 2 or bias.ndim <= 1:
        rows = 1
        for n in input.shape[:-1]:
            rows = rows * n
        expanded_shape(bias, (rows,) + tuple(weight.shape[:-1]))
    broadcast_shapes(out_shape, bias.shape)  # the sizes that differ, else a bias that grows
    raise RuntimeError(f"output with shape {size_list(out_shape)} doesn't match the broadcast "
                       f"shape {size_list(broadcast_shapes(out_shape, bias.shape))}")


def bilinear(input1, input2, weight, bias=None):
    """y_k = x1 @ W_k @ x2 + b_k, weight (out, in1, in2)."""
    t = ops.matmul(ops.matmul(shape_ops.unsqueeze(input1, -2).unsqueeze(-3), weight),
                   shape_ops.unsqueeze(input2, -2).unsqueeze(-3).mT)
    out = t.reshape(tuple(t.shape[:-2]))
    return out if bias is None else ops.add(out, bias)
