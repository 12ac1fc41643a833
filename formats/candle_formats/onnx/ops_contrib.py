"""The com.microsoft contrib ops that exported and optimized transformer
models use (onnxruntime's definitions): GELU variants, layer norms with a
skip connection, the fused Attention, and the quantized matmuls.
SimplifiedLayerNormalization is also registered in the default domain, where
onnxruntime's optimizer writes it.
"""

from __future__ import annotations

import math

import numpy as np

import candle_api as c
from candle_api.ops import nn as fused

from .ops_attention import merge_heads, split_heads
from .ops_norm import layer_norm, rms_norm
from . import int8_products as int8
from .int8_products import Int8Weights
from .ops_quant import dequantize_linear, dynamic_quantize_linear, int8_sums, quantize_linear
from .registry import MS_DOMAIN, op

_NORM = {"axis": -1, "epsilon": 1e-5}


def ms(*names: str, defaults: dict | None = None, pack=None):
    return op(*names, domain=MS_DOMAIN, defaults=defaults, pack=pack)


@ms("Gelu")
def gelu(node, x):
    return x.gelu_erf()


def _bias_gelu(x, bias, approximate: bool):
    """gelu(x + bias): one pass of the bias_gelu kernel when the bias runs along x's last dim."""
    if x.dtype.is_float and x.rank and bias.dtype == x.dtype and bias.shape in ((x.shape[-1],), (1, x.shape[-1])):
        return fused.bias_gelu(x, bias.reshape(x.shape[-1]), approximate)
    return (x + bias).gelu() if approximate else (x + bias).gelu_erf()


@ms("BiasGelu")
def bias_gelu(node, x, bias):
    return _bias_gelu(x, bias, False)


@ms("FastGelu")
def fast_gelu(node, x, bias=None):
    """The tanh approximation of GELU."""
    return x.gelu() if bias is None else _bias_gelu(x, bias, True)


@ms("QuickGelu", defaults={"alpha": 1.702})
def quick_gelu(node, x):
    return x * (x * node["alpha"]).sigmoid()


@ms("BiasAdd")
def bias_add(node, x, bias, skip):
    return x + bias + skip


@ms("FusedMatMul", defaults={"alpha": 1.0, "transA": 0, "transB": 0})
def fused_matmul(node, a, b):
    if node["transA"]:
        a = a.transpose(-1, -2)
    if node["transB"]:
        b = b.transpose(-1, -2)
    y = a @ b
    return y * node["alpha"] if node["alpha"] != 1.0 else y


def _norm_outputs(node, x, scale, bias, simplified: bool):
    a = node["axis"] % x.rank
    if simplified:
        return rms_norm(x, scale, a, node["epsilon"])
    y, mean, inv = layer_norm(x, scale, bias, a, node["epsilon"], node.n_outputs)
    return (y, mean, inv) if node.n_outputs > 1 else y


@ms("LayerNormalization", defaults=_NORM)
def layer_normalization(node, x, scale, bias=None):
    return _norm_outputs(node, x, scale, bias, False)


@ms("SimplifiedLayerNormalization", defaults=_NORM)
@op("SimplifiedLayerNormalization", defaults=_NORM)
def simplified_layer_normalization(node, x, scale):
    return _norm_outputs(node, x, scale, None, True)


def _skip_sum(x, skip, bias):
    s = x + skip
    return s if bias is None else s + bias


@ms("SkipLayerNormalization", defaults={"epsilon": 1e-12})
def skip_layer_normalization(node, x, skip, gamma, beta=None, bias=None):
    """(LayerNorm(x + skip + bias), mean, inv_std, x + skip + bias); the norm alone, when it is the
    only output (what fusion.fuse_skip_layer_norm writes), in one pass: nn.skip_layer_norm."""
    if node.n_outputs == 1 and x.dtype.is_float and gamma.rank == 1 and (beta is None or beta.rank == 1):
        r = skip if bias is None else skip + bias
        shape = np.broadcast_shapes(x.shape, r.shape)  # a fused Add may broadcast either side
        x, r = (v if v.shape == shape else v.broadcast_as(shape) for v in (x, r))
        return fused.skip_layer_norm(x, r, gamma, beta, node["epsilon"])
    s = _skip_sum(x, skip, bias)
    y, mean, inv = layer_norm(s, gamma, beta, s.rank - 1, node["epsilon"], node.n_outputs)
    return y, mean, inv, s


@ms("SkipSimplifiedLayerNormalization", defaults={"epsilon": 1e-12})
def skip_simplified_layer_normalization(node, x, skip, gamma, bias=None):
    s = _skip_sum(x, skip, bias)
    return rms_norm(s, gamma, s.rank - 1, node["epsilon"]), None, None, s


def _key_mask(node, mask, batch: int, q_len: int, kv_len: int, dtype, device):
    """onnxruntime's mask_index as an additive bias broadcastable to (B, H, q, kv)."""
    fill = node["mask_filter_value"]
    if mask.rank == 1 and mask.shape[0] == batch:  # valid lengths: keys at or past the length are masked
        keys = c.arange(0, kv_len, dtype=c.i64, device=device).reshape(1, kv_len)
        keep = keys < mask.to_dtype(c.i64).reshape(batch, 1)
        return c.where(keep, 0.0, c.full(keep.shape, fill, dtype=dtype, device=device)).reshape(batch, 1, 1, kv_len)
    if mask.rank == 1:
        raise node.unsupported("mask_index with start positions (shape 2 * batch)")
    m = mask.to_dtype(dtype)
    if mask.rank == 2:    # (B, kv) of 1 = attend
        m = m.reshape(batch, 1, 1, kv_len)
    elif mask.rank == 3:  # (B, q, kv)
        m = m.unsqueeze(1)
    return (1.0 - m) * fill


@ms("Attention", defaults={"num_heads": 1, "unidirectional": 0, "scale": 0.0, "mask_filter_value": -10000.0,
                           "qkv_hidden_sizes": None, "do_rotary": 0, "past_present_share_buffer": 0})
def attention(node, x, weights, bias=None, mask_index=None, past=None, attention_bias=None,
              past_sequence_length=None):
    """Multi-head self-attention with the QKV projection fused in: x (B, S, in), weights (in, q + k + v)."""
    if node["do_rotary"]:
        raise node.unsupported("do_rotary=1")
    heads = node["num_heads"]
    sizes = node["qkv_hidden_sizes"] or [weights.shape[1] // 3] * 3
    qkv = x @ weights
    if bias is not None:
        qkv = qkv + bias
    q, k, v = (split_heads(t, heads) for t in qkv.split(list(sizes), -1))
    if past is not None:  # (2, B, H, past, D)
        k, v = c.cat([past[0], k], 2), c.cat([past[1], v], 2)
    present = c.stack([k, v], 0)
    batch, q_len, kv_len = x.shape[0], q.shape[2], k.shape[2]
    scale = node["scale"] or 1.0 / math.sqrt(q.shape[-1])
    scores = (q @ k.transpose(-1, -2)) * scale
    if mask_index is not None:
        scores = scores + _key_mask(node, mask_index, batch, q_len, kv_len, scores.dtype, x.device)
    if attention_bias is not None:
        scores = scores + attention_bias
    if node["unidirectional"]:  # query i sees the past and keys up to its own position
        i = c.arange(0, q_len, dtype=c.i64, device=x.device).reshape(q_len, 1)
        j = c.arange(0, kv_len, dtype=c.i64, device=x.device).reshape(1, kv_len)
        allowed = j <= i + (kv_len - q_len)
        scores = c.where(allowed, scores, c.full(scores.shape, node["mask_filter_value"], dtype=scores.dtype,
                                                 device=x.device))
    y = merge_heads(scores.softmax(-1) @ v)
    return y, present


# ---- quantization -------------------------------------------------------------------------------
ms("QuantizeLinear", defaults={"axis": 1})(quantize_linear)
ms("DequantizeLinear", defaults={"axis": 1})(dequantize_linear)
ms("DynamicQuantizeLinear")(dynamic_quantize_linear)


def _scaled(node, a, b, a_scale, b_scale, a_zero_point, b_zero_point, bias):
    """(a - a_zp) @ (b - b_zp) * a_scale * b_scale + bias: on the int8 kernel when b was packed."""
    if isinstance(b, Int8Weights) and int8.takes(a, a_zero_point) and a_scale.numel() == 1 \
            and a_scale.dtype == c.f32 and (bias is None or bias.dtype == c.f32):
        return int8.matmul(a, a_zero_point, node.in_type(0, a), b, b_zero_point, a_scale, b_scale, bias)
    acc = int8_sums(node, a, b, a_zero_point, b_zero_point)
    y = acc.to_dtype(a_scale.dtype) * a_scale * b_scale
    return y if bias is None else y + bias


@ms("MatMulIntegerToFloat", pack=int8.pack_int8)
def matmul_integer_to_float(node, a, b, a_scale, b_scale, a_zero_point=None, b_zero_point=None, bias=None):
    return _scaled(node, a, b, a_scale, b_scale, a_zero_point, b_zero_point, bias)


@ms("DynamicQuantizeMatMul", pack=int8.pack_int8)
def dynamic_quantize_matmul(node, a, b, b_scale, b_zero_point=None, bias=None):
    """a quantized to uint8 on the fly, then MatMulIntegerToFloat."""
    qa, a_scale, a_zero_point = dynamic_quantize_linear(node, a)
    return _scaled(node, qa, b, a_scale, b_scale, a_zero_point, b_zero_point, bias)

