"""Embedding table."""

from __future__ import annotations

from .. import functional as F
from ..ops.creation import zeros
from ..ops.elementwise import where
from ..tensor import Tensor
from .init import Randn
from .module import Module
from .parameter import assign_
from .var_builder import VarBuilder, get_parameter, layer_builder


class Embedding(Module):
    """Rows of ``weight`` (num_embeddings, embedding_dim) for integer ids.
    ``padding_idx``'s row gets no gradient (and starts at zero when the
    layer is built without a VarBuilder), as in PyTorch."""

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None, device=None,
                 dtype=None, *, vb: VarBuilder | None = None) -> None:
        super().__init__()
        fresh = vb is None
        vb = layer_builder(vb, dtype, device)
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise ValueError(f"Embedding: padding_idx {padding_idx} is outside the {num_embeddings} embeddings")
            padding_idx %= num_embeddings
        self.num_embeddings, self.embedding_dim, self.padding_idx = num_embeddings, embedding_dim, padding_idx
        self.weight = get_parameter(vb, (num_embeddings, embedding_dim), "weight", Randn(0.0, 1.0))
        if fresh and padding_idx is not None:
            assign_(self.weight[padding_idx], zeros(embedding_dim, dtype=self.weight.dtype, device=self.weight.device))

    def forward(self, ids: Tensor) -> Tensor:
        out = F.embedding(ids, self.weight)
        if self.padding_idx is not None and out.requires_grad:
            # Same values; the padding positions take the detached copy, so no gradient reaches that row.
            out = where((ids == self.padding_idx).unsqueeze(-1), out.detach(), out)
        return out

    def extra_repr(self) -> str:
        pad = f", padding_idx={self.padding_idx}" if self.padding_idx is not None else ""
        return f"{self.num_embeddings}, {self.embedding_dim}{pad}"
