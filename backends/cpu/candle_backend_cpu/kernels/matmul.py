"""Batched matrix products at any strides."""

from __future__ import annotations

from functools import partial

from ..library import error
from .descriptors import pack


def matmul(fn, dt):
    """k(out, a, la, b, lb), la (batch..., m, k) and lb (batch..., k, n)."""
    isz = dt.itemsize

    def kernel(out, a, la, b, lb):
        *batch, m, k = la.shape
        n = lb.shape[-1]
        desc = pack([m, n, k, la.strides[-2], la.strides[-1], lb.strides[-2], lb.strides[-1],
                     len(batch), *batch, *la.strides[:-2], *lb.strides[:-2]])
        if fn(dt.code, desc, a.ptr + la.offset * isz, b.ptr + lb.offset * isz, out.ptr):
            raise error()

    return kernel


def makers(lib) -> dict:
    return {"matmul": partial(matmul, lib.cd_matmul)}
