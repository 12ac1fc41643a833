"""2-d pooling layers with PyTorch's signatures: MaxPool2d and AvgPool2d over
the fused pooling kernels (stride defaults to the kernel size, as in
PyTorch), and AdaptiveAvgPool2d for any output size."""

from __future__ import annotations

import numpy as np

from .. import functional as F
from ..errors import ShapeError
from ..ops.creation import from_array
from ..tensor import Tensor
from .module import Module


class _Pool2d(Module):
    def __init__(self, kernel_size, stride, padding, ceil_mode: bool) -> None:
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding, self.ceil_mode = padding, ceil_mode

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"ceil_mode={self.ceil_mode}")


class MaxPool2d(_Pool2d):
    """Input (batch, channels, height, width) or (channels, height, width)."""

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices: bool = False,
                 ceil_mode: bool = False) -> None:
        super().__init__(kernel_size, stride, padding, ceil_mode)
        self.dilation, self.return_indices = dilation, return_indices

    def forward(self, x: Tensor):
        """The maxima; with return_indices, ``(maxima, indices)``: u32 flat indices
        into each input plane of the windows' first maxima, as PyTorch's."""
        return F.max_pool2d(x, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode,
                            self.return_indices)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", dilation={self.dilation}"


class AvgPool2d(_Pool2d):
    """Input (batch, channels, height, width) or (channels, height, width)."""

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
                 count_include_pad: bool = True, divisor_override: int | None = None) -> None:
        if divisor_override is not None:
            raise NotImplementedError("AvgPool2d: divisor_override is not supported")
        super().__init__(kernel_size, stride, padding, ceil_mode)
        self.count_include_pad = count_include_pad

    def forward(self, x: Tensor) -> Tensor:
        return F.avg_pool2d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode, self.count_include_pad)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", count_include_pad={self.count_include_pad}"


def _adaptive_weights(size: int, out: int) -> np.ndarray:
    """(out, size) averaging matrix: row i averages PyTorch's window
    [floor(i * size / out), ceil((i + 1) * size / out))."""
    m = np.zeros((out, size))
    for i in range(out):
        lo, hi = (i * size) // out, -(-(i + 1) * size // out)
        m[i, lo:hi] = 1.0 / (hi - lo)
    return m


def adaptive_avg_pool2d(x: Tensor, output_size) -> Tensor:
    """Averages (batch, channels, h, w) or (channels, h, w) over windows that
    tile h and w into ``output_size`` (an int, a pair, None keeps a dim).
    The windows are separable, so this is two matmuls with averaging matrices
    (windows may overlap when the sizes do not divide): differentiable, with
    no dedicated kernel."""
    if x.rank not in (3, 4):
        raise ShapeError(f"adaptive_avg_pool2d: expected a 3-d or 4-d input, got shape {x.shape}")
    pair = (output_size, output_size) if output_size is None or isinstance(output_size, int) else tuple(output_size)
    if len(pair) != 2:
        raise ShapeError(f"adaptive_avg_pool2d: output_size must be an int or a pair, got {output_size}")
    h, w = x.shape[-2:]
    oh, ow = (size if o is None else o for o, size in zip(pair, (h, w)))
    if min(oh, ow) < 1 or min(h, w) < 1:
        raise ShapeError(f"adaptive_avg_pool2d: output size ({oh}, {ow}) and input size ({h}, {w}) "
                         f"must be positive")
    rows = from_array(_adaptive_weights(h, oh), x.dtype, x.device)
    cols = from_array(_adaptive_weights(w, ow).T, x.dtype, x.device)
    return rows.matmul(x.matmul(cols))


class AdaptiveAvgPool2d(Module):
    def __init__(self, output_size) -> None:
        super().__init__()
        self.output_size = output_size

    def forward(self, x: Tensor) -> Tensor:
        return adaptive_avg_pool2d(x, self.output_size)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"
