"""IQ4_NL, IQ4_XS and MXFP4: 4-bit indices into a fixed grid of 16 values.

IQ4_NL and IQ4_XS share a non-linear grid, denser near 0: IQ4_NL scales each
block of 32 values by an f16 ``d``; IQ4_XS scales super-blocks of 256 by an
f16 ``d`` and each 32 of them by a 6-bit level (``scales_l`` holds the low
nibbles, ``scales_h`` the top 2 bits). MXFP4 stores E2M1 floats (4-bit: sign,
2-bit exponent, 1-bit mantissa) against a power-of-two (E8M0) scale ``e``
per block of 32.

Quantization follows ggml step for step, so the bytes agree bit for bit:
``quantize_iq4_nl`` and ``quantize_iq4_xs`` without importance weights (what
llama.cpp writes to files; ggml's ``quantize_row_iq4_nl_ref`` runs a reduced
search meant for activations) and ``quantize_row_mxfp4_ref``.
Dequantization follows ``dequantize_row_*``.
"""

from __future__ import annotations

import numpy as np

from ._blocks import (
    F32, GROUP_MAX_EPS, c_int, f32, inverse, nearest_int, ordered_sum, pack_nibbles, records, signed_absmax,
    unpack_nibbles,
)

QK = 32
QK_K = 256

BLOCK_IQ4_NL = np.dtype([("d", "<f2"), ("qs", "u1", QK // 2)])
BLOCK_IQ4_XS = np.dtype([("d", "<f2"), ("scales_h", "<u2"), ("scales_l", "u1", QK_K // 64), ("qs", "u1", QK_K // 2)])
BLOCK_MXFP4 = np.dtype([("e", "u1"), ("qs", "u1", QK // 2)])

#: The IQ4 grid, ascending.
KVALUES_IQ4NL = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], np.int8)
#: The E2M1 values, doubled (so integers): index = the 4-bit code.
KVALUES_MXFP4 = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], np.int8)

_GRID = KVALUES_IQ4NL.astype(F32)
_FP4 = KVALUES_MXFP4.astype(F32)


# ---- IQ4_NL and IQ4_XS -----------------------------------------------------------------

def _grid_index(v: np.ndarray) -> np.ndarray:
    """The index of the grid value nearest ``v``, the upper one on a tie (ggml's
    best_index_int8; NaN gives the last)."""
    hi = np.clip(np.searchsorted(_GRID, v, side="right"), 1, len(_GRID) - 1)
    return np.where(v - _GRID[hi - 1] < _GRID[hi] - v, hi - 1, hi)


def _grid_sums(x, w, iscale):
    """sum(w q x) and sum(w q q) of each row's values on the grid (q the grid values)."""
    q = _GRID[_grid_index(iscale[:, None] * x)]
    return ordered_sum(w * q * x), ordered_sum(w * q * q)


def _iq4_scales(x: np.ndarray) -> np.ndarray:
    """One scale per row of 32 values: the grid fitted to the largest magnitude,
    then 15 trial scales around it, the best by least squares weighted x^2;
    0 for an all-zero row."""
    top = signed_absmax(x)
    zero = np.abs(top) < GROUP_MAX_EPS
    top = np.where(zero, F32(1), top)
    w = x * x
    sumqx, sumq2 = _grid_sums(x, w, F32(1) / (-top / _GRID[0]))
    d = np.where(sumq2 > 0, sumqx / np.where(sumq2 > 0, sumq2, F32(1)), F32(0))
    best = d * sumqx
    for itry in range(-7, 8):
        sumqx, sumq2 = _grid_sums(x, w, F32(itry + int(KVALUES_IQ4NL[0])) / top)
        win = (sumq2 > 0) & (sumqx * sumqx > best * sumq2)
        d = np.where(win, sumqx / np.where(win, sumq2, F32(1)), d)
        best = np.where(win, d * sumqx, best)
    return np.where(zero, F32(0), d)


def _grid_nibbles(x, iscale):
    """(n, 32) values on the grid at inverse scale ``iscale`` (one per row) -> (n, 16) bytes."""
    return pack_nibbles(_grid_index(iscale[:, None] * x).astype(np.uint8))


def _grid_values(qs, d):
    """(n, 16) bytes at scale ``d`` (one per row) -> (n, 32) values."""
    return d[:, None] * _GRID[unpack_nibbles(qs)]


def quantize_iq4_nl(x):
    d = _iq4_scales(x)
    return records(BLOCK_IQ4_NL, d=d, qs=_grid_nibbles(x, inverse(d)))


def dequantize_iq4_nl(b):
    return _grid_values(b["qs"], f32(b["d"]))


_SCALE_H_SHIFTS = 2 * np.arange(QK_K // 32, dtype=np.uint16)


def quantize_iq4_xs(x):
    n = len(x)
    sub = x.reshape(-1, 32)
    scales = _iq4_scales(sub).reshape(n, 8)
    d = -signed_absmax(scales) / F32(32)
    level = np.clip(nearest_int(inverse(d)[:, None] * scales), -32, 31)
    dl = (d[:, None] * level.astype(F32)).reshape(-1)
    level = (level + 32).astype(np.uint8)
    return records(BLOCK_IQ4_XS, d=d,
                   scales_h=np.bitwise_or.reduce((level >> 4).astype(np.uint16) << _SCALE_H_SHIFTS, axis=1),
                   scales_l=(level[:, 0::2] & 15) | ((level[:, 1::2] & 15) << 4),
                   qs=_grid_nibbles(sub, inverse(dl)).reshape(n, -1))


def dequantize_iq4_xs(b):
    n = len(b)
    low = np.stack([b["scales_l"] & 15, b["scales_l"] >> 4], axis=2).reshape(n, 8)
    high = (b["scales_h"][:, None] >> _SCALE_H_SHIFTS) & 3
    dl = f32(b["d"])[:, None] * ((low | (high << 4)).astype(F32) - 32)
    return _grid_values(b["qs"].reshape(-1, 16), dl.reshape(-1)).reshape(n, QK_K)


# ---- MXFP4 -------------------------------------------------------------------------------

def _e8m0_half(e: np.ndarray) -> np.ndarray:
    """2^(e - 128) as float32 (the E8M0 scale halved, as the E2M1 values are doubled)."""
    e = e.astype(np.uint32)
    bits = np.where(e < 2, np.uint32(0x00200000) << e, (e - 1) << 23)
    return bits.astype(np.uint32).view(F32)


def _log2f(v: np.ndarray) -> np.ndarray:
    """log2 of float32 values rounded to float32, as C's log2f (glibc's agrees
    with the correctly rounded value wherever the floor of it matters)."""
    return np.log2(v.astype(np.float64)).astype(F32)


def quantize_mxfp4(x):
    amax = np.abs(signed_absmax(x))
    exponent = np.floor(_log2f(np.where(amax > 0, amax, F32(1)))) - F32(2) + F32(127)
    # ggml converts that float straight to a byte: below 2^-125 it is negative and wraps
    e = np.where(amax > 0, c_int(exponent), 0).astype(np.uint8)
    d = _e8m0_half(e)[:, None]
    best = np.zeros(x.shape, np.uint8)
    best_err = np.abs(_FP4[0] * d - x)
    for i in range(1, len(_FP4)):  # the first of equally near values wins
        err = np.abs(_FP4[i] * d - x)
        better = err < best_err
        best = np.where(better, np.uint8(i), best)
        best_err = np.where(better, err, best_err)
    return records(BLOCK_MXFP4, e=e, qs=pack_nibbles(best))


def dequantize_mxfp4(b):
    return _FP4[unpack_nibbles(b["qs"])] * _e8m0_half(b["e"])[:, None]
