"""Zip archives (npz, PyTorch checkpoints) and mutants of their records' integer fields."""

from __future__ import annotations

import io
import struct
import zipfile

from ..case import interesting_int, pick
from . import truncated

#: record signature -> offsets of its integer fields (sizes, offsets, methods, flags, name lengths)
FIELDS = {b"PK\x03\x04": {6: "<H", 8: "<H", 18: "<I", 22: "<I", 26: "<H", 28: "<H"},
          b"PK\x01\x02": {8: "<H", 10: "<H", 20: "<I", 24: "<I", 28: "<H", 30: "<H", 42: "<I"},
          b"PK\x05\x06": {8: "<H", 10: "<H", 12: "<I", 16: "<I", 20: "<H"}}


def zip_bytes(members, method=zipfile.ZIP_STORED) -> bytes:
    """An archive of (name, bytes) pairs (a dict or a list: names may repeat)."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", method) as zf:
        for name, raw in (members.items() if isinstance(members, dict) else members):
            zf.writestr(name, raw)
    return out.getvalue()


def field_mutant(rng, raw: bytes) -> tuple[bytes, str]:
    """One integer field of a local header, central header or end record set to an extreme."""
    signature = pick(rng, list(FIELDS))
    positions = [i for i in range(len(raw) - 3) if raw[i:i + 4] == signature]
    if not positions:
        return truncated(rng, raw), "truncated"
    field, fmt = pick(rng, list(FIELDS[signature].items()))
    at = pick(rng, positions) + field
    value = interesting_int(rng, len(raw)) % (1 << (8 * struct.calcsize(fmt)))
    out = bytearray(raw)
    if at + struct.calcsize(fmt) <= len(out):
        struct.pack_into(fmt, out, at, value)
    return bytes(out), f"zip field {signature[2:4].hex()}+{field} = {value}"
