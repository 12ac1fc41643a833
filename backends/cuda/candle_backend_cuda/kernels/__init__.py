"""The kernel table of the cuda device: every required row of the contract
(candle_api/contract/table.py) up to the version this backend implements,
for every dtype, and the optional rows it has a kernel for; the core runs
the other optional rows as decompositions (``candle info`` lists which).

Each family module maps a row's name to a maker, ``maker(dtype) -> kernel``
(or None for a dtype it leaves to the decomposition). A kernel finds its
device through its output storage and launches on that device's stream.
"""

from __future__ import annotations

from candle_api.contract.helpers import kernel_table

from .. import CONTRACT_VERSION, DTYPES
from . import elementwise, fused, image, index, matmul, memory, quantized, reduce

MAKERS = {**elementwise.KERNELS, **memory.KERNELS, **reduce.KERNELS, **matmul.KERNELS, **index.KERNELS,
          **image.KERNELS, **fused.KERNELS, **quantized.KERNELS}


def build_kernels() -> dict:
    """{(op, dtype name): kernel}."""
    return kernel_table(MAKERS, CONTRACT_VERSION, DTYPES)
