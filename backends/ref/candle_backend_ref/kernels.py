"""The kernel table of the ref device: every required row of the contract
(candle_api/contract/table.py) up to the version this backend implements, for
every dtype of the row, and nothing more. The core runs the optional rows as
decompositions into these.

Each family module maps a row's name to a maker: ``maker(dtype) -> kernel``,
called with the row's calling convention.
"""

from __future__ import annotations

import functools

import numpy as np

from candle_api.contract import ROWS
from candle_api.dtype import get_dtype

from . import CONTRACT_VERSION, conv, elementwise, index, matmul, memory, pool, reduce, resample

MAKERS = {**elementwise.KERNELS, **memory.KERNELS, **reduce.KERNELS, **matmul.KERNELS, **index.KERNELS,
          **conv.KERNELS, **pool.KERNELS, **resample.KERNELS}


def _quiet(kernel):
    """IEEE results (inf, NaN, wrapped integers) are answers, not warnings."""

    @functools.wraps(kernel)
    def run(*args):
        with np.errstate(all="ignore"):
            return kernel(*args)

    return run


def build_kernels() -> dict:
    """{(op, dtype name): kernel} for the required rows (bool: their u8 kernels, through the core)."""
    return {(row.name, dtype): _quiet(MAKERS[row.name](get_dtype(dtype)))
            for row in ROWS if row.required and row.since <= CONTRACT_VERSION for dtype in row.dtypes
            if dtype != "bool"}  # the core serves bool with the u8 kernels
