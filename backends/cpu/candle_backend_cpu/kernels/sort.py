"""Sorting along the last dim: sort_last and topk_last, both one call of
cd_sort (csrc/kernels/sort.c), which keeps the first k of each row's stable
order (k = n for sort_last)."""

from __future__ import annotations

from functools import partial

from ..library import error
from .descriptors import cached_lay


def sort_last(fn, dt):
    """k(out, x, lx, indices, descending)."""
    isz = dt.itemsize

    def kernel(out, x, lx, indices, descending):
        if fn(dt.code, cached_lay(lx.shape, lx.strides), x.ptr + lx.offset * isz, lx.shape[-1], int(descending),
              out.ptr, indices.ptr):
            raise error()

    return kernel


def topk_last(fn, dt):
    """k(out, x, lx, indices, k, largest)."""
    isz = dt.itemsize

    def kernel(out, x, lx, indices, k, largest):
        if fn(dt.code, cached_lay(lx.shape, lx.strides), x.ptr + lx.offset * isz, k, int(largest), out.ptr,
              indices.ptr):
            raise error()

    return kernel


def makers(lib) -> dict:
    return {"sort_last": partial(sort_last, lib.cd_sort), "topk_last": partial(topk_last, lib.cd_sort)}
