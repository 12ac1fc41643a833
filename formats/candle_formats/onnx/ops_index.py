"""Indexing: gathers, scatters, one-hot, nonzero, top-k, unique.

Ops whose output size depends on the values (NonZero, Compress, Unique)
read one count back to the host; the rest of their work stays on the device.
"""

from __future__ import annotations

import math

import numpy as np

import candle_api as c

from .helpers import axis, const, full, host, scalar
from .registry import op
from .sorting import sort, sort_last, sort_rows


def wrap(idx, n: int):
    """Indices with negative entries counted from the end (as i64)."""
    idx = idx.to_dtype(c.i64)
    return c.where(idx < 0, idx + n, idx)


@op("Gather")
def gather(node, data, indices):
    a = axis(node.get("axis", 0), data.rank, node)
    flat = wrap(indices, data.shape[a]).reshape(-1)
    out = data.index_select(flat, a)
    return out.reshape(data.shape[:a] + indices.shape + data.shape[a + 1:])


@op("GatherElements", since=11)
def gather_elements(node, data, indices):
    a = axis(node.get("axis", 0), data.rank, node)
    return data.gather(wrap(indices, data.shape[a]), a)


def _linear_index(data, indices, batch_dims: int):
    """For GatherND/ScatterND: the rows of data flattened over its batch and
    indexed dims that the index tuples pick, and the data seen as those rows."""
    k = indices.shape[-1]
    batch, inner, rest = data.shape[:batch_dims], data.shape[batch_dims:batch_dims + k], data.shape[batch_dims + k:]
    linear = None
    for j in range(k):
        term = wrap(indices[..., j], inner[j]) * math.prod(inner[j + 1:])
        linear = term if linear is None else linear + term
    if linear is None:  # k == 0: every index tuple picks the whole block
        linear = full(indices.shape[:-1], 0, c.i64, data.device)
    if batch_dims:
        offsets = c.arange(0, math.prod(batch), dtype=c.i64, device=data.device) * math.prod(inner)
        linear = linear + offsets.reshape(batch + (1,) * (linear.rank - batch_dims))
    rows = data.reshape((math.prod(batch) * math.prod(inner),) + rest)
    return linear, rows, rest


@op("GatherND", since=11)
def gather_nd(node, data, indices):
    linear, rows, rest = _linear_index(data, indices, node.get("batch_dims", 0))
    return rows.index_select(linear.reshape(-1), 0).reshape(indices.shape[:-1] + rest)


def _combine(reduction: str):
    return {"mul": lambda a, b: a * b, "max": lambda a, b: a.maximum(b), "min": lambda a, b: a.minimum(b),
            "add": lambda a, b: a + b}[reduction]


def _reduce_rows(rows, targets: np.ndarray, updates, reduction: str):
    """rows with updates[i] combined into rows[targets[i]]; repeated targets
    are applied in rounds, each round touching a target at most once."""
    rank = np.zeros(len(targets), dtype=np.int64)
    seen: dict[int, int] = {}
    for i, t in enumerate(targets.tolist()):
        rank[i] = seen.get(t, 0)
        seen[t] = rank[i] + 1
    combine = _combine(reduction)
    for r in range(int(rank.max(initial=-1)) + 1):
        pick = np.flatnonzero(rank == r)
        where = const(targets[pick], c.i64, rows.device)
        new = combine(rows.index_select(where, 0), updates.index_select(const(pick, c.i64, rows.device), 0))
        ids = where.reshape((-1,) + (1,) * (rows.rank - 1)).broadcast_as(new.shape).contiguous()
        rows = rows.scatter(ids, new, 0)
    return rows


@op("ScatterND", since=11)
def scatter_nd(node, data, indices, updates):
    linear, rows, rest = _linear_index(data, indices, 0)
    linear = linear.reshape(-1)
    upd = updates.reshape((linear.shape[0],) + rest)
    reduction = node.get("reduction", "none")
    if reduction == "add":
        rows = rows.index_add(linear, upd, 0)
    elif reduction == "none":
        ids = linear.reshape((-1,) + (1,) * len(rest)).broadcast_as(upd.shape).contiguous()
        rows = rows.scatter(ids, upd, 0)
    else:
        rows = _reduce_rows(rows, host(linear).astype(np.int64), upd, reduction)
    return rows.reshape(data.shape)


@op("Scatter", "ScatterElements", since=9)
def scatter_elements(node, data, indices, updates):
    a = axis(node.get("axis", 0), data.rank, node)
    idx = wrap(indices, data.shape[a])
    reduction = node.get("reduction", "none")
    if reduction == "none":
        return data.scatter(idx, updates, a)
    if reduction == "add":
        return data.scatter_add(idx, updates, a)
    # the flat position in data of every update, then rounds over repeated positions
    strides = np.cumprod((data.shape[1:] + (1,))[::-1])[::-1]
    grid = np.indices(indices.shape).reshape(indices.rank, -1)
    grid[a] = host(idx).reshape(-1)
    targets = (grid * strides.reshape(-1, 1)).sum(0)
    flat = _reduce_rows(data.reshape(-1), targets, updates.reshape(-1), reduction)
    return flat.reshape(data.shape)


@op("TensorScatter", since=24)
def tensor_scatter(node, cache, update, write_indices=None):
    a = axis(node.get("axis", -2), cache.rank, node)
    steps = update.shape[a]
    start = (write_indices.to_dtype(c.i64) if write_indices is not None
             else full((cache.shape[0],), 0, c.i64, cache.device))
    pos = start.reshape((-1,) + (1,) * (cache.rank - 1)) + c.arange(0, steps, dtype=c.i64, device=cache.device) \
        .reshape(tuple(-1 if d == a else 1 for d in range(cache.rank)))
    if node.get("mode", "linear") == "circular":
        pos = pos % cache.shape[a]
    return cache.scatter(pos.broadcast_as(update.shape).contiguous(), update, a)


@op("OneHot", since=9)
def one_hot(node, indices, depth, values):
    d = int(scalar(depth))
    a = axis(node.get("axis", -1), indices.rank + 1, node)
    idx = wrap(indices, d).unsqueeze(a)
    positions = c.arange(0, d, dtype=c.i64, device=node.device).reshape(
        tuple(-1 if i == a else 1 for i in range(indices.rank + 1)))
    return c.where(idx == positions, values[1], values[0])


def nonzero_flat(mask):
    """(count, i64 flat positions of the nonzero elements of mask, in order)."""
    flags = (mask != 0).to_dtype(c.i64).reshape(-1)
    count = int(scalar(flags.sum_all())) if flags.shape[0] else 0
    slots = c.where(flags == 1, flags.cumsum(0) - 1, count)
    positions = c.arange(0, flags.shape[0], dtype=c.i64, device=mask.device)
    buffer = full((count + 1,), 0, c.i64, mask.device).scatter(slots, positions, 0) if flags.shape[0] else \
        full((1,), 0, c.i64, mask.device)
    return count, buffer.narrow(0, 0, count)


@op("NonZero", since=9)
def nonzero(node, x):
    shape = x.shape or (1,)
    count, flat = nonzero_flat(x.reshape(shape))
    coords = []
    for d in range(len(shape)):
        coords.append((flat / math.prod(shape[d + 1:])) % shape[d])
    return c.stack(coords, 0) if coords else full((0, count), 0, c.i64, node.device)


@op("Compress", since=9)
def compress(node, x, condition):
    a = node.get("axis")
    if a is None:
        x, a = x.reshape(-1), 0
    a = axis(a, x.rank, node)
    _, picks = nonzero_flat(condition.reshape(-1).narrow(0, 0, min(condition.numel(), x.shape[a])))
    return x.index_select(picks, a)


@op("TopK")
def top_k_v1(node, x):
    return _top_k(node, x, node["k"])


@op("TopK", since=10)
def top_k(node, x, k):
    return _top_k(node, x, int(scalar(k)))


def _top_k(node, x, k: int):
    a = axis(node.get("axis", -1), x.rank, node)
    if k > x.shape[a]:
        raise node.fail(f"k={k} is larger than dim {a} of size {x.shape[a]}")
    vals, idx = sort(x, a, descending=bool(node.get("largest", 1)))
    return vals.narrow(a, 0, k), idx.narrow(a, 0, k)


@op("Unique", since=11)
def unique(node, x):
    a = node.get("axis")
    if a is None:
        rows = x.reshape(-1, 1)
    else:
        a = axis(a, x.rank, node)
        rows = x.transpose(0, a).reshape(x.shape[a], -1) if x.rank > 1 else x.reshape(-1, 1)
    n = rows.shape[0]
    perm = sort_rows(rows) if rows.shape[1] != 1 else sort_last(rows.reshape(-1))[1]
    ordered = rows.index_select(perm, 0)
    changed = (ordered.narrow(0, 1, n - 1) != ordered.narrow(0, 0, n - 1)).amax(1) if n > 1 else None
    starts = c.cat([full((1,), 1, c.u8, x.device), changed], 0) if changed is not None else full((n,), 1, c.u8, x.device)
    group = starts.to_dtype(c.i64).cumsum(0) - 1                      # group of each sorted row
    count, start_pos = nonzero_flat(starts)
    first = perm.index_select(start_pos, 0)                           # first occurrence of each group
    ends = c.cat([start_pos.narrow(0, 1, count - 1), const([n], c.i64, x.device)], 0) if count > 1 else \
        const([n], c.i64, x.device)
    counts = ends - start_pos
    inverse = full((n,), 0, c.i64, x.device).scatter(perm, group, 0)  # group of each original row
    if not node.get("sorted", 1):
        _, order = sort_last(first)
        rank = full((count,), 0, c.i64, x.device).scatter(order, c.arange(0, count, dtype=c.i64, device=x.device), 0)
        first, counts, inverse = first.index_select(order, 0), counts.index_select(order, 0), \
            rank.index_select(inverse, 0)
    if a is None:
        y = x.reshape(-1).index_select(first, 0)
    else:
        y = x.index_select(first, a)
    return y, first, inverse, counts


@op("ReverseSequence", since=10)
def reverse_sequence(node, x, lengths):
    t_axis, b_axis = node.get("time_axis", 0), node.get("batch_axis", 1)

    def along(v, d):
        return v.reshape(tuple(-1 if i == d else 1 for i in range(x.rank)))

    t = along(c.arange(0, x.shape[t_axis], dtype=c.i64, device=x.device), t_axis)
    n = along(lengths.to_dtype(c.i64), b_axis)
    src = c.where(t < n, n - 1 - t, t)
    return x.gather(src.broadcast_as(x.shape).contiguous(), t_axis)

