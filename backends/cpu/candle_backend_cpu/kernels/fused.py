"""Fused kernels: softmax and log_softmax over the last dim, layer_norm (and
skip_layer_norm: of x + a residual) and rms_norm, rotary embeddings, SwiGLU's gate (silu_mul), GELU of
x + a bias (bias_gelu) and scaled-dot-product attention."""

from __future__ import annotations

from functools import partial

from candle_api.errors import KernelError

from ..library import error
from .descriptors import LAYS, cached_lay, lay, pack


def softmax(fn, log, dt):
    """k(out, x, lx): softmax_last (log 0) and log_softmax_last (1)."""
    isz = dt.itemsize
    cached = LAYS.get

    def kernel(out, x, lx):
        desc = cached((lx.shape, lx.strides)) or cached_lay(lx.shape, lx.strides)
        if fn(dt.code, desc, x.ptr + lx.offset * isz, out.ptr, log):
            raise error()

    return kernel


def _norm_rows(fn, dt, out, x, lx, r_ptr, w, lw, b, lb, eps, rms):
    """cd_norm_last over x's rows (plus the residual at r_ptr, when given)."""
    isz = dt.itemsize
    b_ptr = b.ptr + lb.offset * isz if b is not None else None
    if fn(dt.code, lay(lx.shape, lx.strides), x.ptr + lx.offset * isz, r_ptr, w.ptr + lw.offset * isz, b_ptr,
          out.ptr, eps, rms):
        raise error()


def norm(fn, rms, dt):
    """k(out, x, lx, w, lw, b, lb, eps) for layer_norm (rms 0), k(out, x, lx, w, lw, eps) for rms_norm (1)."""
    def kernel(out, x, lx, w, lw, *rest):
        b, lb, eps = (None, None, rest[0]) if rms else rest
        _norm_rows(fn, dt, out, x, lx, None, w, lw, b, lb, eps, rms)

    return kernel


def skip_norm(fn, dt):
    """k(out, x, lx, r, lr, w, lw, b, lb, eps) for skip_layer_norm: layer_norm of x + r (r contiguous)."""
    isz = dt.itemsize

    def kernel(out, x, lx, r, lr, w, lw, b, lb, eps):
        _norm_rows(fn, dt, out, x, lx, r.ptr + lr.offset * isz, w, lw, b, lb, eps, 0)

    return kernel


def rope(fn, interleaved, dt):
    """k(out, x, lx, cos, lcos, sin, lsin): rope (interleaved 0) and rope_i (1)."""
    isz = dt.itemsize

    def kernel(out, x, lx, cos, lcos, sin, lsin):
        if fn(dt.code, pack(lx.shape), pack(lx.strides), x.ptr + lx.offset * isz, cos.ptr + lcos.offset * isz,
              sin.ptr + lsin.offset * isz, out.ptr, interleaved, int(len(lcos.shape) == 3)):
            raise error()

    return kernel


def silu_mul(fn, dt):
    """k(out, x, lx): silu of the first half of the last dim times the second half (x contiguous)."""
    isz = dt.itemsize

    def kernel(out, x, lx):
        if not lx.contiguous:
            raise KernelError("silu_mul: the cpu kernel takes a contiguous input")
        f = lx.shape[-1] // 2
        if fn(dt.code, lx.numel // max(2 * f, 1), f, x.ptr + lx.offset * isz, out.ptr):
            raise error()

    return kernel


def bias_gelu(fn, dt):
    """k(out, x, lx, b, lb, approximate): gelu(x + b) along the last dim (x and b contiguous)."""
    isz = dt.itemsize

    def kernel(out, x, lx, b, lb, approximate):
        if not (lx.contiguous and lb.contiguous):
            raise KernelError("bias_gelu: the cpu kernel takes a contiguous input and bias")
        n = lx.shape[-1]
        if fn(dt.code, lx.numel // max(n, 1), n, x.ptr + lx.offset * isz, b.ptr + lb.offset * isz, out.ptr,
              int(approximate)):
            raise error()

    return kernel


def sdpa_desc(lq, lk, lv, lm, causal) -> bytes:
    """cd_sdpa's descriptor for these layouts (lm None: no mask)."""
    *batch, n_q, e = lq.shape
    n_k, e_v = lk.shape[-2], lv.shape[-1]
    rows = [*lq.strides, *lk.strides, *lv.strides, *(lm.strides if lm is not None else [0] * len(lq.shape))]
    return pack([len(batch), n_q, n_k, e, e_v, int(causal), *batch, *rows])


def sdpa(fn, dt):
    """k(out, q, lq, k, lk, v, lv, mask, lmask, mask_dtype, causal, scale)."""
    isz = dt.itemsize

    def kernel(out, q, lq, k, lk, v, lv, mask, lm, mask_dtype, causal, scale):
        desc = sdpa_desc(lq, lk, lv, lm if mask is not None else None, causal)
        m_ptr = mask.ptr + lm.offset * mask_dtype.itemsize if mask is not None else None
        if fn(dt.code, desc, q.ptr + lq.offset * isz, k.ptr + lk.offset * isz, v.ptr + lv.offset * isz, m_ptr,
              mask_dtype.code if mask is not None else -1, out.ptr, scale):
            raise error()

    return kernel


def makers(lib) -> dict:
    return {
        "softmax_last": partial(softmax, lib.cd_softmax_last, 0),
        "log_softmax_last": partial(softmax, lib.cd_softmax_last, 1),
        "layer_norm": partial(norm, lib.cd_norm_last, 0),
        "rms_norm": partial(norm, lib.cd_norm_last, 1),
        "skip_layer_norm": partial(skip_norm, lib.cd_norm_last),
        "rope": partial(rope, lib.cd_rope, 0),
        "rope_i": partial(rope, lib.cd_rope, 1),
        "sdpa": partial(sdpa, lib.cd_sdpa),
        "silu_mul": partial(silu_mul, lib.cd_silu_mul),
        "bias_gelu": partial(bias_gelu, lib.cd_bias_gelu),
    }
