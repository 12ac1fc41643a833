"""Linear (fully connected) layers, and Identity (a placeholder layer, as in PyTorch)."""

from __future__ import annotations

from ..errors import ShapeError
from ..tensor import Tensor
from .init import TORCH_LAYER_WEIGHT, torch_layer_bias
from .module import Module
from .var_builder import VarBuilder, get_parameter, layer_builder


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """x @ weight.T + bias over the last dim of x; weight is (out, in) as in PyTorch."""
    if x.rank == 0 or x.shape[-1] != weight.shape[-1]:
        raise ShapeError(f"linear: input of shape {x.shape} for a weight of shape {weight.shape} "
                         f"(the input's last dim must be {weight.shape[-1]})")
    y = x.matmul(weight.t())
    return y + bias if bias is not None else y


class Identity(Module):
    """Returns its input; takes and ignores any constructor arguments, as PyTorch's."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__()

    def forward(self, x):
        return x


class Linear(Module):
    """y = x @ weight.T + bias, with PyTorch's parameter names and initialization."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None, *,
                 vb: VarBuilder | None = None) -> None:
        super().__init__()
        vb = layer_builder(vb, dtype, device)
        self.in_features, self.out_features = in_features, out_features
        shape = (out_features, in_features)
        self.weight = get_parameter(vb, shape, "weight", TORCH_LAYER_WEIGHT)
        self.bias = get_parameter(vb, (out_features,), "bias", torch_layer_bias(shape)) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        return linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class QLinear(Module):
    """y = x @ weight.T + bias with ``weight`` a QTensor kept in its GGML
    blocks (Candle's ``QMatMul``): the product runs on the quantized weight.

    ``QLinear(qtensor, bias=None)``, or :meth:`from_linear` to quantize a
    trained :class:`Linear`. Inputs of any float dtype give outputs of that
    dtype; gradients reach the input, not the (constant) weight."""

    def __init__(self, weight, bias: Tensor | None = None) -> None:
        from ..quantized import QTensor

        super().__init__()
        if not isinstance(weight, QTensor) or weight.rank != 2:
            raise TypeError(f"QLinear takes a 2-d QTensor weight, got {weight!r}")
        if bias is not None and bias.shape != (weight.shape[0],):
            raise ShapeError(f"QLinear: bias of shape {bias.shape} for {weight.shape[0]} output features")
        self.weight = weight
        self.bias = bias
        self.out_features, self.in_features = weight.shape

    @classmethod
    def from_linear(cls, linear: Linear, ggml_dtype: str) -> "QLinear":
        """``linear`` with its weight quantized to ``ggml_dtype`` ("q4_0", "q8_0", "q4k"...)."""
        from ..quantized import QTensor

        bias = linear.bias.detach() if linear.bias is not None else None
        return cls(QTensor.quantize(linear.weight.detach(), ggml_dtype), bias)

    def forward(self, x: Tensor) -> Tensor:
        y = self.weight.matmul_t(x)
        return y + self.bias.to_dtype(y.dtype) if self.bias is not None else y

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, "
                f"weight={self.weight.ggml_dtype}")
