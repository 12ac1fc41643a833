"""Fused optimizer steps, in place (the core passes contiguous buffers)."""

from __future__ import annotations

import struct
from functools import partial

from ..library import error


def adamw(fn, dt):
    """k(p, lp, g, lg, m, lm, v, lv, lr, beta1, beta2, eps, weight_decay, step)."""
    isz = dt.itemsize

    def kernel(p, lp, g, lg, m, lm, v, lv, lr, beta1, beta2, eps, weight_decay, step):
        hyper = struct.pack("7d", lr, beta1, beta2, eps, weight_decay, 1 - beta1**step, 1 - beta2**step)
        if fn(dt.code, lp.numel, p.ptr + lp.offset * isz, g.ptr + lg.offset * isz, m.ptr + lm.offset * isz,
              v.ptr + lv.offset * isz, hyper):
            raise error()

    return kernel


def sgd(fn, dt):
    """k(p, lp, g, lg, buf, lbuf, lr, weight_decay, momentum, dampening, nesterov, first)."""
    isz = dt.itemsize

    def kernel(p, lp, g, lg, buf, lbuf, lr, weight_decay, momentum, dampening, nesterov, first):
        hyper = struct.pack("4d", lr, weight_decay, momentum, dampening)
        buf_ptr = buf.ptr + lbuf.offset * isz if buf is not None else None
        if fn(dt.code, lp.numel, p.ptr + lp.offset * isz, g.ptr + lg.offset * isz, buf_ptr, hyper, int(first),
              int(nesterov)):
            raise error()

    return kernel


def makers(lib) -> dict:
    """The library's optimizer loops are f32 and f64; the core updates halves with elementwise ops."""

    def f32_f64(make):
        return lambda dt: make(dt) if dt.name in ("f32", "f64") else None

    return {"adamw_step": f32_f64(partial(adamw, lib.cd_adamw)), "sgd_step": f32_f64(partial(sgd, lib.cd_sgd))}
