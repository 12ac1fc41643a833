""".npy files (written by NumPy) and mutants of their header's fields and text;
.npz archives and mutants of their zip records and members."""

from __future__ import annotations

import io
import struct
import zipfile

import numpy as np

from ..case import interesting_int, pick
from . import Expected, random_shape, sample, splice, truncated
from .zips import field_mutant, zip_bytes

#: dtypes candle-api reads (big-endian ones are made native, int8/uint16/uint64 widened)
DTYPES = ["<f2", "<f4", "<f8", ">f4", ">f8", "|i1", "<i2", "<i4", "<i8", ">i8", "|u1", "<u2", "<u4", "<u8", "|b1"]
DESCRS = ["'<f4'", "'>f8'", "'|b1'", "'|O'", "'<c8'", "'<U3'", "'V8'", "'(2,3)<f4'", "'f4,i4'", "[('a', '<f4')]",
          "'<M8[s]'", "'<f16'", "'S0'", "3", "None", "'xx'", "('<f4', (2,))", "{'a': 1}", "'<f4' 'x'", "'<u8'"]
SHAPES = ["()", "(0,)", "(3,)", "(-1,)", "(1180591620717411303424,)", "(1.5,)", "(True, 2)", "[2, 3]", "((2,3),)",
          "(" + "1," * 40 + ")", "(4611686018427387904, 0)", "(2, 3)", "(10**3,)", "(1 + 2,)", "(" * 300]
ORDERS = ["True", "False", "1", "None", "'yes'"]
HEADER_JUNK = ["{", "}", "(", ")", "'", ",", ":", "\\", "\x00", "[" * 200, "\n", "é", "#", "__import__('os')"]
MEMBER_NAMES = ["a.npy", "../a.npy", "/abs.npy", "a.txt", "dir/", "a.npy", "é.npy", ".npy", "x" * 300 + ".npy"]


def array(rng) -> np.ndarray:
    dtype = np.dtype(pick(rng, DTYPES))
    values = sample(rng, dtype.newbyteorder("="), random_shape(rng)).astype(dtype)
    if dtype.kind == "u" and dtype.itemsize == 8:
        values &= np.uint64(2**63 - 1)  # an i64 holds them: the file must load
    return np.asfortranarray(values) if rng.random() < 0.3 else values


def npy_bytes(values: np.ndarray, version=None) -> bytes:
    out = io.BytesIO()
    np.lib.format.write_array(out, values, version=version, allow_pickle=False)
    return out.getvalue()


def _npy_raw(header_text: str, data: bytes, version=(1, 0)) -> bytes:
    raw = header_text.encode("latin1", "replace")
    length = struct.pack("<H" if version == (1, 0) else "<I", len(raw) % (1 << 16 if version == (1, 0) else 1 << 32))
    return b"\x93NUMPY" + bytes(version) + length + raw + data


def npy_mutant(rng, raw: bytes) -> tuple[bytes, str]:
    data_at = 10 + struct.unpack("<H", raw[8:10])[0]
    kind = pick(rng, ["header field", "header field", "header text", "header length", "version", "data", "flip"])
    if kind == "header field":
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(io.BytesIO(raw[8:]))
        fields = {"descr": repr(np.lib.format.dtype_to_descr(dtype)), "fortran_order": str(fortran),
                  "shape": repr(shape)}
        field = pick(rng, list(fields))
        fields[field] = pick(rng, {"descr": DESCRS, "fortran_order": ORDERS, "shape": SHAPES}[field])
        text = "{" + ", ".join(f"'{k}': {v}" for k, v in fields.items()) + "}"
        text += " " * (-(len(text) + 11) % 64) + "\n"
        return _npy_raw(text, raw[data_at:], pick(rng, [(1, 0), (2, 0), (3, 0)])), f"npy header {field}"
    if kind == "header text":
        text = raw[10:data_at].decode("latin1")
        at = int(rng.integers(len(text)))
        return _npy_raw(text[:at] + pick(rng, HEADER_JUNK) + text[at + int(rng.integers(3)):], raw[data_at:]), kind
    if kind == "header length":
        value = interesting_int(rng, data_at - 10) % (1 << 16)
        return raw[:8] + struct.pack("<H", value) + raw[10:], f"npy header length {value}"
    if kind == "version":
        return raw[:6] + bytes([int(rng.integers(256)), int(rng.integers(256))]) + raw[8:], kind
    if kind == "data":
        return pick(rng, [raw[:-1], raw + b"\0" * 8, raw[:data_at]]), "npy data size"
    return splice(rng, raw), "npy bytes changed"


def npz_mutant(rng, members: dict) -> tuple[bytes, str]:
    method = pick(rng, [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
    kind = pick(rng, ["zip field", "zip field", "member", "member", "names", "bomb", "flip", "truncate"])
    if kind == "zip field":
        return field_mutant(rng, zip_bytes(members, method))
    if kind == "member":
        name = pick(rng, list(members))
        raw, what = npy_mutant(rng, members[name])
        return zip_bytes(dict(members, **{name: raw}), method), f"member {what}"
    if kind == "names":
        name = pick(rng, MEMBER_NAMES)
        return zip_bytes(list(members.items()) + [(name, members[next(iter(members))])], method), \
            f"member named {name[:20]!r}"
    if kind == "bomb":  # a valid member that inflates a thousandfold: it loads (the file justifies it)
        zeros = npy_bytes(np.zeros(int(rng.integers(1, 8)) << 20, np.uint8))
        return zip_bytes(dict(members, bomb=zeros), zipfile.ZIP_DEFLATED), "deflate bomb of a few MiB"
    raw = zip_bytes(members, method)
    return (splice(rng, raw), "zip bytes changed") if kind == "flip" else (truncated(rng, raw), "truncated")


def make(rng, folder, mutate: bool):
    if rng.random() < 0.5:
        values = array(rng)
        raw = npy_bytes(values, pick(rng, [None, (1, 0), (2, 0)]))
        path = folder / "a.npy"
        if not mutate:
            path.write_bytes(raw)
            return path, Expected({"arr_0": values}, {}), "npy: valid"
        raw, what = npy_mutant(rng, npy_bytes(values, (1, 0)))
        path.write_bytes(raw)
        return path, None, f"npy: {what}"
    arrays = {name: array(rng) for name in ["a", "b", "c"][:int(rng.integers(1, 4))]}
    members = {f"{name}.npy": npy_bytes(values) for name, values in arrays.items()}
    path = folder / "a.npz"
    if not mutate:
        path.write_bytes(zip_bytes(members, pick(rng, [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])))
        return path, Expected(arrays, {}), "npz: valid"
    raw, what = npz_mutant(rng, members)
    path.write_bytes(raw)
    return path, None, f"npz: {what}"
