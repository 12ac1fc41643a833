"""What the format plugins share: a read-only memory map (or an in-memory
copy) that hands out bounds-checked zero-copy arrays, zip members, shape
checks, the rule mapping dtypes that candle-api lacks onto ones it has, and
writing files atomically.

Everything here turns a malformed file into ``FormatError(path, offset, reason)``,
and opens files with ``candle_api.io.open_regular``, which refuses FIFOs and
devices (reading one would block or never end).
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import mmap
import os
import struct
import sys
import zipfile
import zlib
from collections import Counter
from functools import lru_cache, partial
from pathlib import Path, PurePosixPath
from typing import BinaryIO, Iterator

import ml_dtypes
import numpy as np

from candle_api.dtype import ALL_DTYPES
from candle_api.errors import DTypeError, FormatError
from candle_api.io import TensorFile, open_regular
from candle_api.layout import MAX_DIMS, Layout
from candle_api.ops.creation import from_numpy
from candle_api.tensor import Tensor


def brief(value, limit: int = 80) -> str:
    """repr(value) cut to ``limit`` characters, for error messages about hostile input."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


@contextlib.contextmanager
def format_errors(path, offset: int | None, what: str, errors: tuple[type[BaseException], ...]):
    """Turns ``errors`` raised by a parser we do not own (json, zipfile,
    numpy's npy header reader) into FormatError."""
    try:
        yield
    except FormatError:
        raise
    except errors as exc:
        raise FormatError(path, offset, f"{what}: {exc}") from None


def _no_duplicates(pairs):
    """json's hook for each object: a repeated name would make the file ambiguous."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        dup = next(k for k, count in Counter(k for k, _ in pairs).items() if count > 1)
        raise ValueError(f"duplicate name {brief(dup)}")
    return obj


def json_object(raw: bytes, path, offset: int, what: str) -> dict:
    """raw as a JSON object (UTF-8, no repeated names), or FormatError."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FormatError(path, offset + exc.start, f"{what} is not UTF-8") from None
    with format_errors(path, offset, f"{what} is not valid JSON", (ValueError, RecursionError)):
        value = json.loads(text, object_pairs_hook=_no_duplicates)
    if not isinstance(value, dict):
        raise FormatError(path, offset, f"{what} is a JSON {type(value).__name__}, not an object")
    return value



def _check_range(path, size: int, offset: int, nbytes: int, what: str) -> None:
    if offset < 0 or nbytes < 0 or offset + nbytes > size:
        raise FormatError(path, offset, f"{what}: {nbytes} bytes at offset {offset} run past "
                                        f"the end of the {size}-byte file")


#: Python 3.13+ can map without keeping a duplicate of the file's descriptor
#: (before, every live map holds one).
_MAP_OPTIONS = {"trackfd": False} if sys.version_info >= (3, 13) else {}


def _map(f: BinaryIO):
    """The open file mapped read-only (mmap refuses empty files: they are b"")."""
    if not os.fstat(f.fileno()).st_size:
        return b""
    return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ, **_MAP_OPTIONS)


class MappedFile:
    """A whole file mapped read-only, or with ``mmap=False`` read into memory
    once: a map dies with SIGBUS when another program truncates the file, a
    copy never touches the file again. Arrays viewed from it keep the map (or
    the copy) alive, so it is released when the last tensor sharing it is gone."""

    def __init__(self, path, mmap: bool = True):
        self.path = str(path)
        with open_regular(path) as f, format_errors(path, None, "cannot read", (OSError, ValueError)):
            self.buf = _map(f) if mmap else f.read()
        self.size = len(self.buf)

    def stream(self) -> BinaryIO:
        """A file object over the same bytes: the copy, or the file opened again."""
        return open_regular(self.path) if isinstance(self.buf, mmap.mmap) else io.BytesIO(self.buf)

    def read(self, offset: int, nbytes: int, what: str) -> bytes:
        _check_range(self.path, self.size, offset, nbytes, what)
        return bytes(self.buf[offset:offset + nbytes])

    def readinto(self, offset: int, out: np.ndarray, what: str) -> None:
        out[:] = self.array(offset, np.dtype(np.uint8), out.shape, what)

    def array(self, offset: int, dtype: np.dtype, shape: tuple, what: str, fortran: bool = False) -> np.ndarray:
        """A read-only view of the file. Data at an offset that is not a multiple
        of the item size is copied instead: kernels expect aligned elements."""
        _check_range(self.path, self.size, offset, math.prod(shape) * dtype.itemsize, what)
        if 0 in shape:
            return np.empty(shape, dtype)
        arr = np.ndarray(shape, dtype, buffer=self.buf, offset=offset, order="F" if fortran else "C")
        return arr.copy(order="K") if offset % dtype.alignment else arr


class FileReader:
    """Reads a file as MappedFile does, opening it for each read: nothing is
    mapped, and no descriptor is held between reads (nor kept alive by an
    exception a caller stores)."""

    def __init__(self, path):
        self.path = str(path)
        with open_regular(path) as f:
            self.size = os.fstat(f.fileno()).st_size

    def stream(self) -> BinaryIO:
        return open_regular(self.path)

    def read(self, offset: int, nbytes: int, what: str) -> bytes:
        out = np.empty(nbytes, np.uint8)
        self.readinto(offset, out, what)
        return out.tobytes()

    def readinto(self, offset: int, out: np.ndarray, what: str) -> None:
        _check_range(self.path, self.size, offset, out.nbytes, what)
        with self.stream() as f, format_errors(self.path, offset, what, (OSError,)):
            f.seek(offset)
            got = f.readinto(out.data) or 0
        if got != out.nbytes:
            raise FormatError(self.path, offset, f"{what}: the file ends after {got} of {out.nbytes} bytes "
                                                 "(it shrank since it was opened)")


def read_whole(path, limit: int, what: str) -> bytes:
    """The bytes of a file read whole (an index, an ONNX model): at most ``limit``."""
    with open_regular(path) as f, format_errors(path, None, "cannot read", (OSError,)):
        size = os.fstat(f.fileno()).st_size
        if size > limit:
            raise FormatError(path, 0, f"{size}-byte {what} exceeds the {limit}-byte limit")
        return f.read(size)


# ---- zip archives (npz, PyTorch's) -----------------------------------------------------------
#: What zipfile and zlib raise on a corrupt archive (NotImplementedError: zip
#: features zipfile lacks, such as newer versions, patched data, strong encryption).
ZIP_ERRORS = (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, struct.error, OverflowError,
              NotImplementedError)
#: deflate's largest expansion ratio: a member claiming more is corrupt.
MAX_DEFLATE_RATIO = 1032
_CHUNK = 1 << 24  # bytes inflated at a time, and most bytes one step produces


def zip_directory(source: MappedFile | FileReader) -> list[zipfile.ZipInfo]:
    """The members of the zip archive in ``source`` (only its directory is read:
    members are read with :func:`zip_member`)."""
    with source.stream() as stream, format_errors(source.path, None, "not a readable zip archive", ZIP_ERRORS), \
            zipfile.ZipFile(stream) as zf:
        return zf.infolist()


def check_zip_member(info: zipfile.ZipInfo, file_size: int, path) -> None:
    """A member we can read: stored or deflated, unencrypted, inside the file,
    and claiming no more than deflate's largest expansion, so that its size
    can never make us allocate more than the file could hold."""
    def bad(reason: str) -> FormatError:
        return FormatError(path, info.header_offset, f"member {info.filename!r}: {reason}")

    if info.flag_bits & 1:
        raise bad("is encrypted")
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise bad(f"compression method {info.compress_type} is not stored or deflated")
    if not 0 <= info.header_offset <= info.header_offset + info.compress_size <= file_size:
        raise bad(f"{info.compress_size} compressed bytes at {info.header_offset} run past the end of the "
                  f"{file_size}-byte file")
    ratio = 1 if info.compress_type == zipfile.ZIP_STORED else MAX_DEFLATE_RATIO
    if info.file_size > info.compress_size * ratio:
        raise bad(f"claims {info.file_size} bytes from {info.compress_size} compressed bytes")


def zip_data_offset(source: MappedFile | FileReader, info: zipfile.ZipInfo) -> int:
    """Where member ``info``'s data starts: after its local header."""
    header = source.read(info.header_offset, 30, f"member {info.filename!r}: local header")
    if header[:4] != b"PK\x03\x04":
        raise FormatError(source.path, info.header_offset, f"member {info.filename!r} has no local file header")
    name_size, extra_size = struct.unpack_from("<HH", header, 26)
    return info.header_offset + 30 + name_size + extra_size


def zip_member(source: MappedFile | FileReader, info: zipfile.ZipInfo) -> np.ndarray:
    """Member ``info`` (checked by :func:`check_zip_member`) as a new writable
    uint8 array, inflated if deflated; its size and CRC must match the
    directory's (a member changed since the directory was read fails here)."""
    what = f"member {info.filename!r}"
    start = zip_data_offset(source, info)
    out = np.empty(info.file_size, np.uint8)  # pages are committed only as data arrives
    if info.compress_type == zipfile.ZIP_STORED:
        source.readinto(start, out, what)
        size = info.compress_size
    else:
        raw = np.empty(info.compress_size, np.uint8)
        source.readinto(start, raw, what)
        size = _inflate(raw, out, source.path, info.header_offset, what)
    if size != info.file_size or zlib.crc32(out) != info.CRC:
        raise FormatError(source.path, info.header_offset, f"{what} does not match the size and CRC its "
                                                           "directory entry gives (corrupt, or changed since)")
    return out


def _inflate(raw: np.ndarray, out: np.ndarray, path, offset: int, what: str) -> int:
    """Inflates raw deflate data into ``out``; returns how many bytes it holds
    (one more than ``out`` takes when there is more: inflating stops there)."""
    pos = 0
    with format_errors(path, offset, f"{what} does not inflate", (zlib.error,)):
        for chunk in _inflated(raw):
            if pos + len(chunk) > out.size:
                return out.size + 1
            out[pos:pos + len(chunk)] = np.frombuffer(chunk, np.uint8)
            pos += len(chunk)
    return pos


def _inflated(raw: np.ndarray) -> Iterator[bytes]:
    """The output of raw deflate data, in pieces of at most _CHUNK bytes, each
    from at most _CHUNK bytes of input (zlib copies the input it has not used)."""
    inflate = zlib.decompressobj(-zlib.MAX_WBITS)
    for start in range(0, raw.size, _CHUNK):
        pending = raw[start:start + _CHUNK]
        while len(pending):
            yield inflate.decompress(pending, _CHUNK)
            pending = inflate.unconsumed_tail
    yield inflate.flush()


def check_shape(shape, path, offset: int | None, name: str) -> tuple[int, ...]:
    """A shape read from a file: at most MAX_DIMS non-negative ints (bools
    refused) whose nonzero dims span fewer bytes than numpy can index at 8
    bytes an element (the widest dtype read), as numpy requires even of
    empty arrays."""
    if (not isinstance(shape, (list, tuple)) or len(shape) > MAX_DIMS
            or not all(type(d) is int and d >= 0 for d in shape)):
        raise FormatError(path, offset, f"{name!r}: shape {brief(shape)} is not a list of at most "
                                        f"{MAX_DIMS} non-negative ints")
    if math.prod(d for d in shape if d) * 8 > np.iinfo(np.intp).max:
        raise FormatError(path, offset, f"{name!r}: shape {brief(shape)} is too large for any array")
    return tuple(shape)


# ---- dtypes ----------------------------------------------------------------------------------
def numpy_dtype(type_name: str) -> np.dtype | None:
    """A numpy or ml_dtypes type by name; None when this ml_dtypes lacks it."""
    found = getattr(np, type_name, None) or getattr(ml_dtypes, type_name, None)
    return np.dtype(found) if found is not None else None


@lru_cache(maxsize=None)
def _targets() -> dict[np.dtype, np.dtype]:
    """numpy dtype found in a file -> the numpy dtype of the candle-api tensor made from it."""
    table = {d.np: d.np for d in ALL_DTYPES}
    widen = {
        "int8": "int16",
        "uint16": "uint32",
        "uint64": "int64",    # values are checked to fit
        "float8_e4m3fn": "float16", "float8_e5m2": "float16",
        "float8_e4m3fnuz": "float16", "float8_e5m2fnuz": "float16",
        "float8_e8m0fnu": "bfloat16",  # powers of two up to 2**127: beyond f16
    }
    for src, dst in widen.items():
        if numpy_dtype(src) is not None:
            table[numpy_dtype(src)] = numpy_dtype(dst)
    return table


def candle_dtype(dtype: np.dtype, path, offset: int | None, name: str) -> np.dtype:
    """The numpy dtype of the tensor made from data of ``dtype`` (any byte
    order): the same dtype, or the smallest one of the same kind holding every
    value exactly. Raises FormatError for dtypes candle-api cannot hold."""
    native = dtype if dtype.isnative else dtype.newbyteorder("=")
    target = _targets().get(native)
    if target is None:
        raise FormatError(path, offset, f"{name!r}: dtype {dtype} has no candle-api equivalent "
                                        f"(candle-api holds bools, integers and floats)")
    return target


def _span(arr: np.ndarray) -> np.ndarray | None:
    """The run of memory a view with non-negative strides reads, as a 1-D array, when it
    holds fewer elements than the view (a broadcast or overlapping view: PyTorch saves
    ``expand``ed tensors with stride 0); else None."""
    size = arr.itemsize
    if not arr.size or any(s < 0 or s % size for s in arr.strides):
        return None
    _, n = Layout(arr.shape, tuple(s // size for s in arr.strides)).span()
    return np.lib.stride_tricks.as_strided(arr, (n,), (size,)) if n < arr.size else None


def astype_view(arr: np.ndarray, dtype) -> np.ndarray:
    """``arr.astype(dtype)``, except that a view reading fewer elements than it has
    converts those and keeps its strides: a file's 3-byte storage expanded to 2**31
    elements costs 3 elements, not 4 GiB (read-only, as a mapped view)."""
    span = _span(arr)
    if span is None:
        return arr.astype(dtype)
    dtype = np.dtype(dtype)
    strides = tuple(s // arr.itemsize * dtype.itemsize for s in arr.strides)
    return np.lib.stride_tricks.as_strided(span.astype(dtype), arr.shape, strides, writeable=False)


def to_candle(arr: np.ndarray, path, offset: int | None, name: str):
    """A candle-api tensor of ``arr``'s values, sharing its memory when the
    dtype needs no conversion."""
    target = candle_dtype(arr.dtype, path, offset, name)
    if arr.dtype != target:
        if arr.dtype.kind == "u" and target.kind == "i" and arr.size:
            # each value once where the view repeats it (stride 0); where it overlaps otherwise, the
            # memory it reads (which may hold values between its elements)
            values = arr[tuple(0 if s == 0 else slice(None) for s in arr.strides)]
            span = _span(values)
            top = (values if span is None else span).max()
            if top > np.iinfo(target).max:
                raise FormatError(path, offset, f"{name!r}: value {top} does not fit in {target}, "
                                                "the widest integer candle-api has")
        arr = astype_view(arr, target)  # also makes big-endian data native
    return from_numpy(arr)


# ---- writing ---------------------------------------------------------------------------------
def tensor_items(tensors, path, refuse: tuple = ()) -> list:
    """(name, Tensor) pairs to write, checked; ``refuse`` lists dtypes the format cannot store."""
    items = list(tensors.items())
    for name, t in items:
        if not isinstance(name, str):
            raise TypeError(f"{path}: tensor names must be str, got {brief(name)}")
        if not isinstance(t, Tensor):
            raise TypeError(f"{path}: {name!r} is a {type(t).__name__}, not a candle_api.Tensor")
        if t.dtype in refuse:
            raise DTypeError(f"{path}: {name!r} is {t.dtype}, which this format cannot store; "
                             f"convert it first (t.to_dtype('f32'))")
    return items


# ---- sharded checkpoints (*.index.json: {"weight_map": {tensor: shard file}, "metadata": {...}}) ----
MAX_INDEX = 100_000_000


def _shard_path(index: Path, file) -> Path:
    """A shard named by the index: a relative path inside the index's folder, not another index."""
    parts = PurePosixPath(file).parts if isinstance(file, str) else ()
    if not parts or file.startswith("/") or ".." in parts or "\\" in file or file.lower().endswith(".json"):
        raise FormatError(index, None, f"weight_map names shard {brief(file)}: expected a checkpoint file "
                                       "relative to the index's folder")
    shard = index.parent.joinpath(*parts)
    if not shard.is_file():
        raise FormatError(index, None, f"shard {file!r} listed in the index does not exist")
    return shard


def open_sharded_index(path: Path, open_shard, format_name: str) -> TensorFile:
    """A lazy TensorFile over the shards an index names; ``open_shard(path)``
    opens one (on first use of one of its tensors)."""
    index = json_object(read_whole(path, MAX_INDEX, "index"), path, 0, "index")
    weight_map, metadata = index.get("weight_map"), index.get("metadata", {})
    if not isinstance(weight_map, dict):
        raise FormatError(path, 0, f"weight_map must be an object mapping tensor names to shard files, "
                                   f"got {brief(weight_map)}")
    for file in weight_map.values():
        if not isinstance(file, str):  # (a list or an object would not even hash)
            _shard_path(path, file)  # raises, naming it
    if not isinstance(metadata, dict):
        raise FormatError(path, 0, f"metadata must be an object, got {brief(metadata)}")
    shard_paths = {file: _shard_path(path, file) for file in set(weight_map.values())}
    shards: dict[str, TensorFile] = {}

    def read(name: str, file: str):
        if file not in shards:
            shards[file] = open_shard(shard_paths[file])
        if name not in shards[file]:
            raise FormatError(shard_paths[file], None, f"{name!r}, listed in {path.name}, is not in this shard")
        return shards[file][name]

    tensors = {name: partial(read, name, file) for name, file in weight_map.items()}
    return TensorFile(tensors, metadata, format_name, path)
