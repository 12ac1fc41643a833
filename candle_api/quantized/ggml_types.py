"""The GGML tensor types candle-api reads and writes: block layouts and the
reference NumPy codecs.

A GGML tensor is stored row by row (a row is the last dim of the logical
shape); a row is a run of blocks of ``block_size`` values, each block a
fixed-size record described by ``block``, a NumPy structured dtype mirroring
ggml's C struct (little-endian). A codec converts all blocks at once:
``quantize`` maps ``(n, block_size)`` float32 to ``n`` records,
``dequantize`` the reverse.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import ml_dtypes
import numpy as np

from ..errors import DTypeError, ShapeError
from . import iq_quants as iq
from . import k_quants as k
from . import simple_quants as s


@dataclass(frozen=True)
class GgmlType:
    """One GGML type: candle's lower-case ``name`` ("q4_0", "q4k"), ggml's
    ``type_id`` (as stored in GGUF/GGML files), ``block_size`` values per
    ``block`` record, and its codec."""

    name: str
    type_id: int
    block_size: int
    block: np.dtype
    quantize: Callable[[np.ndarray], np.ndarray]
    dequantize: Callable[[np.ndarray], np.ndarray]

    @property
    def type_size(self) -> int:
        """Bytes per block."""
        return self.block.itemsize

    def nbytes(self, numel: int) -> int:
        return numel // self.block_size * self.type_size

    def __repr__(self) -> str:
        return f"GgmlType({self.name})"


def _float_type(name: str, type_id: int, np_type) -> GgmlType:
    """Unquantized types: blocks of one value."""
    block = np.dtype(np_type)
    return GgmlType(name, type_id, 1, block, lambda x: x[:, 0].astype(block), lambda b: b.astype(np.float32)[:, None])


_TYPES = (
    _float_type("f32", 0, "<f4"),
    _float_type("f16", 1, "<f2"),
    GgmlType("q4_0", 2, s.QK, s.BLOCK_Q4_0, s.quantize_q4_0, s.dequantize_q4_0),
    GgmlType("q4_1", 3, s.QK, s.BLOCK_Q4_1, s.quantize_q4_1, s.dequantize_q4_1),
    GgmlType("q5_0", 6, s.QK, s.BLOCK_Q5_0, s.quantize_q5_0, s.dequantize_q5_0),
    GgmlType("q5_1", 7, s.QK, s.BLOCK_Q5_1, s.quantize_q5_1, s.dequantize_q5_1),
    GgmlType("q8_0", 8, s.QK, s.BLOCK_Q8_0, s.quantize_q8_0, s.dequantize_q8_0),
    GgmlType("q8_1", 9, s.QK, s.BLOCK_Q8_1, s.quantize_q8_1, s.dequantize_q8_1),
    GgmlType("q2k", 10, k.QK_K, k.BLOCK_Q2_K, k.quantize_q2_k, k.dequantize_q2_k),
    GgmlType("q3k", 11, k.QK_K, k.BLOCK_Q3_K, k.quantize_q3_k, k.dequantize_q3_k),
    GgmlType("q4k", 12, k.QK_K, k.BLOCK_Q4_K, k.quantize_q4_k, k.dequantize_q4_k),
    GgmlType("q5k", 13, k.QK_K, k.BLOCK_Q5_K, k.quantize_q5_k, k.dequantize_q5_k),
    GgmlType("q6k", 14, k.QK_K, k.BLOCK_Q6_K, k.quantize_q6_k, k.dequantize_q6_k),
    GgmlType("q8k", 15, k.QK_K, k.BLOCK_Q8_K, k.quantize_q8_k, k.dequantize_q8_k),
    GgmlType("iq4_nl", 20, iq.QK, iq.BLOCK_IQ4_NL, iq.quantize_iq4_nl, iq.dequantize_iq4_nl),
    GgmlType("iq4_xs", 23, iq.QK_K, iq.BLOCK_IQ4_XS, iq.quantize_iq4_xs, iq.dequantize_iq4_xs),
    _float_type("bf16", 30, ml_dtypes.bfloat16),
    GgmlType("mxfp4", 39, iq.QK, iq.BLOCK_MXFP4, iq.quantize_mxfp4, iq.dequantize_mxfp4),
)

#: name -> GgmlType, in ggml's type order.
GGML_TYPES: dict[str, GgmlType] = {t.name: t for t in _TYPES}
#: ggml type id -> GgmlType.
GGML_TYPE_IDS: dict[int, GgmlType] = {t.type_id: t for t in _TYPES}

#: Values converted per step: bounds the temporaries of big tensors (and keeps them in cache).
_CHUNK_VALUES = 1 << 20


class GgmlName(str):
    """A GGML type's name, candle's spelling ("q4k", what str() gives), equal
    to every spelling of the same type: ggml's ("Q4_K") and candle-pyo3's
    ("Q4K") too. It hashes as candle's spelling."""

    __slots__ = ()

    def __eq__(self, other):
        if not isinstance(other, str):
            return NotImplemented
        return str.__eq__(self, other) or GGML_TYPES.get(_canonical(other)) is GGML_TYPES.get(str(self))

    def __ne__(self, other):
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    __hash__ = str.__hash__


def _canonical(name: str) -> str:
    return name.lower().replace("_k", "k")


def get_ggml_type(name) -> GgmlType:
    """The type called ``name``: candle's spelling ("q4k") or ggml's ("Q4_K")."""
    if isinstance(name, GgmlType):
        return name
    found = GGML_TYPES.get(_canonical(str(name)))
    if found is None:
        raise DTypeError(f"unknown GGML type {name!r} (known: {', '.join(GGML_TYPES)})")
    return found


def check_rows(shape: tuple, ggml_type: GgmlType) -> None:
    """Rows (the last dim) must hold whole blocks."""
    row = shape[-1] if shape else 1
    if row % ggml_type.block_size:
        raise ShapeError(
            f"{ggml_type.name} stores rows in blocks of {ggml_type.block_size} values: the last dim of "
            f"shape {shape} ({row}) is not a multiple of {ggml_type.block_size}"
        )


def check_nbytes(nbytes: int, shape: tuple, ggml_type: GgmlType) -> None:
    """Blocks of ``nbytes`` must hold a tensor of ``shape`` exactly."""
    expected = ggml_type.nbytes(math.prod(shape))
    if nbytes != expected:
        raise ShapeError(f"{ggml_type.name} data of shape {shape} takes {expected} bytes, got {nbytes}")


def check_blocks(data, shape: tuple, ggml_type: GgmlType) -> np.ndarray:
    """``data`` as the flat uint8 blocks of a tensor of ``shape``, or a clear error."""
    check_rows(shape, ggml_type)
    data = np.asarray(data)
    if data.dtype != np.uint8:
        raise DTypeError(f"quantized data must be uint8 bytes, got {data.dtype}")
    check_nbytes(data.size, shape, ggml_type)
    return data.reshape(-1)


def quantize_array(x, ggml_type) -> np.ndarray:
    """The blocks of ``x`` (any float array, rows along its last dim) in
    ``ggml_type``, as a flat uint8 array."""
    t = get_ggml_type(ggml_type)
    x = np.asarray(x, dtype=np.float32)
    check_rows(x.shape, t)
    values = np.ascontiguousarray(x).reshape(-1, t.block_size)
    out = np.empty(len(values), t.block)
    step = _CHUNK_VALUES // t.block_size
    with np.errstate(all="ignore"):  # as in ggml, NaN/inf inputs give meaningless blocks, not warnings
        for start in range(0, len(values), step):
            out[start:start + step] = t.quantize(values[start:start + step])
    return out.view(np.uint8)


def dequantize_array(data: np.ndarray, ggml_type, shape) -> np.ndarray:
    """Float32 values of shape ``shape`` from the blocks in ``data`` (uint8)."""
    t = get_ggml_type(ggml_type)
    shape = tuple(shape)
    blocks = np.ascontiguousarray(check_blocks(data, shape, t)).view(t.block)
    out = np.empty((len(blocks), t.block_size), np.float32)
    step = _CHUNK_VALUES // t.block_size
    with np.errstate(all="ignore"):  # stored inf/NaN scales are data, not errors
        for start in range(0, len(blocks), step):
            out[start:start + step] = t.dequantize(blocks[start:start + step])
    return out.reshape(shape)
