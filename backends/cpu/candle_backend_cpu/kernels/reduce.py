"""Reductions over any set of dims (sum, prod, max, min, argmax, argmin) and cumsum."""

from __future__ import annotations

from functools import partial

from .. import library
from ..library import error
from .descriptors import pack


def reduce(fn, code, dt):
    """k(out, x, lx, dims)."""
    isz = dt.itemsize

    def kernel(out, x, lx, dims):
        keep = [d for d in range(len(lx.shape)) if d not in dims]
        desc = pack([len(keep), *(lx.shape[d] for d in keep), *(lx.strides[d] for d in keep),
                     len(dims), *(lx.shape[d] for d in dims), *(lx.strides[d] for d in dims)])
        if fn(code, dt.code, desc, x.ptr + lx.offset * isz, out.ptr):
            raise error()

    return kernel


def cumsum(fn, dt):
    """k(out, x, lx, dim)."""
    isz = dt.itemsize

    def kernel(out, x, lx, dim):
        desc = pack([len(lx.shape), *lx.shape, *lx.strides, dim])
        if fn(dt.code, desc, x.ptr + lx.offset * isz, out.ptr):
            raise error()

    return kernel


def makers(lib) -> dict:
    out = {name: partial(reduce, lib.cd_reduce, code) for code, name in enumerate(library.op_names("reduce"))}
    out["cumsum"] = partial(cumsum, lib.cd_cumsum)
    return out
