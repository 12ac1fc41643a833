"""NumPy reference implementations the conformance suite checks backends against.

Written for clarity, not speed, on float64 (or the integer dtype itself, so
integer wrap-around matches)."""

from __future__ import annotations

import math

import numpy as np

_erf = np.frompyfunc(math.erf, 1, 1)


def erf(x):
    return np.asarray(_erf(np.asarray(x, dtype=np.float64)), dtype=np.float64)


def gelu(x):
    """0.5 x (1 + tanh(y)) as x sigmoid(2y): equal, without float64 cancellation for x < 0."""
    return x * sigmoid(2 * math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3))


_erfc = np.frompyfunc(math.erfc, 1, 1)


def gelu_erf(x):
    """0.5 x (1 + erf(x / sqrt2)) as 0.5 x erfc(-x / sqrt2), accurate in the negative tail."""
    return 0.5 * x * np.asarray(_erfc(-np.asarray(x, dtype=np.float64) / math.sqrt(2.0)), dtype=np.float64)


def sigmoid(x):
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-x))


def softplus(x):
    return np.where(x > 20, x, np.log1p(np.exp(np.minimum(x, 20))))


def int_div(a, b):
    """Integer division truncating toward zero, in a's dtype."""
    q = np.abs(a.astype(np.int64)) // np.abs(b.astype(np.int64))
    return (np.sign(a.astype(np.int64)) * np.sign(b.astype(np.int64)) * q).astype(a.dtype)


def softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def log_softmax(x, axis=-1):
    s = x - x.max(axis=axis, keepdims=True)
    return s - np.log(np.exp(s).sum(axis=axis, keepdims=True))


def layer_norm(x, w, b, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w + b


def skip_layer_norm(x, r, w, b, eps):
    return layer_norm(x + r, w, b, eps)


def bias_gelu(x, b, approximate):
    return gelu(x + b) if approximate else gelu_erf(x + b)


def silu_mul(x):
    f = x.shape[-1] // 2
    gate = x[..., :f]
    return gate * sigmoid(gate) * x[..., f:]


def rms_norm(x, w, eps):
    return x / np.sqrt((x**2).mean(-1, keepdims=True) + eps) * w


def rope(x, cos, sin, interleaved):
    if cos.ndim == 3:
        cos, sin = cos[:, None], sin[:, None]
    half = x.shape[-1] // 2
    if interleaved:
        x1, x2 = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = x1 * cos - x2 * sin
        out[..., 1::2] = x1 * sin + x2 * cos
        return out
    x1, x2 = x[..., :half], x[..., half:]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)


def attention(q, k, v, mask=None, causal=False, scale=None, gqa=False):
    """softmax(q k^T scale + mask) v; a u8 mask keeps keys where nonzero; rows
    with every key masked give zeros."""
    if gqa:
        g = q.shape[-3] // k.shape[-3]
        k, v = np.repeat(k, g, axis=-3), np.repeat(v, g, axis=-3)
    s = q @ np.swapaxes(k, -1, -2) * (1 / math.sqrt(q.shape[-1]) if scale is None else scale)
    if causal:
        n_q, n_k = s.shape[-2:]
        mask = (np.arange(n_k)[None, :] <= np.arange(n_q)[:, None]).astype(np.uint8)
    if mask is not None:
        s = np.where(mask != 0, s, -np.inf) if mask.dtype == np.uint8 else s + mask
    m = s.max(-1, keepdims=True) if s.shape[-1] else np.zeros(s.shape[:-1] + (1,))
    visible = np.isfinite(m) | np.isnan(m)
    with np.errstate(invalid="ignore"):
        p = np.where(visible, np.exp(s - np.where(visible, m, 0)), 0)
        p = p / np.where(visible, p.sum(-1, keepdims=True), 1)
    return p @ v


def conv2d(x, w, padding, stride, dilation, groups):
    b, cin, h, wd = x.shape
    cout, cin_g, kh, kw = w.shape
    (ph, pw), (sh, sw), (dh, dw) = padding, stride, dilation
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((b, cout, oh, ow))
    cout_g = cout // groups
    for g in range(groups):
        xs = xp[:, g * cin_g : (g + 1) * cin_g]
        ws = w[g * cout_g : (g + 1) * cout_g]
        for i in range(kh):
            for j in range(kw):
                patch = xs[:, :, i * dh : i * dh + sh * (oh - 1) + 1 : sh, j * dw : j * dw + sw * (ow - 1) + 1 : sw]
                out[:, g * cout_g : (g + 1) * cout_g] += np.einsum("bchw,oc->bohw", patch, ws[:, :, i, j])
    return out


def conv_transpose2d(x, w, padding, output_padding, stride, dilation, groups):
    b, cin, h, wd = x.shape
    _, cout_g, kh, kw = w.shape
    (ph, pw), (oph, opw), (sh, sw), (dh, dw) = padding, output_padding, stride, dilation
    oh = (h - 1) * sh - 2 * ph + dh * (kh - 1) + oph + 1
    ow = (wd - 1) * sw - 2 * pw + dw * (kw - 1) + opw + 1
    full = np.zeros((b, cout_g * groups, oh + 2 * ph + sh + dh * kh, ow + 2 * pw + sw + dw * kw))
    cin_g = cin // groups
    for g in range(groups):
        xs = x[:, g * cin_g : (g + 1) * cin_g]
        ws = w[g * cin_g : (g + 1) * cin_g]
        for i in range(kh):
            for j in range(kw):
                contrib = np.einsum("bchw,co->bohw", xs, ws[:, :, i, j])
                full[:, g * cout_g : (g + 1) * cout_g, i * dh : i * dh + sh * (h - 1) + 1 : sh,
                     j * dw : j * dw + sw * (wd - 1) + 1 : sw] += contrib
    return full[:, :, ph : ph + oh, pw : pw + ow]


def pool2d(x, kernel, stride, padding, mode, count_include_pad=True):
    b, c, h, w = x.shape
    (kh, kw), (sh, sw), (ph, pw) = kernel, stride, padding
    oh = (h + 2 * ph - kh) // sh + 1
    ow = (w + 2 * pw - kw) // sw + 1
    out = np.zeros((b, c, oh, ow))
    for oy in range(oh):
        for ox in range(ow):
            y0, x0 = oy * sh - ph, ox * sw - pw
            ys, xs = slice(max(y0, 0), min(y0 + kh, h)), slice(max(x0, 0), min(x0 + kw, w))
            win = x[:, :, ys, xs]
            if mode == "max":
                out[:, :, oy, ox] = win.max(axis=(2, 3))
            else:
                count = kh * kw if count_include_pad else win.shape[2] * win.shape[3]
                out[:, :, oy, ox] = win.sum(axis=(2, 3)) / count
    return out


def pool2d_argmax(x, kernel, stride, padding):
    """max_pool2d's indices: for each window, the flat index (row * width + col)
    in its plane of the first maximum in row-major order (of the last NaN)."""
    b, c, h, w = x.shape
    (kh, kw), (sh, sw), (ph, pw) = kernel, stride, padding
    oh, ow = (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1
    out = np.zeros((b, c, oh, ow), np.uint32)
    for n in np.ndindex(b, c):
        for oy in range(oh):
            for ox in range(ow):
                best, at = None, 0
                for y in range(oy * sh - ph, oy * sh - ph + kh):
                    for xx in range(ox * sw - pw, ox * sw - pw + kw):
                        if 0 <= y < h and 0 <= xx < w:
                            v = x[n][y, xx]
                            if best is None or v > best or v != v:
                                best, at = v, y * w + xx
                out[n][oy, ox] = at
    return out


def upsample_nearest2d(x, oh, ow):
    h, w = x.shape[-2:]
    ys = np.minimum((np.arange(oh) * h / oh).astype(np.int64), h - 1)
    xs = np.minimum((np.arange(ow) * w / ow).astype(np.int64), w - 1)
    return x[..., ys[:, None], xs[None, :]]


def upsample_bilinear2d(x, oh, ow, align_corners):
    h, w = x.shape[-2:]

    def coords(out, size):
        d = np.arange(out, dtype=np.float64)
        if align_corners:
            s = d * (size - 1) / (out - 1) if out > 1 else np.zeros_like(d)
        else:
            s = np.maximum((d + 0.5) * size / out - 0.5, 0.0)
        i0 = np.minimum(s.astype(np.int64), size - 1)
        return i0, np.minimum(i0 + 1, size - 1), s - i0

    y0, y1, fy = coords(oh, h)
    x0, x1, fx = coords(ow, w)
    fy, fx = fy[:, None], fx[None, :]
    top = x[..., y0[:, None], x0[None, :]] * (1 - fx) + x[..., y0[:, None], x1[None, :]] * fx
    bot = x[..., y1[:, None], x0[None, :]] * (1 - fx) + x[..., y1[:, None], x1[None, :]] * fx
    return top * (1 - fy) + bot * fy
