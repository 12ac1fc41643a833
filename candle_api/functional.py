"""Functional forms of the neural-network ops (``candle.functional`` in candle-pyo3)."""

from __future__ import annotations

from .ops import attention as _attention
from .ops import conv as _conv
from .ops import elementwise as _ew
from .ops import indexing as _idx
from .ops import nn as _nn
from .tensor import Tensor


def relu(tensor: Tensor) -> Tensor:
    return _ew.unary("relu", tensor)


def gelu(tensor: Tensor) -> Tensor:
    """GELU with the tanh approximation (Candle's ``gelu``)."""
    return _ew.unary("gelu", tensor)


def gelu_erf(tensor: Tensor) -> Tensor:
    """GELU with the exact erf (PyTorch's default ``gelu``)."""
    return _ew.unary("gelu_erf", tensor)


def silu(tensor: Tensor) -> Tensor:
    return _ew.unary("silu", tensor)


swish = silu


def sigmoid(tensor: Tensor) -> Tensor:
    return _ew.unary("sigmoid", tensor)


def tanh(tensor: Tensor) -> Tensor:
    return _ew.unary("tanh", tensor)


def softplus(tensor: Tensor) -> Tensor:
    return _ew.unary("softplus", tensor)


def elu(tensor: Tensor, alpha: float = 1.0) -> Tensor:
    return _ew.param("elu", tensor, alpha, 0.0)


def leaky_relu(tensor: Tensor, negative_slope: float = 0.01) -> Tensor:
    return _ew.param("leaky_relu", tensor, negative_slope, 0.0)


def softmax(tensor: Tensor, dim: int = -1) -> Tensor:
    return _nn.softmax(tensor, dim)


def log_softmax(tensor: Tensor, dim: int = -1) -> Tensor:
    return _nn.log_softmax(tensor, dim)


scaled_dot_product_attention = _attention.scaled_dot_product_attention


def softmax_last_dim(tensor: Tensor) -> Tensor:
    return _nn.softmax(tensor, -1)


def layer_norm(tensor: Tensor, weight: Tensor, bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    return _nn.layer_norm(tensor, weight, bias, eps)


def rms_norm(tensor: Tensor, weight: Tensor, eps: float = 1e-6) -> Tensor:
    return _nn.rms_norm(tensor, weight, eps)


silu_mul = _nn.silu_mul
rope = _nn.rope
rope_i = _nn.rope_i
rope_thd = _nn.rope_thd


def avg_pool2d(tensor: Tensor, ksize, stride=1, padding=0, ceil_mode=False, count_include_pad=True) -> Tensor:
    """Average pooling; stride defaults to 1 as in candle-pyo3's functional API."""
    return _conv.avg_pool2d(tensor, ksize, stride, padding, ceil_mode, count_include_pad)


def max_pool2d(tensor: Tensor, ksize, stride=1, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """Max pooling; stride defaults to 1 as in candle-pyo3's functional API. With
    return_indices, ``(maxima, u32 indices)`` as PyTorch's (each the flat index in
    its input plane of the window's first maximum)."""
    return _conv.max_pool2d(tensor, ksize, stride, padding, dilation, ceil_mode, return_indices)


conv1d = _conv.conv1d
conv2d = _conv.conv2d
conv_transpose1d = _conv.conv_transpose1d
conv_transpose2d = _conv.conv_transpose2d


def upsample_nearest2d(tensor: Tensor, target_h: int, target_w: int) -> Tensor:
    return _conv.upsample2d(tensor, target_h, target_w, "nearest")


def upsample_bilinear2d(tensor: Tensor, target_h: int, target_w: int, align_corners: bool = False) -> Tensor:
    return _conv.upsample2d(tensor, target_h, target_w, "bilinear", align_corners)


def embedding(ids: Tensor, table: Tensor) -> Tensor:
    return _idx.embedding(ids, table)
