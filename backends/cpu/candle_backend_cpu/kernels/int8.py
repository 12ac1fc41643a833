"""The int8 products of quantized models: quantize_u8_params, quantize_u8,
pack_int8_panels and matmul_int8 (contiguous operands, as the ops make them)."""

from __future__ import annotations

from functools import partial

from ..library import error
from .descriptors import pack


def _ptr(s, lay, isz: int):
    return None if s is None else s.ptr + lay.offset * isz


def quantize_params(fn, dt):
    """k(out, x, lx)."""

    def kernel(out, x, lx):
        if fn(lx.numel, x.ptr + lx.offset * 4, out.ptr):
            raise error()

    return kernel


def quantize(fn, dt):
    """k(out, x, lx, params, lparams)."""

    def kernel(out, x, lx, params, lparams):
        if fn(lx.numel, x.ptr + lx.offset * 4, params.ptr + lparams.offset * 4, out.ptr):
            raise error()

    return kernel


def pack_int8(fn, dt):
    """k(out, w, lw), w (k, n) u8 or i16."""
    isz = dt.itemsize

    def kernel(out, w, lw):
        if fn(dt.code, pack([*lw.shape, *lw.strides]), w.ptr + lw.offset * isz, out.ptr):
            raise error()

    return kernel


def matmul_int8(fn, dt):
    """k(out, a, la, a_zp, la_zp, bp, lbp, b_zp, lb_zp, a_scale, la_scale, b_scale, lb_scale, bias, lbias, n)."""

    def kernel(out, a, la, a_zp, la_zp, bp, lbp, b_zp, lb_zp, a_scale, la_scale, b_scale, lb_scale, bias, lbias, n):
        k = la.shape[-1]
        desc = pack([la.numel // k if k else 0, n, k, k, lb_zp.numel if b_zp is not None else 0,
                     lb_scale.numel if b_scale is not None else 0])
        if fn(desc, a.ptr + la.offset, _ptr(a_zp, la_zp, 1), bp.ptr + lbp.offset, _ptr(b_zp, lb_zp, 4),
              _ptr(a_scale, la_scale, 4), _ptr(b_scale, lb_scale, 4), _ptr(bias, lbias, 4), out.ptr):
            raise error()

    return kernel


def makers(lib) -> dict:
    return {
        "quantize_u8_params": partial(quantize_params, lib.cd_quantize_u8_params),
        "quantize_u8": partial(quantize, lib.cd_quantize_u8),
        "pack_int8_panels": partial(pack_int8, lib.cd_pack_int8_panels),
        "matmul_int8": partial(matmul_int8, lib.cd_matmul_int8),
    }
