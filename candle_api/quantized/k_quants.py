"""The K-quants: super-blocks of 256 values split into sub-blocks of 16 or 32,
whose own scales (and mins) are quantized against one f16 super-scale.

Quantization implements ggml's reference ``quantize_row_q*_K_ref`` (the
search for good sub-block scales in ``make_qkx2_quants``, ``make_q3_quants``
and ``make_qx_quants``, then the requantization against the stored scales)
vectorized over all sub-blocks: the loops that remain run over trial scales or
positions inside a sub-block, never over blocks. Float32 sums are taken in C's
order (ggml compares trial scales whose fits differ in the last bit) and
integers are stored as C stores them, so the bytes agree with ggml bit for
bit. Dequantization follows ``dequantize_row_q*_K`` exactly. Q8_K is the
activation format of the K-quant dot products (f32 scale, per-16 sums of the
quants).
"""

from __future__ import annotations

import numpy as np

from ._blocks import (
    F32, GROUP_MAX_EPS, f32, nearest, nearest_int, ordered_sum, pack_bit_planes, pack_crumbs, pack_nibbles,
    records, signed_absmax, unpack_bit_planes, unpack_crumbs, unpack_nibbles,
)

QK_K = 256

BLOCK_Q2_K = np.dtype([("scales", "u1", 16), ("qs", "u1", 64), ("d", "<f2"), ("dmin", "<f2")])
BLOCK_Q3_K = np.dtype([("hmask", "u1", 32), ("qs", "u1", 64), ("scales", "u1", 12), ("d", "<f2")])
BLOCK_Q4_K = np.dtype([("d", "<f2"), ("dmin", "<f2"), ("scales", "u1", 12), ("qs", "u1", 128)])
BLOCK_Q5_K = np.dtype([("d", "<f2"), ("dmin", "<f2"), ("scales", "u1", 12), ("qh", "u1", 32), ("qs", "u1", 128)])
BLOCK_Q6_K = np.dtype([("ql", "u1", 128), ("qh", "u1", 64), ("scales", "i1", 16), ("d", "<f2")])
BLOCK_Q8_K = np.dtype([("d", "<f4"), ("qs", "i1", QK_K), ("bsums", "<i2", QK_K // 16)])


# ---- scale searches (one sub-block per row) ----------------------------------------

def make_qkx2_quants(x, w, nmax: int, rmin: float, rdelta: float, nstep: int, use_mad: bool):
    """Levels 0..nmax with ``x ~ scale*L - min`` minimizing the weighted error
    over ``nstep+1`` trial scales, each refined by weighted least squares.
    Returns (scale, min, L); min >= 0 is subtracted."""
    lo = np.minimum(x.min(axis=1), 0)
    hi = x.max(axis=1)
    flat = hi == lo
    sum_w = ordered_sum(w, from_zero=False)
    sum_x = ordered_sum(w * x, from_zero=False)

    def levels(iscale, lo):
        return nearest(iscale[:, None] * (x - lo[:, None]), 0, nmax)

    def error(scale, lo, L):
        diff = scale[:, None] * L + lo[:, None] - x
        return ordered_sum(w * (np.abs(diff) if use_mad else diff * diff))

    span = np.where(flat, F32(1), hi - lo)
    iscale = nmax / span
    scale = F32(1) / iscale
    L = levels(iscale, lo)
    best = error(scale, lo, L)
    for step in range(nstep + 1):
        # ggml moves the min as soon as a trial wins, so later trials start from it
        trial = levels((F32(rmin) + F32(rdelta) * F32(step) + F32(nmax)) / np.where(flat, F32(1), hi - lo), lo)
        sum_l = ordered_sum(w * trial)
        sum_l2 = ordered_sum(w * trial * trial)
        sum_xl = ordered_sum(w * trial * x)
        det = sum_w * sum_l2 - sum_l * sum_l
        this_scale = (sum_w * sum_xl - sum_x * sum_l) / det
        this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det
        positive = this_min > 0  # the min may only lower values: refit the scale alone
        this_scale = np.where(positive, sum_xl / sum_l2, this_scale)
        this_min = np.where(positive, F32(0), this_min)
        err = error(this_scale, this_min, trial)
        win = (det > 0) & (err < best) & ~flat
        L = np.where(win[:, None], trial, L)
        best = np.where(win, err, best)
        scale = np.where(win, this_scale, scale)
        lo = np.where(win, this_min, lo)
    return np.where(flat, F32(0), scale), -lo, np.where(flat[:, None], F32(0), L)


def _weighted_sums(x, w, L):
    return ordered_sum(w * x * L), ordered_sum(w * L * L)


def make_q3_quants(x, nmax: int):
    """Symmetric levels -nmax..nmax-1 for Q3_K: start from the largest value,
    then move single levels while that improves the x^2-weighted fit (5
    passes at most). Returns (scale, L + nmax)."""
    top = signed_absmax(x)
    zero = np.abs(top) < GROUP_MAX_EPS
    L = nearest((-nmax / np.where(zero, F32(1), top))[:, None] * x, -nmax, nmax - 1)
    w = x * x
    sumlx, suml2 = _weighted_sums(x, w, L)
    for _ in range(5):
        moved = np.zeros(len(x), dtype=bool)
        for i in range(x.shape[1]):  # sequential within a sub-block: each move changes the sums
            xi, wi, li = x[:, i], w[:, i], L[:, i]
            slx = sumlx - wi * xi * li
            sl2 = suml2 - wi * li * li
            new = nearest(xi * sl2 / np.where(slx > 0, slx, F32(1)), -nmax, nmax - 1)
            slx_new = slx + wi * xi * new
            sl2_new = sl2 + wi * new * new
            take = (slx > 0) & (new != li) & (sl2_new > 0) & (slx_new * slx_new * suml2 > sumlx * sumlx * sl2_new)
            L[:, i] = np.where(take, new, li)
            sumlx = np.where(take, slx_new, sumlx)
            suml2 = np.where(take, sl2_new, suml2)
            moved |= take
        if not moved.any():  # a pass that moves nothing would repeat itself
            break
    scale = np.where(suml2 > 0, sumlx / np.where(suml2 > 0, suml2, F32(1)), F32(0))
    return np.where(zero, F32(0), scale), np.where(zero[:, None], F32(0), L + nmax)


def make_qx_quants(x, nmax: int):
    """Symmetric levels -nmax..nmax-1 (Q6_K: ggml's rmse_type 1, weights
    x^2): the best of 19 trial scales around -nmax/max by weighted least
    squares. Returns (scale, L + nmax)."""
    top = signed_absmax(x)
    zero = np.abs(top) < GROUP_MAX_EPS
    top = np.where(zero, F32(1), top)
    w = x * x

    def trial(levels):
        L = nearest((-levels / top)[:, None] * x, -nmax, nmax - 1)
        return (L, *_weighted_sums(x, w, L))

    L, sumlx, suml2 = trial(F32(nmax))
    scale = np.where(suml2 != 0, sumlx / np.where(suml2 != 0, suml2, F32(1)), F32(0))
    best = scale * sumlx
    for step in (*range(-9, 0), *range(1, 10)):
        cand, sumlx, suml2 = trial(F32(nmax) + F32(0.1) * F32(step))
        win = (suml2 > 0) & (sumlx * sumlx > best * suml2)
        L = np.where(win[:, None], cand, L)
        scale = np.where(win, sumlx / np.where(win, suml2, F32(1)), scale)
        best = np.where(win, scale * sumlx, best)
    return np.where(zero, F32(0), scale), np.where(zero[:, None], F32(0), L + nmax)


# ---- shared steps ----------------------------------------------------------------------

def _scale_levels(values, top: int, cap: int = 255):
    """Sub-block scales (or mins) as levels 0..top of the block's largest:
    (levels as uint8, f16 super-scale), both 0 for a block whose values are all
    <= 0. As ggml, the level is stored in a byte (wrapping) and then capped at
    ``cap``; a negative value could wrap, none does in practice."""
    vmax = np.maximum(values.max(axis=1), 0)
    inv = np.where(vmax > 0, top / np.where(vmax > 0, vmax, F32(1)), F32(0))
    levels = np.minimum(nearest_int(inv[:, None] * values).astype(np.uint8), cap)
    return levels, (vmax / F32(top)).astype(np.float16)


def _requantize(sub, L, d, ls, dmin, lm, nmax: int):
    """Levels against the scales actually stored (f16 super-scale times level);
    sub-blocks whose stored scale is 0 keep the levels of the search."""
    dq = (f32(d)[:, None] * ls).reshape(-1)
    dm = (f32(dmin)[:, None] * lm).reshape(-1)
    fresh = nearest((sub + dm[:, None]) / np.where(dq != 0, dq, F32(1))[:, None], 0, nmax)
    return np.where((dq != 0)[:, None], fresh, L)


def _symmetric_requantize(sub, L, dq, nmax: int):
    fresh = nearest(sub / np.where(dq != 0, dq, F32(1))[:, None], -nmax, nmax - 1) + nmax
    return np.where((dq != 0)[:, None], fresh, L)


def _sub_scales(d, levels, signed_offset: int = 0):
    """Per sub-block scale d * (level - offset), flattened to one per sub-block row."""
    return (f32(d)[:, None] * (levels - signed_offset)).reshape(-1)


def _pack_scale_min_k4(ls, lm):
    """8 six-bit scales and mins -> 12 bytes (ggml's get_scale_min_k4 layout)."""
    return np.concatenate([
        ls[:, :4] | ((ls[:, 4:] >> 4) << 6),
        lm[:, :4] | ((lm[:, 4:] >> 4) << 6),
        (ls[:, 4:] & 15) | ((lm[:, 4:] & 15) << 4),
    ], axis=1)


def _unpack_scale_min_k4(s):
    a, b, c = s[:, :4], s[:, 4:8], s[:, 8:]
    sc = np.concatenate([a & 63, (c & 15) | ((a >> 6) << 4)], axis=1)
    m = np.concatenate([b & 63, (c >> 4) | ((b >> 6) << 4)], axis=1)
    return sc, m


def _pack_q3_scales(levels):
    """16 six-bit scales -> 12 bytes: low nibbles in bytes 0-7, high crumbs in 8-11."""
    return np.concatenate([pack_nibbles(levels & 15), pack_crumbs(levels >> 4, 4)], axis=1)


def _unpack_q3_scales(s):
    return unpack_nibbles(s[:, :8]) | (unpack_crumbs(s[:, 8:], 4) << 4)


# ---- Q2_K ------------------------------------------------------------------------------

def quantize_q2_k(x):
    n = len(x)
    sub = x.reshape(-1, 16)
    scales, mins, L = make_qkx2_quants(sub, np.abs(sub), 3, -0.5, 0.1, 15, use_mad=True)
    ls, d = _scale_levels(scales.reshape(n, 16), 15)
    lm, dmin = _scale_levels(mins.reshape(n, 16), 15)
    packed = ls | (lm << 4)
    L = _requantize(sub, L, d, packed & 15, dmin, packed >> 4, 3).reshape(n, QK_K).astype(np.uint8)
    return records(BLOCK_Q2_K, scales=packed, qs=pack_crumbs(L, 32), d=d, dmin=dmin)


def dequantize_q2_k(b):
    n = len(b)
    dl = (f32(b["d"])[:, None] * (b["scales"] & 15).astype(F32)).reshape(n, 16, 1)
    ml = (f32(b["dmin"])[:, None] * (b["scales"] >> 4).astype(F32)).reshape(n, 16, 1)
    q = unpack_crumbs(b["qs"], 32).reshape(n, 16, 16).astype(F32)
    return (dl * q - ml).reshape(n, QK_K)


def _int8_capped(v):
    """ggml's ``MIN(127, nearest_int(v))`` stored in an int8_t (no lower clamp: it wraps)."""
    return np.minimum(nearest_int(v), 127).astype(np.int8)


def _signed_scale(top, live, nmax: int):
    """ggml's per-block scale from the signed absmax ``top``: iscale = -nmax / top
    and d = 1 / iscale where ``live``, both 0 elsewhere (f32)."""
    iscale = np.where(live, F32(-nmax) / np.where(live, top, F32(1)), F32(0))
    return iscale, np.where(live, F32(1) / np.where(live, iscale, F32(1)), F32(0))


# ---- Q3_K ------------------------------------------------------------------------------

def quantize_q3_k(x):
    n = len(x)
    sub = x.reshape(-1, 16)
    scales, L = make_q3_quants(sub, 4)
    scales = scales.reshape(n, 16)
    top = signed_absmax(scales)
    live = top != 0
    iscale, d = _signed_scale(top, live, 32)
    levels = np.clip(nearest_int(iscale[:, None] * scales).astype(np.int8), -32, 31) + 32  # int8 before the clamp
    levels = np.where(live[:, None], levels, 0).astype(F32)
    d = d.astype(np.float16)
    L = _symmetric_requantize(sub, L, _sub_scales(d, levels, 32), 4).reshape(n, QK_K).astype(np.uint8)
    return records(BLOCK_Q3_K, hmask=pack_bit_planes(L >> 2), qs=pack_crumbs(L & 3, 32),
                   scales=_pack_q3_scales(levels.astype(np.uint8)), d=d)


def dequantize_q3_k(b):
    n = len(b)
    dl = (f32(b["d"])[:, None] * (_unpack_q3_scales(b["scales"]).astype(F32) - 32)).reshape(n, 16, 1)
    low = unpack_crumbs(b["qs"], 32).astype(np.int8)
    q = low - np.where(unpack_bit_planes(b["hmask"]) == 1, np.int8(0), np.int8(4))  # a clear high bit means -4
    return (dl * q.reshape(n, 16, 16).astype(F32)).reshape(n, QK_K)


# ---- Q4_K and Q5_K ---------------------------------------------------------------------

def _quantize_q45_k(x, nmax: int, rmin: float, nstep: int):
    """(d, dmin, packed scales, levels) shared by Q4_K and Q5_K: sub-blocks of
    32 weighted by ``rms + |x|``."""
    n = len(x)
    sub = x.reshape(-1, 32)
    rms = np.sqrt(ordered_sum(sub * sub) / F32(32))
    scales, mins, L = make_qkx2_quants(sub, rms[:, None] + np.abs(sub), nmax, rmin, 0.1, nstep, use_mad=False)
    ls, d = _scale_levels(scales.reshape(n, 8), 63, cap=63)
    lm, dmin = _scale_levels(mins.reshape(n, 8), 63, cap=63)
    L = _requantize(sub, L, d, ls, dmin, lm, nmax).reshape(n, QK_K).astype(np.uint8)
    return d, dmin, _pack_scale_min_k4(ls, lm), L


def _dequantize_q45_k(b, q):
    n = len(b)
    sc, m = _unpack_scale_min_k4(b["scales"])
    d = (f32(b["d"])[:, None] * sc.astype(F32)).reshape(n, 8, 1)
    dm = (f32(b["dmin"])[:, None] * m.astype(F32)).reshape(n, 8, 1)
    return (d * q.reshape(n, 8, 32).astype(F32) - dm).reshape(n, QK_K)


def _nibbles_per_64(q):
    """Levels -> bytes, 64 values per 32 bytes (first 32 low, next 32 high)."""
    return pack_nibbles(q.reshape(-1, 64)).reshape(len(q), -1)


def _levels_per_64(b):
    return unpack_nibbles(b.reshape(-1, 32)).reshape(len(b), -1)


def quantize_q4_k(x):
    d, dmin, scales, L = _quantize_q45_k(x, 15, -1.0, 20)
    return records(BLOCK_Q4_K, d=d, dmin=dmin, scales=scales, qs=_nibbles_per_64(L))


def dequantize_q4_k(b):
    return _dequantize_q45_k(b, _levels_per_64(b["qs"]))


def quantize_q5_k(x):
    d, dmin, scales, L = _quantize_q45_k(x, 31, -0.5, 15)
    return records(BLOCK_Q5_K, d=d, dmin=dmin, scales=scales, qh=pack_bit_planes(L >> 4),
                   qs=_nibbles_per_64(L & 15))


def dequantize_q5_k(b):
    return _dequantize_q45_k(b, _levels_per_64(b["qs"]) | (unpack_bit_planes(b["qh"]) << 4))


# ---- Q6_K ------------------------------------------------------------------------------

def quantize_q6_k(x):
    n = len(x)
    sub = x.reshape(-1, 16)
    scales, L = make_qx_quants(sub, 32)
    scales = scales.reshape(n, 16)
    top = signed_absmax(scales)
    live = np.abs(top) >= GROUP_MAX_EPS  # ggml zeroes the whole block otherwise
    iscale, d = _signed_scale(top, live, 128)
    d = d.astype(np.float16)
    levels = np.where(live[:, None], _int8_capped(iscale[:, None] * scales), 0).astype(F32)
    L = _symmetric_requantize(sub, L, _sub_scales(d, levels), 32).reshape(n, QK_K)
    L = np.where(live[:, None], L, F32(0)).astype(np.uint8)
    # per 128 values: low nibbles of 0-63 | 64-127 in ql, high crumbs of 0-31 | 32-63 | 64-95 | 96-127 in qh
    return records(BLOCK_Q6_K, ql=pack_nibbles((L & 15).reshape(-1, 128)).reshape(n, 128),
                   qh=pack_crumbs(L >> 4, 32), scales=levels.astype(np.int8), d=d)


def dequantize_q6_k(b):
    n = len(b)
    low = unpack_nibbles(b["ql"].reshape(-1, 64)).reshape(n, QK_K)
    q = (low | (unpack_crumbs(b["qh"], 32) << 4)).astype(np.int8) - np.int8(32)
    d = (f32(b["d"])[:, None] * b["scales"].astype(F32)).reshape(n, 16, 1)
    return (d * q.reshape(n, 16, 16).astype(F32)).reshape(n, QK_K)


# ---- Q8_K ------------------------------------------------------------------------------

def quantize_q8_k(x):
    top = signed_absmax(x)
    live = top != 0
    iscale, d = _signed_scale(top, live, 127)
    qs = _int8_capped(iscale[:, None] * x)
    bsums = qs.reshape(len(x), 16, 16).sum(axis=2, dtype=np.int16)
    return records(BLOCK_Q8_K, d=d, qs=qs, bsums=bsums)


def dequantize_q8_k(b):
    return b["qs"].astype(F32) * b["d"][:, None]
