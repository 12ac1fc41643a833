"""Vision ops: GridSample, RoiAlign, Col2Im and NonMaxSuppression.

GridSample runs on the device: the grid's coordinates become, per spatial
dim, the indices and weights of the taps of the interpolation (after the
padding mode moves or masks them), and the output is the sum over the taps'
combinations of weighted gathers. RoiAlign and Col2Im work out where they
sample (from the regions' coordinates, or the shapes alone) on the host,
then gather or add on the device. NonMaxSuppression is a greedy selection
over a few boxes: it runs on the host.
"""

from __future__ import annotations

import math

import numpy as np

import candle_api as c

from .helpers import const, host, ints, scalar
from .registry import op

# ---- GridSample -----------------------------------------------------------------------------------
_MODES = {"bilinear": "linear", "bicubic": "cubic", "linear": "linear", "cubic": "cubic", "nearest": "nearest"}


def _reflect(x, lo: float, hi: float):
    """x folded back into [lo, hi] by reflections at its ends (elementwise)."""
    rng = hi - lo
    if rng <= 0:
        return x * 0.0 + lo
    below, above = x < lo, x > hi
    dx = c.where(below, lo - x, x - hi)
    n = (dx / rng).floor()
    r = dx - n * rng
    even = (n - (n / 2.0).floor() * 2.0) == 0
    inside_below = c.where(even, lo + r, hi - r)
    inside_above = c.where(even, hi - r, lo + r)
    return c.where(below, inside_below, c.where(above, inside_above, x))


def _cubic(t):
    """Keys' cubic coefficients (A = -0.75) of the four taps around a point t past the first."""
    a = -0.75
    t1, t2, t3 = t + 1.0, 1.0 - t, 2.0 - t
    return [((t1 * a - 5 * a) * t1 + 8 * a) * t1 - 4 * a, ((t * (a + 2) - (a + 3)) * t) * t + 1.0,
            ((t2 * (a + 2) - (a + 3)) * t2) * t2 + 1.0, ((t3 * a - 5 * a) * t3 + 8 * a) * t3 - 4 * a]


def _taps(x, size: int, mode: str, padding: str, lo: float, hi: float):
    """[(index i64, weight)] of the taps sampling coordinate x in a dim of ``size``."""
    if mode == "nearest":  # x is rounded already (before any reflection): onnx truncates it here
        base, weights = x.trunc(), [None]
        offsets = [0]
    else:
        base = x.floor()
        frac = x - base
        offsets, weights = ([0, 1], [1.0 - frac, frac]) if mode == "linear" else ([-1, 0, 1, 2], _cubic(frac))
    taps = []
    for off, w in zip(offsets, weights):
        i = base + float(off)
        if padding == "zeros":
            inside = ((i >= 0) * (i <= size - 1)).to_dtype(x.dtype)
            w = inside if w is None else w * inside
            i = i.clamp(0, size - 1)
        elif padding == "border":
            i = i.clamp(0, size - 1)
        else:
            i = _reflect(i, lo, hi).trunc().clamp(0, size - 1)
        taps.append((i.to_dtype(c.i64), w))
    return taps


def _grid_coords(node, grid, dims, align: bool, mode: str, padding: str):
    """Per spatial dim of X (in order): the taps of the grid's coordinates, (N, P) each."""
    n, nd = grid.shape[0], len(dims)
    flat = grid.to_dtype(c.f32).reshape(n, -1, nd)
    out = []
    for d, size in enumerate(dims):
        g = flat.narrow(2, nd - 1 - d, 1).squeeze(2)  # the grid lists coordinates innermost dim first
        x = (g + 1.0) / 2.0 * (size - 1) if align else ((g + 1.0) * size - 1.0) / 2.0
        lo, hi = (0.0, size - 1.0) if align else (-0.5, size - 0.5)
        if mode == "nearest":
            x = x.round()
        if padding == "border":
            x = c.where((x < lo) + (x > hi) > 0, x.clamp(0, size - 1), x)
        elif padding == "reflection":
            x = _reflect(x, lo, hi)
        out.append(_taps(x, size, mode, padding, lo, hi))
    return out


@op("GridSample", since=16)
def grid_sample(node, x, grid):
    mode = _MODES.get(node.get("mode", "linear" if node.opset >= 20 else "bilinear"))
    padding = node.get("padding_mode", "zeros")
    if mode is None or padding not in ("zeros", "border", "reflection"):
        raise node.fail(f"unknown mode {node.get('mode')!r} or padding_mode {padding!r}")
    dims = x.shape[2:]
    if grid.rank != x.rank or grid.shape[0] != x.shape[0] or grid.shape[-1] != len(dims):
        raise node.fail(f"a grid {grid.shape} does not sample an input {x.shape}")
    n, ch = x.shape[:2]
    out_spatial = grid.shape[1:-1]
    points = math.prod(out_spatial)
    if n * ch * points == 0:
        return c.zeros((n, ch, *out_spatial), dtype=x.dtype, device=x.device)
    taps = _grid_coords(node, grid, dims, bool(node.get("align_corners", 0)), mode, padding)
    strides = [math.prod(dims[d + 1:]) for d in range(len(dims))]
    flat = x.reshape(n, ch, -1)
    total = None
    for combo in _combinations(taps):
        index = sum(i * s for (i, _), s in zip(combo, strides))
        weight = None
        for _, w in combo:
            if w is not None:
                weight = w if weight is None else weight * w
        values = flat.gather(index.unsqueeze(1).broadcast_as((n, ch, points)).contiguous(), 2)
        term = values if weight is None else values * weight.to_dtype(x.dtype).unsqueeze(1)
        total = term if total is None else total + term
    return total.reshape(n, ch, *out_spatial)


def _combinations(taps: list):
    """Every choice of one tap per dim."""
    if not taps:
        yield []
        return
    for first in taps[0]:
        for rest in _combinations(taps[1:]):
            yield [first, *rest]


# ---- RoiAlign -------------------------------------------------------------------------------------
def _roi_samples(roi, height: int, width: int, out_h: int, out_w: int, ratio: int, scale: float, half: bool):
    """For one region: the 4 corner positions and bilinear weights of each sample of each
    output cell, (out_h * out_w, samples, 4) each, as onnx's reference computes them."""
    offset = 0.5 if half else 0.0
    x0, y0, x1, y1 = (v * scale - offset for v in roi)
    roi_w, roi_h = x1 - x0, y1 - y0
    if not half:
        roi_w, roi_h = max(roi_w, 1.0), max(roi_h, 1.0)
    bin_h, bin_w = roi_h / out_h, roi_w / out_w
    grid_h = ratio if ratio > 0 else int(math.ceil(roi_h / out_h))
    grid_w = ratio if ratio > 0 else int(math.ceil(roi_w / out_w))
    iy, ix = np.meshgrid(np.arange(grid_h), np.arange(grid_w), indexing="ij")
    ph, pw = np.meshgrid(np.arange(out_h), np.arange(out_w), indexing="ij")
    y = y0 + ph.reshape(-1, 1) * bin_h + (iy.reshape(1, -1) + 0.5) * bin_h / max(grid_h, 1)
    x = x0 + pw.reshape(-1, 1) * bin_w + (ix.reshape(1, -1) + 0.5) * bin_w / max(grid_w, 1)
    outside = (y < -1.0) | (y > height) | (x < -1.0) | (x > width)
    y, x = np.maximum(y, 0), np.maximum(x, 0)
    y_lo, x_lo = y.astype(np.int64), x.astype(np.int64)
    y_edge, x_edge = y_lo >= height - 1, x_lo >= width - 1
    y_lo, x_lo = np.where(y_edge, height - 1, y_lo), np.where(x_edge, width - 1, x_lo)
    y, x = np.where(y_edge, y_lo, y), np.where(x_edge, x_lo, x)
    y_hi, x_hi = np.where(y_edge, y_lo, y_lo + 1), np.where(x_edge, x_lo, x_lo + 1)
    ly, lx = y - y_lo, x - x_lo
    hy, hx = 1.0 - ly, 1.0 - lx
    pos = np.stack([y_lo * width + x_lo, y_lo * width + x_hi, y_hi * width + x_lo, y_hi * width + x_hi], -1)
    weights = np.stack([hy * hx, hy * lx, ly * hx, ly * lx], -1)
    pos[outside], weights[outside] = 0, 0.0
    return pos, weights, max(grid_h * grid_w, 1)


@op("RoiAlign", since=10)
def roi_align(node, x, rois, batch_indices):
    n, ch, height, width = x.shape
    out_h, out_w = node.get("output_height", 1), node.get("output_width", 1)
    half = node.get("coordinate_transformation_mode", "output_half_pixel" if node.opset < 16 else "half_pixel")
    half = half == "half_pixel"
    boxes, batches = host(rois).astype(np.float64).reshape(-1, 4), ints(batch_indices)
    if len(batches) != len(boxes) or any(not 0 <= b < n for b in batches):
        raise node.fail(f"batch_indices {batches} do not match {len(boxes)} regions of an input of batch {n}")
    samples = [_roi_samples(box, height, width, out_h, out_w, int(node.get("sampling_ratio", 0)),
                            float(node.get("spatial_scale", 1.0)), half) for box in boxes]
    most = max((s[0].shape[1] for s in samples), default=1)
    pos = np.zeros((len(boxes), out_h * out_w, most, 4), np.int64)
    weights = np.zeros(pos.shape, np.float64)
    used = np.zeros(pos.shape[:3], bool)
    for r, ((p, w, _), b) in enumerate(zip(samples, batches)):
        pos[r, :, :p.shape[1]] = p + b * height * width
        weights[r, :, :p.shape[1]] = w
        used[r, :, :p.shape[1]] = True
    planes = x.transpose(0, 1).reshape(ch, -1)                    # (C, N * H * W)
    picked = planes.index_select(const(pos.reshape(-1), c.i64, x.device), 1).reshape(ch, *pos.shape)
    weighted = picked * const(weights, x.dtype, x.device)         # (C, R, cells, samples, 4)
    if node.get("mode", "avg") == "avg":
        counts = np.array([s[2] for s in samples], np.float64).reshape(1, -1, 1)
        out = weighted.sum([3, 4]) / const(counts, x.dtype, x.device)
    else:  # max of the weighted corners over the samples (onnx's definition)
        best = c.where(const(used, c.u8, x.device).unsqueeze(0), weighted.amax(4), -math.inf)
        out = best.amax(3)
    return out.reshape(ch, len(boxes), out_h, out_w).transpose(0, 1)


# ---- Col2Im ---------------------------------------------------------------------------------------
@op("Col2Im", since=18)
def col2im(node, x, image_shape, block_shape):
    """The sum of the sliding blocks (N, C * prod(block), L) back into images (N, C, *image)."""
    image, block = ints(image_shape), ints(block_shape)
    nd = len(image)
    dilations = node.get("dilations") or [1] * nd
    strides = node.get("strides") or [1] * nd
    pads = node.get("pads") or [0] * (2 * nd)
    n, rows, length = x.shape
    k = math.prod(block)
    if rows % k:
        raise node.fail(f"input dim 1 ({rows}) is not a multiple of the block size {k}")
    counts = [(image[d] + pads[d] + pads[d + nd] - dilations[d] * (block[d] - 1) - 1) // strides[d] + 1
              for d in range(nd)]
    if math.prod(counts) != length or min(counts) < 1:
        raise node.fail(f"{length} blocks do not tile an image of {image} (expected {counts})")
    # the image position of element (k, l): per dim, l's block start plus k's offset in the block
    k_idx = np.array(np.unravel_index(np.arange(k), block))              # (nd, K)
    l_idx = np.array(np.unravel_index(np.arange(length), counts))        # (nd, L)
    where = [(l_idx[d][None, :] * strides[d] - pads[d] + k_idx[d][:, None] * dilations[d]) for d in range(nd)]
    inside = np.logical_and.reduce([(w >= 0) & (w < image[d]) for d, w in enumerate(where)])
    target = np.ravel_multi_index([np.clip(w, 0, image[d] - 1) for d, w in enumerate(where)], image)
    keep = np.flatnonzero(inside.reshape(-1))
    values = x.reshape(n, rows // k, k * length).index_select(const(keep, c.i64, x.device), 2)
    out = c.zeros((n, rows // k, math.prod(image)), dtype=x.dtype, device=x.device)
    out = out.index_add(const(target.reshape(-1)[keep], c.i64, x.device), values, 2)
    return out.reshape(n, rows // k, *image)


# ---- NonMaxSuppression --------------------------------------------------------------------------
def _corners(boxes: np.ndarray, center: bool) -> np.ndarray:
    """(y_min, x_min, y_max, x_max) of boxes given as corners in any order, or as centers and sizes."""
    if center:
        xc, yc, w, h = boxes.T
        return np.stack([yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2], 1)
    y1, x1, y2, x2 = boxes.T
    return np.stack([np.minimum(y1, y2), np.minimum(x1, x2), np.maximum(y1, y2), np.maximum(x1, x2)], 1)


def _overlaps(box: np.ndarray, others: np.ndarray, threshold: float) -> np.ndarray:
    """Whether each of others has an intersection over union with box above threshold."""
    ih = np.minimum(box[2], others[:, 2]) - np.maximum(box[0], others[:, 0])
    iw = np.minimum(box[3], others[:, 3]) - np.maximum(box[1], others[:, 1])
    inter = np.where((ih > 0) & (iw > 0), ih * iw, 0.0)
    area = (box[2] - box[0]) * (box[3] - box[1])
    areas = (others[:, 2] - others[:, 0]) * (others[:, 3] - others[:, 1])
    union = area + areas - inter
    valid = (inter > 0) & (area > 0) & (areas > 0) & (union > 0)
    return valid & (inter / np.where(valid, union, 1.0) > threshold)


@op("NonMaxSuppression", since=10)
def non_max_suppression(node, boxes, scores, max_per_class=None, iou_threshold=None, score_threshold=None):
    """(selected, 3) i64 [batch, class, box]: per batch and class, the boxes in
    decreasing score (ties: lower index first) that overlap no box kept before."""
    limit = max(int(scalar(max_per_class)), 0) if max_per_class is not None and max_per_class.numel() else 0
    iou = float(scalar(iou_threshold)) if iou_threshold is not None and iou_threshold.numel() else 0.0
    floor = float(scalar(score_threshold)) if score_threshold is not None and score_threshold.numel() else None
    all_boxes, all_scores = host(boxes).astype(np.float64), host(scores).astype(np.float64)
    if all_boxes.ndim != 3 or all_boxes.shape[2] != 4 or all_scores.ndim != 3 \
            or all_scores.shape[0] != all_boxes.shape[0] or all_scores.shape[2] != all_boxes.shape[1]:
        raise node.fail(f"boxes {all_boxes.shape} and scores {all_scores.shape} do not match")
    picked = []
    for b in range(all_boxes.shape[0]):
        corners = _corners(all_boxes[b], bool(node.get("center_point_box", 0)))
        for k in range(all_scores.shape[1]):
            s = all_scores[b, k]
            order = [i for i in np.argsort(-s, kind="stable") if floor is None or s[i] > floor]
            kept: list[int] = []
            for i in order:
                if len(kept) >= limit:
                    break
                if not kept or not _overlaps(corners[i], corners[kept], iou).any():
                    kept.append(int(i))
            picked += [(b, k, i) for i in kept]
    return const(np.array(picked, np.int64).reshape(-1, 3), c.i64, node.device)
