"""The toy device's memory and its device object (the BackendDevice Protocol,
candle_api/contract/device.py).

A storage is a Python ``bytearray``: host memory, but not the cpu backend's,
so tensors move to and from it by copy as they would to a GPU. The core never
looks inside a storage beyond ``nbytes`` and ``writable``; the kernels of this
package view its bytes through a layout with :func:`view`.
"""

from __future__ import annotations

import ctypes
import sys

import numpy as np

from candle_api import DeviceError


class ToyStorage:
    __slots__ = ("buf", "nbytes", "writable", "__weakref__")

    def __init__(self, buf: bytearray):
        self.buf = buf
        self.nbytes = len(buf)
        self.writable = True  # the core refuses in-place ops on storages that say False

    @property
    def ptr(self) -> int:
        """The bytes' address, for DLPack export (a bytearray that is never resized does not move)."""
        return ctypes.addressof(ctypes.c_char.from_buffer(self.buf)) if self.nbytes else 0


def view(storage: ToyStorage, layout, dtype) -> np.ndarray:
    """The elements a layout selects, as a NumPy view of the storage's bytes: the
    layout's strides and offset are in elements, NumPy's in bytes. Any strides
    work: zero for a broadcast dim, negative for a flipped one."""
    if layout.numel == 0:  # nothing to read, whatever the offset says
        return np.empty(layout.shape, dtype.np)
    size = dtype.itemsize
    return np.ndarray(layout.shape, dtype.np, storage.buf, layout.offset * size,
                      tuple(s * size for s in layout.strides))


def write(out: ToyStorage, dtype, values) -> None:
    """Stores values (any NumPy dtype) into a kernel's output, which the core
    always allocates contiguous and of the right size: floats round to dtype,
    integers wrap (int64 to u8, say), as C casts do."""
    np.frombuffer(out.buf, dtype.np)[:] = np.ravel(values).astype(dtype.np)


class ToyDevice:
    """One toy device. Kernels are synchronous and single-threaded."""

    def alloc(self, nbytes: int) -> ToyStorage:
        if nbytes > sys.maxsize:  # bytearray() would raise OverflowError; the contract says MemoryError
            raise MemoryError(f"the toy device cannot allocate {nbytes} bytes")
        return ToyStorage(bytearray(nbytes))

    def from_numpy(self, array: np.ndarray, copy: bool):
        """Always a copy into a new bytearray (``copy=False`` only allows sharing):
        (storage, None), None meaning the contiguous layout of the array's shape."""
        array = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("="))
        return ToyStorage(bytearray(array.reshape(-1).view(np.uint8))), None

    def to_numpy(self, storage: ToyStorage, layout, dtype) -> np.ndarray:
        return view(storage, layout, dtype).copy()  # the caller's array must not alias device memory

    def wrap(self, ptr: int, nbytes: int, owner) -> ToyStorage:
        raise DeviceError("the toy device keeps its memory in bytearrays and cannot wrap foreign memory "
                          "(DLPack import): copy the data in instead, e.g. tensor.to_device('toy')")

    def random(self, storage: ToyStorage, dtype, n: int, dist: int, p0: float, p1: float, seed: int,
               offset: int) -> None:
        """Counter-based: element i is a function of (seed, offset + i) alone, here
        through NumPy's Philox generator, whose stream can start at any position."""
        u = _uniforms(seed, offset, n, lane=0)
        if dist == 0:
            values = (p0 + (p1 - p0) * u).astype(dtype.np)
            if p1 > p0:  # rounding to dtype must not reach the open upper bound
                values = np.minimum(values, np.nextafter(np.array(p1, dtype.np), np.array(-np.inf, dtype.np)))
        else:  # Box-Muller; 1 - u is in (0, 1], so the log is finite
            radius = np.sqrt(-2.0 * np.log1p(-u))
            values = (p0 + p1 * radius * np.cos(2 * np.pi * _uniforms(seed, offset, n, lane=1))).astype(dtype.np)
        write(storage, dtype, values)

    def synchronize(self) -> None:
        """Kernels finish before they return: nothing is queued."""

    def dlpack_device(self) -> tuple[int, int]:
        return (1, 0)  # DLPack's cpu: the bytes are host memory (see ToyStorage.ptr)

    def get_num_threads(self) -> int:
        return 1

    def set_num_threads(self, n: int) -> None:
        """The kernels run on the caller's thread: nothing to set."""


def _uniforms(seed: int, offset: int, n: int, lane: int) -> np.ndarray:
    """n doubles in [0, 1) from stream positions offset .. offset + n - 1 of the
    Philox stream keyed by (seed, lane). Philox makes four 64-bit words per
    counter value, so the stream starts at word offset % 4 of counter offset // 4."""
    bits = np.random.Philox(key=[seed & (2**64 - 1), lane], counter=offset // 4).random_raw(n + offset % 4)
    return (bits[offset % 4:] >> np.uint64(11)) * 2.0**-53
