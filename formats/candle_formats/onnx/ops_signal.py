"""Signal ops: DFT, STFT and MelWeightMatrix.

A complex tensor is, as in ONNX, a trailing dim of 2 (real, imaginary); a
real one has a trailing dim of 1. A transform along a dim is a product by
the cosines and sines of the DFT matrix (built on the host once per size),
so it runs as a matmul on any device: O(n^2) per signal, which for the frame
lengths of audio front ends (a few hundred samples) is what an FFT would
cost in kernel calls anyway. STFT takes its frames as a strided view of the
signal (no copy) and transforms them all in one product.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

import candle_api as c
from candle_api.layout import Layout
from candle_api.ops.core import has_kernel, view

from .dtypes import onnx_type
from .helpers import axis as norm_axis
from .helpers import const, scalar, tensor_from_array
from .registry import op


@lru_cache(maxsize=64)
def _basis(bins: int, length: int, inverse_real: bool) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of 2 pi k t / length for k < bins, t < length: (length, bins) each, float64.
    For the inverse of a one-sided spectrum, each bin is weighted by how many bins
    of the full spectrum it stands for (2, but 1 for the first and the Nyquist one)."""
    k = np.arange(bins)
    theta = 2 * np.pi * np.outer(np.arange(length), k) / length
    cos, sin = np.cos(theta), np.sin(theta)
    if inverse_real:
        weight = np.where((k == 0) | (2 * k == length), 1.0, 2.0)
        cos, sin = cos * weight, sin * weight
    return cos, sin


def _compute_dtype(x):
    """f64 where the device multiplies it (sums of many terms that cancel come out exact to f32), else f32."""
    return c.f64 if has_kernel(x.device, "matmul", c.f64) else c.f32


def _fit(x, length: int):
    """x's last dim cut or zero-padded to length."""
    n = x.shape[-1]
    if n > length:
        return x.narrow(-1, 0, length)
    if n < length:
        return x.pad_with_zeros(x.rank - 1, 0, length - n)
    return x


def transform(xr, xi, length: int, inverse: bool, onesided: bool):
    """The DFT of length ``length`` along the last dim of the signal (xr, xi;
    xi None for a real one): (real, imaginary), or the real signal (imaginary
    None) for the inverse of a one-sided spectrum."""
    dtype = _compute_dtype(xr)
    if inverse and onesided:  # the real signal of a one-sided (Hermitian) spectrum
        bins = length // 2 + 1
        cos, sin = (const(m, dtype, xr.device) for m in _basis(bins, length, True))
        y = _fit(xr, bins) @ cos.t()
        if xi is not None:
            y = y - _fit(xi, bins) @ sin.t()
        return y / length, None
    bins = length // 2 + 1 if onesided else length
    cos, sin = (const(m, dtype, xr.device) for m in _basis(bins, length, False))
    xr = _fit(xr, length)
    sign = 1.0 if inverse else -1.0  # e^(sign i theta)
    real, imag = xr @ cos, xr @ sin * sign
    if xi is not None:
        xi = _fit(xi, length)
        real = real - xi @ sin * sign
        imag = imag + xi @ cos
    if inverse:
        real, imag = real / length, imag / length
    return real, imag


def _dft(node, x, dft_length, a: int):
    out_dtype = x.dtype
    x = x.to_dtype(_compute_dtype(x))
    rank = x.rank
    a = norm_axis(a, rank, node)
    if a == rank - 1:
        raise node.fail("the axis of a DFT cannot be the last dim (it holds the real and imaginary parts)")
    inverse, onesided = bool(node.get("inverse", 0)), bool(node.get("onesided", 0))
    if x.shape[-1] not in (1, 2):
        raise node.fail(f"the last dim must be 1 (real) or 2 (complex), got {x.shape[-1]}")
    if inverse and onesided:
        default = 2 * (x.shape[a] - 1)
    else:
        default = x.shape[a]
    length = int(scalar(dft_length)) if dft_length is not None else default
    if length < 1:
        raise node.fail(f"dft_length must be positive, got {length}")
    parts = [x.narrow(-1, i, 1).squeeze(-1).transpose(a, rank - 2) for i in range(x.shape[-1])]
    real, imag = transform(parts[0], parts[1] if len(parts) == 2 else None, length, inverse, onesided)
    y = real.unsqueeze(-1) if imag is None else c.stack([real, imag], -1)
    return y.transpose(a, rank - 2).to_dtype(out_dtype)


@op("DFT", since=17)
def dft17(node, x, dft_length=None):
    return _dft(node, x, dft_length, node.get("axis", 1))


@op("DFT", since=20)
def dft20(node, x, dft_length=None, axis=None):
    return _dft(node, x, dft_length, int(scalar(axis)) if axis is not None else -2)


@op("STFT", since=17)
def stft(node, signal, frame_step, window=None, frame_length=None):
    """(batch, frames, bins, 2): the DFT of each windowed frame of the signal (batch, length, 1 or 2)."""
    step = int(scalar(frame_step))
    if window is not None:
        length = window.shape[0]
        if frame_length is not None and int(scalar(frame_length)) != length:
            raise node.fail(f"frame_length {int(scalar(frame_length))} differs from the window's {length}")
    elif frame_length is not None:
        length = int(scalar(frame_length))
    else:
        raise node.fail("STFT needs a window or a frame_length")
    if signal.rank != 3 or signal.shape[-1] not in (1, 2):
        raise node.fail(f"the signal must be (batch, length, 1 or 2), got {signal.shape}")
    if step < 1 or length < 1 or length > signal.shape[1]:
        raise node.fail(f"frame_step {step} and frame_length {length} do not fit a signal of {signal.shape[1]}")
    out_dtype = signal.dtype
    x = signal.to_dtype(_compute_dtype(signal)).contiguous()
    batch, total, parts = x.shape
    frames = (total - length) // step + 1
    lay = x._layout
    framed = view(x, Layout((batch, frames, length, parts), (lay.strides[0], step * parts, parts, 1), lay.offset))
    if window is not None:
        framed = framed * window.to_dtype(x.dtype).reshape(length, 1)
    onesided = bool(node.get("onesided", 1))
    planes = [framed.narrow(-1, i, 1).squeeze(-1) for i in range(parts)]
    real, imag = transform(planes[0], planes[1] if parts == 2 else None, length, False, onesided)
    return c.stack([real, imag], -1).to_dtype(out_dtype)


@op("MelWeightMatrix", since=17)
def mel_weight_matrix(node, num_mel_bins, dft_length, sample_rate, lower_edge_hertz, upper_edge_hertz):
    """(dft_length // 2 + 1, num_mel_bins) triangular filters on the mel scale, as ONNX defines them
    (a host computation from five scalars)."""
    mels, length, rate = int(scalar(num_mel_bins)), int(scalar(dft_length)), int(scalar(sample_rate))
    low, high = float(scalar(lower_edge_hertz)), float(scalar(upper_edge_hertz))
    if mels < 1 or length < 1 or rate < 1 or not 0 <= low < high:
        raise node.fail(f"bad MelWeightMatrix arguments: {mels} bins, dft_length {length}, sample_rate {rate}, "
                        f"edges {low}..{high} Hz")
    spectrum_bins = length // 2 + 1
    to_mel = lambda hz: 2595 * math.log1p(hz / 700) / math.log(10)  # noqa: E731
    low_mel, high_mel = to_mel(low), to_mel(high)
    step = (high_mel - low_mel) / (mels + 2)
    points = np.arange(mels + 2) * step + low_mel
    points = 700 * np.expm1(points / 2595 * math.log(10))
    edges = (((length + 1) * points) // rate).astype(np.int64)
    out = np.zeros((spectrum_bins, mels))
    for i in range(mels):
        left, center, right = (int(e) for e in edges[i:i + 3])
        if not 0 <= left <= center <= right <= spectrum_bins:
            raise node.fail(f"mel bin {i} spans spectrum bins {left}..{right}, past the {spectrum_bins} there are")
        if center == left:
            out[center, i] = 1
        else:
            out[left:center + 1, i] = (np.arange(left, center + 1) - left) / (center - left)
        if right > center:
            out[center:right, i] = (right - np.arange(center, right)) / (right - center)
    t = onnx_type(node.get("output_datatype", 1))
    return tensor_from_array(out.astype(t.np), node.device, t)
