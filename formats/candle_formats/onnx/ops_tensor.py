"""Shapes and layouts: reshape, transpose, concat, split, slice, pad, tile,
expand, constants and ranges."""

from __future__ import annotations

import math

import numpy as np

import candle_api as c

from .dtypes import from_numpy_dtype, onnx_type
from .helpers import axes, axis, const, full, ints, scalar, tensor_from_array
from .registry import op


@op("Constant")
def constant(node, *_):
    a = node.attrs
    if "value" in a:
        return tensor_from_array(a["value"], node.device)
    if "sparse_value" in a:
        return tensor_from_array(a["sparse_value"], node.device)
    for name, dtype in (("value_float", np.float32), ("value_floats", np.float32), ("value_int", np.int64),
                        ("value_ints", np.int64)):
        if name in a:
            return tensor_from_array(np.asarray(a[name], dtype=dtype), node.device)
    raise node.unsupported("string constants: candle-api tensors hold numbers only")


@op("ConstantOfShape", since=9)
def constant_of_shape(node, shape):
    value = node.get("value")
    dims = tuple(ints(shape))
    if value is None:
        return full(dims, 0.0, c.f32, node.device)
    return full(dims, value.reshape(-1)[0].item(), from_numpy_dtype(value.dtype).storage, node.device)


@op("Shape")
def shape(node, x):
    dims = list(x.shape)
    start, end = node.get("start", 0), node.get("end", len(dims))
    return const(dims[slice(start, end)], c.i64, node.device)


@op("Size")
def size(node, x):
    return const(math.prod(x.shape), c.i64, node.device)


@op("Reshape")
def reshape_v1(node, x):
    return _reshape(x, node["shape"], False)


@op("Reshape", since=5)
def reshape(node, x, shape):
    return _reshape(x, ints(shape), bool(node.get("allowzero", 0)))


def _reshape(x, dims, allowzero: bool):
    if not allowzero:
        dims = [x.shape[i] if d == 0 else d for i, d in enumerate(dims)]
    return x.reshape(tuple(dims))


@op("Flatten")
def flatten(node, x):
    a = node.get("axis", 1)
    a = a + x.rank if a < 0 else a
    return x.reshape(math.prod(x.shape[:a]), math.prod(x.shape[a:]))


@op("Squeeze")
def squeeze(node, x, axes_in=None):
    given = ints(axes_in) if axes_in is not None else node.get("axes")
    if not given:
        return x.reshape(tuple(d for d in x.shape if d != 1))
    dims = set(axes(given, x.rank, node))
    bad = [d for d in dims if x.shape[d] != 1]
    if bad:
        raise node.fail(f"cannot squeeze dim {bad[0]} of size {x.shape[bad[0]]}")
    return x.reshape(tuple(n for i, n in enumerate(x.shape) if i not in dims))


@op("Unsqueeze")
def unsqueeze(node, x, axes_in=None):
    given = ints(axes_in) if axes_in is not None else node["axes"]
    rank = x.rank + len(given)
    dims = set(axes(given, rank, node))
    it = iter(x.shape)
    return x.reshape(tuple(1 if i in dims else next(it) for i in range(rank)))


@op("Transpose")
def transpose(node, x):
    perm = node.get("perm") or list(range(x.rank))[::-1]
    return x.permute(perm)


@op("Concat")
def concat(node, *xs):
    a = axis(node["axis"], xs[0].rank, node)
    xs = [x for x in xs if x.shape[a] or len(xs) == 1] or xs[:1]
    return c.cat(xs, a) if len(xs) > 1 else xs[0]


@op("Split")
def split(node, x, split_in=None):
    a = axis(node.get("axis", 0), x.rank, node)
    n = x.shape[a]
    sizes = ints(split_in) if split_in is not None else node.get("split")
    if not sizes:
        parts = node.get("num_outputs") or node.n_outputs
        step = -(-n // parts)
        sizes = [min(step, n - i * step) for i in range(parts)]
    if sum(sizes) != n:
        raise node.fail(f"split sizes {sizes} do not add up to dim {a} of size {n}")
    return tuple(x.split(list(sizes), a))


@op("Slice")
def slice_v1(node, x):
    return _slice(x, node["starts"], node["ends"], node.get("axes"), None)


@op("Slice", since=10)
def slice_(node, x, starts, ends, axes_in=None, steps=None):
    return _slice(x, ints(starts), ints(ends), ints(axes_in) if axes_in is not None else None,
                  ints(steps) if steps is not None else None)


def _slice(x, starts, ends, axes_, steps):
    axes_ = axes(axes_ if axes_ is not None else range(len(starts)), x.rank)
    steps = steps or [1] * len(starts)
    index = [slice(None)] * x.rank
    for a, start, end, step in zip(axes_, starts, ends, steps):
        index[a] = _bounds(x.shape[a], start, end, step)
    return x[tuple(index)]


def _bounds(dim: int, start: int, end: int, step: int) -> slice:
    """ONNX's clamping of slice bounds, as a Python slice."""
    if step == 0:
        raise ValueError("slice steps cannot be 0")
    start = start + dim if start < 0 else start
    end = end + dim if end < 0 else end
    if step > 0:
        return slice(min(max(start, 0), dim), min(max(end, 0), dim), step)
    start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
    return slice(start, end if end >= 0 else None, step)


@op("Expand", since=8)
def expand(node, x, shape):
    return x.broadcast_as(np.broadcast_shapes(x.shape, tuple(ints(shape))))


@op("Tile")
def tile(node, x, repeats, *legacy):
    reps = ints(repeats)
    if legacy:  # Tile-1: (input, tiles, axis)
        counts = [1] * x.rank
        counts[ints(legacy[0])[0]] = reps[0]
        reps = counts
    return x.repeat(*reps)


def pad(x, pads: list[tuple[int, int]], mode: str = "constant", value=0):
    """x padded by (begin, end) per dim; negative amounts crop."""
    for d, (b, e) in enumerate(pads):
        if b < 0 or e < 0:
            n = x.shape[d]
            start, stop = max(-b, 0), n - max(-e, 0)
            x = x.narrow(d, start, max(stop - start, 0))
    for d, (b, e) in enumerate(pads):
        b, e = max(b, 0), max(e, 0)
        if b == 0 and e == 0:
            continue
        left, right = _pad_blocks(x, d, b, e, mode, value)
        x = c.cat([p for p in (left, x, right) if p is not None], d)
    return x


def _pad_blocks(x, d: int, b: int, e: int, mode: str, value):
    n = x.shape[d]

    def block(k):
        return full(x.shape[:d] + (k,) + x.shape[d + 1:], value, x.dtype, x.device) if k else None

    if mode == "constant":
        return block(b), block(e)
    if n == 0:
        raise ValueError(f"cannot pad an empty dim in {mode!r} mode")
    if mode == "edge":
        def edge(i, k):
            return x.narrow(d, i, 1).broadcast_as(x.shape[:d] + (k,) + x.shape[d + 1:]) if k else None
        return edge(0, b), edge(n - 1, e)
    if mode == "reflect":
        if max(b, e) > n - 1:
            raise ValueError(f"reflect padding of {max(b, e)} needs a dim longer than {n}")
        return (x.narrow(d, 1, b).flip(d) if b else None), (x.narrow(d, n - 1 - e, e).flip(d) if e else None)
    if mode == "wrap":
        return (x.narrow(d, n - b, b) if b else None), (x.narrow(d, 0, e) if e else None)
    raise ValueError(f"unknown pad mode {mode!r}")


def _pad_node(node, x, raw: list[int], value, axes_in=None):
    rank = x.rank
    dims = axes(axes_in, rank, node) if axes_in is not None else list(range(rank))
    if len(raw) != 2 * len(dims):
        raise node.fail(f"pads has {len(raw)} values for {len(dims)} axes")
    pads = [(0, 0)] * rank
    for i, d in enumerate(dims):
        pads[d] = (raw[i], raw[len(dims) + i])
    if x.dtype.is_int:
        value = int(value)
    return pad(x, pads, node.get("mode", "constant"), value)


@op("Pad")
def pad_v1(node, x):
    return _pad_node(node, x, node.get("pads") or node.get("paddings"), node.get("value", 0.0))


@op("Pad", since=11)
def pad_(node, x, pads, value=None, axes_in=None):
    v = scalar(value) if value is not None and value.numel() else 0
    return _pad_node(node, x, ints(pads), v, ints(axes_in) if axes_in is not None else None)


@op("Range", since=11)
def range_(node, start, limit, delta):
    s, l, d = scalar(start), scalar(limit), scalar(delta)
    n = max(math.ceil((l - s) / d), 0)
    if start.dtype.is_int:
        return c.arange(0, n, dtype=c.i64, device=node.device).to_dtype(start.dtype) * d + s
    return c.arange(0, n, dtype=c.f64, device=node.device).affine(d, s).to_dtype(start.dtype)


@op("EyeLike", since=9)
def eye_like(node, x):
    dtype = onnx_type(node["dtype"]).storage if node.get("dtype") is not None else x.dtype
    rows, cols = x.shape
    mask = _diagonal_offsets(rows, cols, node.device) == node.get("k", 0)
    return mask.to_dtype(dtype)


def _diagonal_offsets(rows: int, cols: int, device):
    """(rows, cols) of j - i."""
    i = c.arange(0, rows, dtype=c.i64, device=device).unsqueeze(1)
    j = c.arange(0, cols, dtype=c.i64, device=device).unsqueeze(0)
    return j - i


@op("Trilu", since=14)
def trilu(node, x, k=None):
    offset = scalar(k) if k is not None else 0
    rel = _diagonal_offsets(x.shape[-2], x.shape[-1], node.device)
    keep = rel >= offset if node.get("upper", 1) else rel <= offset
    return c.where(keep, x, 0)


@op("DepthToSpace")
def depth_to_space(node, x):
    b = node["blocksize"]
    n, ch, h, w = x.shape
    if node.get("mode", "DCR") == "DCR":
        y = x.reshape(n, b, b, ch // (b * b), h, w).permute(0, 3, 4, 1, 5, 2)
    else:
        y = x.reshape(n, ch // (b * b), b, b, h, w).permute(0, 1, 4, 2, 5, 3)
    return y.reshape(n, ch // (b * b), h * b, w * b)


@op("SpaceToDepth")
def space_to_depth(node, x):
    b = node["blocksize"]
    n, ch, h, w = x.shape
    y = x.reshape(n, ch, h // b, b, w // b, b)
    y = y.permute(0, 3, 5, 1, 2, 4) if node.get("mode", "DCR") == "DCR" else y.permute(0, 1, 3, 5, 2, 4)
    return y.reshape(n, ch * b * b, h // b, w // b)


@op("CenterCropPad", since=18)
def center_crop_pad(node, x, shape):
    target = ints(shape)
    dims = axes(node.get("axes") or range(x.rank), x.rank, node)
    pads = [(0, 0)] * x.rank
    for d, n in zip(dims, target):
        grow = abs(n - x.shape[d])          # the smaller half goes first, for crops and pads alike
        sign = 1 if n >= x.shape[d] else -1
        pads[d] = (sign * (grow // 2), sign * (grow - grow // 2))
    return pad(x, pads, "constant", 0)

