"""PyTorch checkpoints, read without torch and without running pickled code,
and written in torch.save's zip format (:mod:`.pytorch_writer`).

Files:

- **zip** (``torch.save`` since 1.6; ``.pt``, ``.pth``, ``pytorch_model.bin``):
  ``<folder>/data.pkl`` is the pickle, ``<folder>/data/<key>`` the storage
  records, ``<folder>/byteorder`` says "little" (the default) or "big". The
  folder is named by the first member, as torch reads it.
- **legacy** (``_use_new_zipfile_serialization=False`` and torch < 1.6): five
  pickles in a row (magic number, protocol version 1001, sys_info, the object,
  the sorted storage keys), then each storage as an 8-byte little-endian
  element count and its raw little-endian bytes.
- **sharded** (``pytorch_model.bin.index.json``): ``weight_map`` maps each
  tensor name to a shard file in the index's folder; a shard is opened when one
  of its tensors is first read. The index's ``metadata`` becomes the metadata.

Pickles run in :mod:`candle_formats.pickle_vm` over an allow-list: the torch
tensor rebuild functions, storage types, dtypes, ``torch.Size``,
``collections.OrderedDict``, ``set``/``frozenset`` and ``_codecs.encode``
(Python 3 bytes in protocol 2), each replaced by an inert implementation here.
Any other global (a class with ``__reduce__``, ``os.system``...) is a
FormatError naming it.

Names: containers are flattened. A tensor at ``obj["model_state"]["fc"]["weight"]``
is named ``model_state.fc.weight``; dict keys that are not strings (an
optimizer's integer parameter ids) are written with ``str()``, list and tuple
items by their index, a file holding one bare tensor names it ``""``. Scalar
leaves (str, int, float, bool, None) go to ``TensorFile.metadata`` under their
flattened names (``step``, ``optimizer_state.param_groups.0.lr``); other
non-tensor leaves (bytes, sets, dtypes) are dropped. Two leaves flattening to
one name are a FormatError.

Dtypes: f32 f64 f16 bf16 i64 i32 i16 u32 u8 bool load as themselves; int8
widens to i16, uint16 to u32, uint64 to i64 (values checked), float8 to f16 or
bf16 (the rule of ``_common.candle_dtype``); complex and quantized tensors are a
FormatError when the file is opened.

Laziness: opening a file maps it (``mmap=False``: reads it into memory),
reads the zip directory and data.pkl (or a legacy file's pickles and 8-byte
storage headers) and checks every tensor's shape, strides and offset against
its storage and every storage against the file. A storage's bytes are touched
only when a tensor using it is first read: tensors are zero-copy strided views
of the map (tensors sharing a storage share its memory). Deflated records are
inflated, misaligned records (legacy files) copied once per storage, and int8,
uint16 or big-endian values converted.
"""

from __future__ import annotations

import math
import re
import zipfile
from dataclasses import dataclass
from functools import lru_cache, partial
from pathlib import Path

import numpy as np

from candle_api.errors import FormatError
from candle_api.hooks import FormatSpec, hookimpl
from candle_api.io import TensorFile, open_regular
from candle_api.layout import MAX_DIMS

from ._common import (FileReader, MappedFile, astype_view, candle_dtype, check_zip_member, format_errors,
                      numpy_dtype, open_sharded_index, to_candle, zip_data_offset, zip_directory, zip_member)
from .pickle_vm import Function, PickleError, describe, scalar, unpickle
from .pytorch_writer import save

#: torch.save's magic number, pickled first in legacy files, and their protocol version.
MAGIC = 0x1950A86A20F9469CFC6C
LEGACY_VERSION = 1001
_MAGIC_PICKLE = b"\x8a\x0a" + MAGIC.to_bytes(10, "little")  # LONG1 of 10 bytes
#: Largest data.pkl and index read. A state dict's pickle takes some hundred bytes a tensor (a few MiB
#: for the largest checkpoints), and the pickle VM runs about two million opcodes a second: 16 MiB of
#: the cheapest opcodes, which a small deflated member can carry, take it seconds, not minutes.
MAX_PICKLE = 1 << 24
#: Largest dim, stride, offset or storage size, in elements.
MAX_ELEMENTS = 1 << 48
#: Deepest nesting of containers flattened, and the flattening budget: name
#: characters produced per byte of pickle (shared containers multiply names).
MAX_DEPTH = 64
FLATTEN_PER_BYTE = 4
FLATTEN_BASE = 1 << 20

_KEY = re.compile(r"[0-9A-Za-z_]{1,64}", re.ASCII)
_INDEX_SUFFIXES = (".bin.index.json", ".pt.index.json", ".pth.index.json")

# torch storage classes and the dtype of their elements
_STORAGE_DTYPES = {
    "Float": "float32", "Double": "float64", "Half": "float16", "BFloat16": "bfloat16",
    "Long": "int64", "Int": "int32", "Short": "int16", "Char": "int8", "Byte": "uint8", "Bool": "bool",
    "ComplexFloat": "complex64", "ComplexDouble": "complex128",
    "QInt8": "qint8", "QUInt8": "quint8", "QInt32": "qint32", "QUInt4x2": "quint4x2", "QUInt2x4": "quint2x4",
}
# torch dtypes a pickle may name (torch.save writes them for _rebuild_tensor_v3); those
# without a numpy equivalent, or that candle-api cannot hold, are refused with a reason
_DTYPE_NAMES = (
    "float32 float64 float16 bfloat16 int64 int32 int16 int8 uint8 bool uint16 uint32 uint64 "
    "complex32 complex64 complex128 float8_e4m3fn float8_e5m2 float8_e4m3fnuz float8_e5m2fnuz "
    "float8_e8m0fnu qint8 quint8 qint32 quint4x2 quint2x4"
).split()


# ---- what the pickle builds ---------------------------------------------------------------------
@dataclass(frozen=True)
class _TorchDtype:
    name: str
    np: np.dtype | None  # the stored elements (little-endian); None: no numpy type


@dataclass(frozen=True)
class _StorageType:
    qualname: str
    dtype: _TorchDtype


@dataclass(frozen=True)
class _Symbol:
    """An allowed global that is only ever an argument (torch.Tensor as a rebuild's type)."""
    qualname: str


@dataclass(frozen=True)
class _Storage:
    """``numel`` elements of ``dtype`` from ``byte_offset`` in storage record ``key``
    (legacy files may view part of a record)."""
    key: str
    dtype: _TorchDtype
    numel: int
    byte_offset: int = 0

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.np.itemsize


@dataclass(frozen=True)
class _Tensor:
    storage: _Storage
    dtype: _TorchDtype
    offset: int  # in elements of dtype
    shape: tuple
    strides: tuple


def _ints(value, what: str) -> tuple:
    if (type(value) is not tuple or len(value) > MAX_DIMS
            or not all(type(x) is int and 0 <= x <= MAX_ELEMENTS for x in value)):
        raise PickleError(f"tensor {what} is {describe(value)}, expected a tuple of at most {MAX_DIMS} "
                          f"ints in [0, {MAX_ELEMENTS}]")
    return value


def _storage(value) -> _Storage:
    if not isinstance(value, _Storage):
        raise PickleError(f"a tensor's storage is {describe(value)}, not a persistent storage")
    return value


def _tensor(storage: _Storage, dtype: _TorchDtype, offset, size, stride) -> _Tensor:
    """A tensor view, checked against its storage."""
    if dtype.np is None:
        raise PickleError(f"torch.{dtype.name} tensors cannot be read: candle-api has no such dtype")
    shape, strides = _ints(size, "size"), _ints(stride, "stride")
    if len(shape) != len(strides):
        raise PickleError(f"tensor size {shape} and stride {strides} differ in length")
    if type(offset) is not int or not 0 <= offset <= MAX_ELEMENTS:
        raise PickleError(f"tensor storage offset is {describe(offset)}, expected an int in [0, {MAX_ELEMENTS}]")
    itemsize = dtype.np.itemsize
    if math.prod(max(d, 1) for d in shape) * itemsize > 1 << 62:
        raise PickleError(f"tensor size {shape} is too large")
    if 0 not in shape:
        end = (offset + sum((d - 1) * s for d, s in zip(shape, strides)) + 1) * itemsize
        if end > storage.nbytes:
            raise PickleError(f"tensor of size {shape}, stride {strides} and offset {offset} reaches byte {end} "
                              f"of storage {storage.key!r}, which holds {storage.nbytes} bytes")
    return _Tensor(storage, dtype, offset, shape, strides)


# ---- the allowed globals: inert versions of what torch.load would call --------------------------
def _rebuild_tensor(storage, storage_offset, size, stride):
    storage = _storage(storage)
    return _tensor(storage, storage.dtype, storage_offset, size, stride)


def _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad=False, backward_hooks=None,
                       metadata=None):
    # autograd flags, hooks and metadata do not apply to loaded weights
    return _rebuild_tensor(storage, storage_offset, size, stride)


def _rebuild_tensor_v3(storage, storage_offset, size, stride, requires_grad, backward_hooks, dtype,
                       metadata=None):
    """Dtypes without a typed storage class (uint16...): bytes of an UntypedStorage."""
    if not isinstance(dtype, _TorchDtype):
        raise PickleError(f"_rebuild_tensor_v3's dtype is {describe(dtype)}, not a torch dtype")
    return _tensor(_storage(storage), dtype, storage_offset, size, stride)


def _rebuild_parameter(data, requires_grad, backward_hooks):
    if not isinstance(data, _Tensor):
        raise PickleError(f"a Parameter wraps {describe(data)}, not a tensor")
    return data


def _rebuild_parameter_with_state(data, requires_grad, backward_hooks, state):
    return _rebuild_parameter(data, requires_grad, backward_hooks)


def _rebuild_from_type_v2(func, new_type, args, state):
    """A tensor (sub)class with attributes: rebuilt as a plain tensor, attributes dropped."""
    if not (isinstance(func, Function) and func.fn in _TENSOR_BUILDERS):
        raise PickleError(f"_rebuild_from_type_v2 rebuilds with {describe(func)}, not a tensor rebuild function")
    if not isinstance(new_type, _Symbol):
        raise PickleError(f"_rebuild_from_type_v2 makes a {describe(new_type)}, not a tensor type")
    if type(args) is not tuple:
        raise PickleError(f"_rebuild_from_type_v2 arguments are {describe(args)}, not a tuple")
    return func.call(args)


_TENSOR_BUILDERS = (_rebuild_tensor, _rebuild_tensor_v2, _rebuild_tensor_v3)


def _sequence(items, what: str):
    if type(items) not in (list, tuple):
        raise PickleError(f"{what} of {describe(items)}, expected a list or tuple")
    return items


def _size(dims=()):
    return _ints(tuple(_sequence(dims, "torch.Size")), "torch.Size")


def _ordered_dict(pairs=()):
    if not all(type(p) in (list, tuple) and len(p) == 2 for p in _sequence(pairs, "OrderedDict")):
        raise PickleError("OrderedDict of items that are not (key, value) pairs")
    return {scalar(key): value for key, value in pairs}


def _set(items=()):
    return {scalar(item) for item in _sequence(items, "set")}


def _frozenset(items=()):
    return frozenset(_set(items))


def _encode(text, encoding="utf-8"):
    """Python 3 bytes pickled with protocol 2: _codecs.encode(str, 'latin1')."""
    if type(text) is not str or encoding not in ("latin1", "latin-1"):
        raise PickleError(f"_codecs.encode of {describe(text)} to {describe(encoding)}: only bytes as latin1")
    try:
        return text.encode("latin1")
    except UnicodeEncodeError:
        raise PickleError("_codecs.encode: the string is not latin1") from None


@lru_cache(maxsize=None)
def _allowed() -> dict:
    # numpy 1.x has no np.bool, only np.bool_
    dtypes = {name: _TorchDtype(name, numpy_dtype("bool_" if name == "bool" else name)) for name in _DTYPE_NAMES}
    allowed: dict = {f"torch.{name}": dtype for name, dtype in dtypes.items()}
    for kind, dtype in _STORAGE_DTYPES.items():
        allowed[f"torch.{kind}Storage"] = _StorageType(f"torch.{kind}Storage", dtypes[dtype])
    allowed["torch.storage.UntypedStorage"] = _StorageType("torch.storage.UntypedStorage", dtypes["uint8"])
    allowed["torch.Tensor"] = _Symbol("torch.Tensor")
    allowed["torch.nn.parameter.Parameter"] = _Symbol("torch.nn.parameter.Parameter")
    functions = {
        "torch._utils._rebuild_tensor": _rebuild_tensor,
        "torch._utils._rebuild_tensor_v2": _rebuild_tensor_v2,
        "torch._utils._rebuild_tensor_v3": _rebuild_tensor_v3,
        "torch._utils._rebuild_parameter": _rebuild_parameter,
        "torch._utils._rebuild_parameter_with_state": _rebuild_parameter_with_state,
        "torch._tensor._rebuild_from_type_v2": _rebuild_from_type_v2,
        "torch.Size": _size,
        "collections.OrderedDict": _ordered_dict,
        "builtins.set": _set,
        "builtins.frozenset": _frozenset,
        "__builtin__.set": _set,  # the Python 2 names protocol 2 writes
        "__builtin__.frozenset": _frozenset,
        "_codecs.encode": _encode,
    }
    allowed.update({qualname: Function(qualname, fn) for qualname, fn in functions.items()})
    return allowed


class _PersistentIds:
    """Resolves torch.save's persistent ids, ``('storage', storage type, key,
    location, numel)`` (legacy files add a view: None or ``(view key, offset,
    numel)``), into :class:`_Storage` and records each storage described."""

    def __init__(self, legacy: bool):
        self.legacy = legacy
        self.roots: dict[str, _Storage] = {}
        self.views: dict[str, _Storage] = {}

    def __call__(self, pid) -> _Storage:
        size = 6 if self.legacy else 5
        if type(pid) is not tuple or len(pid) != size or pid[0] != "storage":
            if type(pid) is tuple and pid and pid[0] == "module":
                raise PickleError("refusing a pickled nn.Module (persistent id 'module'): save its state_dict")
            view = ", view" if self.legacy else ""
            raise PickleError(f"persistent id {describe(pid)} is not ('storage', type, key, location, numel{view})")
        storage_type, key, location, numel = pid[1:5]
        if not isinstance(storage_type, _StorageType):
            raise PickleError(f"storage type {describe(storage_type)} is not a torch storage class")
        dtype = storage_type.dtype
        if dtype.np is None:
            raise PickleError(f"{storage_type.qualname} holds torch.{dtype.name}, which candle-api has no dtype for")
        _check_key(key)
        if type(location) not in (str, bytes):
            raise PickleError(f"storage location {describe(location)} is not a string")
        _check_count(numel, "storage size")
        root = self._record(self.roots, key, _Storage(key, dtype, numel))
        return self._view(root, pid[5]) if self.legacy and pid[5] is not None else root

    def _view(self, root: _Storage, view) -> _Storage:
        if type(view) is not tuple or len(view) != 3:
            raise PickleError(f"storage view {describe(view)} is not (key, offset, numel)")
        view_key, offset, numel = view
        _check_key(view_key)
        _check_count(offset, "storage view offset")
        _check_count(numel, "storage view size")
        if offset + numel > root.numel:
            raise PickleError(f"storage view of {numel} elements at {offset} overruns storage {root.key!r} "
                              f"of {root.numel}")
        view = _Storage(root.key, root.dtype, numel, offset * root.dtype.np.itemsize)
        return self._record(self.views, view_key, view)

    @staticmethod
    def _record(table: dict, key: str, storage: _Storage) -> _Storage:
        known = table.setdefault(key, storage)
        if known != storage:
            raise PickleError(f"storage {key!r} is described twice, differently: {known.numel} x {known.dtype.name} "
                              f"then {storage.numel} x {storage.dtype.name}")
        return known


def _check_key(key) -> None:
    if type(key) is not str or not _KEY.fullmatch(key):
        raise PickleError(f"storage key {describe(key)} is not a name of 1 to 64 letters, digits or _")


def _check_count(value, what: str) -> None:
    if type(value) is not int or not 0 <= value <= MAX_ELEMENTS:
        raise PickleError(f"{what} is {describe(value)}, expected an int in [0, {MAX_ELEMENTS}]")


def _unpickle(data, start: int, path, base: int | None, persistent_load=None):
    """Runs one pickle; errors name the file offset (``base``: where ``data``
    lies in the file, None for a compressed zip member)."""
    try:
        return unpickle(data, start, _allowed(), persistent_load)
    except PickleError as exc:
        if base is None:
            raise FormatError(path, None, f"data.pkl byte {exc.pos}: {exc.reason}") from None
        raise FormatError(path, base + exc.pos, exc.reason) from None


# ---- flattening --------------------------------------------------------------------------------
def _flatten(root, path, budget: int) -> tuple[dict, dict]:
    """(name -> _Tensor, name -> scalar) of the object, named as the module docstring says."""
    tensors: dict[str, _Tensor] = {}
    metadata: dict = {}
    spent = 0

    def add(table: dict, name: str, value) -> None:
        if name in tensors or name in metadata:
            raise FormatError(path, None, f"two entries flatten to the name {name[:200]!r}")
        table[name] = value

    def visit(obj, name: str, depth: int) -> None:
        nonlocal spent
        spent += len(name) + 1
        if spent > budget:
            raise FormatError(path, None, "the pickled containers expand to too many entries "
                                          "(containers referenced over and over)")
        if depth > MAX_DEPTH:
            raise FormatError(path, None, f"containers nested more than {MAX_DEPTH} deep (or a cycle) "
                                          f"at {name[:200]!r}")
        if isinstance(obj, _Tensor):
            add(tensors, name, obj)
        elif type(obj) is dict:
            for key, value in obj.items():
                visit(value, f"{name}.{key}" if name else str(key), depth + 1)
        elif type(obj) in (list, tuple):
            for i, value in enumerate(obj):
                visit(value, f"{name}.{i}" if name else str(i), depth + 1)
        elif type(obj) in (str, int, float, bool, type(None)):
            add(metadata, name, obj)

    visit(root, "", 0)
    return tensors, metadata


# ---- storage records and tensors ---------------------------------------------------------------
@dataclass(frozen=True)
class _Record:
    """A storage's bytes in the file: ``nbytes`` at ``offset``, or a deflated zip member."""
    offset: int
    nbytes: int
    deflated: zipfile.ZipInfo | None = None


class _Records:
    """The storage records of one file, read when a tensor is first accessed."""

    def __init__(self, file: MappedFile, records: dict[str, _Record], big_endian: bool):
        self.path, self.file, self.records, self.big_endian = file.path, file, records, big_endian
        self._storages: dict[str, np.ndarray] = {}  # key -> its bytes, shared by the storage's tensors

    def _read(self, key: str) -> np.ndarray:
        """The record as uint8: a view of the mapped file, or the inflated member."""
        record = self.records[key]
        if record.deflated is None:
            return self.file.array(record.offset, np.dtype(np.uint8), (record.nbytes,), f"storage {key!r}")
        return zip_member(self.file, record.deflated)[:record.nbytes]

    def _bytes(self, key: str, itemsize: int) -> np.ndarray:
        buf = self._storages.get(key)
        if buf is None:
            buf = self._read(key)
        if buf.ctypes.data % itemsize:
            buf = buf.copy()  # a misaligned record (legacy files): kernels expect aligned elements
        self._storages[key] = buf
        return buf

    def array(self, t: _Tensor) -> np.ndarray:
        """The tensor's values: a strided view of its storage's bytes."""
        src = t.dtype.np
        if 0 in t.shape:
            return np.empty(t.shape, src)
        itemsize = src.itemsize
        stored = np.dtype(f">u{itemsize}") if self.big_endian and itemsize > 1 else src
        arr = np.ndarray(t.shape, stored, self._bytes(t.storage.key, itemsize),
                         t.storage.byte_offset + t.offset * itemsize, tuple(s * itemsize for s in t.strides))
        return astype_view(arr, f"<u{itemsize}").view(src) if stored is not src else arr  # byte-swapped copy

    def tensor(self, name: str, t: _Tensor):
        return to_candle(self.array(t), self.path, None, name)


def _tensor_file(path: Path, root, records: _Records, pickle_size: int) -> TensorFile:
    tensors, metadata = _flatten(root, path, FLATTEN_PER_BYTE * pickle_size + FLATTEN_BASE)
    for name, t in tensors.items():
        candle_dtype(t.dtype.np, path, None, name)  # complex and such: refused now, not on first read
    entries = {name: partial(records.tensor, name, t) for name, t in tensors.items()}
    return TensorFile(entries, metadata, "pytorch", path)


# ---- zip files ------------------------------------------------------------------------------------
def _archive_folder(infos: list, path) -> str:
    """The folder holding data.pkl: torch names it by the first member."""
    folder, slash, _ = infos[0].filename.partition("/") if infos else ("", "", "")
    if not slash:
        raise FormatError(path, 0, "not a PyTorch zip: its first member is not in a folder")
    return folder + "/"


def _zip_record(file: MappedFile, info: zipfile.ZipInfo, nbytes: int) -> _Record:
    """Where the first ``nbytes`` of member ``info`` lie (stored members are mapped in place)."""
    check_zip_member(info, file.size, file.path)
    if info.file_size < nbytes:
        raise FormatError(file.path, info.header_offset, f"member {info.filename!r} holds {info.file_size} "
                                                         f"bytes, its storage needs {nbytes}")
    if info.compress_type == zipfile.ZIP_DEFLATED:
        return _Record(info.header_offset, nbytes, info)
    return _Record(zip_data_offset(file, info), nbytes)


def _big_endian(file: MappedFile, info: zipfile.ZipInfo | None) -> bool:
    """What the byteorder record says; files older than it are little-endian."""
    if info is None:
        return False
    check_zip_member(info, file.size, file.path)
    order = zip_member(file, info).tobytes() if info.file_size <= 16 else None
    if order not in (b"little", b"big"):
        raise FormatError(file.path, info.header_offset, f"byteorder record is {describe(order)}, "
                                                         "not little or big")
    return order == b"big"


def _load_zip(path: Path, mmap: bool) -> TensorFile:
    file = MappedFile(path, mmap)
    infos = zip_directory(file)
    folder = _archive_folder(infos, path)
    members = {info.filename: info for info in infos}
    info = members.get(folder + "data.pkl")
    if info is None:
        raise FormatError(path, None, f"not a PyTorch zip: no {folder}data.pkl")
    if info.file_size > MAX_PICKLE:
        raise FormatError(path, info.header_offset, f"data.pkl of {info.file_size} bytes exceeds the "
                                                    f"{MAX_PICKLE}-byte limit")
    record = _zip_record(file, info, info.file_size)
    data = zip_member(file, info).tobytes()
    big_endian = _big_endian(file, members.get(folder + "byteorder"))
    ids = _PersistentIds(legacy=False)
    root, _ = _unpickle(data, 0, path, None if record.deflated else record.offset, ids)
    records = {}
    for key, storage in ids.roots.items():
        info = members.get(f"{folder}data/{key}")
        if info is None:
            raise FormatError(path, None, f"storage {key!r} has no record {folder}data/{key} in the archive")
        records[key] = _zip_record(file, info, storage.nbytes)
    return _tensor_file(path, root, _Records(file, records, big_endian), len(data))


# ---- legacy files ---------------------------------------------------------------------------------
def _is_legacy(head: bytes) -> bool:
    """The magic number pickled with protocol 2 to 5 (PROTO, maybe FRAME, LONG1)."""
    if len(head) < 2 or head[0] != 0x80 or not 2 <= head[1] <= 5:
        return False
    start = 11 if head[2:3] == b"\x95" else 2
    return head[start:start + len(_MAGIC_PICKLE)] == _MAGIC_PICKLE


def _legacy_records(data, pos: int, keys, storages: dict[str, _Storage], path) -> dict[str, _Record]:
    """Each listed storage: an 8-byte element count, then its bytes."""
    if type(keys) is not list or not all(type(k) is str for k in keys):
        raise FormatError(path, pos, f"the storage key list is {describe(keys)}, not a list of strings")
    records = {}
    for key in keys:
        storage = storages.get(key)
        if storage is None or key in records:
            raise FormatError(path, pos, f"storage {key[:80]!r} is listed twice or used by no tensor")
        if pos + 8 > len(data):
            raise FormatError(path, pos, f"storage {key!r}: the file ends before its size")
        numel = int.from_bytes(data[pos:pos + 8], "little", signed=True)
        if numel != storage.numel:
            raise FormatError(path, pos, f"storage {key!r} holds {numel} elements, its tensors say {storage.numel}")
        if pos + 8 + storage.nbytes > len(data):
            raise FormatError(path, pos + 8, f"storage {key!r}: {storage.nbytes} bytes run past the end of the "
                                             f"{len(data)}-byte file")
        records[key] = _Record(pos + 8, storage.nbytes)
        pos += 8 + storage.nbytes
    missing = storages.keys() - records.keys()
    if missing:
        raise FormatError(path, pos, f"storage {min(missing)!r} is used by a tensor but not in the file")
    return records


def _load_legacy(path: Path, mmap: bool) -> TensorFile:
    file = MappedFile(path, mmap)
    data = file.buf
    magic, version_at = _unpickle(data, 0, path, 0)
    if type(magic) is not int or magic != MAGIC:
        raise FormatError(path, 0, "not a PyTorch file: wrong magic number")
    version, sys_info_at = _unpickle(data, version_at, path, 0)
    if type(version) is not int or version != LEGACY_VERSION:
        raise FormatError(path, version_at, f"legacy format version {describe(version)}, "
                                            f"expected {LEGACY_VERSION}")
    # sys_info: the writer's C type sizes and byte order; storages are little-endian whatever it says
    _, main_at = _unpickle(data, sys_info_at, path, 0)
    ids = _PersistentIds(legacy=True)
    root, keys_at = _unpickle(data, main_at, path, 0, ids)
    keys, data_at = _unpickle(data, keys_at, path, 0)
    records = _legacy_records(data, data_at, keys, ids.roots, path)
    return _tensor_file(path, root, _Records(file, records, big_endian=False), keys_at - main_at)


# ---- the plugin -------------------------------------------------------------------------------------
def _load_checkpoint(path: Path, mmap: bool = True) -> TensorFile:
    with open_regular(path) as f, format_errors(path, None, "cannot read", (OSError,)):
        head = f.read(32)
    if head.startswith(b"PK"):
        return _load_zip(path, mmap)
    if _is_legacy(head):
        return _load_legacy(path, mmap)
    raise FormatError(path, 0, "not a PyTorch checkpoint: neither a torch.save zip archive nor a legacy "
                               "file starting with torch's pickled magic number")


def load(path, mmap: bool = True) -> TensorFile:
    path = Path(path)
    if path.name.lower().endswith(".json"):
        return open_sharded_index(path, partial(_load_checkpoint, mmap=mmap), "pytorch")
    return _load_checkpoint(path, mmap)


def sniff(head: bytes, path) -> bool:
    """Legacy magic number; a zip whose first folder holds data.pkl; or an index named like one."""
    if _is_legacy(head):
        return True
    if head.startswith(b"PK\x03\x04"):
        try:
            infos = zip_directory(FileReader(path))
            return f"{_archive_folder(infos, path)}data.pkl" in {info.filename for info in infos}
        except FormatError:
            return False
    return Path(path).name.lower().endswith(_INDEX_SUFFIXES)


@hookimpl
def candle_api_formats():
    return [FormatSpec(
        name="pytorch",
        extensions=(".pt", ".pth", ".bin", ".ckpt") + _INDEX_SUFFIXES,
        sniff=sniff, load=load, save=save,
        description="PyTorch checkpoints (zip and legacy torch.save, sharded pytorch_model.bin.index.json) "
                    "through a restricted pickle VM: never pickle.load, never torch; writes torch.save's zip",
    )]
