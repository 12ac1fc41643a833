"""Valid files built from a seeded generator (with the values they hold), and
their structure-aware mutants: one module per format, each written
independently of the code under test."""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ..case import pick


class Expected(NamedTuple):
    """What loading a valid file must give: name -> values (or, for quantized
    GGUF tensors, their raw blocks), and the metadata when it is checked."""
    tensors: dict
    metadata: dict | None = None


def random_shape(rng, max_rank: int = 3, max_dim: int = 5) -> tuple:
    """A shape of 0 to max_rank dims, sometimes with an empty dim."""
    return tuple(int(rng.integers(0 if rng.random() < 0.1 else 1, max_dim + 1))
                 for _ in range(int(rng.integers(max_rank + 1))))


def sample(rng, dtype, shape) -> np.ndarray:
    """Values across the dtype's range: random bit patterns for floats (NaN,
    infinities, subnormals included) half the time, plain values otherwise."""
    dtype = np.dtype(dtype)
    n = math.prod(shape)
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
    if rng.random() < 0.5:
        bits = rng.integers(0, 256, size=n * dtype.itemsize, dtype=np.uint8)
        return bits.view(dtype).reshape(shape)
    return (rng.standard_normal(n) * pick(rng, [1.0, 100.0])).astype(dtype).reshape(shape)


def splice(rng, raw: bytes, lo: int = 0, hi: int | None = None) -> bytes:
    """raw with one to eight bytes in [lo, hi) overwritten, inserted or deleted."""
    hi = len(raw) if hi is None else min(hi, len(raw))
    if hi <= lo:
        lo, hi = 0, len(raw)
    if hi == 0:
        return bytes(rng.integers(0, 256, size=int(rng.integers(1, 9)), dtype=np.uint8))
    buf = bytearray(raw)
    at = int(rng.integers(lo, hi))
    junk = bytes(rng.integers(0, 256, size=int(rng.integers(1, 9)), dtype=np.uint8))
    kind = int(rng.integers(3))
    if kind == 0:
        buf[at:at + len(junk)] = junk
    elif kind == 1:
        buf[at:at] = junk
    else:
        del buf[at:at + len(junk)]
    return bytes(buf)


def truncated(rng, raw: bytes) -> bytes:
    return raw[:int(rng.integers(len(raw) + 1))]
