"""Quantization: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear and
the integer products MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv.

Integer products with constant weights run on the int8 kernels
(int8_products.py); the others are computed in f64, where every sum of
int8/uint8 products of a realistic inner dim is exact, then converted to
int32. DynamicQuantizeLinear of f32 is one kernel pair (quantize_u8).
"""

from __future__ import annotations

import math

import candle_api as c
from candle_api.ops.int8 import quantize_u8, unpack_int8_panels

from . import int8_products as int8
from .dtypes import MINIFLOATS, TYPES, UINT8, OnnxType, onnx_type
from .helpers import axis as norm_axis
from .int8_products import Int8Weights
from .ops_cast import cast
from .ops_nn import conv, conv_params
from .registry import op


def _along(node, scale, x):
    """A scale or zero point broadcastable to x: a scalar, one value per
    index of ``axis``, or (block_size > 0) one value per block along it."""
    block = node.get("block_size", 0)
    if scale.rank == 0 or scale.numel() == 1 and not block:
        return scale.reshape(())
    a = norm_axis(node.get("axis", 1), x.rank, node)  # only checked where it is used
    if block:
        n = x.shape[a]
        expanded = scale.unsqueeze(a + 1)
        shape = list(expanded.shape)
        shape[a + 1] = block
        merged = expanded.broadcast_as(tuple(shape)).reshape(scale.shape[:a] + (-1,) + scale.shape[a + 1:])
        return merged.narrow(a, 0, n)
    return scale.reshape(tuple(-1 if d == a else 1 for d in range(x.rank)))


def _target(node, zero_point) -> OnnxType:
    if zero_point is not None:
        return node.in_type(2, zero_point)
    code = node.get("output_dtype", 0)
    return onnx_type(code) if code else TYPES[UINT8]


def quantize(x, scale, zero_point, dst: OnnxType, saturate: bool = True):
    """round_half_even(x / scale) + zero_point, saturated to dst (cast to dst for small floats)."""
    q = x.to_dtype(c.f32) / scale.to_dtype(c.f32)
    if dst.code in MINIFLOATS:
        if zero_point is not None:
            q = q + zero_point.to_dtype(c.f32)
        return cast(q, TYPES[1], dst, saturate)
    q = q.round()
    if zero_point is not None:
        q = q + zero_point.to_dtype(c.f32)
    lo, hi = dst.int_range
    return q.clamp(lo, hi).to_dtype(dst.storage)


@op("QuantizeLinear", since=10)
def quantize_linear(node, x, scale, zero_point=None):
    zp = _along(node, zero_point, x) if zero_point is not None else None
    return quantize(x, _along(node, scale, x), zp, _target(node, zero_point),
                    bool(node.get("saturate", 1)))


@op("DequantizeLinear", since=10)
def dequantize_linear(node, x, scale, zero_point=None):
    s = _along(node, scale, x)
    y = x.to_dtype(c.f32)
    if zero_point is not None:
        y = y - _along(node, zero_point, x).to_dtype(c.f32)
    code = node.get("output_dtype", 0)
    out = onnx_type(code).storage if code else s.dtype
    return (y * s.to_dtype(c.f32)).to_dtype(out)


@op("DynamicQuantizeLinear", since=11)
def dynamic_quantize_linear(node, x):
    """uint8 quantization over the range of x widened to include 0."""
    if x.dtype == c.f32 and x.numel():
        return quantize_u8(x)
    lo = x.min_all().minimum(c.zeros((), dtype=x.dtype, device=x.device))
    hi = x.max_all().maximum(c.zeros((), dtype=x.dtype, device=x.device))
    scale = (hi - lo) / 255.0
    zp = (-lo / scale).round().clamp(0, 255)
    y = ((x / scale).round() + zp).clamp(0, 255).to_dtype(c.u8)
    return y, scale.to_dtype(c.f32), zp.to_dtype(c.u8)


def _centered(x, zero_point, like_axis: int | None = None):
    """x - zero_point in f64; a 1-d zero point runs along like_axis of x."""
    y = x.to_dtype(c.f64)
    if zero_point is None:
        return y
    zp = zero_point.to_dtype(c.f64)
    if zp.rank == 1 and zp.numel() > 1 and like_axis is not None:
        zp = zp.reshape(tuple(-1 if d == like_axis % y.rank else 1 for d in range(y.rank)))
    return y - zp


def int8_sums(node, a, b, a_zero_point, b_zero_point, b_index: int = 1):
    """The i32 sums (a - a_zp) @ (b - b_zp): on the int8 kernel when b was packed, else in f64."""
    if isinstance(b, Int8Weights) and int8.takes(a, a_zero_point) and a.rank >= 1:
        return int8.matmul(a, a_zero_point, node.in_type(0, a), b, b_zero_point)
    b = unpacked(b)
    # a's zero point is per row (dim -2), b's per column (dim -1)
    return (_centered(a, a_zero_point, -2) @ _centered(b, b_zero_point, -1)).to_dtype(c.i32)


def unpacked(w):
    """Packed int8 weights back as the tensor the f64 path takes (their stored values plus the shift)."""
    if not isinstance(w, Int8Weights):
        return w
    if len(w.shape) == 2:
        return (unpack_int8_panels(w.packed[0], *w.shape) + w.shift).to_dtype(c.i64)
    m, inner = w.shape[0] // w.groups, math.prod(w.shape[1:])
    parts = [unpack_int8_panels(p, inner, m).t() for p in w.packed]
    return (c.cat(parts, 0) + w.shift).reshape(w.shape).to_dtype(c.i64)


@op("MatMulInteger", since=10, pack=int8.pack_int8)
def matmul_integer(node, a, b, a_zero_point=None, b_zero_point=None):
    return int8_sums(node, a, b, a_zero_point, b_zero_point)


def conv_sums(node, x, w, x_zero_point, w_zero_point):
    """The i32 sums of a quantized convolution: on the int8 kernel when w was packed, else in f64."""
    pads, strides, dilations = conv_params(node, x, w.shape[2:])
    if int8.conv_takes(x, x_zero_point, w) and x.rank == len(w.shape):
        return int8.conv(x, x_zero_point, node.in_type(0, x), w, w_zero_point, pads, strides, dilations)
    xc, wc = _centered(x, x_zero_point), _centered(unpacked(w), w_zero_point, 0)
    # zero padding means padding with the zero point: pad the centered input
    return conv(xc, wc, pads, strides, dilations, node.get("group", 1)).to_dtype(c.i32)


@op("ConvInteger", since=10, pack=int8.pack_int8)
def conv_integer(node, x, w, x_zero_point=None, w_zero_point=None):
    return conv_sums(node, x, w, x_zero_point, w_zero_point)


def _requantize(node, acc, scale, y_scale, y_zero_point, out_index: int):
    y = acc * scale.to_dtype(c.f64) / y_scale.to_dtype(c.f64).reshape(())
    dst = node.in_type(out_index, y_zero_point)
    lo, hi = dst.int_range
    return (y.round() + y_zero_point.to_dtype(c.f64).reshape(())).clamp(lo, hi).to_dtype(dst.storage)


def _pack_third(node, index: int, w):
    return int8.pack_int8(node, index, w, weight_index=3)


@op("QLinearMatMul", since=10, pack=_pack_third)
def qlinear_matmul(node, a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point):
    acc = int8_sums(node, a, b, a_zero_point, b_zero_point).to_dtype(c.f64)
    scale = a_scale.to_dtype(c.f64).reshape(-1, 1) if a_scale.numel() > 1 else a_scale.to_dtype(c.f64).reshape(())
    scale = scale * (b_scale.to_dtype(c.f64) if b_scale.numel() > 1 else b_scale.to_dtype(c.f64).reshape(()))
    return _requantize(node, acc, scale, y_scale, y_zero_point, 7)


@op("QLinearConv", since=10, pack=_pack_third)
def qlinear_conv(node, x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, bias=None):
    acc = conv_sums(node, x, w, x_zero_point, w_zero_point).to_dtype(c.f64)
    if bias is not None:
        acc = acc + bias.to_dtype(c.f64).reshape((1, -1) + (1,) * (acc.rank - 2))
    ws = w_scale.to_dtype(c.f64)
    scale = x_scale.to_dtype(c.f64).reshape(()) * (ws.reshape((1, -1) + (1,) * (acc.rank - 2)) if ws.numel() > 1
                                                   else ws.reshape(()))
    return _requantize(node, acc, scale, y_scale, y_zero_point, 7)
