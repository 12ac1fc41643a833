"""Batched matrix products: (batch..., m, k) @ (batch..., k, n), the batch dims
already broadcast by the core. Floats multiply in float64, integers modulo 2^64."""

from __future__ import annotations

import numpy as np

from .strided import load, store


def _matmul(dtype):
    def kernel(out, a, la, b, lb):
        store(out, dtype, np.matmul(load(a, la, dtype), load(b, lb, dtype)))

    return kernel


KERNELS = {"matmul": _matmul}
