"""The op codes of csrc/ops.cuh, read from that file: a code is written once,
where the kernels switch on it."""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

OPS_HEADER = Path(__file__).resolve().parent.parent / "csrc" / "ops.cuh"


@lru_cache(maxsize=None)
def codes(family: str) -> dict[str, int]:
    """{op name: code} of a family (UNARY, PARAM, BINARY, CMP, REDUCE, DT)."""
    found = re.findall(rf"^#define {family}_(\w+) (\d+)$", OPS_HEADER.read_text(), re.M)
    return {name: int(code) for name, code in found}
