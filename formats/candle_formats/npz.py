"""NumPy's .npy and .npz files, read without ever unpickling.

``.npy``: magic ``\\x93NUMPY``, version, header length, a Python-literal header
(parsed by ``numpy.lib.format``, after its length is checked against a 10,000
byte limit and the file), then the data. The file is memory-mapped and the
tensor is a zero-copy view, C or Fortran order alike. Its one entry is named
``arr_0``, numpy's name for an unnamed array.

``.npz``: a zip of ``NAME.npy`` members; only the zip directory is read on
opening, and each member is read (and decompressed) when its tensor is first
accessed, the file opened for that read only: a loaded npz holds no file
descriptor. Members must be stored or deflated, unencrypted, and claim no more
than deflate's largest expansion (1032:1), so a size field can never make us
allocate more than the file could hold; the zip's CRC checks the data (a
member changed since the file was opened fails it). With ``mmap=False`` the
whole file is read when it is opened and members come from that copy.

Dtypes: big-endian data is made native; int8, uint16 and
uint64 widen to i16, u32 and i64 (see ``candle_formats.safetensors`` for the
rule); object, structured, string, complex and other dtypes are a FormatError.

Writing: ``.npy`` holds exactly one tensor; ``.npz`` is uncompressed, like
``np.savez``. Neither stores metadata or bf16 (npy has no type for it).
"""

from __future__ import annotations

import io
import math
import struct
import tokenize
import zipfile  # already imported by importlib.metadata, which found this plugin
from functools import partial
from typing import NamedTuple

import numpy as np

from candle_api.dtype import bf16
from candle_api.errors import FormatError
from candle_api.hooks import FormatSpec, hookimpl
from candle_api.io import TensorFile

from ._common import (FileReader, MappedFile, brief, candle_dtype, check_shape,
                      check_zip_member, format_errors, tensor_items, to_candle, zip_directory, zip_member)
from .atomic import atomic_write

MAGIC = b"\x93NUMPY"
#: The longest npy header read (numpy's own limit for headers it evaluates).
MAX_HEADER = 10_000
_NPY_ENTRY = "arr_0"
# What numpy's header reader raises on bad input: ast.literal_eval's documented
# ValueError, TypeError, SyntaxError, MemoryError and RecursionError (the
# MemoryError is the parser's nesting limit, about 200 brackets: headers are
# capped at 10,000 characters), and tokenize's TokenError from numpy's
# fallback for headers written by Python 2.
_HEADER_ERRORS = (ValueError, TypeError, SyntaxError, MemoryError, RecursionError, tokenize.TokenError)


class _Npy(NamedTuple):
    dtype: np.dtype
    shape: tuple
    fortran: bool
    data_offset: int  # from the start of the npy file or zip member
    nbytes: int


def _read_exact(fp, n: int, path, offset: int, what: str) -> bytes:
    data = fp.read(n)
    if len(data) != n:
        raise FormatError(path, offset, f"{what}: expected {n} bytes, the data ends after {len(data)}")
    return data


def _npy_header(fp, size: int, path, base: int, name: str) -> _Npy:
    """Parses the npy header at ``fp``'s position; ``size`` bytes are
    available from there, which start at file offset ``base`` (for messages)."""
    start = _read_exact(fp, 8, path, base, f"{name!r}: npy magic and version")
    if not start.startswith(MAGIC):
        raise FormatError(path, base, f"{name!r}: not an npy array (bad magic {start[:6]!r})")
    version = (start[6], start[7])
    if version not in ((1, 0), (2, 0), (3, 0)):
        raise FormatError(path, base + 6, f"{name!r}: unsupported npy version {version[0]}.{version[1]}")
    length_format = "<H" if version == (1, 0) else "<I"
    length_bytes = _read_exact(fp, struct.calcsize(length_format), path, base + 8, f"{name!r}: npy header length")
    header_len = struct.unpack(length_format, length_bytes)[0]
    data_offset = 8 + len(length_bytes) + header_len
    if header_len > MAX_HEADER:
        raise FormatError(path, base + 8, f"{name!r}: npy header length {header_len} exceeds the "
                                          f"{MAX_HEADER}-byte limit")
    if data_offset > size:
        raise FormatError(path, base + 8, f"{name!r}: npy header length {header_len} runs past the "
                                          f"{size} bytes of the array")
    header = io.BytesIO(start + length_bytes + _read_exact(fp, header_len, path, base, f"{name!r}: npy header"))
    # version 3.0 differs from 2.0 only by a UTF-8 header, needed for field names we refuse anyway
    read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    with format_errors(path, base + 8, f"{name!r}: bad npy header", _HEADER_ERRORS):
        np.lib.format.read_magic(header)
        shape, fortran, dtype = read(header, max_header_size=MAX_HEADER)
    candle_dtype(dtype, path, base + 8, name)  # refuse what candle-api cannot hold before reading
    shape = check_shape(shape, path, base + 8, name)
    nbytes = math.prod(shape) * dtype.itemsize
    if data_offset + nbytes > size:
        raise FormatError(path, base + data_offset, f"{name!r}: shape {list(shape)} of {dtype} needs {nbytes} "
                                                    f"bytes but {size - data_offset} follow the header")
    return _Npy(dtype, shape, fortran, data_offset, nbytes)


# ---- .npy ----------------------------------------------------------------------------------------
def _npy_tensor(mf: MappedFile, npy: _Npy):
    arr = mf.array(npy.data_offset, npy.dtype, npy.shape, _NPY_ENTRY, npy.fortran)
    return to_candle(arr, mf.path, npy.data_offset, _NPY_ENTRY)


def load_npy(path, mmap: bool = True) -> TensorFile:
    mf = MappedFile(path, mmap)
    head = io.BytesIO(mf.read(0, min(mf.size, 12 + MAX_HEADER), "npy header"))
    npy = _npy_header(head, mf.size, path, 0, _NPY_ENTRY)
    return TensorFile({_NPY_ENTRY: partial(_npy_tensor, mf, npy)}, {}, "npy", path)


class _PythonWrites:
    """A file seen only through its write(): NumPy then writes with it, whose errors
    raise, instead of tofile(), which ignores a failed write (a full disk would
    leave a torn file to be renamed over the target)."""

    def __init__(self, f):
        self.write = f.write


def save_npy(tensors, path, metadata=None) -> None:
    items = _writable(tensors, path, metadata)
    if len(items) != 1:
        raise ValueError(f"{path}: a .npy file holds one tensor, got {len(items)}; use .npz for several")
    with atomic_write(path) as f:
        np.lib.format.write_array(_PythonWrites(f), items[0][1].numpy(), allow_pickle=False)


def sniff_npy(head: bytes, path) -> bool:
    return head.startswith(MAGIC)


# ---- .npz ----------------------------------------------------------------------------------------
def _member_tensor(source: FileReader | MappedFile, info: zipfile.ZipInfo, name: str):
    check_zip_member(info, source.size, source.path)
    data = zip_member(source, info)
    base = info.header_offset
    npy = _npy_header(io.BytesIO(data[:12 + MAX_HEADER].tobytes()), data.size, source.path, base, name)
    arr = data[npy.data_offset:npy.data_offset + npy.nbytes].view(npy.dtype)
    if not arr.flags.aligned:
        arr = arr.copy()  # kernels expect aligned elements
    arr = arr.reshape(npy.shape, order="F" if npy.fortran else "C")
    return to_candle(arr, source.path, base, name)


def _member_names(infos: list[zipfile.ZipInfo], path) -> dict:
    """entry name -> ZipInfo; every member must be an .npy array."""
    members = {}
    for info in infos:
        if not info.filename.endswith(".npy"):
            raise FormatError(path, info.header_offset, f"member {info.filename!r} is not an .npy array")
        name = info.filename[:-4]
        if name in members:
            raise FormatError(path, info.header_offset, f"member {info.filename!r} appears twice")
        members[name] = info
    return members


def load_npz(path, mmap: bool = True) -> TensorFile:
    """Members are read when accessed, from the file (never mapped) or, with
    ``mmap=False``, from a copy of it read now."""
    source = FileReader(path) if mmap else MappedFile(path, mmap=False)
    members = _member_names(zip_directory(source), path)
    tensors = {name: partial(_member_tensor, source, info, name) for name, info in members.items()}
    return TensorFile(tensors, {}, "npz", path)


def save_npz(tensors, path, metadata=None) -> None:
    items = _writable(tensors, path, metadata)
    with atomic_write(path) as f, zipfile.ZipFile(f, "w", zipfile.ZIP_STORED, allowZip64=True) as zf:
        for name, t in items:
            with zf.open(name + ".npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, t.numpy(), allow_pickle=False)


def sniff_npz(head: bytes, path) -> bool:
    """A zip whose members are all .npy arrays (a PyTorch checkpoint is a zip too)."""
    if not head.startswith(b"PK\x03\x04"):
        return False
    try:
        infos = zip_directory(FileReader(path))
    except FormatError:
        return False
    return bool(infos) and all(info.filename.endswith(".npy") for info in infos)


def _writable(tensors, path, metadata) -> list:
    if metadata:
        raise ValueError(f"{path}: npy/npz files store no metadata, got {brief(dict(metadata))}")
    return tensor_items(tensors, path, refuse=(bf16,))


@hookimpl
def candle_api_formats():
    return [
        FormatSpec(name="npy", extensions=(".npy",), sniff=sniff_npy, load=load_npy, save=save_npy,
                   description="NumPy .npy (memory-mapped, C or Fortran order)"),
        FormatSpec(name="npz", extensions=(".npz",), sniff=sniff_npz, load=load_npz, save=save_npz,
                   description="NumPy .npz (lazy per array)"),
    ]
