"""Adam (L2 weight decay added to the gradient) on the fused in-place ``adamw_step``."""

from __future__ import annotations

from .adamw import AdamW


class Adam(AdamW):
    """torch.optim.Adam: AdamW's moments and bias correction, with the weight
    decay added to the gradient (coupled, so it passes through the moments)
    instead of applied to the weights; weight_decay defaults to 0."""

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0) -> None:
        super().__init__(params, lr, betas, eps, weight_decay)

    def _update(self, p, g, group, state) -> None:
        decay = group["weight_decay"]
        super()._update(p, g + p.detach() * decay if decay else g, dict(group, weight_decay=0.0), state)
