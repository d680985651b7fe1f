"""MultiheadAttention, with PyTorch's parameter layout and initialisation.

>>> mha = nn.MultiheadAttention(8, 2, batch_first=True)
>>> x = aotgrad.randn(3, 5, 8)
>>> out, w = mha(x, x, x, is_causal=True)
>>> out.shape, w.shape
(aotgrad.Size([3, 5, 8]), aotgrad.Size([3, 5, 5]))
"""
from aotgrad.ir import dtypes as dt
from aotgrad.runtime.sizes import hint
from aotgrad.nn import functional as F
from aotgrad.nn import init
from aotgrad.nn.linear import Linear
from aotgrad.nn.module import Module
from aotgrad.nn.parameter import Parameter
from aotgrad.runtime import shape_ops
from aotgrad.runtime.factories import empty


class NonDynamicallyQuantizableLinear(Linear):
    """The out projection's class name in PyTorch (kept so reprs and state dicts match)."""


class MultiheadAttention(Module):
    """Multi-head attention (Vaswani et al.) over query (L, N, E) or, with batch_first=True,
    (N, L, E); unbatched (L, E) also works.

    Parameters: in_proj_weight (3E, E) and in_proj_bias (3E) (or q/k/v_proj_weight when
    kdim/vdim differ from E), out_proj (Linear E -> E). Masks: boolean True means "do not
    attend", float masks are added to the scores. `is_causal=True` without an attn_mask
    builds the causal mask (PyTorch requires the mask too; aotgrad accepts the hint alone).
    forward returns (output, attention weights averaged over heads, or None)."""

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False,
                 add_zero_attn=False, kdim=None, vdim=None, batch_first=False, device=None,
                 dtype=None):
        super().__init__()
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(f"embed_dim and num_heads must be greater than 0, got "
                             f"embed_dim={embed_dim} and num_heads={num_heads} instead")
        if embed_dim % num_heads:
            raise AssertionError("embed_dim must be divisible by num_heads")
        if add_bias_kv or add_zero_attn:
            raise NotImplementedError("MultiheadAttention: add_bias_kv and add_zero_attn are "
                                      "not supported")
        dtype = dt.as_dtype(dtype or dt.float32)
        self.embed_dim, self.num_heads, self.dropout = embed_dim, num_heads, dropout
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.batch_first, self.head_dim = batch_first, embed_dim // num_heads
        if self._qkv_same_embed_dim:
            self.in_proj_weight = Parameter(empty(3 * embed_dim, embed_dim, dtype=dtype))
            self.register_parameter("q_proj_weight", None)
            self.register_parameter("k_proj_weight", None)
            self.register_parameter("v_proj_weight", None)
        else:
            self.q_proj_weight = Parameter(empty(embed_dim, embed_dim, dtype=dtype))
            self.k_proj_weight = Parameter(empty(embed_dim, self.kdim, dtype=dtype))
            self.v_proj_weight = Parameter(empty(embed_dim, self.vdim, dtype=dtype))
            self.register_parameter("in_proj_weight", None)
        if bias:
            self.in_proj_bias = Parameter(empty(3 * embed_dim, dtype=dtype))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = NonDynamicallyQuantizableLinear(embed_dim, embed_dim, bias=bias,
                                                        dtype=dtype)
        self._reset_parameters()

    def _reset_parameters(self):
        if self._qkv_same_embed_dim:
            init.xavier_uniform_(self.in_proj_weight)
        else:
            init.xavier_uniform_(self.q_proj_weight)
            init.xavier_uniform_(self.k_proj_weight)
            init.xavier_uniform_(self.v_proj_weight)
        if self.in_proj_bias is not None:
            init.zeros_(self.in_proj_bias)
            init.zeros_(self.out_proj.bias)

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True,
                attn_mask=None, average_attn_weights=True, is_causal=False):
        unbatched = query.ndim == 2
        if query.ndim not in (2, 3):
            raise AssertionError(f"query should be unbatched 2D or batched 3D tensor but "
                                 f"received {query.ndim}-D query tensor")
        if unbatched:
            query, key, value = (shape_ops.unsqueeze(t, 0) for t in (query, key, value))
            if key_padding_mask is not None:
                key_padding_mask = shape_ops.unsqueeze(key_padding_mask, 0)
        elif not self.batch_first:
            query, key, value = (shape_ops.transpose(t, 0, 1) for t in (query, key, value))
        if query.shape[-1] != self.embed_dim:
            raise AssertionError(f"was expecting embedding dimension of {self.embed_dim}, but "
                                 f"got {hint(query.shape[-1])}")
        out, w = F.multi_head_attention_forward(
            query, key, value, self.num_heads, self.in_proj_weight, self.in_proj_bias,
            self.out_proj.weight, self.out_proj.bias, q_proj_weight=self.q_proj_weight,
            k_proj_weight=self.k_proj_weight, v_proj_weight=self.v_proj_weight,
            dropout_p=self.dropout, training=self.training, key_padding_mask=key_padding_mask,
            need_weights=need_weights, attn_mask=attn_mask,
            average_attn_weights=average_attn_weights, is_causal=is_causal)
        if unbatched:
            out = shape_ops.squeeze(out, 0)
            w = shape_ops.squeeze(w, 0) if w is not None else None
        elif not self.batch_first:
            out = shape_ops.transpose(out, 0, 1)
        return out, w
