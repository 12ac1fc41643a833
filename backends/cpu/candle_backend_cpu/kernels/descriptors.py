"""The packed int64 descriptors the C entry points read (``const int64_t *``)."""

from __future__ import annotations

import struct

_STRUCTS: dict[int, struct.Struct] = {}


def pack(values) -> bytes:
    """values as a packed int64 array."""
    n = len(values)
    s = _STRUCTS.get(n)
    if s is None:
        s = _STRUCTS[n] = struct.Struct(f"{n}q")
    return s.pack(*values)


def lay(shape, *stride_rows) -> bytes:
    """A layout descriptor: [ndim, shape, strides of each operand]."""
    vals = [len(shape), *shape]
    for row in stride_rows:
        vals += row
    return pack(vals)


#: (shape, strides) -> lay(shape, strides), for the hottest kernels: they see the same few layouts over
#: and over, and packing one costs a third of a small call.
LAYS: dict = {}


def cached_lay(shape, strides) -> bytes:
    """lay(shape, strides), remembered in LAYS."""
    desc = LAYS.get((shape, strides))
    if desc is None:
        if len(LAYS) >= 1024:
            LAYS.clear()
        desc = LAYS[(shape, strides)] = lay(shape, strides)
    return desc
