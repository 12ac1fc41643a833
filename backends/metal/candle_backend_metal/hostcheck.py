"""Checks that must raise before a kernel runs: integer division by zero,
negative integer exponents, indices outside their dimension. The GPU cannot
raise, so the values are checked here, with the messages every backend
gives: from the host copy of a small upload (indices sent from the host, the
common case), else read back (a small copy, after the work that made them)."""

from __future__ import annotations

import numpy as np

from candle_api.errors import KernelError, check_indices


def values(storage, layout, dtype) -> np.ndarray:
    """The layout's elements: from the host copy a small upload keeps, else read back."""
    if storage.host is not None:
        flat = storage.host.view(dtype.np)
        isz = dtype.itemsize
        return np.lib.stride_tricks.as_strided(flat[layout.offset:], layout.shape,
                                               tuple(s * isz for s in layout.strides), writeable=False)
    return storage.device.to_numpy(storage, layout, dtype)


def check_nonzero(storage, layout, dtype) -> None:
    if not values(storage, layout, dtype).all():
        raise KernelError("integer division by zero")


def check_nonnegative(storage, layout, dtype) -> None:
    if (values(storage, layout, dtype) < 0).any():
        raise KernelError("integers to negative integer powers are not allowed")


def indices(op: str, storage, layout, dtype, size: int) -> np.ndarray:
    """The indices as int64, each checked to lie in [0, size)."""
    return check_indices(op, values(storage, layout, dtype).astype(np.int64), size)
