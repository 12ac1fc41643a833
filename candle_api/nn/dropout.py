"""Dropout, drawing its mask from the device's seeded random stream."""

from __future__ import annotations

from ..ops.creation import rand
from ..ops.elementwise import where
from ..tensor import Tensor
from .module import Module


def dropout(x: Tensor, p: float = 0.5, training: bool = True) -> Tensor:
    """Zeroes each element with probability p and scales the rest by 1 / (1 - p);
    the identity when not training. ``candle_api.manual_seed`` makes masks reproducible."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout: p must be in [0, 1], got {p}")
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return x * 0.0
    keep = rand(x.shape, dtype=x.dtype, device=x.device) >= p
    return where(keep, x * (1.0 / (1.0 - p)), 0.0)


class Dropout(Module):
    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"Dropout: p must be in [0, 1], got {p}")
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"
