"""The packed layout of quantized weights: the reference NumPy packing.

A device that multiplies by a weight many times (decoding a model) gains from
reading it as one stream in the order its vector units consume it, rather than
row by row. ``qpack`` rearranges a 2-d weight's blocks, once at load, into
that order; ``qmatmul_packed`` multiplies by the result. The bytes are the
same ones, moved: a packed weight takes exactly the space of its blocks.

Layout: rows in groups of :data:`GROUP` (16), each group stored whole, one
block column after another. The 16 blocks of one column (one per row) form a
tile, in which each field of the block struct follows the one before, as in
the struct, with the 16 rows' copies of it arranged by the field's kind:

- ``rows``: the 16 rows' fields one after another (16 f16 scales: 32 bytes);
- ``words``: the quants in runs of 4 bytes, the 16 rows' first 4 bytes, then
  their next 4... (run j of row r at ``64 j + 4 r``): a 32-bit lane of a
  vector holds 4 quants of one row, so one multiply-add of 16 lanes against a
  broadcast of 4 activations serves 16 rows;
- ``planes``: byte i of the 16 rows' fields together (the 12 bytes of packed
  6-bit scales of q4k: byte-wise vector arithmetic unpacks 16 rows at once);
- ``bits`` (the fifth bits ``qh`` of q5_0 and q5_1): 8 little-endian 64-bit
  masks, one per 4-byte run j of the quants and half h (h 0: the low nibbles'
  values 4j..4j+3, h 1: the high ones', 16+4j..16+4j+3), mask 2j + h holding
  the bit of value i of row r at bit 4r + i: one mask selects the values of a
  run of 16 rows that have their fifth bit set.

Rows past the last whole group (``n % 16``) follow the groups in the blocks'
own layout. Types without a layout here are never packed.
"""

from __future__ import annotations

import numpy as np

from ..errors import DTypeError, ShapeError
from .ggml_types import GgmlType, check_blocks, get_ggml_type

#: Rows per group.
GROUP = 16

#: ggml type name -> {block field: its kind in a tile}; the types that have a packed layout.
FIELD_KINDS: dict[str, dict[str, str]] = {
    "q4_0": {"d": "rows", "qs": "words"},
    "q4_1": {"d": "rows", "m": "rows", "qs": "words"},
    "q5_0": {"d": "rows", "qh": "bits", "qs": "words"},
    "q5_1": {"d": "rows", "m": "rows", "qh": "bits", "qs": "words"},
    "q8_0": {"d": "rows", "qs": "words"},
    "iq4_nl": {"d": "rows", "qs": "words"},
    "mxfp4": {"e": "rows", "qs": "words"},
    "q4k": {"d": "rows", "dmin": "rows", "scales": "planes", "qs": "words"},
    "iq4_xs": {"d": "rows", "scales_h": "rows", "scales_l": "rows", "qs": "words"},
}


def packable(ggml_type) -> bool:
    """Whether ``ggml_type`` has a packed layout."""
    return get_ggml_type(ggml_type).name in FIELD_KINDS


def _fields(t: GgmlType) -> list[tuple[str, int, int]]:
    """(kind, offset, size) of each field of t's block, in struct order."""
    kinds = FIELD_KINDS.get(t.name)
    if kinds is None:
        raise DTypeError(f"{t.name} has no packed layout (packed types: {', '.join(FIELD_KINDS)})")
    out = []
    for name in t.block.names:
        sub, offset = t.block.fields[name][:2]
        out.append((kinds[name], offset, sub.itemsize))
    return out


def _bits_to_masks(qh: np.ndarray) -> np.ndarray:
    """(..., 16, 4) bytes of fifth bits -> (..., 64) bytes of the 8 masks of kind ``bits``."""
    q = np.ascontiguousarray(qh).view("<u4")[..., 0].astype(np.uint64)  # (..., 16)
    shifts = 4 * np.arange(GROUP, dtype=np.uint64)
    masks = [((((q >> np.uint64(16 * h + 4 * j)) & np.uint64(15)) << shifts).sum(axis=-1, dtype=np.uint64))
             for j in range(4) for h in range(2)]
    return np.stack(masks, axis=-1).astype("<u8").view(np.uint8)


def _masks_to_bits(masks: np.ndarray) -> np.ndarray:
    """The inverse of :func:`_bits_to_masks`."""
    m = np.ascontiguousarray(masks).view("<u8").astype(np.uint64)  # (..., 8)
    shifts = 4 * np.arange(GROUP, dtype=np.uint64)
    q = np.zeros(m.shape[:-1] + (GROUP,), np.uint64)
    for j in range(4):
        for h in range(2):
            q |= ((m[..., 2 * j + h, None] >> shifts) & np.uint64(15)) << np.uint64(16 * h + 4 * j)
    return q.astype("<u4").view(np.uint8).reshape(q.shape + (4,))


def _tile_part(kind: str, src: np.ndarray) -> np.ndarray:
    """One field of the 16 blocks of a tile, src (..., 16, size) -> (..., 16 * size) in the field's kind."""
    lead, size = src.shape[:-2], src.shape[-1]
    if kind == "words":
        src = src.reshape(lead + (GROUP, size // 4, 4)).swapaxes(-3, -2)
    elif kind == "planes":
        src = src.swapaxes(-2, -1)
    elif kind == "bits":
        src = _bits_to_masks(src)
    return np.ascontiguousarray(src).reshape(lead + (GROUP * size,))


def _field_of(kind: str, part: np.ndarray, size: int) -> np.ndarray:
    """The inverse of :func:`_tile_part`: (..., 16 * size) -> (..., 16, size)."""
    lead = part.shape[:-1]
    if kind == "words":
        return part.reshape(lead + (size // 4, GROUP, 4)).swapaxes(-3, -2).reshape(lead + (GROUP, size))
    if kind == "planes":
        return part.reshape(lead + (size, GROUP)).swapaxes(-2, -1)
    if kind == "bits":
        return _masks_to_bits(part)
    return part.reshape(lead + (GROUP, size))


def _check(data, ggml_type, shape) -> tuple[GgmlType, np.ndarray, int, int]:
    t = get_ggml_type(ggml_type)
    shape = tuple(shape)
    if len(shape) != 2:
        raise ShapeError(f"only 2-d weights are packed, got shape {shape}")
    blocks = check_blocks(data, shape, t)
    _fields(t)
    return t, blocks, shape[0], shape[1] // t.block_size


def pack_array(data, ggml_type, shape) -> np.ndarray:
    """The blocks of a 2-d weight of ``shape`` (flat uint8) in the packed layout (flat uint8, same size)."""
    t, blocks, n, nb = _check(data, ggml_type, shape)
    size = t.type_size
    rows = blocks.reshape(n, nb, size)
    full = n - n % GROUP
    tiles = rows[:full].reshape(-1, GROUP, nb, size).transpose(0, 2, 1, 3)  # (groups, nb, 16, size)
    parts = [_tile_part(kind, tiles[..., off:off + sz]) for kind, off, sz in _fields(t)]
    packed = np.concatenate(parts, axis=-1)
    return np.concatenate([packed.reshape(-1), rows[full:].reshape(-1)])


def unpack_array(packed, ggml_type, shape) -> np.ndarray:
    """The inverse of :func:`pack_array`: the blocks in their own layout (flat uint8)."""
    t, flat, n, nb = _check(packed, ggml_type, shape)
    size = t.type_size
    full = n - n % GROUP
    tiles = flat[:full * nb * size].reshape(full // GROUP, nb, GROUP * size)
    out = np.empty((full // GROUP, nb, GROUP, size), np.uint8)
    start = 0
    for kind, off, sz in _fields(t):
        out[..., off:off + sz] = _field_of(kind, tiles[..., start:start + GROUP * sz], sz)
        start += GROUP * sz
    rows = out.transpose(0, 2, 1, 3).reshape(-1)
    return np.concatenate([rows, flat[full * nb * size:]])
