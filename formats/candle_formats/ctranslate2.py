"""CTranslate2's ``model.bin`` (binary versions 1-6), the weights of
faster-whisper models and of every other model CTranslate2 converts.

The layout, as CTranslate2's ``Model::load`` reads it (all little-endian):
u32 binary version; from version 2 the spec's name (a string) and a u32
spec revision; u32 variable count, then per variable its name, u8 rank, u32
dims, u8 dtype id (from version 4; before, a u8 item size and a u32 element
count instead of a byte count), u32 byte count and the data; from version 3,
u32 alias count and (alias, variable) name pairs. A string is a u16 length
counting a terminating NUL, then its UTF-8 bytes and the NUL.

Reading memory-maps the file (``mmap=False`` reads it into memory instead)
and each variable is a zero-copy view, read on first access. Scalars (a
model's options, such as ``decoder/num_heads``) are tensors of shape ().
An alias is one more name for its variable. dtype ids: 0 f32, 1 int8 (widened
to i16, see ``candle_formats.safetensors``), 2 int16, 3 int32, 4 f16, 5 bf16.
Quantized weights keep their ``*_scale`` variables beside them: dequantizing
is the model's business. Metadata: ``ctranslate2.binary_version``,
``ctranslate2.spec``, ``ctranslate2.spec_revision`` and
``ctranslate2.aliases`` (alias -> variable).

Every count, length, dim, dtype id and byte count is checked against the file
before it is used, so a malformed file raises
:class:`candle_api.errors.FormatError` (path, offset, reason). Read only: the
format is CTranslate2's converters' to write.
"""

from __future__ import annotations

import math
import struct
from functools import partial

import ml_dtypes
import numpy as np

from candle_api.hooks import FormatSpec, hookimpl
from candle_api.io import TensorFile

from ._common import MappedFile, check_shape, to_candle
from .gguf import _Cursor as Cursor

#: The newest binary version CTranslate2 writes (and the newest it reads).
MAX_VERSION = 6
_U8, _U16, _U32 = struct.Struct("<B"), struct.Struct("<H"), struct.Struct("<I")
#: dtype id -> numpy dtype (CTranslate2's DataType enum).
DTYPES = {0: np.dtype("<f4"), 1: np.dtype("i1"), 2: np.dtype("<i2"), 3: np.dtype("<i4"), 4: np.dtype("<f2"),
          5: np.dtype(ml_dtypes.bfloat16)}
#: Before version 4 a variable gave its item size; CTranslate2 took it for these.
_BY_ITEM_SIZE = {4: 0, 2: 2, 1: 1}
#: Bytes of a variable record besides its name and dims: rank, dtype, byte count.
_MIN_RECORD = 2 + 1 + 1 + 4


def _string(cur: Cursor, what: str) -> str:
    """A u16-length, NUL-terminated UTF-8 string."""
    at = cur.pos
    n = cur.scalar(_U16, f"{what} length")
    if n == 0:
        cur.fail(f"{what}: length 0 (a string holds at least its terminating NUL)", at)
    raw = bytes(cur.buf[cur.take(n, what):cur.pos])
    if raw[-1] != 0 or 0 in raw[:-1]:
        cur.fail(f"{what}: {raw[:40]!r} is not one NUL-terminated string", at)
    try:
        return raw[:-1].decode("utf-8")
    except UnicodeDecodeError:
        cur.fail(f"{what}: {raw[:40]!r} is not UTF-8", at)


def _version(cur: Cursor) -> int:
    version = cur.scalar(_U32, "binary version")
    if not 1 <= version <= MAX_VERSION:
        cur.fail(f"unsupported CTranslate2 binary version {version} (this reader knows 1-{MAX_VERSION})", 0)
    return version


def _variable(cur: Cursor, version: int) -> tuple[str, np.dtype, tuple, int]:
    """(name, dtype, shape, data offset) of the next variable record; the cursor moves past its data."""
    at = cur.pos
    name = _string(cur, "variable name")
    rank = cur.scalar(_U8, f"rank of {name!r}")
    dims = [cur.scalar(_U32, f"dims of {name!r}") for _ in range(rank)]
    shape = check_shape(dims, cur.path, at, name)
    if version >= 4:
        type_id = cur.scalar(_U8, f"dtype of {name!r}")
        if type_id not in DTYPES:
            cur.fail(f"{name!r} has unknown dtype id {type_id}", at)
        nbytes = cur.scalar(_U32, f"byte count of {name!r}")
    else:
        item_size = cur.scalar(_U8, f"item size of {name!r}")
        if item_size not in _BY_ITEM_SIZE:
            cur.fail(f"{name!r} has item size {item_size}, which is no CTranslate2 type", at)
        type_id = _BY_ITEM_SIZE[item_size]
        nbytes = cur.scalar(_U32, f"element count of {name!r}") * item_size
    dtype = DTYPES[type_id]
    if nbytes != math.prod(shape) * dtype.itemsize:
        cur.fail(f"{name!r}: {nbytes} data bytes for shape {list(shape)} of {dtype}, which needs "
                 f"{math.prod(shape) * dtype.itemsize}", at)
    return name, dtype, shape, cur.take(nbytes, f"data of {name!r}")


def _parse(cur: Cursor) -> tuple[dict, dict]:
    """(metadata, name -> (dtype, shape, data offset)), aliases included."""
    version = _version(cur)
    metadata = {"ctranslate2.binary_version": version}
    if version >= 2:
        metadata["ctranslate2.spec"] = _string(cur, "spec name")
        metadata["ctranslate2.spec_revision"] = cur.scalar(_U32, "spec revision")
    count = cur.count(_U32, "variable count", _MIN_RECORD)
    variables: dict = {}
    for _ in range(count):
        at = cur.pos
        name, *placement = _variable(cur, version)
        if name in variables:
            cur.fail(f"variable {name!r} appears twice", at)
        variables[name] = tuple(placement)
    aliases: dict = {}
    if version >= 3:
        for _ in range(cur.count(_U32, "alias count", 2 * 3)):
            at = cur.pos
            alias, target = _string(cur, "alias"), _string(cur, "aliased variable")
            if alias in variables or alias in aliases:
                cur.fail(f"alias {alias!r} names an existing variable", at)
            if target not in variables:
                cur.fail(f"alias {alias!r} refers to {target!r}, which is no variable", at)
            aliases[alias] = target
    metadata["ctranslate2.aliases"] = aliases
    return metadata, {**variables, **{alias: variables[target] for alias, target in aliases.items()}}


def _tensor(mf: MappedFile, name: str, dtype: np.dtype, shape: tuple, offset: int):
    return to_candle(mf.array(offset, dtype, shape, name), mf.path, offset, name)


def load(path, mmap: bool = True) -> TensorFile:
    mf = MappedFile(path, mmap)
    metadata, variables = _parse(Cursor(mf.buf, mf.path))
    entries = {name: partial(_tensor, mf, name, *placement) for name, placement in variables.items()}
    return TensorFile(entries, metadata, "ctranslate2", path)


def sniff(head: bytes, path) -> bool:
    """A known binary version followed by a NUL-terminated name: the spec's (version 2 on) or the first
    variable's (version 1, after the variable count)."""
    if len(head) < 8:
        return False
    version = _U32.unpack_from(head)[0]
    if not 1 <= version <= MAX_VERSION:
        return False
    at = 8 if version == 1 else 4
    if len(head) < at + 2:
        return False
    n = _U16.unpack_from(head, at)[0]
    name = head[at + 2:at + 2 + n]
    if not 1 < n == len(name) or name[-1] != 0:
        return False
    try:
        return name[:-1].decode("utf-8").isprintable()
    except UnicodeDecodeError:
        return False


@hookimpl
def candle_api_formats():
    # No extension: model.bin is PyTorch's name too; the header decides.
    return [FormatSpec(name="ctranslate2", sniff=sniff, load=load,
                       description="CTranslate2 model.bin, binary versions 1-6 (read only; faster-whisper's models)")]
