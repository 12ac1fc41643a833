"""GGUF files (v1-v3), written by hand so that every integer field's place
is known, and mutants that set one of those fields (a count, a length, a
type, a dim, an offset, the alignment...) to an extreme value."""

from __future__ import annotations

import struct

import ml_dtypes
import numpy as np

from ..case import interesting_int, pick
from . import Expected, random_shape, sample, splice, truncated

# metadata value types
U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
SCALAR_FORMATS = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f", BOOL: "<B",
                  U64: "<Q", I64: "<q", F64: "<d"}
#: ggml type name -> (type id, values per block, bytes per block; None: plain values of that numpy type)
TYPES = {"f32": (0, np.float32), "f16": (1, np.float16), "bf16": (30, ml_dtypes.bfloat16), "q4_0": (2, (32, 18)),
         "q8_0": (8, (32, 34)), "q4k": (12, (256, 144)), "q6k": (14, (256, 210)), "iq4_nl": (20, (32, 18)),
         "iq4_xs": (23, (256, 136)), "mxfp4": (39, (32, 17))}
KVS = [("general.architecture", STRING, "llama"), ("general.name", STRING, "é\x00x"), ("a.u32", U32, 7),
       ("a.i8", I8, -3), ("a.f32", F32, 0.5), ("a.bool", BOOL, 1), ("a.u64", U64, 2**63),
       ("tokenizer.ggml.tokens", ARRAY, (STRING, ["a", "bc", ""])), ("a.ids", ARRAY, (I32, [1, -2, 3])),
       ("a.nested", ARRAY, (ARRAY, [(U8, [1]), (F64, [2.0])])), ("a.empty", ARRAY, (F32, []))]


class Writer:
    """GGUF bytes, recording where each integer field lies."""

    def __init__(self, version: int):
        self.out = bytearray()
        self.fields: list[tuple[int, str]] = []  # (offset, struct format)
        self.size_fmt = "<I" if version == 1 else "<Q"

    def int(self, fmt: str, value: int) -> None:
        self.fields.append((len(self.out), fmt))
        self.out += struct.pack(fmt, value)

    def string(self, text: str) -> None:
        raw = text.encode("utf-8", "surrogateescape")
        self.int(self.size_fmt, len(raw))
        self.out += raw

    def value(self, vtype: int, value) -> None:
        if vtype == STRING:
            self.string(value)
        elif vtype == ARRAY:
            item_type, items = value
            self.int("<I", item_type)
            self.int(self.size_fmt, len(items))
            for item in items:
                self.value(item_type, item)
        elif vtype in (F32, F64):
            self.out += struct.pack(SCALAR_FORMATS[vtype], value)
        else:
            self.int(SCALAR_FORMATS[vtype], value)

    def pad(self, alignment: int) -> None:
        self.out += bytes(-len(self.out) % alignment)


def tensor_data(rng, type_name: str) -> tuple[tuple, bytes, object]:
    """(logical shape, raw bytes, expected: values for plain types, the raw blocks for quantized ones)."""
    _, layout = TYPES[type_name]
    if isinstance(layout, tuple):
        block, size = layout
        rows = int(rng.integers(0, 3))
        shape = (rows, block * int(rng.integers(1, 3)))
        raw = rng.integers(0, 256, size=rows * shape[1] // block * size, dtype=np.uint8).tobytes()
        return shape, raw, raw
    shape = tuple(max(d, 1) for d in random_shape(rng, max_rank=4)) or (1,)  # ggml tensors have dims >= 1
    values = sample(rng, layout, shape)
    return shape, values.tobytes(), values


def build(rng) -> tuple[Writer, dict]:
    version = pick(rng, [1, 2, 3, 3])
    alignment = pick(rng, [32, 32, 64, 8])
    kvs = [KVS[i] for i in sorted(rng.permutation(len(KVS))[:int(rng.integers(0, len(KVS) + 1))])]
    if alignment != 32:
        kvs.append(("general.alignment", U32, alignment))
    tensors = [(f"t{i}.{name}", name, *tensor_data(rng, name))
               for i, name in enumerate(pick(rng, list(TYPES)) for _ in range(int(rng.integers(0, 4))))]
    w = Writer(version)
    w.out += b"GGUF"
    w.int("<I", version)
    w.int(w.size_fmt, len(tensors))
    w.int(w.size_fmt, len(kvs))
    for key, vtype, value in kvs:
        w.string(key)
        w.int("<I", vtype)
        w.value(vtype, value)
    offset = 0
    for name, type_name, shape, raw, _ in tensors:
        w.string(name)
        w.int("<I", len(shape))
        for d in reversed(shape):
            w.int(w.size_fmt, d)
        w.int("<I", TYPES[type_name][0])
        w.int("<Q", offset)
        offset += len(raw) + (-len(raw) % alignment)
    w.pad(alignment)
    data_start = len(w.out)
    for *_, raw, _ in tensors:
        w.out += raw
        w.pad(alignment)
    w.fields = [f for f in w.fields if f[0] < data_start]
    return w, {name: expected for name, _, _, _, expected in tensors}


def mutant(rng, w: Writer) -> tuple[bytes, str]:
    raw = bytearray(w.out)
    kind = pick(rng, ["field", "field", "field", "field", "splice", "truncate"])
    if kind == "field" and w.fields:
        at, fmt = pick(rng, w.fields)
        size = struct.calcsize(fmt)
        old = struct.unpack_from(fmt, raw, at)[0]
        value = interesting_int(rng, old) % (1 << (8 * size))
        raw[at:at + size] = value.to_bytes(size, "little")
        return bytes(raw), f"field at {at} ({fmt}) {old} -> {value}"
    if kind == "splice":
        return splice(rng, bytes(raw), 0, max(f[0] for f in w.fields) + 8 if w.fields else None), "bytes changed"
    return truncated(rng, bytes(raw)), "truncated"


def make(rng, folder, mutate: bool):
    w, expected = build(rng)
    path = folder / "model.gguf"
    if not mutate:
        path.write_bytes(bytes(w.out))
        return path, Expected(expected), "gguf: valid"
    raw, what = mutant(rng, w)
    path.write_bytes(raw)
    return path, None, f"gguf: {what}"
