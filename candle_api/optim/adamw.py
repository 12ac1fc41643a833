"""AdamW (decoupled weight decay) on the fused in-place ``adamw_step``."""

from __future__ import annotations

from ..ops.creation import zeros_like
from ..ops.optim import adamw_step
from .optimizer import Optimizer


class AdamW(Optimizer):
    """Adam with decoupled weight decay, bias-corrected moments and a step
    count per parameter (torch.optim.AdamW; Candle's ParamsAdamW defaults)."""

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2) -> None:
        if not all(0.0 <= b < 1.0 for b in betas) or len(betas) != 2:
            raise ValueError(f"AdamW: betas must be two values in [0, 1), got {betas}")
        if eps < 0 or weight_decay < 0:
            raise ValueError(f"AdamW: eps ({eps}) and weight_decay ({weight_decay}) must be >= 0")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay))

    def _update(self, p, g, group, state) -> None:
        if not state:
            state.update(step=0, exp_avg=zeros_like(p), exp_avg_sq=zeros_like(p))
        state["step"] += 1
        beta1, beta2 = group["betas"]
        adamw_step(p, g, state["exp_avg"], state["exp_avg_sq"], state["step"], group["lr"], beta1, beta2,
                   group["eps"], group["weight_decay"])
