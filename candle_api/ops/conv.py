"""Convolutions, pooling and resampling over (batch, channels, ...) tensors.

1-d ops run as 2-d ones over a height-1 view (no copy). Unbatched inputs
(one dim fewer) are accepted, as in PyTorch.
"""

from __future__ import annotations

import numpy as np

from ..autograd.graph import no_grad
from ..errors import ShapeError
from ..tensor import Tensor
from .core import check_tensor, require_float, same_device, same_dtype, view
from .creation import from_array, full
from .dispatch import OPS, OpDef, apply, define
from .elementwise import where
from .shape import cat, contiguous, copy_into


def _pair(v, name: str) -> tuple[int, int]:
    if isinstance(v, int):
        return v, v
    v = tuple(v)
    if len(v) != 2:
        raise ShapeError(f"{name} must be an int or a pair, got {v}")
    return int(v[0]), int(v[1])


def _batched(op: str, x: Tensor, rank: int) -> tuple[Tensor, bool]:
    if x.rank == rank - 1:
        return x.unsqueeze(0), True
    if x.rank != rank:
        raise ShapeError(f"{op}: expected a {rank}-d input (batch, channels, ...) or {rank - 1}-d unbatched, got {x.shape}")
    return x, False


def _conv(op: str, x: Tensor, w: Tensor, padding, stride, dilation, groups, transposed: bool,
          output_padding=(0, 0)) -> Tensor:
    check_tensor(op, w, "kernel")
    same_dtype(op, x, w)
    same_device(op, x, w)
    if w.rank != 4:
        raise ShapeError(f"{op}: the kernel must be 4-d, got {w.shape}")
    x, unbatched, params = conv_params(op, x, w.shape, padding, stride, dilation, groups, transposed, output_padding)
    result = apply(CONV_TRANSPOSE2D if transposed else CONV2D, x, w, params=params)
    return result.squeeze(0) if unbatched else result


def conv_params(op: str, x: Tensor, kernel_shape: tuple, padding, stride, dilation, groups, transposed: bool = False,
                output_padding=(0, 0)) -> tuple:
    """(x batched, whether it was not, the 18 params of the conv kernels) for a 2-d
    convolution of x by a kernel of kernel_shape (cout, cin / groups, kh, kw), or
    (cin, cout / groups, kh, kw) when transposed; ShapeError when they do not fit."""
    check_tensor(op, x)
    require_float(op, x)
    x, unbatched = _batched(op, x, 4)
    (ph, pw), (sh, sw), (dh, dw) = _pair(padding, "padding"), _pair(stride, "stride"), _pair(dilation, "dilation")
    oph, opw = _pair(output_padding, "output_padding")
    if min(sh, sw, dh, dw) < 1 or min(ph, pw, oph, opw) < 0 or groups < 1:
        raise ShapeError(f"{op}: stride and dilation must be >= 1, padding >= 0, groups >= 1")
    b, cin, h, wd = x.shape
    kh, kw = kernel_shape[2:]
    if transposed:
        if kernel_shape[0] != cin:
            raise ShapeError(f"{op}: kernel {kernel_shape} expects {kernel_shape[0]} input channels, the input has {cin}")
        cout = kernel_shape[1] * groups
        oh = (h - 1) * sh - 2 * ph + dh * (kh - 1) + oph + 1
        ow = (wd - 1) * sw - 2 * pw + dw * (kw - 1) + opw + 1
        if oph >= max(sh, dh) or opw >= max(sw, dw):
            raise ShapeError(f"{op}: output_padding must be smaller than stride or dilation")
    else:
        cout = kernel_shape[0]
        if cin != kernel_shape[1] * groups:
            raise ShapeError(f"{op}: input has {cin} channels but the kernel {kernel_shape} with {groups} group(s) "
                             f"expects {kernel_shape[1] * groups}")
        oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
        ow = (wd + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    if cin % groups or cout % groups:
        raise ShapeError(f"{op}: channels ({cin} in, {cout} out) must divide by groups={groups}")
    if oh <= 0 or ow <= 0:
        raise ShapeError(f"{op}: input {x.shape} is too small for kernel {kernel_shape} (output would be {oh}x{ow})")
    return x, unbatched, (b, cin, h, wd, cout, kh, kw, sh, sw, ph, pw, dh, dw, groups, oh, ow, oph, opw)


def _conv_prepare(x, w, params):
    b, cout, oh, ow = params[0], params[4], params[14], params[15]
    return (b, cout, oh, ow), x._dtype, (x._storage, x._layout, w._storage, w._layout, params)


def _geometry(params):
    """(padding, stride, dilation, groups) of a convolution's params."""
    sh, sw, ph, pw, dh, dw, groups = params[7:14]
    return (ph, pw), (sh, sw), (dh, dw), groups


def _conv_backward(transposed: bool):
    return lambda inputs, out, g, params: _conv_grads(*inputs, g, _geometry(params), transposed)


def _conv_grads(x, w, g, geometry, transposed):
    padding, stride, dilation, groups = geometry
    kh, kw = w.shape[2:]
    gx = gw = None
    if not transposed:
        if x._node is not None:  # the adjoint of a convolution is the transposed one
            extra = tuple(size - ((o - 1) * s - 2 * p + d * (k - 1) + 1)
                          for size, o, s, p, d, k in zip(x.shape[2:], g.shape[2:], stride, padding, dilation, (kh, kw)))
            gx = conv_transpose2d(g, w, padding, extra, stride, dilation, groups)
        if w._node is not None:
            gw = _weight_grad(x, g, (kh, kw), padding, stride, dilation, groups)
    else:
        if x._node is not None:
            gx = conv2d(g, w, padding, stride, dilation, groups)
            gx = gx.narrow(2, 0, x.shape[2]).narrow(3, 0, x.shape[3])
        if w._node is not None:
            gw = _weight_grad(g, x, (kh, kw), padding, stride, dilation, groups)
    return gx, gw


def _weight_grad(inp, gout, ksize, padding, stride, dilation, groups):
    """dL/dw of ``gout = conv2d(inp, w)``: shape (gout channels, inp channels / groups, kh, kw)."""
    b, cin, h, w = inp.shape
    cout, (oh, ow) = gout.shape[1], gout.shape[2:]
    params = (b, cin, h, w, cout, *ksize, *stride, *padding, *dilation, groups, oh, ow, 0, 0)
    return apply(CONV2D_BACKWARD_WEIGHT, inp, gout, params=params)


def _weight_grad_prepare(inp, gout, params):
    cin, cout, kh, kw, groups = params[1], params[4], params[5], params[6], params[13]
    return (cout, cin // groups, kh, kw), inp._dtype, (inp._storage, inp._layout, gout._storage, gout._layout,
                                                       params)


def _weight_grad_decomposed(inp, gout, params):
    """Per group, a convolution of inp with gout where batch and channels swap
    roles and stride and dilation swap."""
    padding, stride, dilation, groups = _geometry(params)
    ksize = params[5:7]
    cin, cout = inp.shape[1] // groups, gout.shape[1] // groups
    parts = []
    for gi in range(groups):
        xi = inp.narrow(1, gi * cin, cin).transpose(0, 1)     # (cin, b, h, w)
        gi_ = gout.narrow(1, gi * cout, cout).transpose(0, 1)  # (cout, b, oh, ow): the kernel
        full = conv2d(xi, gi_, padding, dilation, stride)      # (cin, cout, >= kh, >= kw)
        parts.append(full.narrow(2, 0, ksize[0]).narrow(3, 0, ksize[1]).transpose(0, 1))
    return parts[0] if groups == 1 else _cat(parts, 0)


def _cat(parts, dim):
    from .shape import cat

    return cat(parts, dim)


def conv2d(x, w, padding=0, stride=1, dilation=1, groups=1) -> Tensor:
    """x (b, c_in, h, w) with kernel (c_out, c_in / groups, kh, kw)."""
    return _conv("conv2d", x, w, padding, stride, dilation, groups, False)


def conv_transpose2d(x, w, padding=0, output_padding=0, stride=1, dilation=1, groups=1) -> Tensor:
    """x (b, c_in, h, w) with kernel (c_in, c_out / groups, kh, kw)."""
    return _conv("conv_transpose2d", x, w, padding, stride, dilation, groups, True, _pair(output_padding, "output_padding"))


def _as_2d(op: str, x: Tensor, w: Tensor) -> tuple[Tensor, Tensor, bool]:
    check_tensor(op, x)
    check_tensor(op, w, "kernel")
    if w.rank != 3:
        raise ShapeError(f"{op}: the kernel must be 3-d, got {w.shape}")
    x, unbatched = _batched(op, x, 3)
    return x.unsqueeze(2), w.unsqueeze(2), unbatched


def conv1d(x, w, padding=0, stride=1, dilation=1, groups=1) -> Tensor:
    """x (b, c_in, l) with kernel (c_out, c_in / groups, k)."""
    x2, w2, unbatched = _as_2d("conv1d", x, w)
    out = _conv("conv1d", x2, w2, (0, padding), (1, stride), (1, dilation), groups, False).squeeze(2)
    return out.squeeze(0) if unbatched else out


def conv_transpose1d(x, w, padding=0, output_padding=0, stride=1, dilation=1, groups=1) -> Tensor:
    """x (b, c_in, l) with kernel (c_in, c_out / groups, k)."""
    x2, w2, unbatched = _as_2d("conv_transpose1d", x, w)
    out = _conv("conv_transpose1d", x2, w2, (0, padding), (1, stride), (1, dilation), groups, True,
                (0, output_padding)).squeeze(2)
    return out.squeeze(0) if unbatched else out


def _pool_out(size: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    span = size + 2 * p - d * (k - 1) - 1
    out = (span + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (out - 1) * s >= size + p:  # the last window must start inside the input
        out -= 1
    return out


def pool2d(op: str, x: Tensor, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
           count_include_pad=True) -> Tensor:
    """max_pool2d / avg_pool2d over (b, c, h, w); stride defaults to the kernel size."""
    x, unbatched, params = _pool_params(op, x, kernel_size, stride, padding, dilation, ceil_mode, count_include_pad)
    result = apply(POOL[op], x, params=params)
    return result.squeeze(0) if unbatched else result


def _pool_params(op: str, x: Tensor, kernel_size, stride, padding, dilation, ceil_mode, count_include_pad):
    """(x as 4-d, whether it was 3-d, the kernel's params), the arguments checked."""
    check_tensor(op, x)
    x, unbatched = _batched(op, x, 4)
    kh, kw = _pair(kernel_size, "kernel_size")
    sh, sw = _pair(stride if stride is not None else (kh, kw), "stride")
    ph, pw = _pair(padding, "padding")
    dh, dw = _pair(dilation, "dilation")
    if min(kh, kw, sh, sw, dh, dw) < 1 or min(ph, pw) < 0:
        raise ShapeError(f"{op}: kernel, stride and dilation must be >= 1 and padding >= 0")
    if ph > kh // 2 or pw > kw // 2:
        raise ShapeError(f"{op}: padding ({ph}, {pw}) must be at most half the kernel ({kh}, {kw})")
    b, c, h, w = x.shape
    oh, ow = _pool_out(h, kh, sh, ph, dh, ceil_mode), _pool_out(w, kw, sw, pw, dw, ceil_mode)
    if oh <= 0 or ow <= 0:
        raise ShapeError(f"{op}: input {x.shape} is too small for a {kh}x{kw} window")
    return x, unbatched, (b, c, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow, int(bool(count_include_pad)))


def max_pool2d_indices(x: Tensor, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False) -> Tensor:
    """Where each window's maximum is, as PyTorch's return_indices gives it: the
    flat index into its input plane (row * width + col) of the first maximum in
    the window's row-major order (of the last NaN, where there is one); u32.
    Composed of strided views of the input, one per window tap."""
    x, unbatched, params = _pool_params("max_pool2d", x, kernel_size, stride, padding, dilation, ceil_mode, True)
    b, c, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow, _ = params
    lowest = float("-inf") if x.dtype.is_float else int(np.iinfo(x.dtype.np).min)
    # pad so that every tap of every window (ceil_mode's last ones too) is in range; padding never wins
    extra_h, extra_w = max(0, (oh - 1) * sh + (kh - 1) * dh + 1 - (h + 2 * ph)), max(0, (ow - 1) * sw + (kw - 1) * dw
                                                                                     + 1 - (w + 2 * pw))
    padded = x
    for dim, before, after in ((2, ph, ph + extra_h), (3, pw, pw + extra_w)):
        parts = [full(padded.shape[:dim] + (n,) + padded.shape[dim + 1:], lowest, dtype=x.dtype, device=x.device)
                 for n in (before, after)]
        padded = cat([parts[0], padded, parts[1]], dim) if before or after else padded
    best = index = None
    seen = np.zeros((oh, ow), bool)  # windows that have met a tap inside the input (padding never wins)
    with no_grad():
        for i in range(kh):
            for j in range(kw):
                tap = padded[:, :, i * dh: i * dh + (oh - 1) * sh + 1: sh, j * dw: j * dw + (ow - 1) * sw + 1: sw]
                rows, cols = np.arange(oh) * sh - ph + i * dh, np.arange(ow) * sw - pw + j * dw
                inside = ((rows >= 0) & (rows < h))[:, None] & ((cols >= 0) & (cols < w))[None, :]
                at = from_array(np.where(inside, rows[:, None] * w + cols[None, :], 0).astype(np.uint32), None,
                                x.device)
                first = from_array(inside & ~seen, None, x.device)
                seen |= inside
                if best is None:
                    best, index = tap, at.broadcast_as(tap.shape)
                    continue
                better = (tap > best).maximum(tap != tap) if x.dtype.is_float else tap > best
                wins = better.logical_and(from_array(inside, None, x.device)).logical_or(first)
                best, index = where(wins, tap, best), where(wins, at, index)
    return index.squeeze(0) if unbatched else index.contiguous()


def _pool_prepare(x, params):
    b, c, oh, ow = params[0], params[1], params[12], params[13]
    return (b, c, oh, ow), x._dtype, (x._storage, x._layout, params)


def _pool_backward(name: str):
    backward_op = f"{name}_backward"
    return lambda inputs, out, g, params: (apply(OPS[backward_op], inputs[0], contiguous(g), params=params),)


def _taps(size: int, k: int, s: int, p: int, d: int, out: int):
    """Per window tap: (tap, first output position, count, first input position)
    for the outputs whose tap falls inside the input."""
    for tap in range(k):
        shift = tap * d - p  # input position of this tap for output 0
        first = -(shift // s) if shift < 0 else 0
        last = min(out, (size - 1 - shift) // s + 1) if size - 1 - shift >= 0 else 0
        if last > first:
            yield tap, first, last - first, first * s + shift


def _pool_backward_prepare(x, g, params):
    return x.shape, x._dtype, (x._storage, x._layout, g._storage, g._layout, params)


def _pool_backward_decomposed(op: str):
    """x's gradient from a walk over the window taps, each a strided view of x
    against a block of the output: max pooling routes each window's gradient
    to the first maximum of the window (the forward's choice), average pooling
    spreads it over the taps."""

    def decompose(x, g, params):
        from .creation import zeros

        b, c, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow, include_pad = params
        gx = zeros(x.shape, dtype=g.dtype, device=g.device)
        if op == "avg_pool2d":
            g = g / _avg_divisor(params, g)
        else:
            out = apply(POOL[op], x.detach(), params=params)
            taken = zeros(out.shape, dtype=g.dtype, device=g.device)
        for i, oy, ny, y in _taps(h, kh, sh, ph, dh, oh):
            for j, ox, nx, xx in _taps(w, kw, sw, pw, dw, ow):
                block = g._layout.narrow(2, oy, ny).narrow(3, ox, nx)
                gb = view(g, block)
                if op == "max_pool2d":
                    tl = taken._layout.narrow(2, oy, ny).narrow(3, ox, nx)
                    xv = view(x, x._layout.slice(2, y, ny, sh).slice(3, xx, nx, sw))
                    first = (xv == view(out, out._layout.narrow(2, oy, ny).narrow(3, ox, nx))).to_dtype(g.dtype)
                    first = first * (1.0 - view(taken, tl))
                    copy_into(taken, tl, view(taken, tl) + first)
                    gb = gb * first
                target = gx._layout.slice(2, y, ny, sh).slice(3, xx, nx, sw)
                copy_into(gx, target, view(gx, target) + gb)
        return gx

    return decompose


def _avg_divisor(params, like) -> Tensor:
    """How many taps each average pooling window divided by, as the forward kernel counts them."""
    from .creation import from_array

    b, c, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow, include_pad = params

    def counts(size, k, s, p, d, out):
        pos = np.arange(out)[:, None] * s - p + np.arange(k)[None, :] * d
        lo, hi = (-p, size + p) if include_pad else (0, size)
        return ((pos >= lo) & (pos < hi)).sum(1)

    cy, cx = counts(h, kh, sh, ph, dh, oh), counts(w, kw, sw, pw, dw, ow)
    div = np.maximum(cy[:, None] * cx[None, :], 1).astype(like.dtype.np)
    return from_array(div, like.dtype, like.device)


def max_pool2d(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """The window maxima; with return_indices, ``(maxima, indices)`` as PyTorch's
    (see :func:`max_pool2d_indices`)."""
    out = pool2d("max_pool2d", x, kernel_size, stride, padding, dilation, ceil_mode)
    if not return_indices:
        return out
    return out, max_pool2d_indices(x, kernel_size, stride, padding, dilation, ceil_mode)


def avg_pool2d(x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True) -> Tensor:
    return pool2d("avg_pool2d", x, kernel_size, stride, padding, 1, ceil_mode, count_include_pad)


def upsample2d(x: Tensor, target_h: int, target_w: int, mode: str = "nearest", align_corners: bool = False) -> Tensor:
    """Resizes (b, c, h, w) to (b, c, target_h, target_w): "nearest" or "bilinear"."""
    check_tensor("upsample", x)
    if mode not in ("nearest", "bilinear"):
        raise ValueError(f"upsample: mode must be 'nearest' or 'bilinear', got {mode!r}")
    x, unbatched = _batched("upsample", x, 4)
    if target_h < 1 or target_w < 1:
        raise ShapeError(f"upsample: target size must be positive, got {target_h}x{target_w}")
    if mode == "bilinear":
        require_float("upsample_bilinear2d", x)
    b, c, h, w = x.shape
    if h == 0 or w == 0:
        raise ShapeError(f"upsample: cannot resize an empty image {x.shape}")
    result = apply(UPSAMPLE[mode], x, out_h=target_h, out_w=target_w, align_corners=bool(align_corners))
    return result.squeeze(0) if unbatched else result


def _upsample_prepare(x, out_h, out_w, align_corners):
    b, c = x.shape[:2]
    return (b, c, out_h, out_w), x._dtype, (x._storage, x._layout, out_h, out_w, align_corners)


def _upsample_backward(mode: str):
    def backward(inputs, out, g, out_h, out_w, align_corners):
        x = inputs[0]
        rows = _resize_matrix(mode, align_corners, x.shape[2], out_h, x)
        cols = _resize_matrix(mode, align_corners, x.shape[3], out_w, x)
        return (rows.t() @ g @ cols,)

    return backward


def _bilinear_decomposed(x, out_h, out_w, align_corners):
    """The resize is separable: out = R x C^T with the interpolation matrices."""
    rows = _resize_matrix("bilinear", align_corners, x.shape[2], out_h, x)
    cols = _resize_matrix("bilinear", align_corners, x.shape[3], out_w, x)
    return rows @ x @ cols.t()


def _resize_matrix(mode: str, align_corners: bool, size: int, out: int, like) -> Tensor:
    """The (out, size) matrix of the forward's interpolation along one axis
    (the resize is separable: out = R x C^T), as the kernel computes its taps."""
    from .creation import from_array

    dst = np.arange(out, dtype=np.float64)
    if mode == "nearest":
        i0 = np.minimum((dst * size / out).astype(np.int64), size - 1)
        i1, f = i0, np.zeros(out)
    else:
        if align_corners:
            src = dst * (size - 1) / (out - 1) if out > 1 else np.zeros(out)
        else:
            src = np.maximum((dst + 0.5) * size / out - 0.5, 0.0)
        i0 = np.minimum(src.astype(np.int64), size - 1)
        i1 = np.minimum(i0 + 1, size - 1)
        f = src - i0
    m = np.zeros((out, size))
    np.add.at(m, (np.arange(out), i0), 1 - f)
    np.add.at(m, (np.arange(out), i1), f)
    return from_array(m.astype(like.dtype.np), like.dtype, like.device)


CONV2D = define(OpDef("conv2d", prepare=_conv_prepare, backward=_conv_backward(False)))
CONV_TRANSPOSE2D = define(OpDef("conv_transpose2d", prepare=_conv_prepare, backward=_conv_backward(True)))
CONV2D_BACKWARD_WEIGHT = define(OpDef("conv2d_backward_weight", prepare=_weight_grad_prepare,
                                      decompose=_weight_grad_decomposed))
POOL = {name: define(OpDef(name, prepare=_pool_prepare, backward=_pool_backward(name)))
        for name in ("max_pool2d", "avg_pool2d")}
for _name in POOL:
    define(OpDef(f"{_name}_backward", prepare=_pool_backward_prepare, decompose=_pool_backward_decomposed(_name)))
UPSAMPLE = {mode: define(OpDef(f"upsample_{mode}2d", prepare=_upsample_prepare, backward=_upsample_backward(mode),
                               decompose=_bilinear_decomposed if mode == "bilinear" else None))
            for mode in ("nearest", "bilinear")}
