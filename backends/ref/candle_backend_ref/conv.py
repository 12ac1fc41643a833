"""Convolutions over (batch, channels, h, w) in float64: conv2d and
conv_transpose2d (1-d ones arrive with h = 1). params, as the core passes them:
(b, c_in, h, w, c_out, kh, kw, sh, sw, ph, pw, dh, dw, groups, oh, ow, oph, opw)."""

from __future__ import annotations

import numpy as np

from .strided import load, store
from .windows import windows


def _correlate(x: np.ndarray, w: np.ndarray, pad: tuple, stride: tuple, dilation: tuple, groups: int,
               out: tuple) -> np.ndarray:
    """x (b, c_in, h, w) cross-correlated with w (c_out, c_in / groups, kh, kw):
    what deep learning calls a convolution. Returns (b, c_out, oh, ow)."""
    b, c_in = x.shape[:2]
    c_out, c_in_g, kh, kw = w.shape
    taps = windows(x, pad, (kh, kw), stride, dilation, out).reshape(b, groups, c_in_g, *out, kh, kw)
    w = w.reshape(groups, c_out // groups, c_in_g, kh, kw)
    return np.einsum("bgcyxij,gocij->bgoyx", taps, w, optimize=True).reshape(b, c_out, *out)


def _conv2d(dtype):
    def kernel(out, x, lx, w, lw, params):
        _, _, _, _, _, _, _, sh, sw, ph, pw, dh, dw, groups, oh, ow, _, _ = params
        image, weight = load(x, lx, dtype), load(w, lw, dtype)
        store(out, dtype, _correlate(image, weight, (ph, pw), (sh, sw), (dh, dw), groups, (oh, ow)))

    return kernel


def _conv_transpose2d(dtype):
    def kernel(out, x, lx, w, lw, params):
        b, c_in, h, wd, c_out, kh, kw, sh, sw, ph, pw, dh, dw, groups, oh, ow, _, _ = params
        # The adjoint of a strided convolution: the input spread out by the stride
        # (zeros between its elements), correlated at stride 1 with the kernel
        # flipped and its channel roles swapped, over its full extent; the
        # padding is then cut from the front, and output padding is the extra
        # length at the end.
        spread = np.zeros((b, c_in, (h - 1) * sh + 1, (wd - 1) * sw + 1))
        spread[:, :, ::sh, ::sw] = load(x, lx, dtype)
        weight = load(w, lw, dtype).reshape(groups, c_in // groups, c_out // groups, kh, kw)
        weight = weight.transpose(0, 2, 1, 3, 4).reshape(c_out, c_in // groups, kh, kw)[..., ::-1, ::-1]
        full = _correlate(spread, weight, ((kh - 1) * dh, (kw - 1) * dw), (1, 1), (dh, dw), groups,
                          (ph + oh, pw + ow))
        store(out, dtype, full[..., ph:, pw:])

    return kernel


KERNELS = {"conv2d": _conv2d, "conv_transpose2d": _conv_transpose2d}
