"""Products with weights packed once: pack_panels, linear_panels and conv2d_panels."""

from __future__ import annotations

import math
from functools import partial

from .. import library
from ..library import error
from .descriptors import pack


def _ptr(s, lay, isz):
    return None if s is None else s.ptr + lay.offset * isz


def pack_panels(fn, dt):
    """k(out, w, lw), w (batch, rows, depth)."""
    isz = dt.itemsize

    def kernel(out, w, lw):
        if fn(dt.code, pack([*lw.shape, *lw.strides]), w.ptr + lw.offset * isz, out.ptr):
            raise error()

    return kernel


def _row_stride(lx) -> int:
    """The stride from one row of x (..., k) to the next: its leading dims merge (the op checked)."""
    for d in range(len(lx.shape) - 2, -1, -1):
        if lx.shape[d] != 1:
            return lx.strides[d]
    return 0


def linear_panels(fn, codes, dt):
    """k(out, x, lx, wp, lwp, bias, lbias, n, act, alpha, beta)."""
    isz = dt.itemsize

    def kernel(out, x, lx, wp, lwp, b, lb, n, act, alpha, beta):
        k = lx.shape[-1]
        desc = pack([math.prod(lx.shape[:-1]), n, k, _row_stride(lx), lx.strides[-1]])
        if fn(dt.code, desc, x.ptr + lx.offset * isz, wp.ptr + lwp.offset * isz, _ptr(b, lb, isz), out.ptr,
              codes[act], alpha, beta):
            raise error()

    return kernel


def conv2d_panels(fn, codes, dt):
    """k(out, x, lx, wp, lwp, bias, lbias, res, lres, params, act, alpha, beta, scale, shift)."""
    isz = dt.itemsize

    def kernel(out, x, lx, wp, lwp, b, lb, res, lres, params, act, alpha, beta, scale, shift):
        if fn(dt.code, pack(params), pack(lx.strides), x.ptr + lx.offset * isz, wp.ptr + lwp.offset * isz,
              _ptr(b, lb, isz), _ptr(res, lres, isz), out.ptr, codes[act], alpha, beta, scale, shift):
            raise error()

    return kernel


def makers(lib) -> dict:
    codes = {name: code for code, name in enumerate(library.op_names("act"))}
    return {
        "pack_panels": partial(pack_panels, lib.cd_pack_panels),
        "linear_panels": partial(linear_panels, lib.cd_linear_panels, codes),
        "conv2d_panels": partial(conv2d_panels, lib.cd_conv2d_panels, codes),
    }
