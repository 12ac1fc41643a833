"""Pooling over (batch, channels, h, w) windows: max_pool2d and avg_pool2d.
params, as the core passes them: (b, c, h, w, kh, kw, sh, sw, ph, pw, dh, dw,
oh, ow, count_include_pad). Values pass through float64, exact for every
dtype the contract lists (all but i64)."""

from __future__ import annotations

import numpy as np

from .strided import store, view
from .windows import windows


def _pool(average: bool):
    def make(dtype):
        def kernel(out, x, lx, params):
            b, c, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow, include_pad = params
            geometry = ((kh, kw), (sh, sw), (dh, dw), (oh, ow))
            values = view(x, lx, dtype).astype(np.float64)
            if average:
                total = windows(values, (ph, pw), *geometry).sum(axis=(-2, -1))
                # the divisor: taps inside the image, or inside the padded image
                inside = np.ones((h + 2 * ph, w + 2 * pw)) if include_pad else np.ones((h, w))
                count = windows(inside, (0, 0) if include_pad else (ph, pw), *geometry).sum(axis=(-2, -1))
                result = total / np.maximum(count, 1)
            else:  # padding never wins; NaN propagates
                result = windows(values, (ph, pw), *geometry, fill=-np.inf).max(axis=(-2, -1))
            if dtype.is_int:  # an integer average truncates toward zero
                result = np.trunc(result).astype(np.int64)
            store(out, dtype, result)

        return kernel

    return make


KERNELS = {"max_pool2d": _pool(False), "avg_pool2d": _pool(True)}
