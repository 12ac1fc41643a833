"""Convolutions, pooling and resampling of (batch, channels, h, w) images
(csrc/image.cu): a thread per output element, inputs on any strides."""

from __future__ import annotations

from ..launch import address
from .common import THREADS, grid

MODULE = "image"
MAX, AVG = 0, 1  # pooling modes


def conv(name: str, dtype):
    """k(out, x, lx, w, lw, params): conv2d and conv_transpose2d."""
    isz = dtype.itemsize

    def kernel(out, x, lx, w, lw, params):
        dev = out.device
        p = list(params)
        n = p[0] * p[4] * p[14] * p[15]  # b * c_out * oh * ow
        dev.function(MODULE, f"{name}_{dtype}").launch(
            grid(dev, n), THREADS, out.ptr, address(x, lx, isz), address(w, lw, isz), *p, *lx.strides, *lw.strides)

    return kernel


def pool(mode: int, dtype):
    """k(out, x, lx, params)."""
    isz = dtype.itemsize

    def kernel(out, x, lx, params):
        dev = out.device
        q = list(params)
        n = q[0] * q[1] * q[12] * q[13]
        dev.function(MODULE, f"pool2d_{dtype}").launch(
            grid(dev, n), THREADS, out.ptr, address(x, lx, isz), mode, *q, *lx.strides)

    return kernel


def upsample(bilinear: bool, dtype):
    """k(out, x, lx, out_h, out_w, align_corners)."""
    if bilinear and not dtype.is_float:
        return None
    isz = dtype.itemsize

    def kernel(out, x, lx, out_h, out_w, align_corners):
        dev = out.device
        mode = (2 if align_corners else 1) if bilinear else 0
        b, c, h, w = lx.shape
        n = b * c * out_h * out_w
        dev.function(MODULE, f"upsample2d_{dtype}").launch(
            grid(dev, n), THREADS, out.ptr, address(x, lx, isz), mode, b, c, h, w, out_h, out_w, *lx.strides)

    return kernel


KERNELS = {
    "conv2d": lambda dt: conv("conv2d", dt),
    "conv_transpose2d": lambda dt: conv("conv_transpose2d", dt),
    "max_pool2d": lambda dt: pool(MAX, dt),
    "avg_pool2d": lambda dt: pool(AVG, dt),
    "upsample_nearest2d": lambda dt: upsample(False, dt),
    "upsample_bilinear2d": lambda dt: upsample(True, dt),
}
