"""Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and Q8_1: blocks of 32 values sharing one
f16 scale ``d`` (and a minimum ``m`` for the ``_1`` types).

Quantization follows ggml's ``quantize_row_q*_ref`` step for step (the same
float32 operations in the same order, C's truncating casts and ``roundf``),
so the bytes agree bit for bit with ggml and gguf-py; dequantization follows
``dequantize_row_q*``. Q8_1 is an activation format: ``s`` caches ``d`` times
the sum of the quants for the dot products that use it.
"""

from __future__ import annotations

import numpy as np

from ._blocks import F32, c_int, f32, inverse, pack_nibbles, records, round_away, signed_absmax, unpack_nibbles

QK = 32

BLOCK_Q4_0 = np.dtype([("d", "<f2"), ("qs", "u1", QK // 2)])
BLOCK_Q4_1 = np.dtype([("d", "<f2"), ("m", "<f2"), ("qs", "u1", QK // 2)])
BLOCK_Q5_0 = np.dtype([("d", "<f2"), ("qh", "u1", 4), ("qs", "u1", QK // 2)])
BLOCK_Q5_1 = np.dtype([("d", "<f2"), ("m", "<f2"), ("qh", "u1", 4), ("qs", "u1", QK // 2)])
BLOCK_Q8_0 = np.dtype([("d", "<f2"), ("qs", "i1", QK)])
BLOCK_Q8_1 = np.dtype([("d", "<f2"), ("s", "<f2"), ("qs", "i1", QK)])


def _byte_level(v: np.ndarray, top: int) -> np.ndarray:
    """ggml's ``MIN(top, (int8_t)v)`` stored in a uint8_t."""
    return np.minimum(c_int(v).astype(np.int8), top).astype(np.uint8)


def _symmetric(x: np.ndarray, levels: int, top: int) -> tuple[np.ndarray, np.ndarray]:
    """(d, quants) with d = (value of largest magnitude) / -levels and quants
    ``MIN(top, (int8_t)(x/d + levels + 0.5))``, as Q4_0 and Q5_0 do."""
    d = signed_absmax(x) / F32(-levels)
    return d, _byte_level(x * inverse(d)[:, None] + F32(levels + 0.5), top)


def _affine(x: np.ndarray, top: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(d, min, quants) with d = (max - min) / top, as Q4_1 and Q5_1 do."""
    lo, hi = x.min(axis=1), x.max(axis=1)
    d = (hi - lo) / F32(top)
    return d, lo, _byte_level((x - lo[:, None]) * inverse(d)[:, None] + F32(0.5), top)


def _split5(q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """5-bit quants -> (qh: bit 4 of quant j in bit j of a little-endian u32, qs: the low nibbles)."""
    return np.packbits(q >> 4, axis=1, bitorder="little"), pack_nibbles(q & 15)


def _join5(b: np.ndarray) -> np.ndarray:
    return unpack_nibbles(b["qs"]) | (np.unpackbits(b["qh"], axis=1, bitorder="little") << 4)


def _q8(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    d = np.abs(x).max(axis=1) / F32(127)
    return d, c_int(round_away(x * inverse(d)[:, None])).astype(np.int8)


def quantize_q4_0(x):
    d, q = _symmetric(x, 8, 15)
    return records(BLOCK_Q4_0, d=d, qs=pack_nibbles(q))


def dequantize_q4_0(b):
    q = unpack_nibbles(b["qs"]).astype(np.int8) - np.int8(8)
    return q.astype(F32) * f32(b["d"])[:, None]


def quantize_q4_1(x):
    d, lo, q = _affine(x, 15)
    return records(BLOCK_Q4_1, d=d, m=lo, qs=pack_nibbles(q))


def dequantize_q4_1(b):
    return unpack_nibbles(b["qs"]).astype(F32) * f32(b["d"])[:, None] + f32(b["m"])[:, None]


def quantize_q5_0(x):
    d, q = _symmetric(x, 16, 31)
    qh, qs = _split5(q)
    return records(BLOCK_Q5_0, d=d, qh=qh, qs=qs)


def dequantize_q5_0(b):
    q = _join5(b).astype(np.int8) - np.int8(16)
    return q.astype(F32) * f32(b["d"])[:, None]


def quantize_q5_1(x):
    d, lo, q = _affine(x, 31)
    qh, qs = _split5(q)
    return records(BLOCK_Q5_1, d=d, m=lo, qh=qh, qs=qs)


def dequantize_q5_1(b):
    return _join5(b).astype(F32) * f32(b["d"])[:, None] + f32(b["m"])[:, None]


def quantize_q8_0(x):
    d, q = _q8(x)
    return records(BLOCK_Q8_0, d=d, qs=q)


def dequantize_q8_0(b):
    return b["qs"].astype(F32) * f32(b["d"])[:, None]


def quantize_q8_1(x):
    d, q = _q8(x)
    s = q.sum(axis=1, dtype=np.int32).astype(F32) * d
    return records(BLOCK_Q8_1, d=d, s=s, qs=q)


dequantize_q8_1 = dequantize_q8_0
