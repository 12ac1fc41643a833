"""Convolutions: Conv and ConvTranspose in 1, 2 and 3 (or more) spatial dims.

1-d and 2-d run on candle-api's conv kernels; deeper ones are sums of 2-d
convolutions over the taps of the leading spatial dims. Padding the kernels
cannot express (asymmetric, SAME_*) is applied to the input (Conv) or cut
from the full output (ConvTranspose).
"""

from __future__ import annotations


import math

import candle_api as c
from candle_api.ops import panels

from .ops_tensor import pad
from .packing import Panels, activation, pack_conv
from .registry import op


def conv_params(node, x, kernel_dims):
    """(pads as (begin, end) per spatial dim, strides, dilations) with auto_pad resolved."""
    n = x.rank - 2
    kernel = node.get("kernel_shape") or list(kernel_dims)
    strides = node.get("strides") or [1] * n
    dilations = node.get("dilations") or [1] * n
    auto = node.get("auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads = []
        for size, k, s, d in zip(x.shape[2:], kernel, strides, dilations):
            out = -(-size // s)
            total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
            small = total // 2
            pads.append((small, total - small) if auto == "SAME_UPPER" else (total - small, small))
    elif auto == "VALID":
        pads = [(0, 0)] * n
    else:
        raw = node.get("pads") or [0] * (2 * n)
        pads = list(zip(raw[:n], raw[n:]))
    return pads, list(strides), list(dilations)


def conv(x, w, pads, strides, dilations, groups: int):
    """x (N, C, *spatial) with w (M, C / groups, *kernel); pads as (begin, end) per dim."""
    if any(b != e for b, e in pads):
        x = pad(x, [(0, 0), (0, 0)] + list(pads))
        pads = [(0, 0)] * len(pads)
    sym = [b for b, _ in pads]
    n = x.rank - 2
    if n == 1:
        return x.conv1d(w, sym[0], strides[0], dilations[0], groups)
    if n == 2:
        return x.conv2d(w, tuple(sym), tuple(strides), tuple(dilations), groups)
    return _conv_leading(x, w, pads, strides, dilations, groups)


def _conv_leading(x, w, pads, strides, dilations, groups):
    """A convolution over 3+ spatial dims: for each tap of the first one, the
    input positions it reads (a strided slice) form a batch of (n-1)-d images."""
    x = pad(x, [(0, 0), (0, 0), pads[0]] + [(0, 0)] * (len(pads) - 1))
    b, ch, depth = x.shape[:3]
    k, s, d = w.shape[2], strides[0], dilations[0]
    out_depth = (depth - (k - 1) * d - 1) // s + 1
    total = None
    for tap in range(k):
        part = x.narrow(2, tap * d, (out_depth - 1) * s + 1)[:, :, ::s]
        part = part.transpose(1, 2).reshape((b * out_depth, ch) + x.shape[3:])
        y = conv(part, w[:, :, tap], pads[1:], strides[1:], dilations[1:], groups)
        y = y.reshape((b, out_depth) + y.shape[1:]).transpose(1, 2)
        total = y if total is None else total + y
    return total


def _with_bias(y, bias):
    return y if bias is None else y + bias.reshape((1, -1) + (1,) * (y.rank - 2))


def conv_any(node, x, w, bias=None, z=None):
    """act(conv(x, w) + bias + z) * output_scale + output_shift, on the packed panels when w is packed."""
    act, alpha, beta = activation(node)
    scale, shift = node.get("output_scale", 1.0), node.get("output_shift", 0.0)
    pads, strides, dilations = conv_params(node, x, w.shape[2:])
    if not isinstance(w, Panels):
        y = _with_bias(conv(x, w, pads, strides, dilations, node.get("group", 1)), bias)
        y = panels.activate(y if z is None else y + z, act, alpha, beta)
        return y if scale == 1.0 and shift == 0.0 else y * scale + shift
    one_d = x.rank == 3
    if one_d:  # a 1-d convolution is a 2-d one over a height of 1
        x, pads, strides, dilations = x.unsqueeze(2), [(0, 0), *pads], [1, *strides], [1, *dilations]
        z = z.unsqueeze(2) if z is not None and z.rank == 3 else z
    if any(b != e for b, e in pads):
        x = pad(x, [(0, 0), (0, 0)] + list(pads))
        pads = [(0, 0)] * len(pads)
    shape4 = w.shape if len(w.shape) == 4 else (w.shape[0], w.shape[1], 1, w.shape[2])
    begin = [b for b, _ in pads]
    out = (x.shape[0], shape4[0], *[(n + 2 * p - d * (k - 1) - 1) // s + 1
                                    for n, p, d, k, s in zip(x.shape[2:], begin, dilations, shape4[2:], strides)])
    if z is not None and z.shape != out:  # a Z that broadcasts is added after
        y = panels.conv2d_panels(x, w.tensor, shape4, bias, None, begin, strides, dilations, w.groups)
        y = panels.activate(y + z, act, alpha, beta)
        y = y if scale == 1.0 and shift == 0.0 else y * scale + shift
    else:
        y = panels.conv2d_panels(x, w.tensor, shape4, bias, z, begin, strides, dilations, w.groups, act, alpha, beta,
                                 scale, shift)
    return y.squeeze(2) if one_d else y


@op("Conv", pack=pack_conv)
def conv_op(node, x, w, bias=None):
    return conv_any(node, x, w, bias)


def _transpose_params(node, x, w):
    """(first output position kept, output size) per dim, with the full output
    of a padding-free transposed convolution as reference."""
    n = x.rank - 2
    strides = node.get("strides") or [1] * n
    dilations = node.get("dilations") or [1] * n
    extra = node.get("output_padding") or [0] * n
    full = [(size - 1) * s + (k - 1) * d + 1 for size, s, k, d in zip(x.shape[2:], strides, w.shape[2:], dilations)]
    target = node.get("output_shape")
    auto = node.get("auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER") and not node.get("pads"):
        target = target or [size * s for size, s in zip(x.shape[2:], strides)]
        total = [f + e - t for f, e, t in zip(full, extra, target)]
        begin = [t // 2 if auto == "SAME_UPPER" else t - t // 2 for t in total]
        return begin, list(target), strides, dilations, full
    raw = node.get("pads") or [0] * (2 * n)
    begin = raw[:n]
    if not target:
        target = [f + e - b - end for f, e, b, end in zip(full, extra, begin, raw[n:])]
    return begin, list(target), strides, dilations, full


def conv_transpose(x, w, begin, target, strides, dilations, full, groups: int):
    n = x.rank - 2
    # the kernels cut `padding` from both ends of the full output, then add `output_padding` at the end
    out_pad = [t - f + 2 * b for f, b, t in zip(full, begin, target)]
    if n <= 2 and all(b >= 0 and 0 <= o < max(s, d) for b, o, s, d in zip(begin, out_pad, strides, dilations)):
        if n == 1:
            return x.conv_transpose1d(w, begin[0], out_pad[0], strides[0], dilations[0], groups)
        return x.conv_transpose2d(w, tuple(begin), tuple(out_pad), tuple(strides), tuple(dilations), groups)
    y = _transpose_full(x, w, strides, dilations, groups)
    return pad(y, [(0, 0), (0, 0)] + [(-b, t - (f - b)) for b, t, f in zip(begin, target, full)])


def _transpose_full(x, w, strides, dilations, groups):
    """The padding-free transposed convolution (any number of spatial dims)."""
    n = x.rank - 2
    if n == 1:
        return x.conv_transpose1d(w, 0, 0, strides[0], dilations[0], groups)
    if n == 2:
        return x.conv_transpose2d(w, (0, 0), (0, 0), tuple(strides), tuple(dilations), groups)
    # 3+ dims: each tap of the first kernel dim adds an (n-1)-d transposed
    # convolution of every input slice at depth i * stride + tap * dilation
    b, ch, depth = x.shape[:3]
    k, s, d = w.shape[2], strides[0], dilations[0]
    flat = x.transpose(1, 2).reshape((b * depth, ch) + x.shape[3:])
    total = None
    full_depth = (depth - 1) * s + (k - 1) * d + 1
    for tap in range(k):
        y = _transpose_full(flat, w[:, :, tap], strides[1:], dilations[1:], groups)
        y = y.reshape((b, depth) + y.shape[1:]).transpose(1, 2)      # (b, m, depth, ...)
        if s > 1:  # place slice i at position i * s: interleave s - 1 zero slices
            y = y.unsqueeze(3)
            y = pad(y, [(0, 0)] * 3 + [(0, s - 1)] + [(0, 0)] * (y.rank - 4))
            y = y.reshape(y.shape[:2] + (depth * s,) + y.shape[4:]).narrow(2, 0, (depth - 1) * s + 1)
        y = pad(y, [(0, 0), (0, 0), (tap * d, full_depth - tap * d - y.shape[2])] + [(0, 0)] * (n - 1))
        total = y if total is None else total + y
    return total


def _tiles_blocks(node, kernel) -> bool:
    """Whether a ConvTranspose puts one kernel-sized block per input pixel with no overlap
    (stride = kernel, no padding, dilation or output padding, one group)."""
    n = len(kernel)
    return (list(node.get("strides") or [1] * n) == list(kernel) and not any(node.get("pads") or [])
            and all(d == 1 for d in node.get("dilations") or [1]) and not any(node.get("output_padding") or [])
            and not node.get("output_shape") and node.get("auto_pad", "NOTSET") == "NOTSET"
            and node.get("group", 1) == 1)


def pack_blocks(node, index: int, w):
    """A 2-d ConvTranspose weight (cin, cout, kh, kw) whose blocks do not overlap, as the
    weight of a 1x1 convolution with kw * cout * kh output channels: one product per pixel
    gives every block, each column offset of the blocks a run of channels."""
    if index != 1 or w.dtype != c.f32 or w.rank != 4 or not _tiles_blocks(node, w.shape[2:]):
        return None
    cin, cout, kh, kw = w.shape
    return Panels(panels.conv_weights(w.permute(3, 1, 2, 0).contiguous().reshape(-1, cin, 1, 1), 1), w.shape)


def _blocks(node, x, w: Panels, bias):
    """act(ConvTranspose + bias) of non-overlapping blocks: the 1x1 product (n, kw * cout * kh, h, w),
    then each column offset's (n, cout, kh, h, w) put in place (runs of w pixels)."""
    n, cin, h, wd = x.shape
    cout, kh, kw = w.shape[1:]
    if bias is not None:
        bias = bias.reshape(1, cout, 1).broadcast_as((kw, cout, kh)).contiguous().reshape(-1)
    act, alpha, beta = activation(node)
    y = panels.conv2d_panels(x, w.tensor, (kw * cout * kh, cin, 1, 1), bias, act=act, alpha=alpha, beta=beta)
    cols = [y.narrow(1, j * cout * kh, cout * kh).reshape(n, cout, kh, h, wd).permute(0, 1, 3, 2, 4)
            for j in range(kw)]
    return c.stack(cols, -1).reshape(n, cout, h * kh, wd * kw)


def conv_transpose_any(node, x, w, bias=None):
    """act(ConvTranspose(x, w) + bias), on the packed blocks when w is packed."""
    if isinstance(w, Panels):
        if x.rank == 4 and x.dtype == c.f32:
            return _blocks(node, x, w, bias)
        cin, cout, kh, kw = w.shape
        w = panels.unpack_panels(w.tensor, kw * cout * kh)[0].reshape(kw, cout, kh, cin).permute(3, 1, 2, 0)
    begin, target, strides, dilations, full = _transpose_params(node, x, w)
    y = conv_transpose(x, w, begin, target, strides, dilations, full, node.get("group", 1))
    return panels.activate(_with_bias(y, bias), *activation(node))


@op("ConvTranspose", pack=pack_blocks)
def conv_transpose_op(node, x, w, bias=None):
    return conv_transpose_any(node, x, w, bias)


@op("CausalConvWithState", since=27)
def causal_conv_with_state(node, x, w, bias=None, past_state=None):
    """A depthwise 1-d convolution over the past state and the input, and the new
    state (the last k - 1 positions it saw), for streaming convolutions."""
    act = node.get("activation", "none")
    if act not in ("none", "silu", "swish") or x.rank != 3 or w.rank != 3:
        raise node.fail(f"needs a (batch, channels, length) input and (channels, 1, k) weight, activation "
                        f"none, silu or swish; got {x.shape}, {w.shape}, {act!r}")
    batch, channels, _ = x.shape
    k = w.shape[2]
    if past_state is None:
        past_state = c.zeros((batch, channels, k - 1), dtype=x.dtype, device=x.device)
    padded = c.cat([past_state, x], 2)
    y = _with_bias(conv(padded, w, [(0, 0)], [1], [1], channels), bias)
    if act != "none":
        y = y.to_dtype(c.f32).silu().to_dtype(x.dtype)
    return y, padded.narrow(2, padded.shape[2] - (k - 1), k - 1)
