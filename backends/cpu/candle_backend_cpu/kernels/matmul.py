"""Batched matrix products at any strides."""

from __future__ import annotations

from functools import partial

from ..library import error
from .descriptors import pack


def _descriptor(code: int, key) -> bytes:
    """[dtype, m, n, k, a's and b's row and column strides, batch dims, the batch shape, a's and b's batch
    strides]."""
    a_shape, a_strides, b_shape, b_strides = key
    *batch, m, k = a_shape
    return pack([code, m, b_shape[-1], k, a_strides[-2], a_strides[-1], b_strides[-2], b_strides[-1],
                 len(batch), *batch, *a_strides[:-2], *b_strides[:-2]])


def matmul(fn, dt):
    """k(out, a, la, b, lb), la (batch..., m, k) and lb (batch..., k, n)."""
    isz = dt.itemsize
    # (a's shape and strides, b's) -> descriptor: packing one costs more than a small product, and a model
    # multiplies the same few layouts over and over.
    descriptors: dict = {}

    def kernel(out, a, la, b, lb):
        key = (la.shape, la.strides, lb.shape, lb.strides)
        desc = descriptors.get(key)
        if desc is None:
            if len(descriptors) >= 1024:
                descriptors.clear()
            desc = descriptors[key] = _descriptor(dt.code, key)
        if fn(desc, a.ptr + la.offset * isz, b.ptr + lb.offset * isz, out.ptr):
            raise error()

    return kernel


def makers(lib) -> dict:
    return {"matmul": partial(matmul, lib.cd_matmul)}
