"""Batched matrix products at any strides."""

from __future__ import annotations

from functools import partial

from ..library import error
from .descriptors import pack


# (a's shape and strides, b's) -> descriptor: packing one costs more than a small product, and a model
# multiplies the same few layouts over and over.
_DESCRIPTORS: dict = {}


def _descriptor(key) -> bytes:
    """[m, n, k, a's and b's row and column strides, batch dims, the batch shape, a's and b's batch strides]."""
    a_shape, a_strides, b_shape, b_strides = key
    *batch, m, k = a_shape
    desc = pack([m, b_shape[-1], k, a_strides[-2], a_strides[-1], b_strides[-2], b_strides[-1],
                 len(batch), *batch, *a_strides[:-2], *b_strides[:-2]])
    if len(_DESCRIPTORS) >= 1024:
        _DESCRIPTORS.clear()
    _DESCRIPTORS[key] = desc
    return desc


def matmul(fn, dt):
    """k(out, a, la, b, lb), la (batch..., m, k) and lb (batch..., k, n)."""
    isz = dt.itemsize
    cached = _DESCRIPTORS.get

    def kernel(out, a, la, b, lb):
        key = (la.shape, la.strides, lb.shape, lb.strides)
        desc = cached(key) or _descriptor(key)
        if fn(dt.code, desc, a.ptr + la.offset * isz, b.ptr + lb.offset * isz, out.ptr):
            raise error()

    return kernel


def makers(lib) -> dict:
    return {"matmul": partial(matmul, lib.cd_matmul)}
