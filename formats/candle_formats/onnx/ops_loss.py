"""Losses: NegativeLogLikelihoodLoss (SoftmaxCrossEntropyLoss is inlined
from its ONNX function body, which calls it)."""

from __future__ import annotations

import candle_api as c

from .registry import op


@op("NegativeLogLikelihoodLoss", since=12)
def nll_loss(node, x, target, weight=None):
    """x (N, C, d...) of log-probabilities, target (N, d...) of class indices."""
    ignore = node.get("ignore_index")
    target = target.to_dtype(c.i64)
    keep = None if ignore is None else (target != ignore)
    safe = target if keep is None else c.where(keep, target, 0)  # ignored targets may be out of range
    picked = -x.gather(safe.unsqueeze(1), 1).squeeze(1)
    w = None if weight is None else weight.index_select(safe.reshape(-1), 0).reshape(safe.shape)
    if keep is not None:
        mask = keep.to_dtype(x.dtype)
        w = mask if w is None else w * mask
    loss = picked if w is None else picked * w
    reduction = node.get("reduction", "mean")
    if reduction == "none":
        return loss
    total = loss.sum_all()
    if reduction == "sum":
        return total
    return total / (w.sum_all() if w is not None else float(loss.numel()))
