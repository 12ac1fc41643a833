"""Helpers shared by the block codecs: building block records, ggml's
rounding rules and float sums, and the bit packings the block layouts use.

Every function works on all blocks at once (one block, or sub-block, per
row); nothing here loops over blocks.
"""

from __future__ import annotations

import numpy as np

F32 = np.float32

#: ggml's threshold under which a group of values counts as all zero.
GROUP_MAX_EPS = F32(1e-15)


def records(block: np.dtype, **fields) -> np.ndarray:
    """One ``block`` record per row of the given field values."""
    n = len(next(iter(fields.values())))
    out = np.zeros(n, block)
    for name, value in fields.items():
        out[name] = value
    return out


def f32(half: np.ndarray) -> np.ndarray:
    """An f16 field as float32 (GGML_FP16_TO_FP32)."""
    return half.astype(F32)


def inverse(d: np.ndarray) -> np.ndarray:
    """1/d, and 0 where d is 0 (ggml's ``d ? 1.0f/d : 0.0f``)."""
    return np.where(d == 0, F32(0), F32(1) / np.where(d == 0, F32(1), d))


def signed_absmax(x: np.ndarray) -> np.ndarray:
    """Per row, the first value of largest magnitude, sign kept (0 for an
    all-zero row): ggml's ``if (amax < fabsf(v)) { amax = fabsf(v); max = v; }``,
    where a NaN never wins (overflowing sums produce them)."""
    mag = np.abs(x)
    mag = np.where(np.isnan(mag), F32(0), mag)
    top = np.take_along_axis(x, mag.argmax(axis=1)[:, None], axis=1)[:, 0]
    return np.where(mag.max(axis=1) == 0, F32(0), top)


def nearest_int(v: np.ndarray) -> np.ndarray:
    """ggml's ``nearest_int`` (int32): adding 1.5 * 2^23 leaves the integer in
    the low mantissa bits. Round half to even for |v| < 2^22; beyond that, and
    for the inf and NaN that degenerate scales produce, the same values as ggml."""
    return ((np.asarray(v, F32) + F32(12582912)).view(np.int32) & 0x7FFFFF) - 0x400000


def nearest(v: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """ggml's ``MAX(lo, MIN(hi, nearest_int(v)))``, as float32."""
    return np.clip(nearest_int(v), lo, hi).astype(F32)


def c_int(v: np.ndarray) -> np.ndarray:
    """C's truncating ``(int)`` of float32 values (int32), with x86's INT_MIN where
    C leaves it undefined (NaN, out of range): ggml meets that when a block's scale
    is so small that its inverse overflows."""
    v = np.asarray(v, F32)
    ok = (v >= F32(-2.0**31)) & (v < F32(2.0**31))
    return np.where(ok, np.trunc(np.where(ok, v, F32(0))), F32(-2.0**31)).astype(np.int32)


def ordered_sum(a: np.ndarray, from_zero: bool = True) -> np.ndarray:
    """Per row, the float32 sum of a C loop: left to right, from 0 (or from the
    first term). NumPy's own sum adds pairwise, which rounds differently, and
    ggml's scale searches compare sums that differ in the last bit."""
    total = np.zeros(len(a), F32) if from_zero else a[:, 0].astype(F32)
    for column in a.T[0 if from_zero else 1:]:
        total += column
    return total


def round_away(v: np.ndarray) -> np.ndarray:
    """C's ``roundf`` (half away from zero). ``floor(v + 0.5)`` would round
    0.49999997 up, so the fraction is doubled instead: exact in float32."""
    a = np.abs(v)
    whole = np.floor(a)
    return np.copysign(whole + np.floor(2 * (a - whole)), v)


def pack_nibbles(q: np.ndarray) -> np.ndarray:
    """(n, 2k) values below 16 -> (n, k) bytes: the first half of each row in
    the low nibbles, the second half in the high nibbles."""
    k = q.shape[1] // 2
    return q[:, :k] | (q[:, k:] << 4)


def unpack_nibbles(b: np.ndarray) -> np.ndarray:
    return np.concatenate([b & 15, b >> 4], axis=1)


_CRUMB_SHIFTS = np.array([0, 2, 4, 6], dtype=np.uint8)


def pack_crumbs(q: np.ndarray, width: int) -> np.ndarray:
    """(n, 4*width*m) values below 4 -> (n, width*m) bytes: in each group of
    ``4*width`` values, byte ``l`` holds values ``l, l+width, l+2*width,
    l+3*width`` at bits 0, 2, 4, 6."""
    n = q.shape[0]
    parts = q.reshape(n, -1, 4, width) << _CRUMB_SHIFTS[:, None]
    return np.bitwise_or.reduce(parts, axis=2).reshape(n, -1)


def unpack_crumbs(b: np.ndarray, width: int) -> np.ndarray:
    n = b.shape[0]
    return ((b.reshape(n, -1, 1, width) >> _CRUMB_SHIFTS[:, None]) & 3).reshape(n, -1)


_BIT_SHIFTS = np.arange(8, dtype=np.uint8)


def pack_bit_planes(bits: np.ndarray) -> np.ndarray:
    """(n, 256) bits -> (n, 32) bytes: value ``e`` goes to bit ``e // 32`` of
    byte ``e % 32`` (the high bits of Q3_K and Q5_K)."""
    n = bits.shape[0]
    planes = bits.reshape(n, 8, 32).astype(np.uint8) << _BIT_SHIFTS[:, None]
    return np.bitwise_or.reduce(planes, axis=1)


def unpack_bit_planes(b: np.ndarray) -> np.ndarray:
    return ((b[:, None, :] >> _BIT_SHIFTS[:, None]) & 1).reshape(len(b), -1)
