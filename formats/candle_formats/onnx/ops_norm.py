"""Normalizations: batch, instance, layer, group, RMS and local response.

Layer and RMS normalization over the last dim run on candle-api's fused
kernels (trailing dims are flattened into one); other shapes, and the
optional mean / inverse-std outputs, are composed from reductions.
"""

from __future__ import annotations

import math

from candle_api.ops import nn as fused

from .helpers import axis as norm_axis
from .ops_tensor import pad
from .registry import op


def _per_channel(v, rank: int):
    return v.reshape((1, -1) + (1,) * (rank - 2))


@op("BatchNormalization")
def batch_norm(node, x, scale, bias, mean, var):
    eps = node.get("epsilon", 1e-5)
    training = node.get("training_mode", 0) or (node.opset < 9 and not node.get("is_test", 0))
    if not training:
        inv = (_per_channel(var, x.rank) + eps).rsqrt() * _per_channel(scale, x.rank)
        return (x - _per_channel(mean, x.rank)) * inv + _per_channel(bias, x.rank)
    dims = [0] + list(range(2, x.rank))
    batch_mean = x.mean(dims)
    batch_var = x.var(dims, unbiased=False)
    y = (x - _per_channel(batch_mean, x.rank)) * (_per_channel(batch_var, x.rank) + eps).rsqrt() \
        * _per_channel(scale, x.rank) + _per_channel(bias, x.rank)
    momentum = node.get("momentum", 0.9)
    running_mean = mean * momentum + batch_mean * (1 - momentum)
    running_var = var * momentum + batch_var * (1 - momentum)
    return y, running_mean, running_var, batch_mean, batch_var


@op("InstanceNormalization", since=6)
def instance_norm(node, x, scale, bias):
    dims = list(range(2, x.rank))
    centered = x - x.mean(dims, True)
    inv = ((centered * centered).mean(dims, True) + node.get("epsilon", 1e-5)).rsqrt()
    return centered * inv * _per_channel(scale, x.rank) + _per_channel(bias, x.rank)


def layer_norm(x, scale, bias, a: int, eps: float, n_outputs: int = 1):
    """Normalizes over dims a.. of x: (y, mean, inv_std), the last two None
    unless more than one output is asked for."""
    rows, trailing = x.shape[:a], x.shape[a:]
    width = math.prod(trailing)
    x2 = x.reshape(rows + (width,))
    scale = _flat(scale, trailing, width)
    bias = None if bias is None else _flat(bias, trailing, width)
    if n_outputs == 1 and x.dtype.is_float:
        return fused.layer_norm(x2, scale, bias, eps).reshape(x.shape), None, None
    mean = x2.mean(-1, True)
    centered = x2 - mean
    inv = ((centered * centered).mean(-1, True) + eps).rsqrt()
    y = centered * inv * scale
    if bias is not None:
        y = y + bias
    stat_shape = rows + (1,) * len(trailing)
    return y.reshape(x.shape), mean.reshape(stat_shape), inv.reshape(stat_shape)


def _flat(v, trailing: tuple, width: int):
    """A scale or bias broadcastable to the normalized dims, as one contiguous row."""
    return (v if v.shape == (width,) else v.broadcast_as(trailing).reshape(width)).contiguous()


@op("LayerNormalization", since=17)
def layer_normalization(node, x, scale, bias=None):
    a = norm_axis(node.get("axis", -1), x.rank, node)
    y, mean, inv = layer_norm(x, scale, bias, a, node.get("epsilon", 1e-5), node.n_outputs)
    return (y, mean, inv) if node.n_outputs > 1 else y


def rms_norm(x, scale, a: int, eps: float):
    rows, trailing = x.shape[:a], x.shape[a:]
    width = math.prod(trailing)
    x2 = x.reshape(rows + (width,))
    if x.dtype.is_float:
        return fused.rms_norm(x2, _flat(scale, trailing, width), eps).reshape(x.shape)
    y = x2 * ((x2 * x2).mean(-1, True) + eps).rsqrt()
    return y.reshape(x.shape) * scale


@op("RMSNormalization", since=23)
def rms_normalization(node, x, scale):
    a = norm_axis(node.get("axis", -1), x.rank, node)
    return rms_norm(x, scale, a, node.get("epsilon", 1e-5))


@op("GroupNormalization", since=18)
def group_norm(node, x, scale, bias):
    groups = node["num_groups"]
    eps = node.get("epsilon", 1e-5)
    n, ch = x.shape[:2]
    g = x.reshape(n, groups, -1)
    centered = g - g.mean(-1, True)
    inv = ((centered * centered).mean(-1, True) + eps).rsqrt()
    y = (centered * inv).reshape(x.shape)
    if scale.shape[0] != ch:  # opset 18: one scale and bias per group
        scale = scale.reshape(groups, 1).broadcast_as((groups, ch // groups)).reshape(ch)
        bias = bias.reshape(groups, 1).broadcast_as((groups, ch // groups)).reshape(ch)
    return y * _per_channel(scale, x.rank) + _per_channel(bias, x.rank)


@op("LRN")
def lrn(node, x):
    size = node["size"]
    alpha, beta, bias = node.get("alpha", 1e-4), node.get("beta", 0.75), node.get("bias", 1.0)
    sq = x * x
    before, after = (size - 1) // 2, size - 1 - (size - 1) // 2
    padded = pad(sq, [(0, 0), (before, after)] + [(0, 0)] * (x.rank - 2))
    window = None
    for k in range(size):
        part = padded.narrow(1, k, x.shape[1])
        window = part if window is None else window + part
    return x / (window * (alpha / size) + bias).powf(beta)

