"""Initialization: Candle's ``Init`` values (``Const``, ``Randn``, ``Uniform``,
``Kaiming``; ``ZERO``, ``ONE``, ``DEFAULT_KAIMING_NORMAL/UNIFORM``), which a
VarMap uses to create missing variables, and PyTorch's in-place functions
(``uniform_``, ``kaiming_uniform_``...) built on them. Random values come
from the device's seeded stream (``candle_api.manual_seed``)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import ShapeError
from ..ops.creation import full, rand, randn
from ..tensor import Tensor
from ..var import Var
from .parameter import assign_

_UNIT_GAIN = {"linear", "identity", "sigmoid", "conv1d", "conv2d", "conv3d", "conv_transpose1d",
              "conv_transpose2d", "conv_transpose3d"}


def calculate_gain(nonlinearity: str, param: float | None = None) -> float:
    """The recommended scale for a nonlinearity (``torch.nn.init.calculate_gain``);
    ``param`` is leaky_relu's negative slope (default 0.01)."""
    if nonlinearity in _UNIT_GAIN:
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3.0
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else float(param)
        return math.sqrt(2.0 / (1.0 + slope * slope))
    if nonlinearity == "selu":
        return 0.75
    raise ValueError(f"calculate_gain: unknown nonlinearity {nonlinearity!r}")


def fan_in_and_fan_out(shape: tuple) -> tuple[int, int]:
    """(fan_in, fan_out) of a weight of ``shape``: dims 1 and 0 times the
    receptive field (the product of the dims after the second), as PyTorch."""
    if len(shape) < 2:
        raise ShapeError(f"fan in and fan out need a weight with at least 2 dims, got shape {tuple(shape)}")
    field = math.prod(shape[2:])
    return shape[1] * field, shape[0] * field


class Init:
    """How a variable is initialized: ``tensor(shape, dtype, device)`` makes the values."""

    def tensor(self, shape, dtype="f32", device=None) -> Tensor:
        raise NotImplementedError

    def var(self, shape, dtype="f32", device=None) -> Var:
        return Var(self.tensor(tuple(shape), dtype, device))


@dataclass(frozen=True)
class Const(Init):
    value: float

    def tensor(self, shape, dtype="f32", device=None) -> Tensor:
        return full(tuple(shape), self.value, dtype=dtype, device=device)


@dataclass(frozen=True)
class Randn(Init):
    mean: float = 0.0
    stdev: float = 1.0

    def tensor(self, shape, dtype="f32", device=None) -> Tensor:
        return randn(tuple(shape), mean=self.mean, std=self.stdev, dtype=dtype, device=device)


@dataclass(frozen=True)
class Uniform(Init):
    lo: float = 0.0
    up: float = 1.0

    def tensor(self, shape, dtype="f32", device=None) -> Tensor:
        return rand(tuple(shape), lo=self.lo, up=self.up, dtype=dtype, device=device)


@dataclass(frozen=True)
class Kaiming(Init):
    """He initialization: std = gain / sqrt(fan), drawn from a normal or a
    uniform (bound sqrt(3) * std) distribution. ``non_linearity`` is a name
    for :func:`calculate_gain` (``a`` is leaky_relu's slope) or an explicit gain."""

    dist: str = "normal"
    fan: str = "fan_in"
    non_linearity: str | float = "relu"
    a: float = 0.0

    def std(self, shape) -> float:
        if self.fan not in ("fan_in", "fan_out"):
            raise ValueError(f"Kaiming: fan must be 'fan_in' or 'fan_out', got {self.fan!r}")
        fan_in, fan_out = fan_in_and_fan_out(tuple(shape))
        nl = self.non_linearity
        gain = float(nl) if isinstance(nl, (int, float)) else calculate_gain(nl, self.a)
        return gain / math.sqrt(fan_in if self.fan == "fan_in" else fan_out)

    def tensor(self, shape, dtype="f32", device=None) -> Tensor:
        return _scaled(self.dist, self.std(shape), shape, dtype, device)


@dataclass(frozen=True)
class Xavier(Init):
    """Glorot initialization: std = gain * sqrt(2 / (fan_in + fan_out))."""

    dist: str = "uniform"
    gain: float = 1.0

    def tensor(self, shape, dtype="f32", device=None) -> Tensor:
        fan_in, fan_out = fan_in_and_fan_out(tuple(shape))
        return _scaled(self.dist, self.gain * math.sqrt(2.0 / (fan_in + fan_out)), shape, dtype, device)


def _scaled(dist: str, std: float, shape, dtype, device) -> Tensor:
    """Zero-mean values of standard deviation ``std`` from a normal or a uniform distribution."""
    if dist == "normal":
        return randn(tuple(shape), std=std, dtype=dtype, device=device)
    if dist == "uniform":
        bound = math.sqrt(3.0) * std
        return rand(tuple(shape), lo=-bound, up=bound, dtype=dtype, device=device)
    raise ValueError(f"init: dist must be 'normal' or 'uniform', got {dist!r}")


ZERO = Const(0.0)
ONE = Const(1.0)
DEFAULT_KAIMING_NORMAL = Kaiming("normal", "fan_in", "relu")
DEFAULT_KAIMING_UNIFORM = Kaiming("uniform", "fan_in", "relu")
#: PyTorch's Linear and Conv weights: kaiming_uniform_(a=sqrt(5)), i.e. U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
TORCH_LAYER_WEIGHT = Kaiming("uniform", "fan_in", "leaky_relu", math.sqrt(5.0))


def torch_layer_bias(weight_shape) -> Uniform:
    """PyTorch's Linear and Conv biases: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for the weight's fan_in."""
    fan_in = fan_in_and_fan_out(tuple(weight_shape))[0]
    bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
    return Uniform(-bound, bound)


# ---- PyTorch's in-place functions --------------------------------------------------------------

def init_(tensor: Tensor, init: Init) -> Tensor:
    """Overwrites ``tensor`` in place with values drawn by ``init``; returns it."""
    assign_(tensor, init.tensor(tensor.shape, tensor.dtype, tensor.device))
    return tensor


def constant_(tensor: Tensor, val: float) -> Tensor:
    return init_(tensor, Const(val))


def zeros_(tensor: Tensor) -> Tensor:
    return init_(tensor, ZERO)


def ones_(tensor: Tensor) -> Tensor:
    return init_(tensor, ONE)


def uniform_(tensor: Tensor, a: float = 0.0, b: float = 1.0) -> Tensor:
    return init_(tensor, Uniform(a, b))


def normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0) -> Tensor:
    return init_(tensor, Randn(mean, std))


def kaiming_uniform_(tensor: Tensor, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu") -> Tensor:
    return init_(tensor, Kaiming("uniform", mode, nonlinearity, a))


def kaiming_normal_(tensor: Tensor, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu") -> Tensor:
    return init_(tensor, Kaiming("normal", mode, nonlinearity, a))


def xavier_uniform_(tensor: Tensor, gain: float = 1.0) -> Tensor:
    return init_(tensor, Xavier("uniform", gain))


def xavier_normal_(tensor: Tensor, gain: float = 1.0) -> Tensor:
    return init_(tensor, Xavier("normal", gain))
