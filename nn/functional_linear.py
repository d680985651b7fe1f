"""`nn.functional` linear maps: linear and bilinear."""
from aotgrad.runtime import linalg_ops, ops, shape_ops
from aotgrad.runtime.sizes import size_list
from aotgrad.runtime import tprims as tp
from aotgrad.runtime.addmm_ops import addmm
from aotgrad.runtime.ops import op
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
