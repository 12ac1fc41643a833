"""Memory kernels: strided copy and fill, in place on their destination."""

from __future__ import annotations

from functools import partial

from candle_api.layout import contiguous_strides

from ..library import error
from .descriptors import lay


def copy(fn, dt):
    """k(dst, ldst, src, lsrc)."""
    isz = dt.itemsize

    def kernel(dst, ld, src, ls):
        if fn(isz, lay(ls.shape, ls.strides, ld.strides), src.ptr + ls.offset * isz, dst.ptr + ld.offset * isz):
            raise error()

    def bind(dst, ld, src, ls):
        """kernel(dst, ld, src, ls) as a call of no arguments, its descriptor and addresses made
        once: a recorded run replays the same copies (a Concat's, a fed-back state's) every time."""
        desc, s, d = lay(ls.shape, ls.strides, ld.strides), src.ptr + ls.offset * isz, dst.ptr + ld.offset * isz

        def call(_keep=(dst, src)):  # the storages stay alive as long as the call
            if fn(isz, desc, s, d):
                raise error()

        return call

    kernel.bind = bind
    return kernel


def fill(fn, dt):
    """k(dst, ldst, value)."""
    isz = dt.itemsize

    def kernel(dst, ld, value: bytes):
        if fn(isz, lay(ld.shape, ld.strides), dst.ptr + ld.offset * isz, value):
            raise error()

    return kernel


def copy_to_contiguous(fn, dt):
    """copy(out, x, lx), out contiguous: the starting values of the index kernels that write into a copy."""
    isz = dt.itemsize

    def copy(out, x, lx):
        if lx.numel and fn(isz, lay(lx.shape, lx.strides, contiguous_strides(lx.shape)), x.ptr + lx.offset * isz,
                           out.ptr):
            raise error()

    return copy


def makers(lib) -> dict:
    return {"copy": partial(copy, lib.cd_copy), "fill": partial(fill, lib.cd_fill)}
