"""Normalization layers: LayerNorm and RmsNorm (fused kernels), BatchNorm1d/2d
(running statistics) and GroupNorm, with PyTorch's parameter names."""

from __future__ import annotations

import numbers

import ml_dtypes

from .. import functional as F
from ..autograd.graph import no_grad
from ..dtype import i64
from ..errors import ShapeError
from ..ops.creation import ones, zeros
from ..tensor import Tensor
from .init import ONE, ZERO
from .module import Module
from .parameter import assign_
from .var_builder import VarBuilder, get_buffer, get_parameter, layer_builder


class _TrailingNorm(Module):
    """Normalizes over the trailing ``normalized_shape`` dims, with an optional
    elementwise ``weight`` (ones when absent: the fused kernels take one)."""

    def __init__(self, normalized_shape, eps, elementwise_affine: bool, vb: VarBuilder) -> None:
        super().__init__()
        if isinstance(normalized_shape, numbers.Integral):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(int(d) for d in normalized_shape)
        self.eps, self.elementwise_affine = eps, elementwise_affine
        self.weight = get_parameter(vb, self.normalized_shape, "weight", ONE) if elementwise_affine else None

    def _weight(self, x: Tensor) -> Tensor:
        return self.weight if self.weight is not None else ones(self.normalized_shape, dtype=x.dtype, device=x.device)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


class LayerNorm(_TrailingNorm):
    """(x - mean) / sqrt(var + eps) * weight + bias over the trailing dims."""

    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True,
                 device=None, dtype=None, *, vb: VarBuilder | None = None) -> None:
        vb = layer_builder(vb, dtype, device)
        super().__init__(normalized_shape, eps, elementwise_affine, vb)
        has_bias = elementwise_affine and bias
        self.bias = get_parameter(vb, self.normalized_shape, "bias", ZERO) if has_bias else None

    def forward(self, x: Tensor) -> Tensor:
        return F.layer_norm(x, self._weight(x), self.bias, self.eps)


class RmsNorm(_TrailingNorm):
    """x / sqrt(mean(x ** 2) + eps) * weight over the trailing dims (Candle's
    RmsNorm, PyTorch's RMSNorm); ``eps=None`` is the input dtype's machine epsilon."""

    def __init__(self, normalized_shape, eps: float | None = None, elementwise_affine: bool = True, device=None,
                 dtype=None, *, vb: VarBuilder | None = None) -> None:
        super().__init__(normalized_shape, eps, elementwise_affine, layer_builder(vb, dtype, device))

    def forward(self, x: Tensor) -> Tensor:
        eps = self.eps if self.eps is not None else float(ml_dtypes.finfo(x.dtype.np).eps)
        return F.rms_norm(x, self._weight(x), eps)


RMSNorm = RmsNorm


def _check_channels(layer: Module, x: Tensor, channels: int, ranks: tuple | None) -> None:
    """x must have one of ``ranks`` (None: any rank from 2) and ``channels`` in dim 1."""
    if (x.rank < 2 if ranks is None else x.rank not in ranks) or x.shape[1] != channels:
        rank_text = "an at least 2-d" if ranks is None else "a " + " or ".join(f"{r}-d" for r in ranks)
        raise ShapeError(f"{type(layer).__name__}: expected {rank_text} input with {channels} channels in dim 1, "
                         f"got shape {x.shape}")


class _BatchNorm(Module):
    """Normalizes each channel (dim 1) over the batch and spatial dims. In
    training, batch statistics are used and folded into the running ones
    (``momentum``, or a cumulative average when None); in eval, the running
    statistics are used."""

    _ranks: tuple

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = True,
                 track_running_stats: bool = True, device=None, dtype=None, *, vb: VarBuilder | None = None) -> None:
        super().__init__()
        vb = layer_builder(vb, dtype, device)
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        shape = (num_features,)
        self.weight = get_parameter(vb, shape, "weight", ONE) if affine else None
        self.bias = get_parameter(vb, shape, "bias", ZERO) if affine else None
        if track_running_stats:
            self.register_buffer("running_mean", get_buffer(vb, shape, "running_mean", ZERO))
            self.register_buffer("running_var", get_buffer(vb, shape, "running_var", ONE))
            # A local counter (PyTorch's state_dict has it; Candle's checkpoints do not).
            self.register_buffer("num_batches_tracked", zeros((), dtype=i64, device=vb.device))
        else:
            for name in ("running_mean", "running_var", "num_batches_tracked"):
                self.register_buffer(name, None)

    def forward(self, x: Tensor) -> Tensor:
        _check_channels(self, x, self.num_features, self._ranks)
        dims = [0] + list(range(2, x.rank))
        stat_shape = (1, self.num_features) + (1,) * (x.rank - 2)
        if self.training or not self.track_running_stats:
            n = x.numel() // self.num_features
            if self.training and n < 2:
                raise ShapeError(f"{type(self).__name__}: training needs more than one value per channel, "
                                 f"got input of shape {x.shape}")
            mean = x.mean(dims, keepdim=True)
            centered = x - mean
            var = centered.sqr().mean(dims, keepdim=True)
            if self.training and self.track_running_stats:
                self._update_running_stats(mean, var, n)
        else:
            centered = x - self.running_mean.detach().reshape(stat_shape)
            var = self.running_var.detach().reshape(stat_shape)
        y = centered * (var + self.eps).rsqrt()
        if self.affine:
            y = y * self.weight.reshape(stat_shape) + self.bias.reshape(stat_shape)
        return y

    @no_grad()
    def _update_running_stats(self, mean: Tensor, var: Tensor, n: int) -> None:
        assign_(self.num_batches_tracked, self.num_batches_tracked + 1)
        m = self.momentum if self.momentum is not None else 1.0 / int(self.num_batches_tracked.item())
        rm, rv = self.running_mean, self.running_var
        batch_mean = mean.flatten_all().to_dtype(rm.dtype)
        batch_var = (var.flatten_all() * (n / (n - 1))).to_dtype(rv.dtype)  # the unbiased variance, as PyTorch
        assign_(rm, rm * (1.0 - m) + batch_mean * m)
        assign_(rv, rv * (1.0 - m) + batch_var * m)

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"track_running_stats={self.track_running_stats}")


class BatchNorm1d(_BatchNorm):
    """Input (batch, channels) or (batch, channels, length)."""

    _ranks = (2, 3)


class BatchNorm2d(_BatchNorm):
    """Input (batch, channels, height, width)."""

    _ranks = (4,)


class GroupNorm(Module):
    """Normalizes each group of channels of each sample over its channels and
    spatial dims (through the fused layer_norm), then scales per channel."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True, device=None,
                 dtype=None, *, vb: VarBuilder | None = None) -> None:
        super().__init__()
        if num_groups < 1 or num_channels % num_groups:
            raise ShapeError(f"GroupNorm: num_channels ({num_channels}) must divide by num_groups ({num_groups})")
        vb = layer_builder(vb, dtype, device)
        self.num_groups, self.num_channels, self.eps, self.affine = num_groups, num_channels, eps, affine
        self.weight = get_parameter(vb, (num_channels,), "weight", ONE) if affine else None
        self.bias = get_parameter(vb, (num_channels,), "bias", ZERO) if affine else None

    def forward(self, x: Tensor) -> Tensor:
        _check_channels(self, x, self.num_channels, None)
        groups = x.reshape(x.shape[0], self.num_groups, -1)
        unit = ones(groups.shape[-1], dtype=x.dtype, device=x.device)
        y = F.layer_norm(groups, unit, None, self.eps).reshape(x.shape)
        if self.affine:
            per_channel = (self.num_channels,) + (1,) * (x.rank - 2)
            y = y * self.weight.reshape(per_channel) + self.bias.reshape(per_channel)
        return y

    def extra_repr(self) -> str:
        return f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}"
