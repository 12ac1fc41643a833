"""In-place optimizer steps: a device's fused ``adamw_step`` / ``sgd_step``
kernel when it has one (one pass over memory), else the same update from
elementwise ops. ``candle_api.optim`` builds its optimizers on these."""

from __future__ import annotations

from ..autograd import versions
from ..autograd.graph import no_grad
from ..tensor import Tensor
from .dispatch import OpDef, apply, check_writable, define
from .shape import contiguous, copy_into


def _assign(dst: Tensor, value: Tensor) -> None:
    copy_into(dst, dst._layout, value)


def _written(*tensors: Tensor) -> None:
    """Counts the step's writes, so a graph that saved a parameter before it refuses to use it after."""
    for t in tensors:
        versions.bump(t)


@no_grad()
def adamw_step(param: Tensor, grad: Tensor, exp_avg: Tensor, exp_avg_sq: Tensor, step: int, lr: float,
               beta1: float, beta2: float, eps: float, weight_decay: float) -> None:
    """One AdamW update (decoupled weight decay, bias-corrected moments) of
    param and its two moment buffers, in place; ``step`` counts from 1."""
    check_writable("adamw_step", param, exp_avg, exp_avg_sq)  # before any of them changes
    grad = grad.to_dtype(param._dtype)
    hyper = dict(lr=float(lr), beta1=float(beta1), beta2=float(beta2), eps=float(eps),
                 weight_decay=float(weight_decay), step=int(step))
    if all(t._layout.contiguous for t in (param, exp_avg, exp_avg_sq)):  # the kernel's buffers are contiguous
        apply(ADAMW_STEP, param, contiguous(grad), exp_avg, exp_avg_sq, **hyper)
    else:
        _adamw_decomposed(param, grad, exp_avg, exp_avg_sq, **hyper)
    _written(param, exp_avg, exp_avg_sq)


def _adamw_decomposed(param, grad, exp_avg, exp_avg_sq, lr, beta1, beta2, eps, weight_decay, step):
    m = exp_avg * beta1 + grad * (1 - beta1)
    v = exp_avg_sq * beta2 + grad * grad * (1 - beta2)
    _assign(exp_avg, m)
    _assign(exp_avg_sq, v)
    update = (m / (1 - beta1**step)) / ((v / (1 - beta2**step)).sqrt() + eps)
    _assign(param, param * (1 - lr * weight_decay) - update * lr)


def _adamw_prepare(param, grad, exp_avg, exp_avg_sq, lr, beta1, beta2, eps, weight_decay, step):
    return None, None, (param._storage, param._layout, grad._storage, grad._layout, exp_avg._storage,
                        exp_avg._layout, exp_avg_sq._storage, exp_avg_sq._layout, lr, beta1, beta2, eps,
                        weight_decay, step)


@no_grad()
def sgd_step(param: Tensor, grad: Tensor, momentum_buf: Tensor | None, first: bool, lr: float, momentum: float,
             dampening: float, nesterov: bool, weight_decay: float) -> None:
    """One SGD update of param in place (torch.optim.SGD's rule): the momentum
    buffer, when given, is updated too (``first``: it starts as the gradient)."""
    check_writable("sgd_step", param, momentum_buf)  # before either changes
    grad = grad.to_dtype(param._dtype)
    hyper = dict(lr=float(lr), weight_decay=float(weight_decay), momentum=float(momentum),
                 dampening=float(dampening), nesterov=bool(nesterov), first=bool(first))
    buffers = (param,) + ((momentum_buf,) if momentum_buf is not None else ())
    if all(t._layout.contiguous for t in buffers):  # the kernel's buffers are contiguous
        apply(SGD_STEP, param, contiguous(grad), momentum_buf, **hyper)
    else:
        _sgd_decomposed(param, grad, momentum_buf, **hyper)
    _written(*buffers)


def _sgd_decomposed(param, grad, momentum_buf, lr, weight_decay, momentum, dampening, nesterov, first):
    d = grad + param * weight_decay if weight_decay else grad
    if momentum_buf is not None:
        buf = d if first else momentum_buf * momentum + d * (1 - dampening)
        _assign(momentum_buf, buf)
        d = d + buf * momentum if nesterov else buf
    _assign(param, param - d * lr)


def _sgd_prepare(param, grad, buf, lr, weight_decay, momentum, dampening, nesterov, first):
    buf_args = (buf._storage, buf._layout) if buf is not None else (None, None)
    return None, None, (param._storage, param._layout, grad._storage, grad._layout, *buf_args, lr, weight_decay,
                        momentum, dampening, nesterov, first)


ADAMW_STEP = define(OpDef("adamw_step", prepare=_adamw_prepare, decompose=_adamw_decomposed, writes=(0, 2, 3)))
SGD_STEP = define(OpDef("sgd_step", prepare=_sgd_prepare, decompose=_sgd_decomposed, writes=(0, 2)))
