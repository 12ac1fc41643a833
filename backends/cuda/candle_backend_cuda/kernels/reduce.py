"""Reductions over any set of dims and cumsum (csrc/reduce.cu). The host
splits the layout into kept and reduced dims (each merged) and picks a
block per output (when the reduced elements lie contiguously, or few
outputs share a big reduction) or a thread per output."""

from __future__ import annotations

from functools import partial

from candle_api.layout import Layout, contiguous_strides, numel

from ..launch import MAXD, THREADS, address, merge, strided
from .codes import codes
from .common import grid
from .memory import contiguous

MODULE = "reduce"


def _split(lx: Layout, dims: tuple):
    """(kept shape, kept strides, reduced shape, reduced strides), each merged."""
    kept = [d for d in range(len(lx.shape)) if d not in dims]
    ks, (kst,) = merge(tuple(lx.shape[d] for d in kept), [tuple(lx.strides[d] for d in kept)])
    rs, (rst,) = merge(tuple(lx.shape[d] for d in dims), [tuple(lx.strides[d] for d in dims)])
    return ks, kst, rs, rst


def reduce(op: str, dtype):
    """k(out, x, lx, dims)."""
    code, isz, name = codes("REDUCE")[op], dtype.itemsize, f"reduce_{dtype}"

    def kernel(out, x, lx, dims):
        dev = out.device
        ks, kst, rs, rst = _split(lx, dims)
        if len(ks) > MAXD or len(rs) > MAXD:  # read through a contiguous copy: its dims merge
            x, lx = contiguous(x, lx, dtype), Layout.contig(lx.shape)
            ks, kst, rs, rst = _split(lx, dims)
        n_out, n_red = numel(ks), numel(rs)
        per_block = n_red >= 64 and ((rst and rst[-1] == 1) or n_out < 4 * dev.gpu.sms)
        blocks = min(n_out, 32 * dev.gpu.sms) if per_block else grid(dev, n_out)
        dev.function(MODULE, name).launch(
            max(blocks, 1), THREADS, out.ptr, address(x, lx, isz), n_out, n_red, code, int(per_block),
            *strided(ks, kst), *strided(rs, rst))

    return kernel


def cumsum(dtype):
    """k(out, x, lx, dim)."""
    isz, name = dtype.itemsize, f"cumsum_{dtype}"

    def kernel(out, x, lx, dim):
        dev = out.device
        if len(lx.shape) - 1 > MAXD:
            x, lx = contiguous(x, lx, dtype), Layout.contig(lx.shape)
        ostrides = contiguous_strides(lx.shape)
        other = [d for d in range(len(lx.shape)) if d != dim]
        fs, (xs, os_) = merge(tuple(lx.shape[d] for d in other),
                              [tuple(lx.strides[d] for d in other), tuple(ostrides[d] for d in other)])
        n_fib = numel(fs)
        dev.function(MODULE, name).launch(
            grid(dev, n_fib), THREADS, out.ptr, address(x, lx, isz), n_fib, lx.shape[dim], lx.strides[dim],
            ostrides[dim], *strided(fs, xs, os_))

    return kernel


KERNELS = {**{op: partial(reduce, op) for op in codes("REDUCE")}, "cumsum": cumsum}
