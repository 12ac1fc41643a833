"""Flatten and Unflatten: reshaping layers for Sequential models (PyTorch's)."""

from __future__ import annotations

import math

from ..errors import ShapeError
from ..layout import normalize_dim
from ..tensor import Tensor
from .module import Module


class Flatten(Module):
    """Merges dims start_dim..end_dim: (N, C, H, W) -> (N, C * H * W) by default."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1) -> None:
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x: Tensor) -> Tensor:
        return x.flatten(self.start_dim, self.end_dim)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Unflatten(Module):
    """Splits dim ``dim`` into ``unflattened_size`` (one entry may be -1)."""

    def __init__(self, dim: int, unflattened_size) -> None:
        super().__init__()
        self.dim, self.unflattened_size = dim, tuple(unflattened_size)
        if sum(s == -1 for s in self.unflattened_size) > 1 or any(s < -1 for s in self.unflattened_size):
            raise ShapeError(f"Unflatten: unflattened_size {self.unflattened_size} may hold one -1 and no other "
                             f"negative size")

    def forward(self, x: Tensor) -> Tensor:
        dim = normalize_dim(self.dim, x.rank)
        size, known = x.shape[dim], math.prod(s for s in self.unflattened_size if s != -1)
        fits = size % known == 0 if -1 in self.unflattened_size and known else size == known
        if not fits:
            raise ShapeError(f"Unflatten: dim {self.dim} of an input of shape {x.shape} has size {size}, "
                             f"which does not unflatten to {self.unflattened_size}")
        return x.reshape(x.shape[:dim] + self.unflattened_size + x.shape[dim + 1:])

    def extra_repr(self) -> str:
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"
