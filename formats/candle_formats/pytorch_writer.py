"""Writing PyTorch checkpoints: the zip format ``torch.save`` writes, which
``torch.load(path, weights_only=True)`` and this package's reader load.

The archive (stored, not deflated) holds, under ``archive/``:

- ``data.pkl``: a protocol-2 pickle of a dict of name -> tensor, written here
  opcode by opcode. A tensor is ``torch._utils._rebuild_tensor_v2(storage,
  0, size, stride, False, collections.OrderedDict())`` (``_rebuild_tensor_v3``
  with an untyped storage and ``torch.uint32`` for u32, as torch writes it),
  its storage the persistent id ``("storage", torch.<Kind>Storage, key,
  "cpu", numel)``. Nothing else is pickled: the only globals are those
  torch's weights-only unpickler allows.
- ``data/<key>``: each tensor's values, contiguous and little-endian, one
  record per tensor (views that share memory are written apart), its bytes
  aligned to 64 in the file, as torch aligns them (``.storage_alignment``).
- ``byteorder`` ("little"), ``version`` ("3"), ``.format_version`` ("1").
"""

from __future__ import annotations

import struct
import sys
import zipfile

import numpy as np

from candle_api.errors import FormatError

from ._common import tensor_items
from .atomic import atomic_write

FOLDER = "archive"
ALIGNMENT = 64
#: candle-api dtype -> the torch storage class torch.save names for it (u32 has none: an untyped storage)
STORAGES = {"f32": "FloatStorage", "f64": "DoubleStorage", "f16": "HalfStorage", "bf16": "BFloat16Storage",
            "i64": "LongStorage", "i32": "IntStorage", "i16": "ShortStorage", "u8": "ByteStorage",
            "bool": "BoolStorage"}
UNTYPED = {"u32": "uint32"}


class _Pickle:
    """The few pickle opcodes a state dict of tensors needs (protocol 2)."""

    def __init__(self) -> None:
        self.out = bytearray(b"\x80\x02")  # PROTO 2

    def global_(self, module: str, name: str) -> None:
        self.out += b"c" + f"{module}\n{name}\n".encode()

    def str_(self, text: str) -> None:
        raw = text.encode("utf-8")
        self.out += b"X" + struct.pack("<I", len(raw)) + raw  # BINUNICODE

    def int_(self, n: int) -> None:
        if 0 <= n < 256:
            self.out += b"K" + bytes([n])  # BININT1
        elif -(2**31) <= n < 2**31:
            self.out += b"J" + struct.pack("<i", n)  # BININT
        else:
            raw = n.to_bytes((n.bit_length() + 8) // 8, "little", signed=True)
            self.out += b"\x8a" + bytes([len(raw)]) + raw  # LONG1

    def ints(self, values) -> None:
        """A tuple of ints."""
        self.out += b"("  # MARK
        for v in values:
            self.int_(int(v))
        self.out += b"t"  # TUPLE

    def empty_ordered_dict(self) -> None:
        self.global_("collections", "OrderedDict")
        self.out += b")R"  # EMPTY_TUPLE, REDUCE

    def tensor(self, key: str, dtype: str, shape: tuple, numel: int, itemsize: int) -> None:
        """_rebuild_tensor_v2/v3 of a contiguous tensor over storage record ``key``
        (an untyped storage counts bytes, a typed one elements)."""
        untyped = UNTYPED.get(dtype)
        self.global_("torch._utils", "_rebuild_tensor_v3" if untyped else "_rebuild_tensor_v2")
        self.out += b"(("  # the arguments, then the persistent id
        self.str_("storage")
        self.global_(*(("torch.storage", "UntypedStorage") if untyped else ("torch", STORAGES[dtype])))
        self.str_(key)
        self.str_("cpu")
        self.int_(numel * itemsize if untyped else numel)
        self.out += b"tQ"  # TUPLE, BINPERSID
        self.int_(0)
        self.ints(shape)
        self.ints(_contiguous_strides(shape))
        self.out += b"\x89"  # NEWFALSE: requires_grad
        self.empty_ordered_dict()  # backward hooks
        if untyped:
            self.global_("torch", untyped)  # v3's dtype
        self.out += b"tR"  # TUPLE, REDUCE

    def dict_(self, items) -> None:
        """items: (name, writer) pairs, each writer pickling one value."""
        self.out += b"}"  # EMPTY_DICT
        for start in range(0, len(items), 1000):  # SETITEMS batches, as pickle writes them
            self.out += b"("
            for name, write in items[start:start + 1000]:
                self.str_(name)
                write()
            self.out += b"u"
        self.out += b"."  # STOP


def _contiguous_strides(shape: tuple) -> tuple:
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= max(d, 1)
    return tuple(reversed(strides))


def _stored_info(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(f"{FOLDER}/{name}", date_time=(1980, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_STORED
    return info


def _aligned(zf: zipfile.ZipFile, name: str, nbytes: int) -> zipfile.ZipInfo:
    """A member whose data will start at a multiple of ALIGNMENT: its local header
    gets an extra field of padding (id "FB", as torch writes it)."""
    info = _stored_info(name)
    zip64 = 20 if nbytes >= zipfile.ZIP64_LIMIT else 0  # zipfile appends its zip64 extra to the header
    start = zf.fp.tell() + 30 + len(info.filename.encode()) + 4 + zip64
    pad = -start % ALIGNMENT
    info.extra = b"FB" + struct.pack("<H", pad) + b"Z" * pad
    return info


def save(tensors, path, metadata=None) -> None:
    """Writes name -> Tensor as a torch.save zip checkpoint."""
    if str(path).lower().endswith(".index.json"):
        raise FormatError(path, None, "a sharded checkpoint's index is not written: name a .pt, .pth or .bin file")
    if metadata:
        raise ValueError(f"{path}: a PyTorch checkpoint has no metadata field; save metadata beside it "
                         "(or use safetensors, whose header holds str -> str metadata)")
    items = tensor_items(tensors, path)
    pickle = _Pickle()
    pickle.dict_([(name, (lambda k=str(i), t=t: pickle.tensor(k, t.dtype.name, t.shape, t.numel(), t.dtype.itemsize)))
                  for i, (name, t) in enumerate(items)])
    with atomic_write(path) as f, zipfile.ZipFile(f, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr(_stored_info("data.pkl"), bytes(pickle.out))
        zf.writestr(_stored_info(".format_version"), b"1")
        zf.writestr(_stored_info(".storage_alignment"), str(ALIGNMENT).encode())
        zf.writestr(_stored_info("byteorder"), b"little")
        for i, (_, t) in enumerate(items):  # one tensor in memory at a time
            values = np.ascontiguousarray(t.numpy())
            if sys.byteorder != "little":
                values = values.byteswap()
            with zf.open(_aligned(zf, f"data/{i}", values.nbytes), "w",
                         force_zip64=values.nbytes >= zipfile.ZIP64_LIMIT) as member:
                member.write(values.reshape(-1).view(np.uint8).data)
        zf.writestr(_stored_info("version"), b"3\n")
