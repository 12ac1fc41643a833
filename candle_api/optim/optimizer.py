"""The optimizer base: parameter groups, per-parameter state, and both
training loops: PyTorch's (``loss.backward(); opt.step(); opt.zero_grad()``,
gradients from each parameter's ``.grad``) and Candle's
(``opt.backward_step(loss)`` or ``opt.step(grads)`` with a GradStore)."""

from __future__ import annotations

from ..autograd import GradStore, grad
from ..errors import DTypeError
from ..ops.creation import zeros_like
from ..tensor import Tensor


class Optimizer:
    """Subclasses define ``_update(param, grad, group, state)``, one in-place
    update of a parameter from its gradient, its group's hyperparameters and
    its state dict (empty on the first update)."""

    def __init__(self, params, defaults: dict) -> None:
        self.defaults = dict(defaults)
        self.param_groups: list[dict] = []
        self.state: dict = {}  # param -> its state; tensors hash by identity
        params = [params] if isinstance(params, Tensor) else list(params)
        if not params:
            raise ValueError("optimizer got an empty parameter list")
        for group in params if isinstance(params[0], dict) else [{"params": params}]:
            self.add_param_group(group)

    def add_param_group(self, group: dict) -> None:
        """Adds parameters with their own hyperparameters (the missing ones take the defaults)."""
        group = dict(group)
        params = group["params"]
        params = [params] if isinstance(params, Tensor) else list(params)
        for p in params:
            if not isinstance(p, Tensor):
                raise TypeError(f"optimizers take tensors (Vars, module parameters), got {type(p).__name__}")
            if not p.dtype.is_float:
                raise DTypeError(f"optimizers update float tensors, got a {p.dtype} tensor of shape {p.shape}")
            if not p.is_leaf:
                raise ValueError("cannot optimize a tensor computed from others (a non-leaf); use a Var")
        known = {id(p) for g in self.param_groups for p in g["params"]}
        if len({id(p) for p in params}) != len(params) or known & {id(p) for p in params}:
            raise ValueError("a parameter appears more than once in the optimizer's parameter groups")
        for key, value in self.defaults.items():
            group.setdefault(key, value)
        if group["lr"] < 0:
            raise ValueError(f"invalid learning rate {group['lr']}")
        group["params"] = params
        self.param_groups.append(group)

    def _parameters(self):
        for group in self.param_groups:
            for p in group["params"]:
                yield group, p

    def step(self, grads: GradStore | None = None) -> None:
        """One update of every parameter that has a gradient: from ``grads``
        (a GradStore, Candle) or, without it, from each parameter's ``.grad``."""
        for group, p in self._parameters():
            g = p.grad if grads is None else grads.get(p)
            if g is not None:
                self._update(p, g, group, self.state.setdefault(p, {}))

    def backward_step(self, loss: Tensor) -> None:
        """Candle's training step: the gradients of ``loss`` alone (``.grad``
        is neither read nor changed), then one update."""
        params = [p for _, p in self._parameters() if p.requires_grad]
        store = GradStore()
        for p, g in zip(params, grad(loss, params)):
            if g is not None:
                store.insert(p, g)
        self.step(store)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for _, p in self._parameters():
            if p.grad is not None:
                p.grad = None if set_to_none else zeros_like(p)

    def learning_rate(self) -> float:
        """The first group's learning rate (Candle)."""
        return self.param_groups[0]["lr"]

    def set_learning_rate(self, lr: float) -> None:
        """Sets every group's learning rate (Candle)."""
        for group in self.param_groups:
            group["lr"] = lr

    def state_dict(self) -> dict:
        """PyTorch's layout: ``state`` by parameter index (its tensors are the
        live buffers) and ``param_groups`` with parameter indices."""
        index = {id(p): i for i, (_, p) in enumerate(self._parameters())}
        groups = [{**{k: v for k, v in g.items() if k != "params"}, "params": [index[id(p)] for p in g["params"]]}
                  for g in self.param_groups]
        return {"state": {index[id(p)]: dict(s) for p, s in self.state.items()}, "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restores hyperparameters and state (copied to each parameter's dtype and device)."""
        saved = state_dict["param_groups"]
        if len(saved) != len(self.param_groups) or any(
                len(s["params"]) != len(g["params"]) for s, g in zip(saved, self.param_groups)):
            raise ValueError("load_state_dict: the saved parameter groups do not match this optimizer's in number "
                             "or size")
        by_index = dict(zip((i for s in saved for i in s["params"]), (p for _, p in self._parameters())))
        for group, s in zip(self.param_groups, saved):
            group.update({k: v for k, v in s.items() if k != "params"})
        self.state = {}
        for i, entries in state_dict["state"].items():
            p = by_index[int(i)]
            self.state[p] = {k: v.to_device(p.device).to_dtype(p.dtype).copy() if isinstance(v, Tensor) else v
                             for k, v in entries.items()}
