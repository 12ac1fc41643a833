"""Reductions over a sorted tuple of dims (sum, prod, max, min, argmax, argmin)
and cumsum along one dim. Floats accumulate in float64, integers modulo 2^64."""

from __future__ import annotations

import numpy as np

from candle_api.dtype import u32

from .strided import load, store


def _reduce(fn):
    def make(dtype):
        def kernel(out, x, lx, dims):
            store(out, dtype, fn(load(x, lx, dtype), axis=dims))  # max/min propagate NaN

        return kernel

    return make


def _arg(fn):
    def make(dtype):
        def kernel(out, x, lx, dims):
            values = load(x, lx, dtype)
            kept = [d for d in range(values.ndim) if d not in dims]
            # the reduced dims last, flattened into one: its index is the flat index within dims
            rows = values.transpose(kept + list(dims)).reshape([values.shape[d] for d in kept] + [-1])
            store(out, u32, fn(rows, axis=-1))  # the first extreme (or the first NaN), as numpy

        return kernel

    return make


def _cumsum(dtype):
    def kernel(out, x, lx, dim):
        store(out, dtype, np.cumsum(load(x, lx, dtype), axis=dim))

    return kernel


KERNELS = {
    "sum": _reduce(np.sum),
    "prod": _reduce(np.prod),
    "max": _reduce(np.max),
    "min": _reduce(np.min),
    "argmax": _arg(np.argmax),
    "argmin": _arg(np.argmin),
    "cumsum": _cumsum,
}
