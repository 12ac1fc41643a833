"""GGUF (llama.cpp's model format, versions 1-3) and the legacy GGML/GGJT
files that preceded it.

Reading memory-maps the file (``mmap=False`` reads it into memory instead):
every tensor comes back as a :class:`candle_api.quantized.QTensor`
(F32/F16/BF16 included, as in Candle's ``load_gguf``) whose ``data`` is a
zero-copy view of the map. The parser
checks every count, length, type id, dimension and data range against the
file before using it, so a malformed file raises
:class:`candle_api.errors.FormatError` (path, offset, reason) and never
allocates more than the file could hold.

GGUF metadata comes back as Python values (arrays as lists; strings decoded
as UTF-8, invalid bytes kept with ``surrogateescape`` so they write back
unchanged), so the exact integer and float widths of the file are not kept.
Writing produces GGUF v3 and types Python values as gguf-py does, widened
where a value needs it: ``bool`` -> BOOL, ``int`` -> INT32 (INT64 or UINT64
when out of range), ``float`` -> FLOAT32, ``str``/``bytes`` -> STRING, lists
and tuples -> ARRAY (element type from the elements; an empty list is an
empty INT32 array). NumPy scalars and 1-d arrays force their own type
(``np.uint32(8192)``, ``np.array([...], np.float64)``): llama.cpp checks the
types of the keys it reads (most counts are UINT32), so pass those where it
expects something other than the defaults.

Legacy files (magic ``ggml`` unversioned, ``ggmf`` v1, ``ggjt`` v1-v3) are
read with llama.cpp's LLaMA layout: hyper-parameters, vocabulary (with
scores from ``ggmf`` on), then tensors; metadata is ``{"magic", "version",
"hparams", "vocab", "scores"}``.
"""

from __future__ import annotations

import math
import struct
from typing import NoReturn

import numpy as np

from candle_api.errors import DTypeError, FormatError, ShapeError
from candle_api.hooks import FormatSpec, hookimpl
from candle_api.io import TensorFile
from candle_api.quantized import GGML_TYPE_IDS, GGML_TYPES, GgmlType, QTensor
from candle_api.tensor import Tensor

from ._common import MappedFile
from .atomic import atomic_write

GGUF_MAGIC = b"GGUF"
GGUF_VERSION = 3
GGUF_DEFAULT_ALIGNMENT = 32
#: ggml tensors have at most 4 dims.
MAX_DIMS = 4
#: Metadata values (array elements included) one file may hold: a bound on
#: the Python objects a hostile file can make us build.
MAX_METADATA_VALUES = 1 << 24
#: How deep metadata arrays may nest (real files use 1).
MAX_NESTING = 8
#: Bound on the product of a tensor's non-zero dims, so that its f32 values
#: always fit in a NumPy array even when a zero dim makes it empty.
MAX_ELEMENTS = 1 << 60

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_F32 = struct.Struct("<f")

# GGUF metadata value types
U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
_TYPE_NAMES = ("uint8", "int8", "uint16", "int16", "uint32", "int32", "float32", "bool", "string", "array",
               "uint64", "int64", "float64")
_SCALARS = {t: struct.Struct(f) for t, f in ((U8, "<B"), (I8, "<b"), (U16, "<H"), (I16, "<h"), (U32, "<I"),
                                             (I32, "<i"), (F32, "<f"), (BOOL, "<B"), (U64, "<Q"), (I64, "<q"),
                                             (F64, "<d"))}
_NUMPY = {t: np.dtype(s.format) for t, s in _SCALARS.items()}
_NUMPY_TYPES = {dtype: t for t, dtype in _NUMPY.items() if t != BOOL} | {np.dtype(np.bool_): BOOL}

# GGML types candle-api does not decode, named in errors.
_OTHER_GGML_TYPES = {
    4: "Q4_2", 5: "Q4_3", 16: "IQ2_XXS", 17: "IQ2_XS", 18: "IQ3_XXS", 19: "IQ1_S", 21: "IQ3_S",
    22: "IQ2_S", 24: "I8", 25: "I16", 26: "I32", 27: "I64", 28: "F64", 29: "IQ1_M",
    31: "Q4_0_4_4", 32: "Q4_0_4_8", 33: "Q4_0_8_8", 34: "TQ1_0", 35: "TQ2_0", 36: "IQ4_NL_4_4",
    37: "IQ4_NL_4_8", 38: "IQ4_NL_8_8", 40: "NVFP4", 41: "Q1_0",
}

# Legacy magics (as the bytes appear in the file) -> (name, accepted versions; () = unversioned)
_GGML_MAGICS = {b"lmgg": ("ggml", ()), b"fmgg": ("ggmf", (1,)), b"tjgg": ("ggjt", (1, 2, 3))}
_GGML_HPARAMS = ("n_vocab", "n_embd", "n_mult", "n_head", "n_layer", "n_rot", "ftype")
# Early llama.cpp files stored some types in older block layouts, which llama.cpp
# itself stopped reading: f32 scales before ggjt v3, interleaved nibbles before
# ggjt v2. Generations: ggml 0, ggmf v1 1, ggjt v1-v3 2-4.
_LAYOUT_SINCE = {"q4_0": (4, "ggjt v3"), "q4_1": (4, "ggjt v3"), "q8_0": (4, "ggjt v3"),
                 "q5_0": (3, "ggjt v2"), "q5_1": (3, "ggjt v2")}


# ---- bounds-checked reading -------------------------------------------------------------

class _Cursor:
    """Little-endian reads from ``buf`` that never pass its end: a short or
    malformed read raises FormatError naming the file and the offset."""

    def __init__(self, buf, path):
        self.buf, self.path, self.pos, self.size = buf, path, 0, len(buf)

    @property
    def left(self) -> int:
        return self.size - self.pos

    def fail(self, reason: str, at: int | None = None) -> NoReturn:
        raise FormatError(self.path, self.pos if at is None else at, reason)

    def take(self, n: int, what: str) -> int:
        """Claims the next ``n`` bytes and returns their offset."""
        if n > self.left:
            self.fail(f"file truncated: {what} needs {n} bytes, {self.left} left")
        at = self.pos
        self.pos += n
        return at

    def scalar(self, fmt: struct.Struct, what: str):
        return fmt.unpack_from(self.buf, self.take(fmt.size, what))[0]

    def count(self, fmt: struct.Struct, what: str, min_item_bytes: int) -> int:
        """A count, checked against the bytes left before anything is built for it."""
        at = self.pos
        n = self.scalar(fmt, what)
        if n * min_item_bytes > self.left:
            self.fail(f"{what} {n} cannot fit in the {self.left} bytes left", at)
        return n

    def text(self, n: int, what: str) -> str:
        at = self.take(n, what)
        return bytes(self.buf[at:at + n]).decode("utf-8", "surrogateescape")

    def string(self, len_fmt: struct.Struct, what: str) -> str:
        return self.text(self.scalar(len_fmt, f"{what} length"), what)

    def array(self, dtype: np.dtype, n: int, what: str) -> np.ndarray:
        return np.frombuffer(self.buf, dtype, n, self.take(n * dtype.itemsize, what))


def _ggml_type(cur: _Cursor, type_id: int, name: str, at: int) -> GgmlType:
    found = GGML_TYPE_IDS.get(type_id)
    if found is None:
        other = _OTHER_GGML_TYPES.get(type_id)
        cur.fail(f"tensor {name!r} has GGML type {other} ({type_id}), which candle-api does not read" if other
                 else f"tensor {name!r} has unknown GGML type id {type_id}", at)
    return found


def _shape(cur: _Cursor, dims: list[int], ggml_type: GgmlType, name: str, at: int) -> tuple:
    """The logical shape of ggml dims (innermost first), checked."""
    if any(d >= 1 << 63 for d in dims) or math.prod(max(d, 1) for d in dims) >= MAX_ELEMENTS:
        cur.fail(f"tensor {name!r} has impossible dims {dims}", at)
    row = dims[0] if dims else 1
    if row % ggml_type.block_size:
        cur.fail(f"tensor {name!r}: rows of {row} values are not whole {ggml_type.name} blocks of "
                 f"{ggml_type.block_size}", at)
    return tuple(reversed(dims))


def _add_tensor(cur: _Cursor, tensors: dict, name: str, at: int, placement: tuple) -> None:
    if name in tensors:
        cur.fail(f"duplicate tensor name {name!r}", at)
    tensors[name] = placement


def _tensor_file(path, parse, fmt: str, mmap: bool) -> TensorFile:
    """Maps the file (or reads it: ``mmap=False``), parses it into (metadata,
    name -> (type, shape, data offset)) and wraps each tensor as a QTensor over
    its bytes, built on first access."""
    buf = MappedFile(path, mmap).buf
    metadata, tensors = parse(_Cursor(buf, path))

    def entry(ggml_type: GgmlType, shape: tuple, start: int):
        nbytes = ggml_type.nbytes(math.prod(shape))
        return lambda: QTensor(np.frombuffer(buf, np.uint8, nbytes, start), shape, ggml_type)

    return TensorFile({name: entry(*placement) for name, placement in tensors.items()}, metadata, fmt, path)


# ---- GGUF reading -----------------------------------------------------------------------

class _Metadata:
    """Reads GGUF metadata values, spending a budget of MAX_METADATA_VALUES."""

    def __init__(self, cur: _Cursor, size_t: struct.Struct):
        self.cur, self.size_t, self.budget = cur, size_t, MAX_METADATA_VALUES

    def spend(self, n: int, at: int) -> None:
        self.budget -= n
        if self.budget < 0:
            self.cur.fail(f"metadata holds more than {MAX_METADATA_VALUES} values", at)

    def value(self, vtype: int, what: str, depth: int = 0):
        at = self.cur.pos
        self.spend(1, at)
        fmt = _SCALARS.get(vtype)
        if fmt is not None:
            value = self.cur.scalar(fmt, what)
            if vtype != BOOL:
                return value
            if value > 1:
                self.cur.fail(f"{what}: bool value {value} is neither 0 nor 1", at)
            return bool(value)
        if vtype == STRING:
            return self.cur.string(self.size_t, what)
        if vtype == ARRAY:
            return self.array(what, depth)
        self.cur.fail(f"{what}: unknown value type {vtype}", at - 4)

    def array(self, what: str, depth: int) -> list:
        at = self.cur.pos
        if depth == MAX_NESTING:
            self.cur.fail(f"{what}: arrays nested deeper than {MAX_NESTING}", at)
        itype = self.cur.scalar(_U32, f"{what} element type")
        if itype in _SCALARS:
            item_bytes = _SCALARS[itype].size
        elif itype in (STRING, ARRAY):
            item_bytes = self.size_t.size + (4 if itype == ARRAY else 0)
        else:
            self.cur.fail(f"{what}: unknown array element type {itype}", at)
        n = self.cur.count(self.size_t, f"{what} length", item_bytes)
        if itype == STRING:
            self.spend(n, at)
            return [self.cur.string(self.size_t, what) for _ in range(n)]
        if itype == ARRAY:
            return [self.value(ARRAY, f"{what}[{i}]", depth + 1) for i in range(n)]
        self.spend(n, at)
        values = self.cur.array(_NUMPY[itype], n, what)
        if itype == BOOL:
            if n and values.max() > 1:
                self.cur.fail(f"{what}: bool values must be 0 or 1", at)
            values = values.astype(bool)
        return values.tolist()


def _gguf_version(cur: _Cursor) -> int:
    if bytes(cur.buf[cur.take(4, "magic"):4]) != GGUF_MAGIC:
        cur.fail("not a GGUF file (bad magic)", 0)
    version = cur.scalar(_U32, "version")
    if version not in (1, 2, 3):
        swapped = struct.unpack(">I", struct.pack("<I", version))[0]
        cur.fail(f"big-endian GGUF (version {swapped}) is not supported" if swapped in (1, 2, 3)
                 else f"unsupported GGUF version {version}", 4)
    return version


def _gguf_metadata(cur: _Cursor, size_t: struct.Struct, n_kv: int) -> tuple[dict, int]:
    """(metadata, alignment)"""
    values = _Metadata(cur, size_t)
    metadata: dict = {}
    alignment = GGUF_DEFAULT_ALIGNMENT
    for _ in range(n_kv):
        at = cur.pos
        key = cur.string(size_t, "metadata key")
        if key in metadata:
            cur.fail(f"duplicate metadata key {key!r}", at)
        vtype = cur.scalar(_U32, f"type of {key!r}")
        metadata[key] = values.value(vtype, repr(key))
        if key == "general.alignment":
            alignment = metadata[key]
            if vtype != U32 or alignment == 0 or alignment & (alignment - 1):
                cur.fail(f"general.alignment must be a uint32 power of two, got {_TYPE_NAMES[vtype]} {alignment!r}",
                         at)
    return metadata, alignment


def _gguf_tensor_info(cur: _Cursor, size_t: struct.Struct) -> tuple:
    """(name, type, shape, offset in the data section, offset of the info)"""
    at = cur.pos
    name = cur.string(size_t, "tensor name")
    n_dims = cur.scalar(_U32, f"dim count of tensor {name!r}")
    if n_dims > MAX_DIMS:
        cur.fail(f"tensor {name!r} has {n_dims} dims; ggml tensors have at most {MAX_DIMS}", at)
    dims = [cur.scalar(size_t, f"dims of tensor {name!r}") for _ in range(n_dims)]
    ggml_type = _ggml_type(cur, cur.scalar(_U32, f"type of tensor {name!r}"), name, at)
    offset = cur.scalar(_U64, f"data offset of tensor {name!r}")
    return name, ggml_type, _shape(cur, dims, ggml_type, name, at), offset, at


def _parse_gguf(cur: _Cursor):
    size_t = _U32 if _gguf_version(cur) == 1 else _U64  # v1 stored lengths and counts as u32
    n_tensors = cur.count(size_t, "tensor count", size_t.size + 4 + 4 + 8)
    n_kv = cur.count(size_t, "metadata count", size_t.size + 4 + 1)
    metadata, alignment = _gguf_metadata(cur, size_t, n_kv)
    infos = [_gguf_tensor_info(cur, size_t) for _ in range(n_tensors)]
    data_start = -(-cur.pos // alignment) * alignment
    tensors: dict = {}
    for name, ggml_type, shape, offset, at in infos:
        end = data_start + offset + ggml_type.nbytes(math.prod(shape))
        if offset % alignment:
            cur.fail(f"tensor {name!r}: data offset {offset} is not a multiple of the alignment {alignment}", at)
        if end > cur.size:
            cur.fail(f"tensor {name!r}: data ends at byte {end}, past the end of the file ({cur.size} bytes)", at)
        _add_tensor(cur, tensors, name, at, (ggml_type, shape, data_start + offset))
    return metadata, tensors


def load_gguf(path, mmap: bool = True) -> TensorFile:
    """A GGUF file as a lazy name -> QTensor mapping with its metadata."""
    return _tensor_file(path, _parse_gguf, "gguf", mmap)


# ---- legacy GGML/GGJT reading -----------------------------------------------------------

def _ggml_version(cur: _Cursor) -> tuple[str, int | None]:
    """(magic name, version or None for unversioned files)"""
    kind, versions = _GGML_MAGICS.get(bytes(cur.buf[cur.take(4, "magic"):4]), (None, ()))
    if kind is None:
        cur.fail("not a GGML/GGMF/GGJT file (bad magic)", 0)
    if not versions:
        return kind, None
    version = cur.scalar(_U32, "version")
    if version not in versions:
        cur.fail(f"unsupported {kind} version {version}", 4)
    return kind, version


def _ggml_vocab(cur: _Cursor, n_vocab: int, scored: bool) -> tuple[list, list]:
    if n_vocab * (4 + 4 * scored) > cur.left:
        cur.fail(f"vocabulary of {n_vocab} tokens cannot fit in the {cur.left} bytes left")
    vocab, scores = [], []
    for _ in range(n_vocab):
        vocab.append(cur.string(_U32, "vocabulary token"))
        if scored:
            scores.append(cur.scalar(_F32, "vocabulary score"))
    return vocab, scores


def _ggml_tensor(cur: _Cursor, kind: str, generation: int) -> tuple:
    """(name, at, (type, shape, data offset)) of the next tensor record."""
    at = cur.pos
    n_dims, name_len, type_id = (cur.scalar(_U32, "tensor header") for _ in range(3))
    if not 1 <= n_dims <= MAX_DIMS:
        cur.fail(f"tensor has {n_dims} dims; ggml tensors have 1 to {MAX_DIMS}", at)
    dims = [cur.scalar(_U32, "tensor dims") for _ in range(n_dims)]
    name = cur.text(name_len, "tensor name")
    ggml_type = _ggml_type(cur, type_id, name, at)
    since, first = _LAYOUT_SINCE.get(ggml_type.name, (0, ""))
    if generation < since:
        cur.fail(f"tensor {name!r} uses the {ggml_type.name} block layout of llama.cpp files before {first}, "
                 "which llama.cpp and candle-api no longer read: convert the model again", at)
    shape = _shape(cur, dims, ggml_type, name, at)
    if kind == "ggjt":
        cur.take(-cur.pos % 32, f"padding before tensor {name!r}")  # ggjt aligns data to 32 bytes
    start = cur.take(ggml_type.nbytes(math.prod(shape)), f"data of tensor {name!r}")
    return name, at, (ggml_type, shape, start)


def _parse_ggml(cur: _Cursor):
    kind, version = _ggml_version(cur)
    generation = (version or 0) + (kind == "ggjt")
    hparams = {name: cur.scalar(_U32, f"hyper-parameter {name}") for name in _GGML_HPARAMS}
    scored = kind != "ggml"  # scores arrived with ggmf
    vocab, scores = _ggml_vocab(cur, hparams["n_vocab"], scored)
    tensors: dict = {}
    while cur.left:
        _add_tensor(cur, tensors, *_ggml_tensor(cur, kind, generation))
    metadata = {"magic": kind, "version": version, "hparams": hparams, "vocab": vocab}
    if scored:
        metadata["scores"] = scores
    return metadata, tensors


def load_ggml(path, mmap: bool = True) -> TensorFile:
    """A legacy GGML/GGMF/GGJT file as a lazy name -> QTensor mapping."""
    return _tensor_file(path, _parse_ggml, "ggml", mmap)


# ---- GGUF writing -----------------------------------------------------------------------

def _int_type(lo: int, hi: int, what: str) -> int:
    if -(1 << 31) <= lo and hi < 1 << 31:
        return I32
    if -(1 << 63) <= lo and hi < 1 << 63:
        return I64
    if lo >= 0 and hi < 1 << 64:
        return U64
    held = str(lo) if lo == hi else f"both {lo} and {hi}"
    raise DTypeError(f"metadata {what}: no 64-bit GGUF integer type holds {held}")


def _common_type(values: list, what: str) -> int:
    """The GGUF value type all of ``values`` are stored as."""
    if all(isinstance(v, (str, bytes)) for v in values):
        return STRING
    if all(isinstance(v, np.generic) for v in values) and len({v.dtype for v in values}) == 1:
        vtype = _NUMPY_TYPES.get(values[0].dtype)
        if vtype is None:
            raise DTypeError(f"metadata {what}: GGUF has no value type for numpy {values[0].dtype}")
        return vtype
    if all(isinstance(v, bool) for v in values):
        return BOOL
    if all(isinstance(v, int) and not isinstance(v, (bool, np.generic)) for v in values):
        return _int_type(min(values), max(values), what)
    if all(isinstance(v, (int, float)) and not isinstance(v, (bool, np.generic)) for v in values):
        return F32
    if all(isinstance(v, (list, tuple, np.ndarray)) for v in values):
        return ARRAY
    kinds = sorted({type(v).__name__ for v in values})
    raise DTypeError(f"metadata {what}: cannot store {' and '.join(kinds)} values as one GGUF value type")


def _encode_string(value) -> bytes:
    raw = value.encode("utf-8", "surrogateescape") if isinstance(value, str) else bytes(value)
    return _U64.pack(len(raw)) + raw


def _encode_values(vtype: int, values: list, what: str) -> bytes:
    if vtype == STRING:
        return b"".join(_encode_string(v) for v in values)
    if vtype == ARRAY:
        return b"".join(_encode_array(v, what) for v in values)
    return np.asarray(values, dtype=_NUMPY[vtype]).tobytes()


def _encode_array(value, what: str) -> bytes:
    """Element type, length and elements of an ARRAY value."""
    if isinstance(value, np.ndarray) and value.ndim == 1 and value.dtype in _NUMPY_TYPES:
        vtype = _NUMPY_TYPES[value.dtype]
        return _U32.pack(vtype) + _U64.pack(len(value)) + value.astype(_NUMPY[vtype]).tobytes()
    items = list(value)
    vtype = _common_type(items, what) if items else I32
    return _U32.pack(vtype) + _U64.pack(len(items)) + _encode_values(vtype, items, what)


def _encode_kv(key: str, value) -> bytes:
    if not isinstance(key, str):
        raise TypeError(f"GGUF metadata keys are strings, got {key!r}")
    what = repr(key)
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value[()]
    if isinstance(value, (list, tuple, np.ndarray)):
        vtype, payload = ARRAY, _encode_array(value, what)
    else:
        vtype = _common_type([value], what)
        payload = _encode_values(vtype, [value], what)
    return _encode_string(key) + _U32.pack(vtype) + payload


def _tensor_payload(name, tensor) -> tuple[GgmlType, tuple, np.ndarray]:
    """(type, shape, bytes) to store for one entry."""
    if not isinstance(name, str):
        raise TypeError(f"GGUF tensor names are strings, got {name!r}")
    if isinstance(tensor, QTensor):
        ggml_type, shape, data = GGML_TYPES[tensor.ggml_dtype], tensor.shape, tensor.data
    elif isinstance(tensor, Tensor):
        if tensor.dtype not in ("f32", "f16", "bf16"):
            raise DTypeError(f"tensor {name!r}: GGUF stores f32, f16 and bf16 tensors (or QTensors), got "
                             f"{tensor.dtype}; convert it first")
        ggml_type, shape = GGML_TYPES[tensor.dtype.name], tensor.shape
        data = np.ascontiguousarray(tensor.numpy()).reshape(-1).view(np.uint8)
    else:
        raise TypeError(f"tensor {name!r}: GGUF stores Tensors and QTensors, got {type(tensor).__name__}")
    if len(shape) > MAX_DIMS:
        raise ShapeError(f"tensor {name!r} has shape {shape}; ggml tensors have at most {MAX_DIMS} dims")
    return ggml_type, shape, data


def _writer_alignment(metadata: dict) -> int:
    alignment = metadata.get("general.alignment", GGUF_DEFAULT_ALIGNMENT)
    if isinstance(alignment, bool) or not isinstance(alignment, (int, np.integer)) or not 0 < alignment < 1 << 32 \
            or alignment & (alignment - 1):
        raise ValueError(f"general.alignment must be a power of two below 2**32, got {alignment!r}")
    return int(alignment)


def _pad(n: int, alignment: int) -> bytes:
    return bytes(-n % alignment)


def save_gguf(tensors, path, metadata=None) -> None:
    """Writes a name -> Tensor/QTensor mapping and metadata as GGUF v3
    (atomically: the file is replaced only once it is complete, so a model
    mapped from ``path`` stays readable while it is rewritten)."""
    metadata = dict(metadata or {})
    alignment = _writer_alignment(metadata)
    if "general.alignment" in metadata:
        metadata["general.alignment"] = np.uint32(alignment)  # GGUF readers require a uint32
    header = [GGUF_MAGIC, _U32.pack(GGUF_VERSION), _U64.pack(len(tensors)), _U64.pack(len(metadata))]
    header += [_encode_kv(key, value) for key, value in metadata.items()]
    payloads, offset = [], 0
    for name, tensor in tensors.items():
        ggml_type, shape, data = _tensor_payload(name, tensor)
        header.append(_encode_string(name) + _U32.pack(len(shape)) + b"".join(_U64.pack(d) for d in reversed(shape))
                      + _U32.pack(ggml_type.type_id) + _U64.pack(offset))
        payloads.append(data)
        offset += data.nbytes + len(_pad(data.nbytes, alignment))
    head = b"".join(header)
    chunks = [head, _pad(len(head), alignment)]
    for data in payloads:
        chunks += [memoryview(data), _pad(data.nbytes, alignment)]
    with atomic_write(path) as f:
        for chunk in chunks:
            f.write(chunk)


# ---- the plugin -------------------------------------------------------------------------

@hookimpl
def candle_api_formats():
    return [
        FormatSpec(name="gguf", extensions=(".gguf",), sniff=lambda head, path: head[:4] == GGUF_MAGIC,
                   load=load_gguf, save=save_gguf,
                   description="llama.cpp GGUF v1-v3 (quantized tensors stay QTensor); writes v3"),
        FormatSpec(name="ggml", extensions=(".ggml",), sniff=lambda head, path: head[:4] in _GGML_MAGICS,
                   load=load_ggml, description="legacy llama.cpp GGML/GGMF/GGJT files (read only)"),
    ]
