"""Launching a kernel: its parameters packed into one buffer as the device ABI
lays them out (natural alignment, as cuLaunchKernel's
CU_LAUNCH_PARAM_BUFFER_POINTER takes them), layouts merged to their fewest
dims, the grid sized, and the launch's status checked.

A parameter list is a string of type codes, in the order of the kernel's C
parameters: ``p`` a pointer, ``q`` i64, ``i`` i32, ``d`` f64, ``f`` f32,
``1`` ``2`` ``3`` a ``Strided<K>`` layout (csrc/common.cuh) of K operands,
``q[n]`` a struct of n i64.
tests/test_build.py checks every signature against the parameter sizes nvcc
recorded in the fatbins.
"""

from __future__ import annotations

import ctypes
import re
import struct
import threading

from candle_api.contract.helpers import merge_dims as merge  # noqa: F401 (the kernels import it from here)
from candle_api.layout import Layout, numel

from . import driver as cu

#: csrc/common.cuh's MAXD: the dims a layout passes to a kernel.
MAXD = 8
#: Threads per block of the one-dimensional kernels.
THREADS = 256

_CODES = {"p": ("Q", 8), "q": ("q", 8), "i": ("i", 4), "d": ("d", 8), "f": ("f", 4)}


def _strided_format(k: int) -> tuple[str, int]:
    """Strided<K>: i64 shape[MAXD], i64 st[K][MAXD], i32 rank, padded to 8 bytes."""
    return f"{MAXD * (1 + k)}qi4x", 8


def param_layout(signature: str) -> tuple[str, list[tuple[int, int]]]:
    """(struct format, [(offset, size) of each C parameter]): the device ABI's layout of a
    parameter list, each member at its natural alignment, and no padding after the last: the
    driver refuses a parameter buffer of any size but the kernel's (CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES)."""
    fmt, at, members = "<", 0, []
    for code in re.findall(r"q\[\d+\]|.", signature):
        if code.startswith("q["):
            part, align = f"{code[2:-1]}q", 8
        else:
            part, align = _strided_format(int(code)) if code.isdigit() else _CODES[code]
        pad = -at % align
        size = struct.calcsize("<" + part)
        fmt += "x" * pad + part
        members.append((at + pad, size))
        at += pad + size
    return fmt, members


def param_struct(signature: str) -> struct.Struct:
    """The struct that packs a parameter list (see param_layout)."""
    return struct.Struct(param_layout(signature)[0])


def strided(shape: tuple, *strides: tuple) -> list[int]:
    """A Strided<K> layout's values (shape, each operand's strides, rank), padded to MAXD."""
    rank = len(shape)
    pad = [0] * (MAXD - rank)
    values = [*shape, *pad]
    for s in strides:
        values += [*s, *pad]
    return values + [rank]


def contiguous_values(k: int) -> list[int]:
    """The Strided<K> of rank 0: every operand read in order."""
    return [0] * (MAXD * (1 + k)) + [0]


def is_contiguous(shape: tuple, strides: list[tuple]) -> bool:
    """Merged, every operand reads its elements in order."""
    return len(shape) == 0 or (len(shape) == 1 and all(s == (1,) for s in strides))


def outer_splits(shape: tuple, strides: list[tuple]):
    """(element offsets per operand, flat start, inner shape, inner strides) for
    each launch over a merged layout: one launch when it has at most MAXD dims,
    else one per position of the outer dims beyond MAXD."""
    if len(shape) <= MAXD:
        yield [0] * len(strides), 0, shape, strides
        return
    outer, inner = shape[:-MAXD], shape[-MAXD:]
    inner_n = numel(inner)
    inner_strides = [s[-MAXD:] for s in strides]
    for flat, offs in enumerate(positions(outer, strides)):
        yield offs, flat * inner_n, inner, inner_strides


def positions(shape: tuple, strides: list[tuple]):
    """Each operand's element offset at every position of shape, in C order (strides may be longer
    than shape: their leading dims count)."""
    for flat in range(numel(shape)):
        rest, offs = flat, [0] * len(strides)
        for d in range(len(shape) - 1, -1, -1):
            c = rest % shape[d]
            rest //= shape[d]
            for k, s in enumerate(strides):
                offs[k] += c * s[d]
        yield offs


def blocks_for(n: int, sms: int, threads: int = THREADS) -> int:
    """Blocks of a grid-stride loop over n items: enough to fill the GPU, no more."""
    return max(1, min(-(-n // threads), sms * 32))


class Function:
    """One kernel of one device's loaded module: ``launch(grid, block, *args)``. Its parameter buffer
    and the launch's ``extra`` list are made once (a launch's host time is what a small model waits
    for); a lock keeps two threads from packing into the buffer at once, and the driver copies the
    parameters when it queues the launch."""

    __slots__ = ("device", "name", "handle", "struct", "params", "size", "extra", "lock")

    def __init__(self, device, name: str, handle, signature: str):
        self.device, self.name, self.handle = device, name, handle
        self.struct = param_struct(signature)
        self.params = ctypes.create_string_buffer(self.struct.size)
        self.size = ctypes.c_size_t(self.struct.size)
        self.extra = (ctypes.c_void_p * 5)(cu.LAUNCH_PARAM_BUFFER_POINTER, ctypes.addressof(self.params),
                                           cu.LAUNCH_PARAM_BUFFER_SIZE, ctypes.addressof(self.size),
                                           cu.LAUNCH_PARAM_END)
        self.lock = threading.Lock()

    def launch(self, grid, block, *args, shared: int = 0) -> None:
        gx, gy, gz = (*grid, 1, 1)[:3] if isinstance(grid, tuple) else (grid, 1, 1)
        bx, by, bz = (*block, 1, 1)[:3] if isinstance(block, tuple) else (block, 1, 1)
        dev = self.device
        dev.make_current()
        with self.lock:
            self.struct.pack_into(self.params, 0, *args)
            rc = dev.lib.cuLaunchKernel(self.handle, gx, gy, gz, bx, by, bz, shared, dev.stream, None, self.extra)
        if rc:
            raise cu.exception(rc, f"{dev.name}: launching kernel {self.name} (grid {gx}x{gy}x{gz}, block "
                                   f"{bx}x{by}x{bz}, {shared} bytes of shared memory)")


def address(storage, layout: Layout, itemsize: int) -> int:
    """The device address of a layout's element 0."""
    return storage.ptr + layout.offset * itemsize
