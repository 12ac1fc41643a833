"""Convolutions, pooling and resampling of (batch, channels, h, w) images."""

from __future__ import annotations

from functools import partial

from ..library import error
from .descriptors import pack

MAX, AVG = 0, 1  # pooling modes


def conv(fn, dt):
    """k(out, x, lx, w, lw, params): conv2d, conv_transpose2d and conv2d_backward_weight (w is gout)."""
    isz = dt.itemsize

    def kernel(out, x, lx, w, lw, params):
        if fn(dt.code, pack(params), pack([*lx.strides, *lw.strides]), x.ptr + lx.offset * isz,
              w.ptr + lw.offset * isz, out.ptr):
            raise error()

    return kernel


def pool(fn, mode, dt):
    """k(out, x, lx, params)."""
    isz = dt.itemsize

    def kernel(out, x, lx, params):
        if fn(dt.code, mode, pack(params), pack(lx.strides), x.ptr + lx.offset * isz, out.ptr):
            raise error()

    return kernel


def pool_backward(fn, mode, dt):
    """k(gx, x, lx, g, lg, params)."""
    isz = dt.itemsize

    def kernel(gx, x, lx, g, lg, params):
        if fn(dt.code, mode, pack(params), pack(lx.strides), x.ptr + lx.offset * isz, g.ptr + lg.offset * isz,
              gx.ptr):
            raise error()

    return kernel


def upsample(fn, bilinear, dt):
    """k(out, x, lx, out_h, out_w, align_corners)."""
    isz = dt.itemsize

    def kernel(out, x, lx, out_h, out_w, align_corners):
        mode = (2 if align_corners else 1) if bilinear else 0
        if fn(dt.code, mode, pack([*lx.shape, out_h, out_w]), pack(lx.strides), x.ptr + lx.offset * isz, out.ptr):
            raise error()

    return kernel


def makers(lib) -> dict:
    return {
        "conv2d": partial(conv, lib.cd_conv2d),
        "conv_transpose2d": partial(conv, lib.cd_conv_transpose2d),
        "conv2d_backward_weight": partial(conv, lib.cd_conv2d_backward_weight),
        "max_pool2d": partial(pool, lib.cd_pool2d, MAX),
        "avg_pool2d": partial(pool, lib.cd_pool2d, AVG),
        "max_pool2d_backward": partial(pool_backward, lib.cd_pool2d_backward, MAX),
        "avg_pool2d_backward": partial(pool_backward, lib.cd_pool2d_backward, AVG),
        "upsample_nearest2d": partial(upsample, lib.cd_upsample2d, False),
        "upsample_bilinear2d": partial(upsample, lib.cd_upsample2d, True),
    }
