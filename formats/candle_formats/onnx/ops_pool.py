"""Pooling: MaxPool (with indices), AveragePool, LpPool, the global pools, MaxUnpool.

1-d and 2-d pools whose padding the kernels support run on candle-api's
pooling kernels. Everything else (3-d, asymmetric or SAME padding, indices,
average pools in ceil mode) walks the window taps: each tap is a strided
view of the padded input, and the window's maximum, sum or index is built
up tap by tap.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

import candle_api as c
from candle_api.ops import conv as kernels

from .helpers import const, ints
from .ops_tensor import pad
from .registry import op


class Geometry:
    """Kernel, strides, dilations, (begin, end) pads and output sizes per spatial dim."""

    def __init__(self, node, x):
        n = x.rank - 2
        self.sizes = list(x.shape[2:])
        self.kernel = list(node["kernel_shape"])
        self.strides = list(node.get("strides") or [1] * n)
        self.dilations = list(node.get("dilations") or [1] * n)
        self.ceil = bool(node.get("ceil_mode", 0))
        auto = node.get("auto_pad", "NOTSET")
        spans = [(k - 1) * d + 1 for k, d in zip(self.kernel, self.dilations)]
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            self.out = [-(-size // s) for size, s in zip(self.sizes, self.strides)]
            self.pads = []
            for size, s, span, o in zip(self.sizes, self.strides, spans, self.out):
                total = max((o - 1) * s + span - size, 0)
                small = total // 2
                self.pads.append((small, total - small) if auto == "SAME_UPPER" else (total - small, small))
            return
        raw = [0] * (2 * n) if auto == "VALID" else (node.get("pads") or [0] * (2 * n))
        self.pads = list(zip(raw[:n], raw[n:]))
        self.out = []
        for size, s, span, (b, e) in zip(self.sizes, self.strides, spans, self.pads):
            room = size + b + e - span
            o = (-(-room // s) if self.ceil else room // s) + 1
            if self.ceil and (o - 1) * s >= size + b:  # the last window must start inside
                o -= 1
            self.out.append(o)

    def native(self) -> bool:
        """Whether candle-api's 2-d kernels compute this pool."""
        return len(self.sizes) <= 2 and all(b == e and b <= k // 2 for (b, e), k in zip(self.pads, self.kernel))

    def taps(self, x, fill):
        """(tap position per dim, the input values each output reads at that tap)."""
        ext = []
        for size, k, s, d, (b, e), o in zip(self.sizes, self.kernel, self.strides, self.dilations, self.pads,
                                              self.out):
            ext.append((b, max((o - 1) * s + (k - 1) * d + 1 - size - b, 0)))  # ceil mode may read past `e`
        xp = pad(x, [(0, 0), (0, 0)] + ext, "constant", fill)
        for tap in itertools.product(*(range(k) for k in self.kernel)):
            index = (slice(None), slice(None)) + tuple(
                slice(t * d, t * d + (o - 1) * s + 1, s) for t, d, s, o in zip(tap, self.dilations, self.strides,
                                                                                self.out))
            yield tap, xp[index]

    def counts(self, include_pad: bool, like):
        """How many taps of each window fall inside the input (or its padding)."""
        per_dim = []
        for size, k, s, d, (b, e), o in zip(self.sizes, self.kernel, self.strides, self.dilations, self.pads,
                                              self.out):
            pos = np.arange(o)[:, None] * s - b + np.arange(k)[None, :] * d
            lo, hi = (-b, size + e) if include_pad else (0, size)
            per_dim.append(((pos >= lo) & (pos < hi)).sum(1))
        total = per_dim[0]
        for counts in per_dim[1:]:
            total = np.multiply.outer(total, counts)
        return const(np.maximum(total, 1), like.dtype, like.device)


def _lowest(dtype):
    return -math.inf if dtype.is_float else int(np.iinfo(dtype.np).min)


def _as_2d(x, g: Geometry):
    """A 1-d pool as a 2-d one over a height-1 view."""
    return x.unsqueeze(2), (1, g.kernel[0]), (1, g.strides[0]), (0, g.pads[0][0]), (1, g.dilations[0])


def _native(kind, x, g: Geometry, include_pad=True):
    if x.rank == 3:
        x2, k, s, p, d = _as_2d(x, g)
    else:
        x2, k, s, p, d = x, tuple(g.kernel), tuple(g.strides), tuple(b for b, _ in g.pads), tuple(g.dilations)
    if kind == "max":
        y = kernels.max_pool2d(x2, k, s, p, d, g.ceil)
    else:
        y = kernels.avg_pool2d(x2, k, s, p, g.ceil, include_pad)
    return y.squeeze(2) if x.rank == 3 else y


@op("MaxPool")
def max_pool(node, x):
    g = Geometry(node, x)
    want_indices = node.n_outputs > 1
    if g.native() and not want_indices and x.dtype.is_float:
        return _native("max", x, g)
    best = arg = None
    order = node.get("storage_order", 0)
    for tap, view in g.taps(x, _lowest(x.dtype)):
        if best is None:
            best = view
            arg = _tap_indices(x, g, tap, order) if want_indices else None
            continue
        better = view > best
        best = c.where(better, view, best)
        if want_indices:
            arg = c.where(better, _tap_indices(x, g, tap, order), arg)
    return (best, arg) if want_indices else best


def _tap_indices(x, g: Geometry, tap, storage_order: int):
    """The flat input position (over N, C and the spatial dims) that each output reads at this tap."""
    coords = [np.arange(o) * s + t * d - b for o, s, t, d, (b, _) in
              zip(g.out, g.strides, tap, g.dilations, g.pads)]
    grids = np.meshgrid(*coords, indexing="ij")
    sizes = g.sizes
    if storage_order:  # column-major over the spatial dims
        flat, scale = np.zeros(grids[0].shape, np.int64), 1
        for grid, size in zip(grids, sizes):
            flat, scale = flat + grid * scale, scale * size
    else:
        flat = np.ravel_multi_index(tuple(np.clip(gr, 0, s - 1) for gr, s in zip(grids, sizes)), sizes)
    plane = math.prod(sizes)
    base = np.arange(x.shape[0] * x.shape[1]).reshape(x.shape[0], x.shape[1], *([1] * len(sizes))) * plane
    return const(base + flat, c.i64, x.device)


@op("AveragePool")
def average_pool(node, x):
    g = Geometry(node, x)
    include = bool(node.get("count_include_pad", 0))
    if g.native() and not g.ceil and all(d == 1 for d in g.dilations):
        return _native("avg", x, g, include)
    total = None
    for _, view in g.taps(x, 0.0):
        total = view if total is None else total + view
    return total / g.counts(include, x)


@op("LpPool")
def lp_pool(node, x):
    g = Geometry(node, x)
    p = node.get("p", 2)
    total = None
    for _, view in g.taps(x, 0.0):
        term = view * view if p == 2 else view.abs().powf(float(p))
        total = term if total is None else total + term
    return total.sqrt() if p == 2 else total.powf(1.0 / p)


def _spatial(x):
    return list(range(2, x.rank))


@op("GlobalAveragePool")
def global_average_pool(node, x):
    return x.mean(_spatial(x), True)


@op("GlobalMaxPool")
def global_max_pool(node, x):
    return x.amax(_spatial(x), True)


@op("GlobalLpPool", since=2)
def global_lp_pool(node, x):
    p = node.get("p", 2)
    if p == 2:
        return (x * x).sum(_spatial(x), True).sqrt()
    return x.abs().powf(float(p)).sum(_spatial(x), True).powf(1.0 / p)


@op("MaxUnpool", since=9)
def max_unpool(node, x, indices, output_shape=None):
    """Values scattered to their indices in the pooled input's shape, then
    zero-padded at the end to ``output_shape`` when it is given."""
    n = x.rank - 2
    kernel, strides = node["kernel_shape"], node.get("strides") or [1] * n
    raw = node.get("pads") or [0] * (2 * n)
    shape = x.shape[:2] + tuple((size - 1) * s + k - raw[i] - raw[n + i]
                                for i, (size, s, k) in enumerate(zip(x.shape[2:], strides, kernel)))
    out = c.zeros(math.prod(shape), dtype=x.dtype, device=x.device)
    out = out.scatter(indices.reshape(-1).to_dtype(c.i64), x.reshape(-1), 0).reshape(shape)
    if output_shape is None:
        return out
    return pad(out, [(0, t - s) for s, t in zip(shape, ints(output_shape))])
