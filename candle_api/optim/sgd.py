"""Stochastic gradient descent (torch.optim.SGD's rule) on the fused in-place ``sgd_step``."""

from __future__ import annotations

from ..ops.creation import zeros_like
from ..ops.optim import sgd_step
from .optimizer import Optimizer


class SGD(Optimizer):
    """SGD with optional momentum (and dampening, Nesterov) and L2 weight decay."""

    def __init__(self, params, lr: float = 1e-3, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False) -> None:
        if momentum < 0 or weight_decay < 0:
            raise ValueError(f"SGD: momentum ({momentum}) and weight_decay ({weight_decay}) must be >= 0")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("SGD: nesterov needs a positive momentum and zero dampening")
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                                      nesterov=nesterov))

    def _update(self, p, g, group, state) -> None:
        buf, first = None, False
        if group["momentum"]:
            buf = state.get("momentum_buffer")
            first = buf is None  # the buffer starts as the first gradient
            if first:
                buf = state["momentum_buffer"] = zeros_like(p)
        sgd_step(p, g, buf, first, group["lr"], group["momentum"], group["dampening"], group["nesterov"],
                 group["weight_decay"])
