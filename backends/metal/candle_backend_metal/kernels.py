"""The kernel table of the wgpu device: every required row of the contract
(candle_api/contract/table.py) up to the version this backend implements,
for every dtype the device holds, and the optional rows it has a kernel for.
The core runs the other optional rows (and optional rows in the dtypes a
maker declines) as decompositions (``candle info``
lists which; see docs/metal.md).

Each family module maps a row's name to a maker: ``maker(dtype) -> kernel``
(or None).
"""

from __future__ import annotations

from candle_api.contract.helpers import kernel_table

from . import CONTRACT_VERSION, DTYPES, conv, elementwise, fused, index, matmul, memory, quantized, reduce

MAKERS = {**elementwise.KERNELS, **memory.KERNELS, **reduce.KERNELS, **matmul.KERNELS, **index.KERNELS,
          **conv.KERNELS, **fused.KERNELS, **quantized.KERNELS}


def build_kernels() -> dict:
    """{(op, dtype name): kernel}; a maker answers None for a dtype it leaves to the decomposition."""
    return kernel_table(MAKERS, CONTRACT_VERSION, DTYPES)
