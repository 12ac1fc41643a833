"""Indexing kernels: index_select and gather read through indexes; scatter,
scatter_add and index_add write through them into a copy of their input."""

from __future__ import annotations

from functools import partial

from candle_api.layout import contiguous_strides

from ..library import error
from .descriptors import pack
from .memory import copy_to_contiguous


def index_select(fn, dt):
    """k(out, x, lx, ids, lids, ids_dtype, dim)."""
    isz = dt.itemsize

    def kernel(out, x, lx, ids, lids, id_dtype, dim):
        desc = pack([len(lx.shape), *lx.shape, *lx.strides, dim])
        if fn(dt.code, id_dtype.code, desc, x.ptr + lx.offset * isz, ids.ptr + lids.offset * id_dtype.itemsize,
              lids.numel, out.ptr):
            raise error()

    return kernel


def gather(fn, dt):
    """k(out, x, lx, ids, lids, ids_dtype, dim)."""
    isz = dt.itemsize

    def kernel(out, x, lx, ids, lids, id_dtype, dim):
        desc = pack([len(lids.shape), *lids.shape, *lx.strides, *lids.strides, dim, lx.shape[dim]])
        if fn(dt.code, id_dtype.code, desc, x.ptr + lx.offset * isz, ids.ptr + lids.offset * id_dtype.itemsize,
              out.ptr):
            raise error()

    return kernel


def scatter(fn, copy_fn, accumulate, dt):
    """k(out, x, lx, ids, lids, ids_dtype, src, lsrc, dim): scatter (accumulate 0) and scatter_add (1)."""
    isz = dt.itemsize
    copy = copy_to_contiguous(copy_fn, dt)

    def kernel(out, x, lx, ids, lids, id_dtype, src, ls, dim):
        copy(out, x, lx)
        strides = contiguous_strides(lx.shape)
        desc = pack([len(lids.shape), *lids.shape, *ls.strides, *lids.strides, *strides, dim, lx.shape[dim]])
        if fn(dt.code, id_dtype.code, desc, ids.ptr + lids.offset * id_dtype.itemsize, src.ptr + ls.offset * isz,
              out.ptr, accumulate):
            raise error()

    return kernel


def index_add(fn, copy_fn, dt):
    """k(out, x, lx, ids, lids, ids_dtype, src, lsrc, dim); ids contiguous."""
    isz = dt.itemsize
    copy = copy_to_contiguous(copy_fn, dt)

    def kernel(out, x, lx, ids, lids, id_dtype, src, ls, dim):
        copy(out, x, lx)
        desc = pack([len(ls.shape), *ls.shape, *ls.strides, dim, lx.shape[dim]])
        if fn(dt.code, id_dtype.code, desc, ids.ptr + lids.offset * id_dtype.itemsize, src.ptr + ls.offset * isz,
              out.ptr):
            raise error()

    return kernel


def makers(lib) -> dict:
    return {
        "index_select": partial(index_select, lib.cd_index_select),
        "gather": partial(gather, lib.cd_gather),
        "scatter": partial(scatter, lib.cd_scatter, lib.cd_copy, 0),
        "scatter_add": partial(scatter, lib.cd_scatter, lib.cd_copy, 1),
        "index_add": partial(index_add, lib.cd_index_add, lib.cd_copy),
    }
