"""What the kernel glue of every family shares: walking a merged layout in
launches (one, or one per outer position beyond MAXD dims), and the grid of
a grid-stride loop."""

from __future__ import annotations

from candle_api.layout import Layout, numel

from ..launch import THREADS, blocks_for, contiguous_values, is_contiguous, merge, outer_splits, strided


def views(layouts: list[Layout]):
    """(element offsets per operand, flat start, count, Strided values) for each
    launch over layouts of one shape (the first's)."""
    if layouts[0].numel == 0:
        return
    shape, strides = merge(layouts[0].shape, [lay.strides for lay in layouts])
    if is_contiguous(shape, strides):
        yield [0] * len(layouts), 0, numel(shape), contiguous_values(len(layouts))
        return
    for offs, start, inner, inner_strides in outer_splits(shape, strides):
        yield offs, start, numel(inner), strided(inner, *inner_strides)


def grid(device, n: int, per_thread: int = 1) -> int:
    """Blocks of a grid-stride loop over n elements, per_thread of them a thread's step."""
    return blocks_for(-(-n // per_thread), device.gpu.sms)


def per_thread(lay: list[int], widest: int, *ptrs: int) -> int:
    """The elements an element-wise thread takes a step (common.cuh's each_pack): two 16-byte packs
    of the widest operand (itemsize widest) when the launch is contiguous (lay's rank 0) and every
    pointer 16-byte aligned, else 1 (the element loop)."""
    return 2 * (16 // widest) if lay[-1] == 0 and not any(p % 16 for p in ptrs) else 1


__all__ = ["THREADS", "grid", "per_thread", "views"]
