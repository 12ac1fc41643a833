"""Index ops (csrc/index.cu): index_select, gather, scatter, scatter_add,
index_add, and the checked ids the quantized embedding reads.

Every op first makes its ids contiguous i64, checked against the dim's
size. Ids sent from the host (a small upload keeps a host copy) are checked
there, with no wait; others by the ids_check kernel, whose report is read
back (errors.py). Either way a bad id raises IndexOutOfRangeError naming
it, its position and the size, before any kernel reads through it.
"""

from __future__ import annotations

import numpy as np

from candle_api.errors import check_indices
from candle_api.layout import Layout, contiguous_strides, numel

from ..launch import MAXD, address, merge, strided
from .common import THREADS, grid, views
from .memory import contiguous, strided_copy

MODULE = "index"


def _host_ids(ids, lids: Layout, id_dtype):
    """The ids as numpy values from the host copy of their upload, or None."""
    if ids.host is None:
        return None
    isz = id_dtype.itemsize
    flat = ids.host.view(id_dtype.np)
    return np.lib.stride_tricks.as_strided(flat[lids.offset:], lids.shape, tuple(s * isz for s in lids.strides),
                                           writeable=False)


def checked_ids(op: str, ids, lids: Layout, id_dtype, size: int):
    """A device storage of the ids as contiguous i64 (ids' shape), each in [0, size)."""
    dev = ids.device
    n = lids.numel
    host = _host_ids(ids, lids, id_dtype)
    if host is not None:
        values = check_indices(op, host.astype(np.int64), size)
        out, _ = dev.from_numpy(values, copy=True)
        return out
    out = dev.alloc(8 * n)
    fn = dev.function(MODULE, "ids_check")
    base = address(ids, lids, id_dtype.itemsize)

    def launch(err):
        for offs, start, count, lay in views([lids]):
            fn.launch(grid(dev, count), THREADS, out.ptr + 8 * start, base + offs[0] * id_dtype.itemsize,
                      id_dtype.code, count, size, err, *lay)

    def name(pos: int) -> str:
        value = dev.to_numpy(ids, Layout((1,), (1,), _element(lids, pos)), id_dtype)[0]
        return (f"{op}: index {value} (at position {pos}) is out of range for a dimension of size {size}")

    dev.errors.run(launch, name)
    return out


def _element(layout: Layout, flat: int) -> int:
    """The storage offset of element `flat` (C order) of layout."""
    off = layout.offset
    for d in range(len(layout.shape) - 1, -1, -1):
        off += flat % layout.shape[d] * layout.strides[d]
        flat //= layout.shape[d]
    return off


def _around(shape: tuple, strides: list[tuple], dim: int):
    """The dims before and after `dim`, each merged: (shape, strides per operand, the new index of dim)."""
    pre, pst = merge(shape[:dim], [s[:dim] for s in strides])
    post, qst = merge(shape[dim + 1:], [s[dim + 1:] for s in strides])
    return (*pre, shape[dim], *post), [(*a, s[dim], *b) for a, b, s in zip(pst, qst, strides)], len(pre)


def index_select(dtype):
    """k(out, x, lx, ids, lids, ids_dtype, dim)."""
    isz = dtype.itemsize

    def kernel(out, x, lx, ids, lids, id_dtype, dim):
        dev = out.device
        cids = checked_ids("index_select", ids, lids, id_dtype, lx.shape[dim])
        shape = (*lx.shape[:dim], lids.numel, *lx.shape[dim + 1:])
        xst = (*lx.strides[:dim], 0, *lx.strides[dim + 1:])
        mshape, (mst,), mdim = _around(shape, [xst], dim)
        if len(mshape) > MAXD:
            x, lx = contiguous(x, lx, dtype), Layout.contig(lx.shape)
            xst = (*lx.strides[:dim], 0, *lx.strides[dim + 1:])
            mshape, (mst,), mdim = _around(shape, [xst], dim)
        n = numel(shape)
        dev.function(MODULE, f"select_{8 * isz}").launch(
            grid(dev, n), THREADS, out.ptr, address(x, lx, isz), cids.ptr, n, lx.strides[dim], mdim,
            *strided(mshape, mst))

    return kernel


def gather(dtype):
    """k(out, x, lx, ids, lids, ids_dtype, dim): out has the ids' shape."""
    isz = dtype.itemsize

    def kernel(out, x, lx, ids, lids, id_dtype, dim):
        dev = out.device
        cids = checked_ids("gather", ids, lids, id_dtype, lx.shape[dim])
        xst = tuple(0 if d == dim else s for d, s in enumerate(lx.strides))
        shape, (mst,) = merge(lids.shape, [xst])
        if len(shape) > MAXD:
            x, lx = contiguous(x, lx, dtype), Layout.contig(lx.shape)
            shape, (mst,) = merge(lids.shape, [tuple(0 if d == dim else s for d, s in enumerate(lx.strides))])
        n = lids.numel
        dev.function(MODULE, f"select_{8 * isz}").launch(
            grid(dev, n), THREADS, out.ptr, address(x, lx, isz), cids.ptr, n, lx.strides[dim], -1,
            *strided(shape, mst))

    return kernel


def scatter(accumulate: int, dtype):
    """k(out, x, lx, ids, lids, ids_dtype, src, lsrc, dim): scatter (0) and scatter_add (1)."""

    def kernel(out, x, lx, ids, lids, id_dtype, src, lsrc, dim):
        dev = out.device
        cids = checked_ids("scatter_add" if accumulate else "scatter", ids, lids, id_dtype, lx.shape[dim])
        strided_copy(out, Layout.contig(lx.shape), x, lx, dtype.itemsize)
        _fibers(dev, dtype, out, lx.shape, src, lsrc, cids, lids.shape, contiguous_strides(lids.shape), dim,
                accumulate)

    return kernel


def index_add(dtype):
    """k(out, x, lx, ids, lids, ids_dtype, src, lsrc, dim): ids 1-d."""

    def kernel(out, x, lx, ids, lids, id_dtype, src, lsrc, dim):
        dev = out.device
        cids = checked_ids("index_add", ids, lids, id_dtype, lx.shape[dim])
        strided_copy(out, Layout.contig(lx.shape), x, lx, dtype.itemsize)
        # fibers over src's shape; along dim, id j of the 1-d ids
        id_strides = tuple(1 if d == dim else 0 for d in range(len(lsrc.shape)))
        _fibers(dev, dtype, out, lx.shape, src, lsrc, cids, lsrc.shape, id_strides, dim, 1)

    return kernel


def _fibers(dev, dtype, out, out_shape: tuple, src, lsrc: Layout, cids, shape: tuple, id_strides: tuple, dim: int,
            accumulate: int) -> None:
    """Fibers along dim over `shape` (the ids' or src's): out (contiguous, out_shape) at the checked ids."""
    isz = dtype.itemsize
    ostrides = contiguous_strides(out_shape)
    other = [d for d in range(len(shape)) if d != dim]
    fs, (fo, fsrc, fid) = merge(tuple(shape[d] for d in other),
                                [tuple(ostrides[d] for d in other), tuple(lsrc.strides[d] for d in other),
                                 tuple(id_strides[d] for d in other)])
    if len(fs) > MAXD:
        src, lsrc = contiguous(src, lsrc, dtype), Layout.contig(lsrc.shape)
        return _fibers(dev, dtype, out, out_shape, src, lsrc, cids, shape, id_strides, dim, accumulate)
    n_fib = numel(fs)
    dev.function(MODULE, f"scatter_{dtype}").launch(
        grid(dev, n_fib), THREADS, out.ptr, address(src, lsrc, isz), cids.ptr, n_fib, shape[dim], ostrides[dim],
        lsrc.strides[dim], id_strides[dim], accumulate, *strided(fs, fo, fsrc, fid))


KERNELS = {"index_select": index_select, "gather": gather, "scatter": lambda dt: scatter(0, dt),
           "scatter_add": lambda dt: scatter(1, dt), "index_add": index_add}
