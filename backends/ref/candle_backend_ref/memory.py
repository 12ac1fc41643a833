"""Memory kernels: strided copy and fill, in place on the destination's layout.
Elements move as they are, bit for bit."""

from __future__ import annotations

import numpy as np

from .strided import view


def _copy(dtype):
    def kernel(dst, ldst, src, lsrc):
        # numpy buffers the source when the two views overlap
        view(dst, ldst, dtype)[...] = view(src, lsrc, dtype)

    return kernel


def _fill(dtype):
    def kernel(dst, ldst, value: bytes):
        view(dst, ldst, dtype)[...] = np.frombuffer(value, dtype.np, count=1)[0]

    return kernel


KERNELS = {"copy": _copy, "fill": _fill}
