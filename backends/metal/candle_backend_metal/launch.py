"""What every kernel does on the host: merge the dims of its layouts, pack
the parameter block, bind its storages, pick its pipeline, dispatch.

Bindings are windows: a storage is bound from the aligned start of the
bytes its layout reaches to their end, and the layout's offset is made
relative to that start. A storage larger than the adapter's binding limit
(128 MiB by default in WebGPU; the device asks for the adapter's maximum)
is then still bound when the view a kernel reads fits the limit, and
kernels split their work by rows when it does not (row_chunks).
"""

from __future__ import annotations

import math
import struct

from candle_api.contract.helpers import merge_dims as merge  # noqa: F401 (the kernels import it from here)
from candle_api.errors import DeviceError
from candle_api.layout import Layout, numel

from .gpu import align
from .shaders import WG


def contiguous_all(shape: tuple, strides: list[tuple]) -> bool:
    """True when, merged, every layout reads its elements in order (rank <= 1, stride 1)."""
    return len(shape) == 0 or (len(shape) == 1 and all(s == (1,) for s in strides))


def fits(gpu, layout: Layout, itemsize: int) -> bool:
    """Whether the bytes layout reaches fit in one binding."""
    if layout.numel == 0:
        return True
    lo, end = layout.span()
    return (end - lo) * itemsize + gpu.offset_align <= gpu.max_binding


def bind(gpu, storage, layout: Layout | None, itemsize: int):
    """((buffer, byte offset, byte size), element shift) binding the bytes
    layout reaches in storage (the whole storage for layout None); subtract
    the shift from the layout's offset."""
    if storage.capacity <= gpu.max_binding:
        return (storage.buffer, 0, 0), 0
    if layout is None or layout.numel == 0:
        size = align(max(storage.nbytes, 4), 4)
        if size > gpu.max_binding:
            raise DeviceError(f"wgpu: a {storage.nbytes}-byte tensor exceeds the adapter's largest binding "
                              f"({gpu.max_binding} bytes) for this kernel")
        return (storage.buffer, 0, min(size, storage.capacity)), 0
    lo, hi = layout.span()
    start = (lo * itemsize) // gpu.offset_align * gpu.offset_align
    end = align(hi * itemsize, 4)
    if end - start > gpu.max_binding:
        raise DeviceError(f"wgpu: a view of {end - start} bytes exceeds the adapter's largest binding "
                          f"({gpu.max_binding} bytes) for this kernel")
    return (storage.buffer, start, end - start), start // itemsize


def row_chunks(gpu, shape: tuple, inputs: list[tuple[tuple, int]], out_itemsize: int) -> list[tuple[int, int]]:
    """Ranges of dim 0 of a merged shape, each small enough that every binding
    of a kernel over those rows fits the adapter's limit: one range, the
    whole, when everything fits. inputs: (strides, itemsize) of each input;
    the output is contiguous, and a range starts at a multiple of the
    binding alignment in it (so that its narrow elements start a word)."""
    rows = shape[0] if shape else 1
    row = numel(shape[1:])

    def need(count: int) -> int:  # the largest binding for count rows
        most = count * row * out_itemsize
        for strides, isz in inputs:
            extent = sum((n - 1) * abs(st) for n, st in zip(shape[1:], strides[1:])) + 1
            if shape:
                extent += (count - 1) * abs(strides[0])
            most = max(most, extent * isz + gpu.offset_align)
        return most

    if need(rows) <= gpu.max_binding:
        return [(0, rows)]
    step = gpu.offset_align // math.gcd(row * out_itemsize, gpu.offset_align)  # rows per aligned start
    count = step
    while count * 2 <= rows and need(count * 2) <= gpu.max_binding:
        count *= 2
    if need(count) > gpu.max_binding:
        raise DeviceError(f"wgpu: rows of {row * out_itemsize} bytes are too large to split under the adapter's "
                          f"binding limit ({gpu.max_binding} bytes)")
    return [(r, min(r + count, rows)) for r in range(0, rows, count)]


def chunks_along(gpu, layout: Layout, dim: int, itemsize: int, multiple: int = 1) -> list[tuple[int, int]]:
    """Ranges of layout's dim (starting at multiples of multiple) over which it
    fits one binding: the whole dim when it fits already."""
    size = layout.shape[dim]
    if fits(gpu, layout, itemsize):
        return [(0, size)]
    count = multiple
    while count * 2 <= size and fits(gpu, narrow(layout, dim, 0, count * 2), itemsize):
        count *= 2
    if not fits(gpu, narrow(layout, dim, 0, count), itemsize):
        raise DeviceError(f"wgpu: a view of shape {layout.shape} cannot be split along dim {dim} under the "
                          f"adapter's binding limit ({gpu.max_binding} bytes)")
    return [(r, min(r + count, size)) for r in range(0, size, count)]


def narrow(layout: Layout, dim: int, start: int, end: int) -> Layout:
    """layout's elements start..end along dim."""
    shape = list(layout.shape)
    shape[dim] = end - start
    return Layout(tuple(shape), layout.strides, layout.offset + start * layout.strides[dim])


def narrow_rows(layout: Layout, shape: tuple, strides: tuple, r0: int, r1: int) -> Layout:
    """Rows [r0, r1) of a merged view (shape, strides) of layout."""
    if not shape:
        return Layout((), (), layout.offset)
    return Layout((r1 - r0, *shape[1:]), strides, layout.offset + r0 * strides[0])


_U32 = struct.Struct("<I")
_F32 = struct.Struct("<f")


def f32_bits(x: float) -> int:
    try:
        return _U32.unpack(_F32.pack(x))[0]
    except OverflowError:  # beyond f32: infinity, as a conversion rounds it
        return 0x7F800000 if x > 0 else 0xFF800000


def pack(*values) -> bytes:
    """The parameter block: ints wrapped into u32 (negative strides become
    two's complement), floats as f32 bits."""
    return struct.pack(f"<{len(values)}I", *[f32_bits(v) if isinstance(v, float) else v & 0xFFFFFFFF
                                             for v in values])


def fits_whole(gpu, *storages) -> bool:
    """Whether every storage fits one binding whole (the common case: no window to work out)."""
    return all(s.capacity <= gpu.max_binding for s in storages)


def layout_words(layout: Layout, shift: int = 0) -> list[int]:
    """offset, then strides: a layout's part of a parameter block."""
    return [layout.offset - shift, *layout.strides]


def run(gpu, key, access: str, source, buffers: list, params, threads: int) -> None:
    """Dispatches pipeline key (compiled from source() on first use) over
    threads threads of one-dimensional workgroups."""
    pipe = gpu.pipeline(key, access, source)
    gpu.dispatch(pipe, buffers, params, max(1, -(-threads // WG)))
