"""safetensors files (8-byte header length, JSON header, data) and mutants of
their header's fields, its JSON text and its data; sharded indexes too."""

from __future__ import annotations

import json
import os
import struct

import ml_dtypes
import numpy as np

from ..case import INTERESTING, interesting_int, pick
from . import Expected, random_shape, sample, splice, truncated

DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": ml_dtypes.bfloat16, "I64": np.int64,
          "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_, "U16": np.uint16,
          "U32": np.uint32, "U64": np.uint64, "F8_E4M3": ml_dtypes.float8_e4m3fn, "F8_E5M2": ml_dtypes.float8_e5m2,
          "F8_E8M0": ml_dtypes.float8_e8m0fnu}
NAMES = ["w", "bias", "model.layers.0.self_attn.q_proj.weight", "é", "a b", "0", "x" * 300, "\u2028"]
ODD_VALUES = INTERESTING + [[], [1], [1, 2, 3], "x", "F32", None, True, 1.5, {"a": 1}, [[0, 1]], [-1, 4],
                            float("nan"), 10**30, "1" * 5000]
JUNK = [b"{", b"}", b"[", b"]", b",", b":", b'"', b"\\", b"\xff", b"\x00", b"1e999", b"-", b"[" * 100_000,
        b'"\\ud800"', b"9" * 5000, b"NaN", b"\xed\xa0\x80"]


def tensors(rng) -> dict:
    """name -> array, of random dtypes and shapes (U64 values an i64 holds: they must load)."""
    out = {}
    for name in rng.permutation(NAMES)[:int(rng.integers(1, 4))]:
        code = pick(rng, list(DTYPES))
        array = sample(rng, DTYPES[code], random_shape(rng))
        out[str(name)] = array & np.uint64(2**63 - 1) if code == "U64" else array
    return out


def layout(arrays: dict, metadata: dict | None) -> tuple[dict, bytes]:
    """The header and data the reference writer would make."""
    header, data, codes = {}, bytearray(), {np.dtype(v): k for k, v in DTYPES.items()}
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, array in arrays.items():
        raw = np.ascontiguousarray(array).tobytes()
        header[name] = {"dtype": codes[array.dtype], "shape": list(array.shape),
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    return header, bytes(data)


def encode(header: dict, data: bytes) -> bytes:
    raw = json.dumps(header, allow_nan=True, ensure_ascii=False).encode("utf-8", "surrogatepass")
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw + data


def _field(rng, header: dict, data: bytes) -> tuple[dict, bytes, str]:
    """One header field (or the data) changed; the header is a fresh copy."""
    header = json.loads(json.dumps(header))
    names = [k for k in header if k != "__metadata__"]
    name = pick(rng, names)
    entry = header[name]
    kind = pick(rng, ["dtype", "shape", "offsets", "overlap", "gap", "missing", "metadata", "name", "data"])
    if kind == "dtype":
        entry["dtype"] = pick(rng, list(DTYPES) + ["F8", "f32", "", "C64", "F4", "F6_E2M3", 3, None, ["F32"]])
    elif kind == "shape":
        shape = list(entry["shape"]) or [1]
        shape[int(rng.integers(len(shape)))] = pick(rng, ODD_VALUES)
        entry["shape"] = pick(rng, [shape, pick(rng, ODD_VALUES), shape + [2], shape[:-1], shape + [0],
                                    [1] * 33, [2**32, 2**32, 0]])
    elif kind == "offsets":
        offsets = list(entry["data_offsets"])
        offsets[int(rng.integers(2))] = interesting_int(rng, offsets[1])
        entry["data_offsets"] = pick(rng, [offsets, offsets[::-1], pick(rng, ODD_VALUES), offsets + [0]])
    elif kind == "overlap":
        entry["data_offsets"] = header[pick(rng, names)]["data_offsets"]
    elif kind == "gap":
        entry["data_offsets"] = [o + int(rng.integers(1, 9)) for o in entry["data_offsets"]]
    elif kind == "missing":
        del entry[pick(rng, ["dtype", "shape", "data_offsets"])]
    elif kind == "metadata":
        header["__metadata__"] = pick(rng, [{"k": 1}, {"k": None}, {"k": {"a": "b"}}, [], "x", {"k": "v" * 10**6}])
    elif kind == "name":
        header[pick(rng, ["__metadata__", "", "\ud800", "x" * 100_000])] = header.pop(name)
    else:
        data = pick(rng, [data[:-1], data + b"\0", data[: len(data) // 2], b""])
    return header, data, f"{kind} of {name[:20]!r}"


def mutant(rng, header: dict, data: bytes) -> tuple[bytes, str]:
    kind = pick(rng, ["field", "field", "field", "length", "json text", "duplicate", "flip", "truncate"])
    if kind == "field":
        header, data, what = _field(rng, header, data)
        return encode(header, data), what
    raw = encode(header, data)
    n = struct.unpack("<Q", raw[:8])[0]
    if kind == "length":
        value = interesting_int(rng, n) % 2**64
        return struct.pack("<Q", value) + raw[8:], f"header length {value}"
    if kind == "json text":
        text = bytearray(raw[8:8 + n])
        at = int(rng.integers(len(text)))
        text[at:at + int(rng.integers(3))] = pick(rng, JUNK)
        return struct.pack("<Q", len(text)) + bytes(text) + data, "junk in the JSON text"
    if kind == "duplicate":
        name = pick(rng, [k for k in header if k != "__metadata__"])
        extra = json.dumps({name: header[name]}, ensure_ascii=False)[1:-1].encode()
        text = raw[8:8 + n].rstrip()[:-1] + b"," + extra + b"}"
        return struct.pack("<Q", len(text)) + text + data, "a name twice"
    if kind == "flip":
        lo, hi = pick(rng, [(0, 8 + n), (8 + n, len(raw))])
        return splice(rng, raw, lo, hi), "bytes changed"
    return truncated(rng, raw), "truncated"


def make(rng, folder, mutate: bool):
    """(path, expected arrays or None for a mutant, what)."""
    arrays, metadata = tensors(rng), pick(rng, [None, {}, {"format": "pt", "k": "é"}])
    header, data = layout(arrays, metadata)
    path = folder / "model.safetensors"
    if rng.random() < 0.15:
        return sharded(rng, folder, arrays, mutate)
    if not mutate:
        path.write_bytes(encode(header, data))
        return path, Expected(arrays, metadata or {}), "safetensors: valid"
    raw, what = mutant(rng, header, data)
    path.write_bytes(raw)
    return path, None, f"safetensors: {what}"


SHARD_NAMES = ["../outside.safetensors", "/etc/passwd", "a/../../b.safetensors", "model.safetensors.index.json",
               "missing.safetensors", "sub", "fifo.safetensors", "", 3, None, "s1.safetensors"]


def sharded(rng, folder, arrays: dict, mutate: bool):
    """An index and one shard per tensor; a mutant names shards it must not open."""
    weight_map = {}
    for i, (name, array) in enumerate(arrays.items()):
        shard = f"s{i}.safetensors"
        (folder / shard).write_bytes(encode(*layout({name: array}, None)))
        weight_map[name] = shard
    index = {"metadata": {"total_size": 0}, "weight_map": weight_map}
    what = "safetensors index: valid"
    if mutate:
        (folder / "sub").mkdir()
        os.mkfifo(folder / "fifo.safetensors")
        kind = pick(rng, ["shard", "shard", "extra name", "weight_map", "metadata"])
        if kind == "shard":
            weight_map[pick(rng, list(weight_map))] = pick(rng, SHARD_NAMES)
        elif kind == "extra name":
            weight_map["not.in.the.shard"] = "s0.safetensors"
        elif kind == "weight_map":
            index["weight_map"] = pick(rng, [[], "x", None, {"a": {"b": "c"}}])
        else:
            index["metadata"] = pick(rng, [[], "x", 3])
        what = f"safetensors index: {kind}"
    path = folder / "model.safetensors.index.json"
    path.write_text(json.dumps(index))
    return path, None if mutate else Expected(arrays, index["metadata"]), what
