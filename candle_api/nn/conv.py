"""Convolutions and transposed convolutions over 1 and 2 spatial dims, with
PyTorch's constructor signatures, parameter shapes and initialization."""

from __future__ import annotations

from .. import functional as F
from ..errors import ShapeError
from ..tensor import Tensor
from .init import TORCH_LAYER_WEIGHT, torch_layer_bias
from .module import Module
from .var_builder import VarBuilder, get_parameter, layer_builder


def _tuple(value, n: int, name: str) -> tuple:
    if isinstance(value, int):
        return (value,) * n
    value = tuple(value)
    if len(value) != n or not all(isinstance(v, int) for v in value):
        raise ValueError(f"{name} must be an int or {n} ints, got {value}")
    return value


class _ConvNd(Module):
    """What the four convolution layers share: a weight of shape
    (out, in / groups, *kernel), or (in, out / groups, *kernel) when
    transposed, and an optional bias of one value per output channel."""

    _dims: int
    _transposed: bool

    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                 padding_mode, output_padding, device, dtype, vb) -> None:
        super().__init__()
        n = self._dims
        if in_channels % groups or out_channels % groups:
            raise ShapeError(f"{type(self).__name__}: in_channels ({in_channels}) and out_channels "
                             f"({out_channels}) must divide by groups ({groups})")
        if padding_mode != "zeros":
            raise ValueError(f"{type(self).__name__}: only padding_mode='zeros' is supported, got {padding_mode!r}")
        vb = layer_builder(vb, dtype, device)
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size = _tuple(kernel_size, n, "kernel_size")
        self.stride = _tuple(stride, n, "stride")
        self.padding = _tuple(padding, n, "padding")
        self.dilation = _tuple(dilation, n, "dilation")
        self.output_padding = _tuple(output_padding, n, "output_padding")
        channels = (in_channels, out_channels // groups) if self._transposed else (out_channels, in_channels // groups)
        shape = channels + self.kernel_size
        self.weight = get_parameter(vb, shape, "weight", TORCH_LAYER_WEIGHT)
        self.bias = get_parameter(vb, (out_channels,), "bias", torch_layer_bias(shape)) if bias else None

    def _add_bias(self, y: Tensor) -> Tensor:
        if self.bias is None:
            return y
        return y + self.bias.reshape((self.out_channels,) + (1,) * self._dims)  # batched or not

    def extra_repr(self) -> str:
        s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        n = self._dims
        if self.padding != (0,) * n:
            s += f", padding={self.padding}"
        if self.dilation != (1,) * n:
            s += f", dilation={self.dilation}"
        if self.output_padding != (0,) * n:
            s += f", output_padding={self.output_padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        return s + ("" if self.bias is not None else ", bias=False")


class Conv1d(_ConvNd):
    """Input (batch, in_channels, length) or (in_channels, length)."""

    _dims, _transposed = 1, False

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, dilation=1,
                 groups: int = 1, bias: bool = True, padding_mode: str = "zeros", device=None, dtype=None, *,
                 vb: VarBuilder | None = None) -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                         padding_mode, 0, device, dtype, vb)

    def forward(self, x: Tensor) -> Tensor:
        y = F.conv1d(x, self.weight, self.padding[0], self.stride[0], self.dilation[0], self.groups)
        return self._add_bias(y)


class Conv2d(_ConvNd):
    """Input (batch, in_channels, height, width) or (in_channels, height, width)."""

    _dims, _transposed = 2, False

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, dilation=1,
                 groups: int = 1, bias: bool = True, padding_mode: str = "zeros", device=None, dtype=None, *,
                 vb: VarBuilder | None = None) -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                         padding_mode, 0, device, dtype, vb)

    def forward(self, x: Tensor) -> Tensor:
        return self._add_bias(F.conv2d(x, self.weight, self.padding, self.stride, self.dilation, self.groups))


class ConvTranspose1d(_ConvNd):
    _dims, _transposed = 1, True

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, output_padding=0,
                 groups: int = 1, bias: bool = True, dilation=1, padding_mode: str = "zeros", device=None,
                 dtype=None, *, vb: VarBuilder | None = None) -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                         padding_mode, output_padding, device, dtype, vb)

    def forward(self, x: Tensor) -> Tensor:
        y = F.conv_transpose1d(x, self.weight, self.padding[0], self.output_padding[0], self.stride[0],
                               self.dilation[0], self.groups)
        return self._add_bias(y)


class ConvTranspose2d(_ConvNd):
    _dims, _transposed = 2, True

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, output_padding=0,
                 groups: int = 1, bias: bool = True, dilation=1, padding_mode: str = "zeros", device=None,
                 dtype=None, *, vb: VarBuilder | None = None) -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                         padding_mode, output_padding, device, dtype, vb)

    def forward(self, x: Tensor) -> Tensor:
        y = F.conv_transpose2d(x, self.weight, self.padding, self.output_padding, self.stride, self.dilation,
                               self.groups)
        return self._add_bias(y)
