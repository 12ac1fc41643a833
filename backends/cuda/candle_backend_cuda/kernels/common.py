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


def grid(device, n: int) -> int:
    return blocks_for(n, device.gpu.sms)


__all__ = ["THREADS", "grid", "views"]
