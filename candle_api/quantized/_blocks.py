"""Helpers shared by the block codecs: building block records, ggml's
rounding rules and the bit packings the block layouts use.

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
    all-zero row): ggml's ``if (amax < fabsf(v)) { amax = fabsf(v); max = v; }``."""
    mag = np.abs(x)
    top = np.take_along_axis(x, mag.argmax(axis=1)[:, None], axis=1)[:, 0]
    return np.where(mag.max(axis=1) == 0, F32(0), top)


def nearest(v: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """ggml's ``MAX(lo, MIN(hi, nearest_int(v)))`` (round half to even), as float32."""
    return np.clip(np.rint(v), lo, hi).astype(F32)


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
