"""CTranslate2 model.bin files (binary versions 1, 3 and 6), written by hand
so that every integer field's place is known, and mutants that set one of
those fields (version, a string length, the variable or alias count, a rank,
a dim, a dtype id, a byte count) to an extreme value."""

from __future__ import annotations

import struct

import ml_dtypes
import numpy as np

from ..case import interesting_int, pick
from . import Expected, random_shape, sample, splice, truncated

TYPE_IDS = {np.dtype(np.float32): 0, np.dtype(np.int8): 1, np.dtype(np.int16): 2, np.dtype(np.int32): 3,
            np.dtype(np.float16): 4, np.dtype(ml_dtypes.bfloat16): 5}
#: Before version 4 a variable gave its item size, read as f32, int16 or int8.
OLD_DTYPES = [np.float32, np.int16, np.int8]
NAMES = ["encoder/conv1/weight", "decoder/num_heads", "w", "é", "x" * 300, "a b"]


class _Writer:
    """Bytes, and the offset and struct format of every integer field written (to mutate one later)."""

    def __init__(self):
        self.raw, self.fields = bytearray(), []

    def int(self, fmt: str, value: int) -> None:
        self.fields.append((len(self.raw), fmt))
        self.raw += struct.pack(fmt, value)

    def string(self, text: str) -> None:
        raw = text.encode("utf-8")
        self.int("<H", len(raw) + 1)
        self.raw += raw + b"\0"


def write(arrays: dict, aliases: dict, version: int) -> _Writer:
    w = _Writer()
    w.int("<I", version)
    if version >= 2:
        w.string("WhisperSpec")
        w.int("<I", 3)
    w.int("<I", len(arrays))
    for name, a in arrays.items():
        w.string(name)
        w.int("<B", a.ndim)
        for d in a.shape:
            w.int("<I", d)
        if version >= 4:
            w.int("<B", TYPE_IDS[a.dtype])
            w.int("<I", a.nbytes)
        else:
            w.int("<B", a.dtype.itemsize)
            w.int("<I", a.size)
        w.raw += a.tobytes()
    if version >= 3:
        w.int("<I", len(aliases))
        for alias, target in aliases.items():
            w.string(alias)
            w.string(target)
    return w


def arrays(rng, version: int) -> dict:
    dtypes = list(TYPE_IDS) if version >= 4 else [np.dtype(d) for d in OLD_DTYPES]
    names = [str(n) for n in rng.permutation(NAMES)[:int(rng.integers(1, 4))]]
    return {name: sample(rng, pick(rng, dtypes), random_shape(rng, max_rank=3)) for name in names}


def expected(values: dict, aliases: dict) -> Expected:
    tensors = {**values, **{alias: values[target] for alias, target in aliases.items()}}
    return Expected(tensors, None)


def mutant(rng, w: _Writer) -> tuple[bytes, str]:
    raw = bytes(w.raw)
    kind = pick(rng, ["field", "field", "field", "flip", "truncate", "trailing"])
    if kind == "field":
        at, fmt = w.fields[int(rng.integers(len(w.fields)))]
        size = struct.calcsize(fmt)
        old = struct.unpack_from(fmt, raw, at)[0]
        value = interesting_int(rng, old) % (1 << (8 * size))
        return raw[:at] + struct.pack(fmt, value) + raw[at + size:], f"field at {at} ({fmt}) {old} -> {value}"
    if kind == "flip":
        return splice(rng, raw), "bytes changed"
    if kind == "trailing":
        return raw + bytes(rng.integers(0, 256, int(rng.integers(1, 16)), dtype=np.uint8)), "trailing bytes"
    return truncated(rng, raw), "truncated"


def make(rng, folder, mutate: bool):
    version = pick(rng, [1, 3, 6, 6])
    values = arrays(rng, version)
    aliases = {"alias/of/" + name: name for name in list(values)[:1]} if version >= 3 and rng.random() < 0.5 else {}
    w = write(values, aliases, version)
    path = folder / "model.bin"
    if not mutate:
        path.write_bytes(bytes(w.raw))
        return path, expected(values, aliases), f"ctranslate2 v{version}: valid"
    raw, what = mutant(rng, w)
    path.write_bytes(raw)
    return path, None, f"ctranslate2 v{version}: {what}"
