"""Index kernels: index_select, gather, scatter, scatter_add and index_add.

Every index is checked against its dimension before any element moves; the
first bad one raises IndexOutOfRangeError naming the index, its position
among the indices and the size of the dimension."""

from __future__ import annotations

import numpy as np

from candle_api.errors import check_indices
from candle_api.layout import Layout

from .strided import load, store, view


def _indices(op: str, ids, lids: Layout, ids_dtype, size: int) -> np.ndarray:
    """The indices as int64, each checked to lie in [0, size)."""
    return check_indices(op, view(ids, lids, ids_dtype).astype(np.int64), size)


def _along(rows: np.ndarray, dim: int) -> tuple:
    """Advanced-index tuple addressing, for every position of rows, the element
    at that position except along dim, where rows gives it (scatter's targets)."""
    where = list(np.indices(rows.shape, sparse=True))
    where[dim] = rows
    return tuple(where)


def _index_select(dtype):
    def kernel(out, x, lx, ids, lids, ids_dtype, dim):
        rows = _indices("index_select", ids, lids, ids_dtype, lx.shape[dim])
        store(out, dtype, np.take(view(x, lx, dtype), rows, axis=dim))

    return kernel


def _gather(dtype):
    def kernel(out, x, lx, ids, lids, ids_dtype, dim):
        rows = _indices("gather", ids, lids, ids_dtype, lx.shape[dim])
        # ids may be shorter than x in the other dims: only that corner of x is read
        corner = tuple(slice(None) if d == dim else slice(0, n) for d, n in enumerate(rows.shape))
        store(out, dtype, np.take_along_axis(view(x, lx, dtype)[corner], rows, axis=dim))

    return kernel


def _added(x, lx, dtype, where: tuple, src, lsrc) -> np.ndarray:
    """x with src added at where (duplicates accumulating), in float64 or int64."""
    total = load(x, lx, dtype)
    np.add.at(total, where, load(src, lsrc, dtype))
    return total


def _scatter(op: str):
    def make(dtype):
        def kernel(out, x, lx, ids, lids, ids_dtype, src, lsrc, dim):
            where = _along(_indices(op, ids, lids, ids_dtype, lx.shape[dim]), dim)
            if op == "scatter_add":
                store(out, dtype, _added(x, lx, dtype, where, src, lsrc))
            else:  # with duplicate ids, the last write wins
                result = view(x, lx, dtype).copy()
                result[where] = view(src, lsrc, dtype)
                store(out, dtype, result)

        return kernel

    return make


def _index_add(dtype):
    def kernel(out, x, lx, ids, lids, ids_dtype, src, lsrc, dim):
        rows = _indices("index_add", ids, lids, ids_dtype, lx.shape[dim])
        store(out, dtype, _added(x, lx, dtype, (slice(None),) * dim + (rows,), src, lsrc))

    return kernel


KERNELS = {
    "index_select": _index_select,
    "gather": _gather,
    "scatter": _scatter("scatter"),
    "scatter_add": _scatter("scatter_add"),
    "index_add": _index_add,
}
