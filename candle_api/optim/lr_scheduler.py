"""Learning-rate schedulers with PyTorch's semantics: construction sets the
epoch-0 rate, each ``step()`` moves one epoch on and writes the new rates into
the optimizer's groups. Rates are closed-form functions of the epoch and the
groups' ``initial_lr``; compose schedules with :class:`SequentialLR` (for
example a LinearLR warmup followed by CosineAnnealingLR)."""

from __future__ import annotations

import bisect
import math

from .optimizer import Optimizer


class LRScheduler:
    """Subclasses define ``get_lr()``: the rates at ``self.last_epoch``."""

    def __init__(self, optimizer: Optimizer, last_epoch: int = -1) -> None:
        self.optimizer = optimizer
        for group in optimizer.param_groups:
            if last_epoch == -1:
                group.setdefault("initial_lr", group["lr"])
            elif "initial_lr" not in group:
                raise KeyError("resuming a schedule (last_epoch != -1) needs 'initial_lr' in every parameter group")
        self.base_lrs = [group["initial_lr"] for group in optimizer.param_groups]
        self.last_epoch = last_epoch
        self.step()

    def step(self, epoch: int | None = None) -> None:
        """Moves to the next epoch (or to ``epoch``) and sets the groups' rates."""
        self.last_epoch = self.last_epoch + 1 if epoch is None else epoch
        self._last_lr = self.get_lr()
        for group, lr in zip(self.optimizer.param_groups, self._last_lr):
            group["lr"] = lr

    def get_last_lr(self) -> list[float]:
        """The rates the last step set, one per group."""
        return list(self._last_lr)


class LambdaLR(LRScheduler):
    """initial_lr * lr_lambda(epoch); one function, or one per group."""

    def __init__(self, optimizer: Optimizer, lr_lambda, last_epoch: int = -1) -> None:
        groups = len(optimizer.param_groups)
        self.lr_lambdas = list(lr_lambda) if isinstance(lr_lambda, (list, tuple)) else [lr_lambda] * groups
        if len(self.lr_lambdas) != groups:
            raise ValueError(f"LambdaLR: {len(self.lr_lambdas)} functions for {groups} parameter groups")
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        return [base * f(self.last_epoch) for base, f in zip(self.base_lrs, self.lr_lambdas)]


class StepLR(LRScheduler):
    """initial_lr * gamma ** (epoch // step_size)."""

    def __init__(self, optimizer: Optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1) -> None:
        if step_size < 1:
            raise ValueError(f"StepLR: step_size must be positive, got {step_size}")
        self.step_size, self.gamma = step_size, gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        return [base * self.gamma ** (self.last_epoch // self.step_size) for base in self.base_lrs]


class CosineAnnealingLR(LRScheduler):
    """eta_min + (initial_lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2."""

    def __init__(self, optimizer: Optimizer, T_max: int, eta_min: float = 0.0, last_epoch: int = -1) -> None:
        if T_max < 1:
            raise ValueError(f"CosineAnnealingLR: T_max must be positive, got {T_max}")
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        cosine = (1.0 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2.0
        return [self.eta_min + (base - self.eta_min) * cosine for base in self.base_lrs]


class LinearLR(LRScheduler):
    """initial_lr times a factor going linearly from start_factor to
    end_factor over total_iters epochs, then constant (a linear warmup)."""

    def __init__(self, optimizer: Optimizer, start_factor: float = 1.0 / 3, end_factor: float = 1.0,
                 total_iters: int = 5, last_epoch: int = -1) -> None:
        if not 0.0 < start_factor <= 1.0 or not 0.0 <= end_factor <= 1.0 or total_iters < 1:
            raise ValueError("LinearLR: start_factor must be in (0, 1], end_factor in [0, 1], total_iters positive")
        self.start_factor, self.end_factor, self.total_iters = start_factor, end_factor, total_iters
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        progress = min(self.last_epoch, self.total_iters) / self.total_iters
        factor = self.start_factor + (self.end_factor - self.start_factor) * progress
        return [base * factor for base in self.base_lrs]


class SequentialLR:
    """Runs ``schedulers[i]`` from ``milestones[i - 1]`` on, each restarting at
    its epoch 0: ``SequentialLR(opt, [LinearLR(opt, 0.1, total_iters=w),
    CosineAnnealingLR(opt, T_max=n - w)], milestones=[w])`` warms up then anneals."""

    def __init__(self, optimizer: Optimizer, schedulers: list, milestones: list[int], last_epoch: int = -1) -> None:
        if len(milestones) != len(schedulers) - 1 or list(milestones) != sorted(milestones):
            raise ValueError(f"SequentialLR: {len(schedulers)} schedulers need {len(schedulers) - 1} sorted "
                             f"milestones, got {milestones}")
        if any(s.optimizer is not optimizer for s in schedulers):
            raise ValueError("SequentialLR: every scheduler must drive the given optimizer")
        self.optimizer, self._schedulers, self._milestones = optimizer, list(schedulers), list(milestones)
        self.last_epoch = last_epoch + 1
        # Undo the first step each scheduler took when it was built, then start the first one.
        for group in optimizer.param_groups:
            group["lr"] = group["initial_lr"]
        for scheduler in self._schedulers:
            scheduler.last_epoch -= 1
        self._schedulers[0].step()
        self._last_lr = self._schedulers[0].get_last_lr()

    def step(self) -> None:
        self.last_epoch += 1
        i = bisect.bisect_right(self._milestones, self.last_epoch)
        scheduler = self._schedulers[i]
        if i > 0 and self._milestones[i - 1] == self.last_epoch:
            scheduler.step(0)
        else:
            scheduler.step()
        self._last_lr = scheduler.get_last_lr()

    def get_last_lr(self) -> list[float]:
        return list(self._last_lr)
