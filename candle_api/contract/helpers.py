"""What every plugin with its own device repeats, written once: its kernel
table built from per-op makers, the host copy of a view of device memory
(the ``to_numpy`` of a backend whose memory the host cannot address), and
the merging of dims before a launch."""

from __future__ import annotations

from typing import Callable

import numpy as np

from ..dtype import get_dtype
from ..layout import Layout
from .table import ROWS


def kernel_table(makers: dict, contract_version: int, dtypes) -> dict:
    """{(op, dtype name): kernel} for the rows up to ``contract_version``:
    ``makers[op](dtype)`` makes an op's kernel, or answers None for a dtype it
    leaves to the op's decomposition; ``dtypes`` are the names the device holds."""
    table = {}
    for row in ROWS:
        if row.since <= contract_version and row.name in makers:
            for d in row.dtypes:
                kernel = makers[row.name](get_dtype(d)) if d in dtypes else None
                if kernel is not None:
                    table[(row.name, d)] = kernel
    return table


def read_layout(storage, layout: Layout, dtype, download: Callable, gather: Callable) -> np.ndarray:
    """A host copy of ``layout``'s elements: the bytes they span are read back
    with ``download(storage, byte_offset, nbytes)`` (a uint8 array), after a
    strided copy on the device (``gather(storage, layout, dtype)``, a
    contiguous storage) when they span much more than the view holds."""
    shape = layout.shape
    if layout.numel == 0:
        return np.empty(shape, dtype.np)
    lo, end = layout.span()
    isz = dtype.itemsize
    if end - lo > 2 * layout.numel + 1024:  # a sparse view of a big buffer: gather it first
        storage, layout = gather(storage, layout, dtype), Layout.contig(shape)
        lo, end = 0, layout.numel
    flat = download(storage, lo * isz, (end - lo) * isz).view(dtype.np)
    strides = tuple(s * isz for s in layout.strides)
    view = np.lib.stride_tricks.as_strided(flat[layout.offset - lo:], shape, strides, writeable=False)
    return np.array(view)


#: merge_dims' answers by (shape, strides): a model's ops ask about the same few layouts layer after
#: layer, and on a GPU the host's time per op is what a small model waits for. Cleared when full.
_MERGED: dict = {}


def merge_dims(shape: tuple, strides: list[tuple]) -> tuple[tuple, list[tuple]]:
    """The same elements in the fewest dims: size-1 dims dropped, and a dim
    folded into the next when every layout (one strides tuple each) steps over
    it contiguously. Returns the merged shape and each layout's strides."""
    key = (tuple(shape), tuple(map(tuple, strides)))
    merged = _MERGED.get(key)
    if merged is None:
        if len(_MERGED) >= 4096:
            _MERGED.clear()
        merged = _MERGED[key] = _merge_dims(*key)
    return merged[0], list(merged[1])


def _merge_dims(shape: tuple, strides: tuple) -> tuple[tuple, tuple]:
    dims = [(n, [s[i] for s in strides]) for i, n in enumerate(shape) if n != 1]
    out: list = []
    for n, ss in dims:
        if out and all(prev == s * n for prev, s in zip(out[-1][1], ss)):
            out[-1] = (out[-1][0] * n, ss)
        else:
            out.append((n, ss))
    if not out:
        return (), tuple(() for _ in strides)
    return tuple(n for n, _ in out), tuple(tuple(ss[k] for _, ss in out) for k in range(len(strides)))
