"""Sliding windows over padded images: what convolutions and pooling read."""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view


def windows(image: np.ndarray, pad: tuple, kernel: tuple, stride: tuple, dilation: tuple, out: tuple,
            fill: float = 0.0) -> np.ndarray:
    """The (..., oh, ow, kh, kw) windows of image (..., h, w), as a view: windows
    stride apart, their taps dilation apart, over image padded with fill by
    pad = (ph, pw) before each spatial dim and after it as far as the last
    window reaches (short of ph in some convolutions, past it in pooling's
    ceil mode)."""
    (ph, pw), (kh, kw), (sh, sw), (dh, dw), (oh, ow) = pad, kernel, stride, dilation, out
    span_h, span_w = (kh - 1) * dh + 1, (kw - 1) * dw + 1
    h, w = image.shape[-2:]
    after_h, after_w = max(0, (oh - 1) * sh + span_h - h - ph), max(0, (ow - 1) * sw + span_w - w - pw)
    padded = np.pad(image, [(0, 0)] * (image.ndim - 2) + [(ph, after_h), (pw, after_w)], constant_values=fill)
    every = sliding_window_view(padded, (span_h, span_w), axis=(-2, -1))
    return every[..., : (oh - 1) * sh + 1 : sh, : (ow - 1) * sw + 1 : sw, ::dh, ::dw]
