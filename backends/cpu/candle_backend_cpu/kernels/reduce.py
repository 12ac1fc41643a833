"""Reductions over any set of dims (sum, prod, max, min, argmax, argmin) and cumsum."""

from __future__ import annotations

from functools import partial

from .. import library
from ..library import error
from .descriptors import pack


# (shape, strides, dims) -> descriptor: building one costs more than the C call on small
# tensors, and a model reduces the same few layouts over and over.
_DESCRIPTORS: dict = {}


def _descriptor(shape, strides, dims) -> bytes:
    """[kept dims, their sizes and strides, reduced dims, their sizes and strides]."""
    keep = [d for d in range(len(shape)) if d not in dims]
    desc = pack([len(keep), *(shape[d] for d in keep), *(strides[d] for d in keep),
                 len(dims), *(shape[d] for d in dims), *(strides[d] for d in dims)])
    if len(_DESCRIPTORS) >= 1024:
        _DESCRIPTORS.clear()
    _DESCRIPTORS[(shape, strides, dims)] = desc
    return desc


def reduce(fn, code, dt):
    """k(out, x, lx, dims)."""
    isz = dt.itemsize
    cached = _DESCRIPTORS.get

    def kernel(out, x, lx, dims):
        shape, strides = lx.shape, lx.strides
        desc = cached((shape, strides, dims)) or _descriptor(shape, strides, dims)
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
