"""Activations, as functions and modules, covering Candle's ``Activation``
list, plus PyTorch's PReLU (a learned slope), Softmax and LogSoftmax.
``gelu`` here is PyTorch's (exact, erf); ``new_gelu`` and
``gelu_pytorch_tanh`` are the tanh approximation, which
``candle_api.functional.gelu`` computes (Candle's naming). The fused
kernels (gelu, gelu_erf, silu, sigmoid...) and their backward rules are used."""

from __future__ import annotations

from .. import functional as F
from ..errors import ShapeError
from ..ops.elementwise import where
from ..tensor import Tensor
from .init import Const
from .module import Module
from .var_builder import VarBuilder, get_parameter, layer_builder

relu = F.relu
silu = swish = F.silu
sigmoid = F.sigmoid
tanh = F.tanh
softplus = F.softplus
elu = F.elu
leaky_relu = F.leaky_relu


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    """GELU: exact (erf) by default, as PyTorch; ``approximate="tanh"`` for the tanh form."""
    if approximate == "none":
        return F.gelu_erf(x)
    if approximate == "tanh":
        return F.gelu(x)
    raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")


def new_gelu(x: Tensor) -> Tensor:
    """GELU, tanh approximation (Hugging Face's gelu_new and gelu_pytorch_tanh)."""
    return F.gelu(x)


gelu_pytorch_tanh = new_gelu


def relu2(x: Tensor) -> Tensor:
    """relu(x) ** 2."""
    return F.relu(x).sqr()


def relu6(x: Tensor) -> Tensor:
    return x.clamp(0.0, 6.0)


def hard_sigmoid(x: Tensor) -> Tensor:
    """relu6(x + 3) / 6."""
    return x.affine(1.0 / 6.0, 0.5).clamp(0.0, 1.0)


def hard_swish(x: Tensor) -> Tensor:
    return x * hard_sigmoid(x)


def mish(x: Tensor) -> Tensor:
    """x * tanh(softplus(x))."""
    return x * F.softplus(x).tanh()


def swiglu(x: Tensor) -> Tensor:
    """silu(a) * b for the two halves a, b of the last dim."""
    if x.rank == 0 or x.shape[-1] % 2:
        raise ShapeError(f"swiglu: the last dim must be even, got shape {x.shape}")
    a, b = x.chunk(2, -1)
    return F.silu(a) * b


def prelu(x: Tensor, weight: Tensor) -> Tensor:
    """x where x > 0, else weight * x; weight holds one slope or one per
    channel (dim 1, or dim 0 of a 1-d input), as PyTorch's prelu."""
    n = weight.numel()
    if n != 1:
        channel = 1 if x.rank >= 2 else 0
        if x.rank == 0 or x.shape[channel] != n:
            raise ShapeError(f"prelu: {n} slopes for an input of shape {x.shape} (they go along dim {channel})")
        weight = weight.reshape((n,) + (1,) * (x.rank - channel - 1))
    return where(x > 0.0, x, x * weight)


def _softmax_dim(dim: int | None, x: Tensor) -> int:
    """PyTorch's implicit dim of Softmax(dim=None): 0 for 0-d, 1-d and 3-d inputs, else 1."""
    return dim if dim is not None else (0 if x.rank in (0, 1, 3) else 1)


hardsigmoid, hardswish = hard_sigmoid, hard_swish


class ReLU(Module):
    def forward(self, x: Tensor) -> Tensor:
        return relu(x)


class ReLU6(Module):
    def forward(self, x: Tensor) -> Tensor:
        return relu6(x)


class GELU(Module):
    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        self.approximate = approximate

    def forward(self, x: Tensor) -> Tensor:
        return gelu(x, self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class SiLU(Module):
    def forward(self, x: Tensor) -> Tensor:
        return silu(x)


class Sigmoid(Module):
    def forward(self, x: Tensor) -> Tensor:
        return sigmoid(x)


class Tanh(Module):
    def forward(self, x: Tensor) -> Tensor:
        return tanh(x)


class Hardsigmoid(Module):
    def forward(self, x: Tensor) -> Tensor:
        return hard_sigmoid(x)


class Hardswish(Module):
    def forward(self, x: Tensor) -> Tensor:
        return hard_swish(x)


class Mish(Module):
    def forward(self, x: Tensor) -> Tensor:
        return mish(x)


class ELU(Module):
    def __init__(self, alpha: float = 1.0) -> None:
        super().__init__()
        self.alpha = alpha

    def forward(self, x: Tensor) -> Tensor:
        return elu(x, self.alpha)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}"


class LeakyReLU(Module):
    def __init__(self, negative_slope: float = 0.01) -> None:
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: Tensor) -> Tensor:
        return leaky_relu(x, self.negative_slope)

    def extra_repr(self) -> str:
        return f"negative_slope={self.negative_slope}"


class PReLU(Module):
    """max(0, x) + weight * min(0, x) with a learned ``weight`` of
    ``num_parameters`` slopes (1, or one per channel), starting at ``init``."""

    def __init__(self, num_parameters: int = 1, init: float = 0.25, device=None, dtype=None, *,
                 vb: VarBuilder | None = None) -> None:
        super().__init__()
        self.num_parameters = num_parameters
        self.weight = get_parameter(layer_builder(vb, dtype, device), (num_parameters,), "weight", Const(init))

    def forward(self, x: Tensor) -> Tensor:
        return prelu(x, self.weight)

    def extra_repr(self) -> str:
        return f"num_parameters={self.num_parameters}"


class Softmax(Module):
    def __init__(self, dim: int | None = None) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, x: Tensor) -> Tensor:
        return F.softmax(x, _softmax_dim(self.dim, x))

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class LogSoftmax(Softmax):
    def forward(self, x: Tensor) -> Tensor:
        return F.log_softmax(x, _softmax_dim(self.dim, x))


# Candle's Activation names (its serde names and their aliases) and the snake_case spellings of configs.
_BY_NAME = {
    "gelu": gelu, "newgelu": new_gelu, "new_gelu": new_gelu, "gelu_new": new_gelu,
    "gelupytorchtanh": gelu_pytorch_tanh, "gelu_pytorch_tanh": gelu_pytorch_tanh,
    "relu": relu, "relu2": relu2, "relu6": relu6, "silu": silu, "swish": swish, "sigmoid": sigmoid,
    "hardsigmoid": hard_sigmoid, "hard_sigmoid": hard_sigmoid, "hardswish": hard_swish, "hard_swish": hard_swish,
    "swiglu": swiglu, "mish": mish, "elu": elu, "leakyrelu": leaky_relu, "leaky_relu": leaky_relu,
}
_WITH_PARAM = {elu, leaky_relu}


class Activation(Module):
    """An activation chosen by its config name, as Candle's ``Activation``
    enum: ``Activation("gelu_new")``, ``Activation("elu", 0.5)``; ``param``
    is elu's alpha or leaky_relu's negative slope."""

    names = tuple(_BY_NAME)

    def __init__(self, name: str = "gelu", param: float | None = None) -> None:
        super().__init__()
        fn = _BY_NAME.get(name.lower() if isinstance(name, str) else name)
        if fn is None:
            raise ValueError(f"unknown activation {name!r}; known: {', '.join(self.names)}")
        if param is not None and fn not in _WITH_PARAM:
            raise ValueError(f"activation {name!r} takes no parameter")
        self.name, self.param, self._fn = name, param, fn

    def forward(self, x: Tensor) -> Tensor:
        return self._fn(x) if self.param is None else self._fn(x, self.param)

    def extra_repr(self) -> str:
        return self.name if self.param is None else f"{self.name}, {self.param}"
