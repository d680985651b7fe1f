"""`nn.functional`: the stateless forms of the layers, written with aotgrad's tensor ops.

Everything here is a composition of runtime ops and prims, so it is differentiable by the
one derivative rule of each prim and traceable by the compiler.

>>> import aotgrad.nn.functional as F
>>> F.relu(aotgrad.tensor([-1., 2.]))
tensor([0., 2.])
"""
from aotgrad.ir import dtypes as dt
from aotgrad.runtime.sizes import size_list
from aotgrad.runtime import ops, shape_ops
from aotgrad.runtime.ops import op
from aotgrad.runtime.shape_ops import one_hot  # noqa: F401  (F.one_hot)
from aotgrad.runtime.value_checks import checked
from aotgrad.nn._checks import _check_float, _check_tensor  # noqa: F401


# ---- embedding -----------------------------------------------------------------------------
@op("embedding", "EmbeddingBackward0")
def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0,
              scale_grad_by_freq=False, sparse=False):
    """Rows of `weight` at integer `input`; the row at padding_idx gets no gradient."""
    _check_tensor("embedding", input)
    if input.dtype not in (dt.int64, dt.int32):
        raise RuntimeError(f"embedding(): expected indices of type int64 or int32, but got "
                           f"{input.dtype.name} (shape {size_list(input.shape)})")
    if weight.ndim != 2:
        raise RuntimeError(f"embedding(): 'weight' must be 2-D, got shape "
                           f"{size_list(weight.shape)}")
    if max_norm is not None or scale_grad_by_freq or sparse:
        raise NotImplementedError("embedding(): max_norm, scale_grad_by_freq and sparse are not "
                                  "supported")
    n = weight.shape[0]
    input = checked(input, IndexError,   # eagerly, and at run time when compiled
                    "embedding(): index out of range in self (index {value}, "
                    "num_embeddings={high}; indices {type0}, weight {type1})", low=0, high=n,
                    shown=(input, weight))
    flat = shape_ops.index_select(weight, 0, input.reshape(-1))
    out = flat.reshape(tuple(input.shape) + (weight.shape[1],))
    if padding_idx is not None:
        if padding_idx < 0:
            padding_idx += n
        pad = shape_ops.unsqueeze(ops.eq(input, padding_idx), -1)
        out = ops.where(pad, out.detach(), out)
    return out


# the rest of the namespace, one module per job (aotgrad.nn.functional.X stays the path)
from aotgrad.nn.functional_linear import bilinear, linear  # noqa: E402,F401
from aotgrad.nn.functional_activations import *  # noqa: E402,F401,F403
from aotgrad.nn.functional_activations import (_maybe_inplace, _softmax_dim,  # noqa: E402,F401
                                               _source, _threshold)
from aotgrad.nn.functional_dropout import dropout  # noqa: E402,F401
from aotgrad.nn.functional_norm import *  # noqa: E402,F401,F403
from aotgrad.nn.functional_attention import *  # noqa: E402,F401,F403
from aotgrad.nn.functional_attention import _apply_mask  # noqa: E402,F401
from aotgrad.nn.functional_conv import *  # noqa: E402,F401,F403
from aotgrad.nn.functional_conv import _pair, _patches  # noqa: E402,F401
from aotgrad.nn.functional_loss import *  # noqa: E402,F401,F403
from aotgrad.nn.functional_conv_transpose import (conv3d, conv_transpose1d,  # noqa: E402,F401
                                                  conv_transpose2d)
from aotgrad.nn.functional_layers import (adaptive_max_pool1d,  # noqa: E402,F401
                                          adaptive_max_pool2d, dropout1d, dropout2d,
                                          embedding_bag, group_norm, instance_norm, interpolate,
                                          pixel_shuffle, pixel_unshuffle, upsample,
                                          upsample_bilinear, upsample_nearest)
