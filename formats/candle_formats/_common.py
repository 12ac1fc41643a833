"""What the format plugins share: a read-only memory map that hands out
bounds-checked zero-copy arrays, shape checks, the rule mapping dtypes that
candle-api lacks onto ones it has, and writing files atomically.

Everything here turns a malformed file into ``FormatError(path, offset, reason)``.
"""

from __future__ import annotations

import contextlib
import json
import math
import mmap
import os
import threading
from collections import Counter
from functools import lru_cache, partial
from pathlib import Path, PurePosixPath

import ml_dtypes
import numpy as np

from candle_api.dtype import ALL_DTYPES
from candle_api.errors import DTypeError, FormatError
from candle_api.io import TensorFile
from candle_api.layout import MAX_DIMS
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



class MappedFile:
    """A whole file mapped read-only. Arrays viewed from it keep the map alive,
    so it is unmapped when the last tensor sharing it is gone."""

    def __init__(self, path):
        self.path = str(path)
        try:
            with open(path, "rb") as f:
                self.size = os.fstat(f.fileno()).st_size
                # mmap refuses empty files; an empty buffer is bounds-checked the same way
                self._buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if self.size else b""
        except OSError as exc:
            raise FormatError(path, None, f"cannot open: {exc.strerror or exc}") from None

    def _check(self, offset: int, nbytes: int, what: str) -> None:
        if offset < 0 or nbytes < 0 or offset + nbytes > self.size:
            raise FormatError(self.path, offset, f"{what}: {nbytes} bytes at offset {offset} run past "
                                                 f"the end of the {self.size}-byte file")

    def read(self, offset: int, nbytes: int, what: str) -> bytes:
        self._check(offset, nbytes, what)
        return bytes(self._buf[offset:offset + nbytes])

    def array(self, offset: int, dtype: np.dtype, shape: tuple, what: str, fortran: bool = False) -> np.ndarray:
        """A read-only view of the file. Data at an offset that is not a multiple
        of the item size is copied instead: kernels expect aligned elements."""
        self._check(offset, math.prod(shape) * dtype.itemsize, what)
        if 0 in shape:
            return np.empty(shape, dtype)
        arr = np.ndarray(shape, dtype, buffer=self._buf, offset=offset, order="F" if fortran else "C")
        return arr.copy(order="K") if offset % dtype.alignment else arr


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
        "bool_": "uint8",     # Candle's masks are u8
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


def to_candle(arr: np.ndarray, path, offset: int | None, name: str):
    """A candle-api tensor of ``arr``'s values, sharing its memory when the
    dtype needs no conversion (bool is viewed as u8)."""
    target = candle_dtype(arr.dtype, path, offset, name)
    if arr.dtype == np.bool_:
        arr = arr.view(np.uint8)
    elif arr.dtype != target:
        if arr.dtype.kind == "u" and target.kind == "i" and arr.size and arr.max() > np.iinfo(target).max:
            raise FormatError(path, offset, f"{name!r}: value {arr.max()} does not fit in {target}, "
                                            "the widest integer candle-api has")
        arr = arr.astype(target)  # also makes big-endian data native
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


@contextlib.contextmanager
def atomic_write(path):
    """A file object whose contents replace ``path`` only once fully written:
    a failed save leaves no partial file, and tensors still mapped from the
    old file keep their data."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with open(tmp, "wb") as f:
            yield f
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


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
    mf = MappedFile(path)
    if mf.size > MAX_INDEX:
        raise FormatError(path, 0, f"{mf.size}-byte index exceeds the {MAX_INDEX}-byte limit")
    index = json_object(mf.read(0, mf.size, "index"), path, 0, "index")
    weight_map, metadata = index.get("weight_map"), index.get("metadata", {})
    if not isinstance(weight_map, dict):
        raise FormatError(path, 0, f"weight_map must be an object mapping tensor names to shard files, "
                                   f"got {brief(weight_map)}")
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
