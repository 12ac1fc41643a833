"""The integer products of quantized models on candle-api's int8 kernels
(candle_api.ops.int8): MatMulInteger, ConvInteger, QLinearMatMul,
QLinearConv, MatMulIntegerToFloat, DynamicQuantizeMatMul (ops_quant.py and
ops_contrib.py route to here) and DynamicQuantizeLSTM's gate products.

A constant int8 or uint8 weight is packed once when the model is planned
(:func:`pack_int8`, the ops' pack hook) into :class:`Int8Weights`. Activations
take the kernel as u8 with one zero point: int8 ones are shifted by 128 (and
their zero point with them), which changes no difference. A convolution
gathers its patches (a strided view of the input padded with its zero
point, made contiguous) and multiplies them by the weights of each group.
What the kernels do not take (a zero point per row, weights that are not
constant) stays on the float64 path of ops_quant.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import candle_api as c
from candle_api.layout import Layout
from candle_api.ops import int8
from candle_api.ops.core import view

from .dtypes import INT8, UINT8


@dataclass(frozen=True)
class Int8Weights:
    """Weights packed for matmul_int8, one per group of output channels (one for a
    matmul): ``shape`` is the weight's ONNX shape, ``shift`` 128 when they are uint8
    (stored minus 128), else 0."""

    packed: tuple
    shape: tuple
    shift: int
    groups: int = 1


def pack_int8(node, index: int, w, weight_index: int = 1):
    """The pack hook: a constant int8 or uint8 weight at ``weight_index``, 2-d for a
    matmul, 3-d or 4-d for a convolution."""
    t = node.in_types[index] if index < len(node.in_types) else None
    if index != weight_index or t is None or t.code not in (INT8, UINT8) or w.rank not in (2, 3, 4):
        return None
    shift = 128 if t.code == UINT8 else 0
    if w.rank == 2:
        return Int8Weights((int8.pack_int8_panels(w),), w.shape, shift)
    groups = node.get("group", 1)
    m = w.shape[0] // groups
    flat = w.reshape(w.shape[0], -1)
    packed = tuple(int8.pack_int8_panels(flat.narrow(0, g * m, m).t().contiguous()) for g in range(groups))
    return Int8Weights(packed, w.shape, shift, groups)


def _per_tensor(t) -> bool:
    return t is None or t.numel() == 1


def takes(a, a_zero_point) -> bool:
    """Whether the kernels take this activation: u8 or int8, one zero point."""
    return a.dtype in (c.u8, c.i16) and _per_tensor(a_zero_point)


def activation(a, a_zero_point, a_type):
    """(a as u8, its zero point as a 1-element u8 tensor or None): int8 values shifted by 128."""
    if a_type.code == INT8:
        shifted = (a.to_dtype(c.i32) + 128).to_dtype(c.u8)
        zp = (a_zero_point.reshape(1).to_dtype(c.i32) + 128 if a_zero_point is not None
              else c.full((1,), 128, dtype=c.i32, device=a.device))
        return shifted, zp.to_dtype(c.u8)
    return a, None if a_zero_point is None else a_zero_point.reshape(1).to_dtype(c.u8)


def weight_zero_point(w: Int8Weights, zero_point, count: int):
    """The weights' zero point(s) in the stored domain, as the kernel takes them (or None for 0)."""
    if zero_point is None:
        return c.full((1,), -w.shift, dtype=c.i32, device=w.packed[0].device) if w.shift else None
    zp = zero_point.reshape(-1).to_dtype(c.i32)
    if zp.numel() not in (1, count):
        raise ValueError(f"a weight zero point of shape {zero_point.shape} for {count} output channels")
    return zp - w.shift if w.shift else zp


def matmul(a, a_zp, a_type, w: Int8Weights, b_zp, a_scale=None, b_scale=None, bias=None):
    """(a - a_zp) @ (W - b_zp) for packed W (k, n): i32, or f32 with the scales (and bias)."""
    n = w.shape[1]
    a, zp = activation(a, a_zp, a_type)
    return int8.matmul_int8(a, w.packed[0], n, zp, weight_zero_point(w, b_zp, n), _vec(a_scale), _vec(b_scale),
                            bias)


def _vec(t):
    return None if t is None else t.reshape(-1).to_dtype(c.f32)


def _padded(x, pads: list, fill):
    """x (N, C, *spatial) padded by (begin, end) per spatial dim with the value of the 1-element tensor fill."""
    for d, (b, e) in enumerate(pads, start=2):
        parts = [x]
        for amount, where in ((b, 0), (e, 1)):
            if amount:
                shape = x.shape[:d] + (amount,) + x.shape[d + 1:]
                block = fill.reshape((1,) * x.rank).broadcast_as(shape)
                parts.insert(0 if where == 0 else len(parts), block)
        x = c.cat(parts, d) if len(parts) > 1 else x
    return x


def conv(x, x_zp, x_type, w: Int8Weights, w_zp, pads, strides, dilations):
    """The i32 sums of ConvInteger (1-d or 2-d): patches of x padded with its zero point, by group."""
    one_d = x.rank == 3
    if one_d:
        x, pads, strides, dilations = x.unsqueeze(2), [(0, 0), *pads], [1, *strides], [1, *dilations]
    kernel = w.shape[2:] if not one_d else (1, *w.shape[2:])
    x, zp = activation(x, x_zp, x_type)
    fill = zp if zp is not None else c.zeros((1,), dtype=c.u8, device=x.device)
    x = _padded(x, pads, fill).contiguous()
    n, ch, h, width = x.shape
    oh = (h - dilations[0] * (kernel[0] - 1) - 1) // strides[0] + 1
    ow = (width - dilations[1] * (kernel[1] - 1) - 1) // strides[1] + 1
    m, cg = w.shape[0] // w.groups, ch // w.groups
    zb = weight_zero_point(w, w_zp, w.shape[0])
    outs = []
    for g in range(w.groups):
        s = x._layout.strides
        patches = view(x, Layout((n, oh, ow, cg, kernel[0], kernel[1]),
                                 (s[0], s[2] * strides[0], s[3] * strides[1], s[1], s[2] * dilations[0],
                                  s[3] * dilations[1]), x._layout.offset + g * cg * s[1]))
        rows = patches.contiguous().reshape(n, oh * ow, cg * kernel[0] * kernel[1])
        zg = zb if zb is None or zb.numel() == 1 else zb.narrow(0, g * m, m)
        outs.append(int8.matmul_int8(rows, w.packed[g], m, zp, zg))
    y = (outs[0] if len(outs) == 1 else c.cat(outs, 2)).transpose(1, 2).reshape(n, w.shape[0], oh, ow)
    return y.squeeze(2) if one_d else y


def conv_takes(x, x_zero_point, w) -> bool:
    return isinstance(w, Int8Weights) and takes(x, x_zero_point) and len(w.shape) in (3, 4) and \
        math.prod(w.shape[1:]) <= 65536
