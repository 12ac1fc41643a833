"""safetensors: memory-mapped and zero-copy on cpu, read lazily; sharded
checkpoints; writing.

A file is ``N`` (u64, little-endian), ``N`` bytes of JSON header, then the
data. The header maps each tensor name to ``{"dtype", "shape", "data_offsets":
[begin, end]}`` (offsets into the data) and may hold ``"__metadata__"``, a
str -> str mapping that becomes ``TensorFile.metadata``. The header is checked
before any tensor is made: at most 100 MB and inside the file, UTF-8 JSON
without duplicate names, known dtypes, shapes of at most 32 non-negative ints
whose byte size equals the tensor's byte range, and byte ranges that tile the
data exactly (no gap, no overlap, nothing past the end of the file), as the
reference implementation requires. Any violation is a FormatError naming the
file, the offset and the reason.

Reading maps the file once (``mmap=False`` reads it into memory instead); a
tensor is made on first access as a view of the map (no copy, no memory until
its pages are touched). Data at an offset that is not a multiple of its item
size (never so in files the reference writer makes) is copied instead.

Dtypes. BOOL U8 U32 I16 I32 I64 BF16 F16 F32 F64 are candle-api's own. The
others are widened when read to the
smallest candle-api dtype of the same kind that holds every value exactly:

    I8 -> i16     U16 -> u32     U64 -> i64 (a value above 2**63-1 is a FormatError)
    F8_E4M3, F8_E5M2, F8_E4M3FNUZ, F8_E5M2FNUZ -> f16
    F8_E8M0 -> bf16 (its powers of two reach 2**127, beyond f16)

The packed sub-byte floats (F4, F6_E2M3, F6_E3M2) and C64 have no candle-api
equivalent: such files open, and reading one of those tensors is a FormatError.

Sharded checkpoints: a path ending in ``.json`` is an index
(``model.safetensors.index.json``) whose ``weight_map`` maps each tensor name
to a shard file in the index's folder; a shard is opened when one of its
tensors is first read. The index's ``metadata`` object becomes
``TensorFile.metadata``.

Writing follows the reference writer: ``__metadata__`` first, tensors sorted by
decreasing item size then name, the header padded with spaces so the data
starts at a multiple of 8 (every tensor is then aligned and maps zero-copy),
written to a temporary file renamed over the target.
"""

from __future__ import annotations

import json
import math
from functools import partial
from pathlib import Path
from typing import NamedTuple

import numpy as np

from candle_api.errors import FormatError
from candle_api.hooks import FormatSpec, hookimpl
from candle_api.io import TensorFile

from ._common import (MappedFile, brief, check_shape, json_object, numpy_dtype, open_sharded_index,
                      tensor_items, to_candle)
from .atomic import atomic_write

#: The largest header (and index file) read, as in the reference implementation.
MAX_HEADER = 100_000_000

# safetensors dtype -> (bits per element, numpy type name; None: no numpy type)
_DTYPES = {
    "BOOL": (8, "bool_"), "U8": (8, "uint8"), "I8": (8, "int8"),
    "U16": (16, "uint16"), "I16": (16, "int16"), "F16": (16, "float16"), "BF16": (16, "bfloat16"),
    "U32": (32, "uint32"), "I32": (32, "int32"), "F32": (32, "float32"),
    "U64": (64, "uint64"), "I64": (64, "int64"), "F64": (64, "float64"), "C64": (64, "complex64"),
    "F8_E4M3": (8, "float8_e4m3fn"), "F8_E5M2": (8, "float8_e5m2"), "F8_E4M3FNUZ": (8, "float8_e4m3fnuz"),
    "F8_E5M2FNUZ": (8, "float8_e5m2fnuz"), "F8_E8M0": (8, "float8_e8m0fnu"),
    "F4": (4, None), "F6_E2M3": (6, None), "F6_E3M2": (6, None),
}
# candle-api dtype -> safetensors dtype, for writing
_WRITE = {"bool": "BOOL", "u8": "U8", "u32": "U32", "i16": "I16", "i32": "I32", "i64": "I64",
          "bf16": "BF16", "f16": "F16", "f32": "F32", "f64": "F64"}


class _Entry(NamedTuple):
    dtype: str
    shape: tuple
    begin: int  # byte range in the data section
    end: int


# ---- reading -----------------------------------------------------------------------------------
def _metadata(value, path) -> dict:
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise FormatError(path, 8, f"__metadata__ must map str to str, got {brief(value)}")
    return value


def _is_offset(x) -> bool:
    return type(x) is int and x >= 0


def _entry(name: str, value, path) -> _Entry:
    if not isinstance(value, dict) or not {"dtype", "shape", "data_offsets"} <= value.keys():
        raise FormatError(path, 8, f"{name!r}: expected an object with dtype, shape and data_offsets, "
                                   f"got {brief(value)}")
    dtype, offsets = value["dtype"], value["data_offsets"]
    if not isinstance(dtype, str) or dtype not in _DTYPES:
        raise FormatError(path, 8, f"{name!r}: unknown dtype {brief(dtype)}")
    shape = check_shape(value["shape"], path, 8, name)
    if (not isinstance(offsets, list) or len(offsets) != 2 or not all(map(_is_offset, offsets))
            or offsets[0] > offsets[1]):
        raise FormatError(path, 8, f"{name!r}: data_offsets {brief(offsets)} is not [begin, end] "
                                   "with 0 <= begin <= end")
    bits = math.prod(shape) * _DTYPES[dtype][0]
    if bits % 8 or bits // 8 != offsets[1] - offsets[0]:
        raise FormatError(path, 8, f"{name!r}: shape {list(shape)} of {dtype} is {bits / 8:g} bytes but "
                                   f"data_offsets {offsets} span {offsets[1] - offsets[0]}")
    return _Entry(dtype, shape, offsets[0], offsets[1])


def _check_tiling(entries: dict, data_start: int, data_size: int, path) -> None:
    """The byte ranges must cover the data exactly, one after another."""
    end = 0
    for name, e in sorted(entries.items(), key=lambda item: (item[1].begin, item[1].end)):
        if e.begin != end:
            problem = "overlaps the previous tensor" if e.begin < end else "leaves a gap"
            raise FormatError(path, data_start + end, f"{name!r}: data_offsets [{e.begin}, {e.end}] {problem} "
                                                      f"(expected it to begin at {end})")
        end = e.end
    if end != data_size:
        raise FormatError(path, data_start + min(end, data_size),
                          f"the tensors cover {end} bytes of data but the file holds {data_size}")


def _header(mf: MappedFile) -> tuple[dict, dict, int]:
    """(name -> _Entry, metadata, offset of the data) of a safetensors file."""
    if mf.size < 8:
        raise FormatError(mf.path, 0, f"{mf.size}-byte file is too short for the 8-byte header length")
    n = int.from_bytes(mf.read(0, 8, "header length"), "little")
    if n > MAX_HEADER:
        raise FormatError(mf.path, 0, f"header length {n} exceeds the {MAX_HEADER}-byte limit")
    raw = mf.read(8, n, "header")
    if not raw.startswith(b"{"):
        raise FormatError(mf.path, 8, "header does not start with '{'")
    header = json_object(raw, mf.path, 8, "header")
    metadata = _metadata(header.pop("__metadata__", {}), mf.path)
    entries = {name: _entry(name, value, mf.path) for name, value in header.items()}
    _check_tiling(entries, 8 + n, mf.size - 8 - n, mf.path)
    return entries, metadata, 8 + n


def _tensor(mf: MappedFile, name: str, entry: _Entry, data_start: int):
    offset = data_start + entry.begin
    type_name = _DTYPES[entry.dtype][1]
    if type_name is None:
        raise FormatError(mf.path, offset, f"{name!r}: dtype {entry.dtype} (packed sub-byte floats) has no "
                                           "candle-api equivalent")
    dtype = numpy_dtype(type_name)
    if dtype is None:
        raise FormatError(mf.path, offset, f"{name!r}: dtype {entry.dtype} needs an ml_dtypes with {type_name}")
    return to_candle(mf.array(offset, dtype, entry.shape, repr(name)), mf.path, offset, name)


def _open(path, mmap: bool = True) -> TensorFile:
    mf = MappedFile(path, mmap)
    entries, metadata, data_start = _header(mf)
    tensors = {name: partial(_tensor, mf, name, entry, data_start) for name, entry in entries.items()}
    return TensorFile(tensors, metadata, "safetensors", path)


# ---- sharded checkpoints -----------------------------------------------------------------------
def load(path, mmap: bool = True) -> TensorFile:
    path = Path(path)
    if path.name.lower().endswith(".json"):
        return open_sharded_index(path, partial(_open, mmap=mmap), "safetensors")
    return _open(path, mmap)


def sniff(head: bytes, path) -> bool:
    return len(head) > 8 and head[8:9] == b"{" and int.from_bytes(head[:8], "little") <= MAX_HEADER


# ---- writing ---------------------------------------------------------------------------------------
def save(tensors, path, metadata=None) -> None:
    if metadata and not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise TypeError(f"{path}: safetensors metadata maps str to str, got {brief(dict(metadata))}")
    items = sorted(tensor_items(tensors, path), key=lambda item: (-item[1].dtype.itemsize, item[0]))
    header: dict = {"__metadata__": dict(metadata)} if metadata else {}
    begin = 0
    for name, t in items:
        if name == "__metadata__":
            raise ValueError(f"{path}: '__metadata__' is reserved and cannot name a tensor")
        end = begin + math.prod(t.shape) * t.dtype.itemsize
        header[name] = {"dtype": _WRITE[t.dtype.name], "shape": list(t.shape), "data_offsets": [begin, end]}
        begin = end
    raw = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
    raw += b" " * (-len(raw) % 8)  # 8 + len(raw) is then a multiple of 8
    with atomic_write(path) as f:
        f.write(len(raw).to_bytes(8, "little"))
        f.write(raw)
        for _, t in items:  # one tensor in memory at a time
            f.write(np.ascontiguousarray(t.numpy()).reshape(-1).view(np.uint8).data)


@hookimpl
def candle_api_formats():
    return [FormatSpec(
        name="safetensors",
        extensions=(".safetensors", ".safetensors.index.json"),
        sniff=sniff, load=load, save=save,
        description="safetensors (memory-mapped, lazy), sharded *.safetensors.index.json",
    )]
