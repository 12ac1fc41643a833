"""Tensor repr, in Candle's style: the values, then ``Tensor[[dims], dtype]``."""

from __future__ import annotations

import numpy as np


def tensor_repr(t) -> str:
    arr = t.numpy()
    if t.dtype.is_float and t.dtype.itemsize == 2:
        arr = arr.astype(np.float32)
    body = np.array2string(arr, precision=4, threshold=1000, edgeitems=3, separator=", ")
    device = "" if t.device == "cpu" else f", {t.device}"
    return f"{body}\nTensor[{list(t.shape)}, {t.dtype}{device}]"
