"""In-place optimizer steps: a device's fused ``adamw_step`` / ``sgd_step``
kernel when it has one (one pass over memory), else the same update from
elementwise ops. ``candle_api.optim`` builds its optimizers on these."""

from __future__ import annotations

from ..autograd.graph import no_grad
from ..tensor import Tensor
from .core import has_kernel, kernel
from .shape import contiguous, copy_into


def _assign(dst: Tensor, value: Tensor) -> None:
    copy_into(dst, dst._layout, value)


@no_grad()
def adamw_step(param: Tensor, grad: Tensor, exp_avg: Tensor, exp_avg_sq: Tensor, step: int, lr: float,
               beta1: float, beta2: float, eps: float, weight_decay: float) -> None:
    """One AdamW update (decoupled weight decay, bias-corrected moments) of
    param and its two moment buffers, in place; ``step`` counts from 1."""
    dev, dtype = param._device, param._dtype
    grad = grad.to_dtype(dtype)
    if has_kernel(dev, "adamw_step", dtype) and all(t._layout.contiguous for t in (param, exp_avg, exp_avg_sq)):
        grad = contiguous(grad)
        kernel(dev, "adamw_step", dtype)(param._storage, param._layout, grad._storage, grad._layout,
                                         exp_avg._storage, exp_avg._layout, exp_avg_sq._storage, exp_avg_sq._layout,
                                         float(lr), float(beta1), float(beta2), float(eps), float(weight_decay),
                                         int(step))
        return
    m = exp_avg * beta1 + grad * (1 - beta1)
    v = exp_avg_sq * beta2 + grad * grad * (1 - beta2)
    _assign(exp_avg, m)
    _assign(exp_avg_sq, v)
    update = (m / (1 - beta1**step)) / ((v / (1 - beta2**step)).sqrt() + eps)
    _assign(param, param * (1 - lr * weight_decay) - update * lr)


@no_grad()
def sgd_step(param: Tensor, grad: Tensor, momentum_buf: Tensor | None, first: bool, lr: float, momentum: float,
             dampening: float, nesterov: bool, weight_decay: float) -> None:
    """One SGD update of param in place (torch.optim.SGD's rule): the momentum
    buffer, when given, is updated too (``first``: it starts as the gradient)."""
    dev, dtype = param._device, param._dtype
    grad = grad.to_dtype(dtype)
    buffers = (param,) + ((momentum_buf,) if momentum_buf is not None else ())
    if has_kernel(dev, "sgd_step", dtype) and all(t._layout.contiguous for t in buffers):
        grad = contiguous(grad)
        buf_args = (momentum_buf._storage, momentum_buf._layout) if momentum_buf is not None else (None, None)
        kernel(dev, "sgd_step", dtype)(param._storage, param._layout, grad._storage, grad._layout, *buf_args,
                                       float(lr), float(weight_decay), float(momentum), float(dampening),
                                       bool(nesterov), bool(first))
        return
    d = grad + param * weight_decay if weight_decay else grad
    if momentum_buf is not None:
        buf = d if first else momentum_buf * momentum + d * (1 - dampening)
        _assign(momentum_buf, buf)
        d = d + buf * momentum if nesterov else buf
    _assign(param, param - d * lr)
