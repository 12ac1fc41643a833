"""TransformerEncoderLayer with PyTorch's constructor and sub-module names
(``self_attn``, ``linear1``, ``linear2``, ``norm1``, ``norm2``), so its state
dicts load: self-attention then a feed-forward block, each with a residual
connection, normalized after (default) or before (``norm_first``)."""

from __future__ import annotations

from typing import Callable

from ..tensor import Tensor
from .activation import gelu, relu
from .attention import MultiheadAttention
from .dropout import Dropout
from .linear import Linear
from .module import Module
from .norm import LayerNorm
from .var_builder import VarBuilder, layer_builder

_ACTIVATIONS = {"relu": relu, "gelu": gelu}


class TransformerEncoderLayer(Module):
    """Input (S, N, E) ((N, S, E) when ``batch_first``) or (S, E) unbatched.
    ``activation`` is "relu", "gelu" or a callable (a module is registered,
    as in PyTorch); dropout is active in training mode only."""

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation: str | Callable = "relu", layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, device=None, dtype=None, *,
                 vb: VarBuilder | None = None) -> None:
        super().__init__()
        if isinstance(activation, str):
            if activation not in _ACTIVATIONS:
                raise ValueError(f"TransformerEncoderLayer: activation must be 'relu', 'gelu' or a callable, "
                                 f"got {activation!r}")
            activation = _ACTIVATIONS[activation]
        vb = layer_builder(vb, dtype, device)
        self.self_attn = MultiheadAttention(d_model, nhead, dropout, bias, batch_first=batch_first,
                                            vb=vb.pp("self_attn"))
        self.linear1 = Linear(d_model, dim_feedforward, bias, vb=vb.pp("linear1"))
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias, vb=vb.pp("linear2"))
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, layer_norm_eps, bias=bias, vb=vb.pp("norm1"))
        self.norm2 = LayerNorm(d_model, layer_norm_eps, bias=bias, vb=vb.pp("norm2"))
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.activation = activation

    def _self_attention(self, x: Tensor, mask, key_padding_mask, is_causal: bool) -> Tensor:
        out = self.self_attn(x, x, x, key_padding_mask=key_padding_mask, need_weights=False, attn_mask=mask,
                             is_causal=is_causal)[0]
        return self.dropout1(out)

    def _feed_forward(self, x: Tensor) -> Tensor:
        return self.dropout2(self.linear2(self.dropout(self.activation(self.linear1(x)))))

    def forward(self, src: Tensor, src_mask: Tensor | None = None, src_key_padding_mask: Tensor | None = None,
                is_causal: bool = False) -> Tensor:
        """``src_mask`` and ``src_key_padding_mask`` are MultiheadAttention's
        ``attn_mask`` and ``key_padding_mask`` (u8 nonzero: ignore; float: added)."""
        x = src
        if self.norm_first:
            x = x + self._self_attention(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            return x + self._feed_forward(self.norm2(x))
        x = self.norm1(x + self._self_attention(x, src_mask, src_key_padding_mask, is_causal))
        return self.norm2(x + self._feed_forward(x))
