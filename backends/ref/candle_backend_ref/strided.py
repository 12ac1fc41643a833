"""Typed views of raw storage bytes, and the conversions the kernels share.

A kernel never sees a numpy array from the core: it gets storages (bytes) and
layouts (shape, strides and offset in elements). :func:`view` turns the pair
into a numpy array over the same bytes; :func:`load` reads it in the
precision the kernels compute in (float64 for every float dtype, int64 for
every integer dtype); :func:`rounded` brings results back to a dtype,
rounding floats once and wrapping integers.
"""

from __future__ import annotations

import numpy as np

from candle_api.dtype import bf16
from candle_api.layout import Layout


def view(storage, layout: Layout, dtype) -> np.ndarray:
    """The elements of layout in storage, as a numpy view of its bytes (no copy;
    any strides: zero for broadcast dims, negative for reversed ones). numpy
    checks that every element lies inside the buffer."""
    if layout.numel == 0:  # nothing to read or write, whatever the offset
        return np.empty(layout.shape, dtype.np)
    isz = dtype.itemsize
    return np.ndarray(layout.shape, dtype.np, storage.buf, layout.offset * isz, tuple(s * isz for s in layout.strides))


def load(storage, layout: Layout, dtype) -> np.ndarray:
    """The elements as float64 (float dtypes, exactly) or int64 (integer dtypes):
    the precision every arithmetic kernel computes in."""
    return view(storage, layout, dtype).astype(np.float64 if dtype.is_float else np.int64)


def rounded(values, dtype) -> np.ndarray:
    """float64 or int64 values in dtype: floats rounded once to nearest even,
    integers wrapped (two's complement, as C and Rust do). Integers beyond 2^53
    may round twice on their way to bf16 (through float64)."""
    values = np.asarray(values)
    if values.dtype == dtype.np:  # already there (copies, selections): keep every bit
        return values
    if dtype is bf16:
        return _bf16(values.astype(np.float64))
    return values.astype(dtype.np)


def store(out, dtype, values) -> None:
    """Writes values, rounded to dtype, into the contiguous output storage out."""
    values = rounded(values, dtype)
    view(out, Layout.contig(values.shape), dtype)[...] = values


def saturated(values: np.ndarray, dtype) -> np.ndarray:
    """float64 values in the integer dtype: truncated toward zero, clamped to the
    dtype's range, NaN as 0 (Rust's ``as``, which Candle inherits)."""
    info = np.iinfo(dtype.np)
    # the largest float64 not above the maximum (2^63 - 1 is not a float64)
    top = float(info.max) if float(info.max) <= info.max else np.nextafter(float(info.max), 0.0)
    values = np.where(np.isnan(values), 0.0, values)
    ints = np.clip(values, float(info.min), top).astype(np.int64)
    return np.where(values > top, info.max, ints).astype(dtype.np)


def _bf16(values: np.ndarray) -> np.ndarray:
    """float64 -> bf16 rounded once. ml_dtypes converts through f32, which would
    round twice; so the f32 step rounds to odd instead (truncate, then set the
    last bit when anything was cut off), which the f32 -> bf16 rounding then
    resolves as a single rounding would (Boldo and Melquiond)."""
    f32 = values.astype(np.float32)
    bits = f32.view(np.uint32)
    inexact = np.isfinite(f32) & (f32 != values)
    away = np.abs(f32) > np.abs(values)  # rounded away from zero: step back toward it
    odd = (bits - away.astype(np.uint32)) | np.uint32(1)
    return np.where(inexact, odd, bits).view(np.float32).astype(bf16.np)
