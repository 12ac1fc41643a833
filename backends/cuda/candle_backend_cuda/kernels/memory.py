"""Strided copy and fill (csrc/memory.cu), in place on any layout of the
destination, and the contiguous copy other kernels take of an input they
cannot read strided. Both move bits: a kernel per element width."""

from __future__ import annotations

from candle_api.layout import Layout

from ..launch import address
from .common import THREADS, grid, per_thread, views

MODULE = "memory"


def _overlap(dst, ldst: Layout, src, lsrc: Layout, isz: int) -> bool:
    """Whether the bytes the two views reach in one storage intersect."""
    if dst.ptr != src.ptr or ldst.numel == 0:
        return False
    (d0, d1), (s0, s1) = ldst.span(), lsrc.span()
    return d0 < s1 and s0 < d1


def strided_copy(dst, ldst: Layout, src, lsrc: Layout, isz: int) -> None:
    dev = dst.device
    dst.host = None  # written in place: a host copy of its upload is stale
    if _overlap(dst, ldst, src, lsrc, isz):  # read everything before anything is written
        src, lsrc = contiguous_bits(src, lsrc, isz), Layout.contig(lsrc.shape)
    fn = dev.function(MODULE, f"copy_{8 * isz}")
    pd, ps = address(dst, ldst, isz), address(src, lsrc, isz)
    for offs, _start, n, lay in views([ldst, lsrc]):
        d, s = pd + offs[0] * isz, ps + offs[1] * isz
        fn.launch(grid(dev, n, per_thread(lay, isz, d, s)), THREADS, d, s, n, *lay)


def copy_kernel(dtype):
    """k(dst, ldst, src, lsrc)."""
    isz = dtype.itemsize

    def kernel(dst, ldst, src, lsrc):
        strided_copy(dst, ldst, src, lsrc, isz)

    return kernel


def fill_kernel(dtype):
    """k(dst, ldst, value): value is itemsize raw bytes."""
    isz = dtype.itemsize

    def kernel(dst, ldst, value):
        dev = dst.device
        dst.host = None
        fn = dev.function(MODULE, f"fill_{8 * isz}")
        bits = int.from_bytes(bytes(value), "little")
        bits = bits - (1 << 64) if bits >= 1 << 63 else bits  # passed as an i64's bits
        base = address(dst, ldst, isz)
        for offs, _start, n, lay in views([ldst]):
            d = base + offs[0] * isz
            fn.launch(grid(dev, n, per_thread(lay, isz, d)), THREADS, d, bits, n, *lay)

    return kernel


def contiguous_bits(storage, layout: Layout, isz: int):
    """A new storage holding layout's elements in order."""
    out = storage.device.alloc(layout.numel * isz)
    strided_copy(out, Layout.contig(layout.shape), storage, layout, isz)
    return out


def contiguous(storage, layout: Layout, dtype):
    return contiguous_bits(storage, layout, dtype.itemsize)


KERNELS = {"copy": copy_kernel, "fill": fill_kernel}
