"""Resize and Upsample: separable interpolation, one axis at a time.

For each resized axis the interpolation weights depend only on the sizes
and attributes, so they are computed on the host as an (out, in) matrix
(neighbours clamped at the borders, as ONNX's edge padding does). Nearest
mode picks one input per output: an index_select. Linear and cubic modes
(antialiased or not) multiply the axis by the weight matrix.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

import candle_api as c

from .helpers import const, ints, move_to_last
from .registry import op


# ---- coefficients per output position (ONNX's definitions) --------------------------------------
def _nearest(ratio: float, scale: float, rounding: str) -> np.ndarray:
    if ratio == 1.0:  # exactly on a sample
        return np.array([0.0, 1.0])
    up = {"round_prefer_floor": ratio > 0.5, "round_prefer_ceil": ratio >= 0.5, "floor": False,
          "ceil": True}[rounding]
    return np.array([0.0, 1.0]) if up else np.array([1.0, 0.0])


def _linear(ratio: float, scale: float, antialias: bool) -> np.ndarray:
    if not antialias:
        return np.array([1 - ratio, ratio])
    scale = min(scale, 1.0)   # a downsampling filter widens by 1 / scale
    start = math.floor(-1 / scale) + 1
    taps = (np.arange(start, start + 2 - 2 * start) - ratio) * scale
    coeffs = np.clip(1 - np.abs(taps), 0, 1)
    return coeffs / coeffs.sum()


def _cubic_kernel(x: np.ndarray, a: float) -> np.ndarray:
    x = np.abs(x)
    near = ((a + 2) * x - (a + 3)) * x * x + 1
    far = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return np.where(x <= 1, near, np.where(x < 2, far, 0.0))


def _cubic(ratio: float, scale: float, a: float, antialias: bool) -> np.ndarray:
    if not antialias:
        return _cubic_kernel(np.array([ratio + 1, ratio, 1 - ratio, 2 - ratio]), a)
    scale = min(scale, 1.0)
    start = math.floor(-2 / scale) + 1
    coeffs = _cubic_kernel(scale * (np.arange(start, 2 - start) - ratio), a)
    return coeffs / coeffs.sum()


def _source_positions(mode: str, out: int, size: int, scale: float, roi) -> tuple[np.ndarray, np.ndarray | None]:
    """The input coordinate each output position samples, and (tf_crop_and_resize)
    which ones fall outside the input."""
    y = np.arange(out, dtype=np.float64)
    width = scale * size
    if mode == "align_corners":
        return (np.zeros(out) if width == 1 else y * (size - 1) / (width - 1)), None
    if mode == "asymmetric":
        return y / scale, None
    if mode == "tf_crop_and_resize":
        lo, hi = roi
        x = np.full(out, (hi - lo) * (size - 1) / 2) if width == 1 else y * (hi - lo) * (size - 1) / (width - 1)
        x = x + lo * (size - 1)
        return x, (x < 0) | (x > size - 1)
    if mode == "pytorch_half_pixel":
        return (np.full(out, -0.5) if width == 1 else (y + 0.5) / scale - 0.5), None
    if mode == "half_pixel":
        return (y + 0.5) / scale - 0.5, None
    if mode == "half_pixel_symmetric":
        offset = size / 2 * (1 - out / width)
        return offset + (y + 0.5) / scale - 0.5, None
    raise ValueError(f"unknown coordinate_transformation_mode {mode!r}")


@lru_cache(maxsize=256)
def axis_weights(size: int, out: int, scale: float, kernel: tuple, transform: str, roi=None,
                 exclude_outside=False):
    """(out, size) interpolation matrix and the extrapolated rows (or None);
    cached, since a model resizes the same shapes on every run."""
    mode, rounding, antialias, a = kernel
    if mode == "nearest":
        coeffs = lambda r, s: _nearest(r, s, rounding)  # noqa: E731
    elif mode == "cubic":
        coeffs = lambda r, s: _cubic(r, s, a, antialias)  # noqa: E731
    else:
        coeffs = lambda r, s: _linear(r, s, antialias)  # noqa: E731
    x, outside = _source_positions(transform, out, size, scale, roi)
    floor = np.floor(x)
    ratios = np.where(x == floor, 1.0, x - floor)
    rows = [coeffs(float(r), scale) for r in ratios]
    n = len(rows[0]) if rows else 0
    w = np.zeros((out, size))
    half = math.ceil(n / 2)
    for i, (xi, row) in enumerate(zip(x, rows)):
        # the n neighbours of xi, preferring smaller indices on ties (ONNX's rule)
        p = math.floor(xi + half)
        frac = xi + half - p
        first = p + ((-(n // 2) if frac == 0 else -(n // 2) + 1) if n % 2 == 0 else
                     (-((n - 1) // 2) if frac <= 0.5 else -((n - 1) // 2) + 1)) - half
        idx = np.arange(first, first + n)
        row = np.asarray(row, dtype=np.float64)
        if exclude_outside:
            row = np.where((idx < 0) | (idx >= size), 0.0, row)
            total = row.sum()
            row = row / (total if total != 0 else 1.0)
        np.add.at(w[i], np.clip(idx, 0, size - 1), row)
    return w, outside


def resize_axis(x, a: int, out: int, matrix: np.ndarray, outside, extrapolation: float, nearest: bool):
    """x resized along axis a by an (out, in) weight matrix."""
    if nearest:
        idx = matrix.argmax(1)
        size = x.shape[a]
        if size and out % size == 0 and np.array_equal(idx, np.arange(out) // (out // size)):
            # each input repeated out/size times (an integer upsampling): one broadcast copy
            wide = x.unsqueeze(a + 1)
            y = wide.broadcast_as(wide.shape[:a + 1] + (out // size,) + wide.shape[a + 2:]).reshape(
                x.shape[:a] + (out,) + x.shape[a + 1:])
        else:
            y = x.index_select(const(idx, c.i64, x.device), a)
    else:
        moved, back = move_to_last(x, a)
        compute = x.dtype if x.dtype.is_float else c.f32
        w = const(matrix.T, compute, x.device)
        y = back(moved.to_dtype(compute) @ w)
    if outside is not None and outside.any():
        mask = const(outside.reshape(tuple(-1 if d == a else 1 for d in range(x.rank))), c.u8, x.device)
        y = c.where(mask, extrapolation, y)
    return y


def _image_upsampling(x, sizes: list, scales: list, kernel: tuple, transform: str, roi) -> bool:
    """Whether a nearest resize only repeats each pixel of an image's planes a whole
    number of times (upsample_nearest2d's floor(dst * in / out))."""
    if x.rank != 4 or roi or not x.dtype.is_float or sizes[:2] != list(x.shape[:2]):
        return False
    for d in (2, 3):
        size, out = x.shape[d], sizes[d]
        if not size or out % size:
            return False
        matrix, outside = axis_weights(size, out, scales[d], kernel, transform)
        if (outside is not None and outside.any()) or not np.array_equal(matrix.argmax(1), np.arange(out) // (out // size)):
            return False
    return True


def _saturate(y, dtype):
    if y.dtype == dtype:
        return y
    info = np.iinfo(dtype.np)
    return y.round().clamp(int(info.min), int(info.max)).to_dtype(dtype)


def resize(node, x, scales: list[float] | None, sizes: list[int] | None, roi: list[float] | None,
           transform: str, rounding: str):
    rank = x.rank
    dims = [d % rank for d in (node.get("axes") or range(rank))]
    if sizes is not None:
        full_sizes = list(x.shape)
        for d, s in zip(dims, sizes):
            full_sizes[d] = s
        full_scales = [o / n if n else 1.0 for o, n in zip(full_sizes, x.shape)]
        policy = node.get("keep_aspect_ratio_policy", "stretch")
        if policy != "stretch":
            pick = min if policy == "not_larger" else max
            s = pick(full_scales[d] for d in dims)
            full_scales = [s if d in dims else 1.0 for d in range(rank)]
            full_sizes = [int(s * x.shape[d] + 0.5) if d in dims else x.shape[d] for d in range(rank)]
    else:
        full_scales = [1.0] * rank
        for d, s in zip(dims, scales):
            full_scales[d] = s
        full_sizes = [int(s * n) for s, n in zip(full_scales, x.shape)]
    full_roi = None
    if roi:
        full_roi = [[0.0, 1.0] for _ in range(rank)]
        k = len(roi) // 2
        for i, d in enumerate(dims if k == len(dims) else range(rank)):
            full_roi[d] = [roi[i], roi[k + i]]
    mode = node.get("mode", "nearest")
    if mode not in ("nearest", "linear", "bilinear", "cubic"):
        raise node.fail(f"unknown mode {mode!r}")
    kernel = (mode, rounding, bool(node.get("antialias", 0)), node.get("cubic_coeff_a", -0.75))
    source = x
    if mode == "nearest" and _image_upsampling(x, full_sizes, full_scales, kernel, transform, full_roi):
        return x.upsample_nearest2d(full_sizes[2], full_sizes[3])  # one pass on the kernel
    for d in range(rank):
        r = tuple(full_roi[d]) if full_roi else None
        if full_sizes[d] == x.shape[d] and math.isclose(full_scales[d], 1.0) and (r is None or r == (0.0, 1.0)):
            continue
        matrix, outside = axis_weights(x.shape[d], full_sizes[d], full_scales[d], kernel, transform, r,
                                       bool(node.get("exclude_outside", 0)))
        x = resize_axis(x, d, full_sizes[d], matrix, outside, node.get("extrapolation_value", 0.0),
                        mode == "nearest")
    return _saturate(x, source.dtype)


def _floats(t) -> list[float] | None:
    return None if t is None or t.numel() == 0 else [float(v) for v in t.numpy().reshape(-1)]


@op("Resize", since=10)
def resize_v10(node, x, scales):
    return resize(node, x, _floats(scales), None, None, "asymmetric", "floor")


@op("Resize", since=11)
def resize_op(node, x, roi=None, scales=None, sizes=None):
    transform = node.get("coordinate_transformation_mode", "half_pixel")
    s = _floats(scales)
    n = ints(sizes) if sizes is not None and sizes.numel() else None
    return resize(node, x, s, n, _floats(roi), transform, node.get("nearest_mode", "round_prefer_floor"))


@op("Upsample")
def upsample_v1(node, x):
    scales = [1.0, 1.0, node["height_scale"], node["width_scale"]]
    return resize(node, x, scales, None, None, "asymmetric", "floor")


@op("Upsample", since=7)
def upsample_v7(node, x):
    return resize(node, x, list(node["scales"]), None, None, "asymmetric", "floor")


@op("Upsample", since=9)
def upsample(node, x, scales):
    return resize(node, x, _floats(scales), None, None, "asymmetric", "floor")
