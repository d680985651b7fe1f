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
from aotgrad.nn._checks import _check_float, _check_tensor  # noqa: F401


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


@op("hardtanh", "HardtanhBackward0")
def hardtanh(input, min_val=-1.0, max_val=1.0, inplace=False):
    """clamp(input, min_val, max_val), but (as in PyTorch) with gradient 0 at the bounds
    themselves, where clamp's is 1; NaN passes through with gradient 1."""
    value = ops.clamp(input.detach(), min_val, max_val)
    inside = ops.logical_not(ops.logical_or(ops.le(input, min_val), ops.ge(input, max_val)))
    return _maybe_inplace(input, ops.where(inside, input, value), inplace, "hardtanh")


@op("leaky_relu", "LeakyReluBackward0")
def leaky_relu(input, negative_slope=0.01, inplace=False):
    out = ops.where(ops.gt(input, 0), input, ops.mul(input, negative_slope))
    return _maybe_inplace(input, out, inplace, "leaky_relu")


@op("elu", "EluBackward0")
def elu(input, alpha=1.0, inplace=False):
    neg = ops.le(input, 0)  # NaN takes the identity branch (gradient 1), as in PyTorch
    safe = ops.where(neg, input, 0.0)  # expm1 of a large x would be inf, its gradient NaN
    out = ops.where(neg, ops.mul(ops.expm1(safe), alpha), input)
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
    return ops.where(ops.gt(bx, threshold), input, ops.div(ops._softplus(bx), beta))


@op("mish")
def mish(input, inplace=False):
    return _maybe_inplace(input, ops.mul(input, ops.tanh(softplus(input))), inplace, "mish")


def logsigmoid(input):
    """log(sigmoid(x)) = -softplus(-x), without softplus's linear threshold (PyTorch)."""
    return ops.neg(ops._softplus(ops.neg(input)))


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
    if attn_mask is not None and not is_causal:
        # PyTorch's safe softmax: a query that may attend nowhere gets zero weights, not NaN
        # (a causal query always sees key 0: its rows need no check, which costs W4 0.4 ms)
        dead = ops.all(ops.eq(scores, -math.inf), -1, keepdim=True)
        w = ops.where(dead, 0.0, ops.softmax(ops.where(dead, 0.0, scores), -1))
    else:
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


from aotgrad.nn.functional_conv import *  # noqa: E402,F401,F403
from aotgrad.nn.functional_conv import _pair, _patches  # noqa: E402,F401
from aotgrad.nn.functional_loss import *  # noqa: E402,F401,F403
