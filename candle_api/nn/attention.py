"""MultiheadAttention with PyTorch's constructor, parameter names
(``in_proj_weight``/``in_proj_bias``, or ``q_proj_weight``... when key and
value have their own sizes, ``out_proj``, ``bias_k``/``bias_v``) and
forward signature, so PyTorch state dicts load and code ports unchanged.

Masks follow PyTorch's MultiheadAttention, not ``scaled_dot_product_attention``:
a bool or u8 ``key_padding_mask`` or ``attn_mask`` marks with nonzero the keys
to *ignore*; a float mask is added to the scores. A query whose keys are all
masked gets zero weights (PyTorch's math path gives NaN)."""

from __future__ import annotations

import math

from .. import functional as F
from ..dtype import bool_, u8
from ..errors import DTypeError, ShapeError
from ..ops.creation import zeros
from ..ops.elementwise import where
from ..ops.shape import cat
from ..tensor import Tensor
from .dropout import dropout
from .init import ZERO, Xavier
from .linear import Linear, linear
from .module import Module
from .var_builder import VarBuilder, get_parameter, layer_builder


def _additive(mask: Tensor, what: str, like: Tensor) -> Tensor:
    """A mask as a float to add to the scores: -inf where a bool or u8 mask is nonzero."""
    if mask.dtype is u8 or mask.dtype is bool_:
        return where(mask, float("-inf"), zeros(mask.shape, dtype=like.dtype, device=like.device))
    if mask.dtype is not like.dtype:
        raise DTypeError(f"MultiheadAttention: {what} must be bool or u8 (nonzero: ignore the key) or {like.dtype} "
                         f"(added to the scores), got {mask.dtype}")
    return mask


class MultiheadAttention(Module):
    """Attention over ``num_heads`` heads of ``embed_dim // num_heads``
    features. Inputs are (L, N, E) ((N, L, E) when ``batch_first``) or
    (L, E) unbatched; returns the output and, with ``need_weights``, the
    attention weights (N, L, S) averaged over heads, or (N, heads, L, S)."""

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 add_bias_kv: bool = False, add_zero_attn: bool = False, kdim: int | None = None,
                 vdim: int | None = None, batch_first: bool = False, device=None, dtype=None, *,
                 vb: VarBuilder | None = None) -> None:
        super().__init__()
        if embed_dim < 1 or num_heads < 1 or embed_dim % num_heads:
            raise ShapeError(f"MultiheadAttention: embed_dim ({embed_dim}) must be a positive multiple of "
                             f"num_heads ({num_heads})")
        if not 0.0 <= dropout <= 1.0:
            raise ValueError(f"MultiheadAttention: dropout must be in [0, 1], got {dropout}")
        vb = layer_builder(vb, dtype, device)
        e = embed_dim
        self.embed_dim, self.num_heads, self.head_dim, self.dropout = e, num_heads, e // num_heads, dropout
        self.kdim = kdim if kdim is not None else e
        self.vdim = vdim if vdim is not None else e
        self.batch_first, self.add_zero_attn = batch_first, add_zero_attn
        self._qkv_same_embed_dim = self.kdim == e and self.vdim == e
        xavier = Xavier("uniform")
        if self._qkv_same_embed_dim:
            self.in_proj_weight = get_parameter(vb, (3 * e, e), "in_proj_weight", xavier)
        else:
            self.q_proj_weight = get_parameter(vb, (e, e), "q_proj_weight", xavier)
            self.k_proj_weight = get_parameter(vb, (e, self.kdim), "k_proj_weight", xavier)
            self.v_proj_weight = get_parameter(vb, (e, self.vdim), "v_proj_weight", xavier)
        self.in_proj_bias = get_parameter(vb, (3 * e,), "in_proj_bias", ZERO) if bias else None
        if bias:  # PyTorch zeroes out_proj's bias: ask for it first, so a VarMap creates it with zeros
            vb.pp("out_proj").get((e,), "bias", ZERO)
        self.out_proj = Linear(e, e, bias=bias, vb=vb.pp("out_proj"))
        if add_bias_kv:
            self.bias_k = get_parameter(vb, (1, 1, e), "bias_k", Xavier("normal"))
            self.bias_v = get_parameter(vb, (1, 1, e), "bias_v", Xavier("normal"))
        else:
            self.bias_k = self.bias_v = None

    def _project(self, query: Tensor, key: Tensor, value: Tensor) -> tuple:
        if self._qkv_same_embed_dim:
            weights = self.in_proj_weight.chunk(3, 0)
            if query is key and key is value:  # self-attention: one product
                return tuple(linear(query, self.in_proj_weight, self.in_proj_bias).chunk(3, -1))
        else:
            weights = (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight)
        biases = self.in_proj_bias.chunk(3, 0) if self.in_proj_bias is not None else (None,) * 3
        return tuple(linear(x, w, b) for x, w, b in zip((query, key, value), weights, biases))

    def _mask(self, key_padding_mask, attn_mask, n: int, l: int, s: int, like: Tensor):
        """key_padding_mask (N, S) and attn_mask (L, S) or (N * heads, L, S)
        as one additive mask broadcasting to (N, heads, L, S), or None."""
        mask = None
        if key_padding_mask is not None:
            if key_padding_mask.shape != (n, s):
                raise ShapeError(f"MultiheadAttention: key_padding_mask of shape {key_padding_mask.shape}, "
                                 f"expected (batch, source length) = {(n, s)}")
            mask = _additive(key_padding_mask, "key_padding_mask", like).reshape(n, 1, 1, s)
        if attn_mask is not None:
            shapes = {2: (l, s), 3: (n * self.num_heads, l, s)}
            if shapes.get(attn_mask.rank) != attn_mask.shape:
                raise ShapeError(f"MultiheadAttention: attn_mask of shape {attn_mask.shape}, expected "
                                 f"{shapes[2]} or {shapes[3]} (batch * heads, target length, source length)")
            added = _additive(attn_mask, "attn_mask", like).reshape(-1, 1 if attn_mask.rank == 2 else self.num_heads,
                                                                     l, s)
            mask = added if mask is None else mask + added
        return mask

    def forward(self, query: Tensor, key: Tensor, value: Tensor, key_padding_mask: Tensor | None = None,
                need_weights: bool = True, attn_mask: Tensor | None = None, average_attn_weights: bool = True,
                is_causal: bool = False) -> tuple:
        if is_causal and attn_mask is None:
            raise ValueError("MultiheadAttention: is_causal is a hint that attn_mask is causal; pass attn_mask too")
        rank = query.rank
        for t, what, features in ((query, "query", self.embed_dim), (key, "key", self.kdim),
                                  (value, "value", self.vdim)):
            if t.rank not in (2, 3) or t.rank != rank or t.shape[-1] != features:
                raise ShapeError(f"MultiheadAttention: expected {what} of the query's rank (2 unbatched, or 3) with "
                                 f"{features} features in the last dim, got shape {t.shape} "
                                 f"(query {query.shape})")
        q, k, v = self._project(query, key, value)
        if rank == 2:
            q, k, v = (t.unsqueeze(0) for t in (q, k, v))
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        elif not self.batch_first:
            q, k, v = (t.transpose(0, 1) for t in (q, k, v))
        (n, l, _), s = q.shape, k.shape[1]
        if k.shape[:2] != v.shape[:2] or k.shape[0] != n:
            raise ShapeError(f"MultiheadAttention: key {key.shape} and value {value.shape} must have the same "
                             f"batch and length, and the query's batch ({query.shape})")
        mask = self._mask(key_padding_mask, attn_mask, n, l, s, q)
        if self.bias_k is not None:
            k = cat([k, self.bias_k.broadcast_as((n, 1, self.embed_dim))], 1)
            v = cat([v, self.bias_v.broadcast_as((n, 1, self.embed_dim))], 1)
        q, k, v = (t.reshape(n, t.shape[1], self.num_heads, self.head_dim).transpose(1, 2) for t in (q, k, v))
        if self.add_zero_attn:
            k, v = k.pad_with_zeros(2, 0, 1), v.pad_with_zeros(2, 0, 1)
        extra = k.shape[2] - s  # keys added by bias_k and add_zero_attn: never masked
        if mask is not None and extra:
            mask = mask.pad_with_zeros(-1, 0, extra)
        weights = None
        p = self.dropout if self.training else 0.0
        if need_weights or p:
            scores = q.matmul(k.transpose(-1, -2)) * (1.0 / math.sqrt(self.head_dim))
            weights = F.softmax(scores + mask if mask is not None else scores, -1)
            if mask is not None:  # a query with every key masked: zero weights, as the fused kernel gives
                weights = where((scores + mask).max_keepdim(-1) != float("-inf"), weights, 0.0)
            weights = dropout(weights, p)
            out = weights.matmul(v)
        else:  # the fused kernel, which never holds the whole score matrix
            out = F.scaled_dot_product_attention(q, k, v, mask)
        out = self.out_proj(out.transpose(1, 2).reshape(n, l, self.embed_dim))
        if need_weights and average_attn_weights:
            weights = weights.mean(1)
        if rank == 2:
            return out.squeeze(0), weights.squeeze(0) if need_weights else None
        out = out if self.batch_first else out.transpose(0, 1)
        return out, weights if need_weights else None

    def extra_repr(self) -> str:
        s = f"embed_dim={self.embed_dim}, num_heads={self.num_heads}"
        if self.dropout:
            s += f", dropout={self.dropout}"
        if not self._qkv_same_embed_dim:
            s += f", kdim={self.kdim}, vdim={self.vdim}"
        return s + (", batch_first=True" if self.batch_first else "")
