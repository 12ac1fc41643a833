"""Storages and the device object of the wgpu backend (the BackendDevice
contract, candle_api/contract/device.py).

A storage is one WebGPU buffer from the caching allocator; its ``__del__``
gives the buffer back. Host copies go through staging buffers (gpu.py). The
device holds f32, f16, bf16, u8, u32, i16, i32 and i64 (WGSL has no 64-bit
types: i64 is emulated on pairs of 32-bit words, exactly); it refuses f64,
naming itself.
"""

from __future__ import annotations

import numpy as np

from candle_api.contract.helpers import read_layout
from candle_api.errors import DeviceError, UnsupportedDTypeError
from candle_api.layout import Layout

from . import adapter, random
from .allocator import CachingAllocator
from .gpu import Gpu

#: Uploads up to this size keep a host copy (``WgpuStorage.host``): index kernels check
#: their indices on the host, and a token id just sent needs no read back.
HOST_COPY_BYTES = 1 << 16


class WgpuStorage:
    """``buffer`` (a WGPUBuffer handle), ``capacity`` (its size), ``nbytes``
    and ``writable`` (the Storage contract), ``device`` (the WgpuDevice), and
    ``host``: the bytes a small upload put there, until a kernel writes in
    place (None otherwise)."""

    __slots__ = ("buffer", "capacity", "nbytes", "writable", "device", "host", "__weakref__")

    def __init__(self, device, buffer, capacity: int, nbytes: int):
        self.device, self.buffer, self.capacity, self.nbytes = device, buffer, capacity, nbytes
        self.writable = True
        self.host = None

    def __del__(self):
        try:
            self.device.allocator.give(self.buffer, self.capacity)
        except Exception:  # interpreter shutdown: the device may be gone already
            pass


class WgpuDevice:
    """One adapter's device: see the module docstring."""

    def __init__(self, index: int):
        self.index = index
        self.adapter = adapter.adapter(index)
        self.gpu = Gpu(self.adapter)
        self.allocator = CachingAllocator(self.gpu)
        self.name = f"wgpu:{index}"

    # ---- memory ----------------------------------------------------------------------------------
    def alloc(self, nbytes: int) -> WgpuStorage:
        if nbytes > self.gpu.max_buffer:
            raise MemoryError(f"{self.name}: cannot allocate {nbytes} bytes (the adapter's largest buffer is "
                              f"{self.gpu.max_buffer} bytes)")
        buffer, cap = self.allocator.take(nbytes)
        return WgpuStorage(self, buffer, cap, nbytes)

    def from_numpy(self, array: np.ndarray, copy: bool):
        """Always a copy, through a staging buffer (``copy=False`` only permits sharing)."""
        if array.dtype == np.float64:
            raise UnsupportedDTypeError(f"device {self.name} does not hold f64 tensors (WGSL has no 64-bit "
                                        "floats): convert to f32 first")
        array = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("="))
        storage = self.alloc(array.nbytes)
        flat = array.reshape(-1).view(np.uint8)
        self.gpu.upload(storage.buffer, flat)
        if array.nbytes <= HOST_COPY_BYTES:
            storage.host = flat.copy()
        return storage, None

    def to_numpy(self, storage: WgpuStorage, layout: Layout, dtype) -> np.ndarray:
        """A copy of the layout's elements (read_layout)."""
        from .memory import contiguous

        return read_layout(storage, layout, dtype, lambda s, offset, n: self.gpu.download(s.buffer, offset, n),
                           contiguous)

    def wrap(self, ptr: int, nbytes: int, owner):
        raise DeviceError(f"{self.name}: wrapping foreign memory is not supported (WebGPU buffers are not "
                          "addressable; copy through the host instead)")

    def random(self, storage: WgpuStorage, dtype, n: int, dist: int, p0: float, p1: float, seed: int,
               offset: int) -> None:
        random.fill(storage, dtype, n, dist, p0, p1, seed, offset)

    def synchronize(self) -> None:
        self.gpu.synchronize()

    def dlpack_device(self) -> tuple[int, int]:
        return (15, self.index)  # kDLWebGPU

    def get_num_threads(self) -> int:
        return 1

    def set_num_threads(self, n: int) -> None:
        """The GPU's parallelism is not the host's threads: nothing to set."""

