"""`nn.functional` attention: scaled_dot_product_attention and the multi-head forward."""
import math

import numpy as np

from aotgrad.ir import dtypes as dt
from aotgrad.runtime.sizes import size_list
from aotgrad.ir.symbolic import is_static_shape
from aotgrad.runtime import ops, shape_ops
from aotgrad.runtime import tprims as tp
from aotgrad.runtime.factories import tensor
from aotgrad.runtime.ops import op
from aotgrad.nn.functional_dropout import dropout
from aotgrad.nn.functional_linear import linear


# ---- attention -----------------------------------------------------------------------------
@op("scaled_dot_product_attention")
def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, enable_gqa=False):
    """softmax(q k^T * scale + mask) v over the last two dims, (..., L, E) x (..., S, E).

    A boolean attn_mask marks the positions that may be attended (True = keep), as in
    PyTorch's SDPA; a float mask is added to the scores. is_causal masks j > i."""
    if query.ndim < 2:
        raise RuntimeError(f"scaled_dot_product_attention: query must be at least 2-D, got "
                           f"shape {size_list(query.shape)}")
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
    if not is_static_shape((l, s)):  # a symbolic length: the mask is computed by the program
        return ops.le(tp.iota(shape=(l, s), dim=1, dtype=dt.int64),
                      tp.iota(shape=(l, s), dim=0, dtype=dt.int64))
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
                               f"{size_list(key_padding_mask.shape)}")
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
