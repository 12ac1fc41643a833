"""Sorting composed from candle-api ops, so it runs on every backend.

A bitonic sorting network over the last dim (padded to a power of two):
each of its log2(n) * (log2(n) + 1) / 2 passes compares every element with
the one ``j`` places away (a gather by a fixed permutation) and keeps the
smaller or larger one depending on its position. Elements are compared as
(value, original index) pairs, which makes the order total: equal values
keep their input order (a stable sort), as TopK and Unique require.
"""

from __future__ import annotations

import math

import numpy as np

import candle_api as c

from .helpers import const, full


def _extreme(dtype, largest: bool):
    if dtype.is_float:
        return math.inf if largest else -math.inf
    info = np.iinfo(dtype.np)
    return int(info.max if largest else info.min)


def sort_last(x, descending: bool = False):
    """(values, i64 indices) of x sorted along its last dim, stable."""
    n = x.shape[-1]
    idx = c.arange(0, n, dtype=c.i64, device=x.device).broadcast_as(x.shape)
    if n <= 1:
        return x, idx.contiguous()
    size = 1 << (n - 1).bit_length()
    if size > n:  # padding sorts after every real element: the extreme value, then a larger index
        pad_shape = x.shape[:-1] + (size - n,)
        x = c.cat([x, full(pad_shape, _extreme(x.dtype, not descending), x.dtype, x.device)], -1)
        idx = c.arange(0, size, dtype=c.i64, device=x.device).broadcast_as(x.shape)
    vals, idx = x.contiguous(), idx.contiguous()
    positions = np.arange(size)
    k = 2
    while k <= size:
        j = k // 2
        while j >= 1:
            partner = const(positions ^ j, c.i64, x.device)
            # does this position keep the first of its pair (the smaller, ascending)?
            keeps_first = const(((positions & j) == 0) == ((positions & k) == 0), c.u8, x.device)
            pv, pi = vals.index_select(partner, -1), idx.index_select(partner, -1)
            before = (vals > pv) if descending else (vals < pv)
            first = before.maximum((vals == pv) * (idx < pi))
            take_self = first == keeps_first
            vals, idx = c.where(take_self, vals, pv), c.where(take_self, idx, pi)
            j //= 2
        k *= 2
    return vals.narrow(-1, 0, n), idx.narrow(-1, 0, n)


def sort(x, dim: int, descending: bool = False):
    """(values, i64 indices) of x sorted along dim, stable."""
    if dim in (-1, x.rank - 1):
        return sort_last(x, descending)
    vals, idx = sort_last(x.transpose(dim, -1), descending)
    return vals.transpose(dim, -1), idx.transpose(dim, -1)


def sort_rows(rows):
    """The permutation (i64) putting the rows of a 2-d tensor in
    lexicographic order: stable sorts by each column, last column first."""
    perm = c.arange(0, rows.shape[0], dtype=c.i64, device=rows.device)
    for col in range(rows.shape[1] - 1, -1, -1):
        _, order = sort_last(rows.index_select(perm, 0)[:, col].contiguous())
        perm = perm.index_select(order, 0)
    return perm
