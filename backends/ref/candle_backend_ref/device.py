"""Storages and the device object of the ref backend (the BackendDevice
contract, candle_api/contract/device.py).

A storage is host memory held as a 1-d numpy uint8 array: the kernels view
its bytes through layouts (strided.py), and nothing else in the core looks
inside it. A GPU backend keeps a device buffer here instead, and its kernels
launch on that buffer.
"""

from __future__ import annotations

import ctypes

import numpy as np

from candle_api.layout import Layout

from . import rng
from .strided import view

#: No allocation reaches this size: the core does not bound what it asks for
#: (a broadcast of views can ask for more than 2^64 bytes).
MAX_BYTES = 1 << 62


class RefStorage:
    """``buf`` (the bytes), ``nbytes`` and ``writable`` (the Storage contract),
    ``ptr`` (the host address, for DLPack export), and ``owner``: what keeps
    foreign memory alive, None for the backend's own."""

    __slots__ = ("buf", "nbytes", "writable", "owner", "__weakref__")  # weak: the core's version counts

    def __init__(self, buf: np.ndarray, owner=None):
        self.buf = buf
        self.nbytes = buf.nbytes
        self.writable = True
        self.owner = owner

    @property
    def ptr(self) -> int:
        return self.buf.ctypes.data


class RefDevice:
    """The ref device: host memory, NumPy kernels, no threads of its own."""

    def alloc(self, nbytes: int) -> RefStorage:
        if nbytes >= MAX_BYTES:
            raise MemoryError(f"cannot allocate {nbytes} bytes")
        return RefStorage(np.empty(nbytes, np.uint8))  # numpy raises MemoryError when the host has too little

    def from_numpy(self, array: np.ndarray, copy: bool):
        """Always a contiguous copy, as a device with memory of its own must make
        (``copy=False`` only permits sharing)."""
        array = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("="))
        storage = self.alloc(array.nbytes)
        storage.buf[:] = array.reshape(-1).view(np.uint8)
        return storage, None

    def to_numpy(self, storage: RefStorage, layout: Layout, dtype) -> np.ndarray:
        """A copy: nothing the caller does to it reaches the storage."""
        return view(storage, layout, dtype).copy()

    def wrap(self, ptr: int, nbytes: int, owner) -> RefStorage:
        """A storage over foreign host memory (DLPack import), kept alive by owner."""
        buf = np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(ptr)) if nbytes else np.empty(0, np.uint8)
        return RefStorage(buf, owner)

    def random(self, storage: RefStorage, dtype, n: int, dist: int, p0: float, p1: float, seed: int,
               offset: int) -> None:
        view(storage, Layout.contig((n,)), dtype)[...] = rng.draw(dtype, n, dist, p0, p1, seed, offset)

    def synchronize(self) -> None:
        """Kernels finish before they return."""

    def dlpack_device(self) -> tuple[int, int]:
        return (1, 0)  # host memory: DLPack's cpu device

    def get_num_threads(self) -> int:
        return 1

    def set_num_threads(self, n: int) -> None:
        """The kernels run on the calling thread."""
