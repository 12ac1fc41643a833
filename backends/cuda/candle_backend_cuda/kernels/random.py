"""Seeded random fill (csrc/random.cu, Philox4x32-10): BackendDevice.random."""

from __future__ import annotations

from .common import THREADS, grid

MODULE = "random"


def fill(storage, dtype, n: int, dist: int, p0: float, p1: float, seed: int, offset: int) -> None:
    dev = storage.device
    storage.host = None
    fn = dev.function(MODULE, f"random_{dtype}")
    wrap = lambda v: (v & (2**64 - 1)) - (1 << 64) * bool(v & (1 << 63))  # u64 bits as an i64
    fn.launch(grid(dev, n), THREADS, storage.ptr, n, dist, float(p0), float(p1), wrap(seed), wrap(offset))
