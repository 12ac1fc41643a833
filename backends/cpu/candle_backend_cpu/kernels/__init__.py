"""The kernel table of the cpu device: ``{(op, dtype): kernel}``, one module per
kernel family.

Each kernel is a closure over one C function, looked up once when the table
is built, and follows the calling convention of its row of the contract
(:mod:`candle_api.contract`): contiguous inputs call the contiguous C entry
point with four arguments; other layouts pass a packed int64 descriptor
(:mod:`.descriptors`) to the strided entry point. A call costs the closure
and one ctypes call.

A family module's ``makers(lib)`` maps each kernel name it implements to the
factory of its closure for one dtype (None where the library has no kernel for
that dtype); the dtypes come from the kernel's row of the contract. bool has no
kernels of its own here: the core serves it with the u8 ones (same bytes).
"""

from __future__ import annotations

from candle_api.contract import BY_NAME
from candle_api.dtype import get_dtype

from .. import library
from . import conv, elementwise, fused, index, int8, matmul, memory, optim, panels, quantized, reduce, rnn, sort

FAMILIES = (elementwise, memory, reduce, matmul, index, conv, fused, optim, quantized, rnn, sort, panels, int8)


def build_kernels() -> dict:
    lib = library.load()
    kernels: dict = {}
    for family in FAMILIES:
        for name, make in family.makers(lib).items():
            for dtype in BY_NAME[name].dtypes:
                if dtype == "bool":
                    continue
                kernel = make(get_dtype(dtype))
                if kernel is not None:
                    kernels[(name, dtype)] = kernel
    return kernels
