"""Losses, as functions (Candle's names: ``nll``, ``cross_entropy``, ``mse``,
``binary_cross_entropy_with_logit(s)``, ``huber``; PyTorch's are in
``nn.functional``) and modules (``CrossEntropyLoss``...), with PyTorch's
semantics. Class targets are integer ids (u8, u32, i64...) of the input's
shape without its class dim (dim 1, or dim 0 for an unbatched input)."""

from __future__ import annotations

import numpy as np

from .. import functional as F
from ..errors import DTypeError, ShapeError
from ..ops.elementwise import where
from ..tensor import Tensor
from .module import Module

_REDUCTIONS = ("mean", "sum", "none")


def _check_reduction(op: str, reduction: str) -> None:
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{op}: reduction must be one of {', '.join(_REDUCTIONS)}, got {reduction!r}")


def _reduce(loss: Tensor, reduction: str, count: Tensor | None = None) -> Tensor:
    """'none' keeps the elements; 'sum' adds them; 'mean' divides the sum by
    ``count`` (the elements not ignored) or by the number of elements."""
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum_all()
    return loss.mean_all() if count is None else loss.sum_all() / count


def _same_shape(op: str, input: Tensor, target: Tensor) -> None:
    if input.shape != target.shape:
        raise ShapeError(f"{op}: input of shape {input.shape} and target of shape {target.shape} must match")


def _class_rows(op: str, scores: Tensor, target: Tensor) -> tuple[Tensor, Tensor, tuple]:
    """scores (N, C), (N, C, d1, ...) or (C,) as (rows, C), the targets as (rows,)
    and the shape a per-element loss has (the target's)."""
    if not isinstance(target, Tensor) or target.dtype.is_float:
        what = target.dtype if isinstance(target, Tensor) else type(target).__name__
        raise DTypeError(f"{op}: the target must be a tensor of integer class ids (u8, u32, i64...), got {what}")
    if not scores.dtype.is_float:
        raise DTypeError(f"{op}: the input must be a float tensor of scores, got {scores.dtype}")
    if scores.rank == 0:
        raise ShapeError(f"{op}: the input needs a class dim, got a 0-d tensor")
    expected = () if scores.rank == 1 else (scores.shape[0],) + scores.shape[2:]
    if target.shape != expected:
        raise ShapeError(f"{op}: target of shape {target.shape} for an input of shape {scores.shape} "
                         f"(expected a target of shape {expected})")
    classes = scores.shape[0] if scores.rank == 1 else scores.shape[1]
    if scores.rank > 2:  # move the class dim last
        scores = scores.permute([0] + list(range(2, scores.rank)) + [1])
    return scores.reshape(-1, classes), target.flatten_all(), expected


def _nll_rows(log_probs: Tensor, ids: Tensor, shape: tuple, reduction: str, ignore_index: int,
              label_smoothing: float = 0.0) -> Tensor:
    """-log_probs[i, ids[i]] per row (mixed with the mean over classes by
    label_smoothing), rows whose id is ignore_index left out."""
    info = np.iinfo(ids.dtype.np)
    keep = ids != ignore_index if info.min <= ignore_index <= info.max else None  # u32 ids cannot hold -100
    safe = ids if keep is None else where(keep, ids, 0)
    loss = -log_probs.gather(safe.unsqueeze(1), 1).squeeze(1)
    if label_smoothing:
        loss = loss * (1.0 - label_smoothing) - log_probs.mean(-1) * label_smoothing
    count = None
    if keep is not None:
        loss = where(keep, loss, 0.0)
        count = keep.to_dtype(loss.dtype).sum_all()
    return _reduce(loss.reshape(shape), reduction, count)


def nll(log_probs: Tensor, target: Tensor, reduction: str = "mean", ignore_index: int = -100) -> Tensor:
    """Negative log likelihood of the target classes under ``log_probs``
    (N, C) or (N, C, d1, ...); 'mean' averages over the targets not equal to ignore_index."""
    _check_reduction("nll", reduction)
    rows, ids, shape = _class_rows("nll", log_probs, target)
    return _nll_rows(rows, ids, shape, reduction, ignore_index)


def cross_entropy(logits: Tensor, target: Tensor, label_smoothing: float = 0.0, reduction: str = "mean",
                  ignore_index: int = -100) -> Tensor:
    """nll of the fused log_softmax of ``logits`` over the class dim. With
    label smoothing e, the target distribution is (1 - e) one-hot + e / C."""
    _check_reduction("cross_entropy", reduction)
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"cross_entropy: label_smoothing must be in [0, 1], got {label_smoothing}")
    rows, ids, shape = _class_rows("cross_entropy", logits, target)
    return _nll_rows(F.log_softmax(rows, -1), ids, shape, reduction, ignore_index, label_smoothing)


def mse(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
    """Squared error (input - target) ** 2."""
    _check_reduction("mse", reduction)
    _same_shape("mse", input, target)
    return _reduce((input - target).sqr(), reduction)


def binary_cross_entropy_with_logits(input: Tensor, target: Tensor, weight: Tensor | None = None,
                                     reduction: str = "mean", pos_weight: Tensor | None = None) -> Tensor:
    """Binary cross-entropy of sigmoid(input) against float targets in [0, 1],
    computed from the logits without overflow: (1 - t) x + (1 + (pw - 1) t) softplus(-x).
    ``pos_weight`` (one per class, broadcast over the last dim) weighs positive examples."""
    _check_reduction("binary_cross_entropy_with_logits", reduction)
    _same_shape("binary_cross_entropy_with_logits", input, target)
    softplus_neg = F.softplus(-input)  # log(1 + exp(-x)), stable for any x
    scale = softplus_neg if pos_weight is None else (target * (pos_weight - 1.0) + 1.0) * softplus_neg
    loss = (1.0 - target) * input + scale
    return _reduce(loss * weight if weight is not None else loss, reduction)


binary_cross_entropy_with_logit = binary_cross_entropy_with_logits  # Candle's name


def huber(input: Tensor, target: Tensor, delta: float = 1.0, reduction: str = "mean") -> Tensor:
    """0.5 d ** 2 where |d| < delta, else delta (|d| - delta / 2), for d = input - target."""
    _check_reduction("huber", reduction)
    _same_shape("huber", input, target)
    if delta <= 0:
        raise ValueError(f"huber: delta must be positive, got {delta}")
    d = input - target
    a = d.abs()
    return _reduce(where(a < delta, d.sqr() * 0.5, (a - 0.5 * delta) * delta), reduction)


class NLLLoss(Module):
    def __init__(self, *, ignore_index: int = -100, reduction: str = "mean") -> None:
        super().__init__()
        _check_reduction("NLLLoss", reduction)
        self.ignore_index, self.reduction = ignore_index, reduction

    def forward(self, log_probs: Tensor, target: Tensor) -> Tensor:
        return nll(log_probs, target, self.reduction, self.ignore_index)


class CrossEntropyLoss(Module):
    def __init__(self, *, ignore_index: int = -100, reduction: str = "mean", label_smoothing: float = 0.0) -> None:
        super().__init__()
        _check_reduction("CrossEntropyLoss", reduction)
        self.ignore_index, self.reduction, self.label_smoothing = ignore_index, reduction, label_smoothing

    def forward(self, logits: Tensor, target: Tensor) -> Tensor:
        return cross_entropy(logits, target, self.label_smoothing, self.reduction, self.ignore_index)


class MSELoss(Module):
    def __init__(self, *, reduction: str = "mean") -> None:
        super().__init__()
        _check_reduction("MSELoss", reduction)
        self.reduction = reduction

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return mse(input, target, self.reduction)


class BCEWithLogitsLoss(Module):
    """``weight`` and ``pos_weight`` are buffers (they follow ``to()``)."""

    def __init__(self, *, weight: Tensor | None = None, reduction: str = "mean",
                 pos_weight: Tensor | None = None) -> None:
        super().__init__()
        _check_reduction("BCEWithLogitsLoss", reduction)
        self.reduction = reduction
        self.register_buffer("weight", weight)
        self.register_buffer("pos_weight", pos_weight)

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return binary_cross_entropy_with_logits(input, target, self.weight, self.reduction, self.pos_weight)


class HuberLoss(Module):
    def __init__(self, *, reduction: str = "mean", delta: float = 1.0) -> None:
        super().__init__()
        _check_reduction("HuberLoss", reduction)
        self.reduction, self.delta = reduction, delta

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return huber(input, target, self.delta, self.reduction)
