"""Storages and the device object of the cuda backend (the BackendDevice
contract, candle_api/contract/device.py).

One device per GPU: its primary context, one stream that every kernel and
copy of the device is queued on (so work runs in the order it is asked
for, and the caching allocator may hand a freed block to the next
allocation at once), a pinned staging buffer for host copies, the
device-side error word kernels report into, and its modules of kernels.
Every call first makes the device's context current on the calling thread.
"""

from __future__ import annotations

import ctypes
import threading

import numpy as np

from candle_api.contract.helpers import read_layout
from candle_api.errors import DeviceError
from candle_api.layout import Layout

from . import driver as cu
from . import probe
from .allocator import CachingAllocator
from .errors import ErrorWord
from .modules import Modules

#: Uploads up to this size keep a host copy (CudaStorage.host): index kernels
#: check ids sent from the host there, with no read back.
HOST_COPY_BYTES = 1 << 16
#: The pinned staging buffer host copies go through, in chunks of this size.
STAGING_BYTES = 8 << 20
#: Copies this small go straight from pageable memory (the driver stages them itself).
DIRECT_BYTES = 1 << 16

_current = threading.local()  # the context made current on this thread


class CudaStorage:
    """``ptr`` (the device address), ``nbytes`` and ``writable`` (the Storage
    contract), ``capacity`` (the block's size), ``device``, ``owner`` (what
    keeps foreign memory alive: None for the allocator's blocks) and
    ``host``: the bytes a small upload came from, until a kernel writes in
    place (None otherwise)."""

    __slots__ = ("ptr", "nbytes", "capacity", "writable", "device", "owner", "host", "__weakref__")

    def __init__(self, device, ptr: int, capacity: int, nbytes: int, owner=None):
        self.device, self.ptr, self.capacity, self.nbytes, self.owner = device, ptr, capacity, nbytes, owner
        self.writable = True
        self.host = None

    def __del__(self):
        if self.owner is None and self.capacity:
            try:
                self.device.allocator.give(self.ptr, self.capacity)
            except Exception:  # interpreter shutdown: the device may be gone already
                pass


class _DriverMemory:
    """The allocator's view of the driver."""

    def __init__(self, device):
        self.device = device

    def alloc(self, nbytes: int) -> tuple[int, int]:
        ptr = ctypes.c_uint64()
        self.device.make_current()
        return self.device.lib.cuMemAlloc_v2(ctypes.byref(ptr), nbytes), ptr.value

    def free(self, ptr: int) -> None:
        self.device.make_current()
        self.device.lib.cuMemFree_v2(ptr)

    def free_text(self) -> str:
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        self.device.make_current()
        if self.device.lib.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)):
            return "free memory unknown"
        return f"{free.value} of {total.value} bytes free on the device"


class CudaDevice:
    """One GPU: see the module docstring."""

    def __init__(self, index: int):
        self.index = index
        self.name = f"cuda:{index}"
        self.lib = lib = cu.load()
        self.gpu = probe.gpu(index)
        handle = ctypes.c_int()
        cu.check(lib.cuDeviceGet(ctypes.byref(handle), index), f"{self.name}: cuDeviceGet")
        self.ctx = ctypes.c_void_p()
        cu.check(lib.cuDevicePrimaryCtxRetain(ctypes.byref(self.ctx), handle), f"{self.name}: cuDevicePrimaryCtxRetain")
        self.ctx = self.ctx.value
        self.make_current()
        stream = ctypes.c_void_p()
        cu.check(lib.cuStreamCreate(ctypes.byref(stream), 0), f"{self.name}: cuStreamCreate")
        self.stream = stream.value
        self.allocator = CachingAllocator(_DriverMemory(self), self.name)
        self.modules = Modules(self)
        self.errors = ErrorWord(self)
        self.staging = self._pinned(STAGING_BYTES)
        self.copy_lock = threading.Lock()  # one staging buffer
        self._gemm = None

    def make_current(self) -> None:
        if getattr(_current, "ctx", None) != self.ctx:
            cu.check(self.lib.cuCtxSetCurrent(self.ctx), f"{self.name}: cuCtxSetCurrent")
            _current.ctx = self.ctx

    def _pinned(self, nbytes: int) -> int:
        ptr = ctypes.c_void_p()
        cu.check(self.lib.cuMemHostAlloc(ctypes.byref(ptr), nbytes, cu.MEMHOSTALLOC_PORTABLE),
                 f"{self.name}: cuMemHostAlloc of {nbytes} bytes")
        return ptr.value

    def gemm(self):
        """The cuBLASLt handle, workspace and plans of this device (made on first use)."""
        if self._gemm is None:
            from .cublaslt import Gemm

            with self.copy_lock:
                if self._gemm is None:
                    self._gemm = Gemm(self)
        return self._gemm

    def memset(self, ptr: int, value: int, nbytes: int) -> None:
        self.make_current()
        cu.check(self.lib.cuMemsetD8Async(ptr, value, nbytes, self.stream), f"{self.name}: cuMemsetD8Async")

    def function(self, stem: str, name: str):
        """The kernel ``name`` of csrc/<stem>.cu (see modules.py)."""
        return self.modules.function(stem, name)

    # ---- memory ----------------------------------------------------------------------------------
    def alloc(self, nbytes: int) -> CudaStorage:
        if nbytes > self.gpu.memory:
            raise MemoryError(f"{self.name}: cannot allocate {nbytes} bytes (the GPU has {self.gpu.memory})")
        if nbytes == 0:
            return CudaStorage(self, 0, 0, 0)
        ptr, cap = self.allocator.take(nbytes)
        return CudaStorage(self, ptr, cap, nbytes)

    def memory_stats(self) -> dict:
        """Bytes allocated (held by live tensors), reserved (from the driver, cached included), peak
        (the most allocated at once), cached; driver allocations and cache reuses."""
        return self.allocator.stats()

    def empty_cache(self) -> int:
        """Gives every cached block back to the driver; returns the bytes freed."""
        self.synchronize()
        return self.allocator.empty()

    def reset_peak_memory(self) -> None:
        self.allocator.reset_peak()

    # ---- host copies ---------------------------------------------------------------------------------
    def upload(self, ptr: int, data: np.ndarray) -> None:
        """Host bytes (a contiguous uint8 array) to device address ptr: straight from pageable memory when
        small, else in chunks through the pinned staging buffer."""
        self.make_current()
        n = data.nbytes
        if n <= DIRECT_BYTES:
            cu.check(self.lib.cuMemcpyHtoDAsync_v2(ptr, data.ctypes.data, n, self.stream), f"{self.name}: upload")
            return
        with self.copy_lock:
            for start in range(0, n, STAGING_BYTES):
                size = min(STAGING_BYTES, n - start)
                self.synchronize()  # the staging buffer's last copy is done
                ctypes.memmove(self.staging, data.ctypes.data + start, size)
                cu.check(self.lib.cuMemcpyHtoDAsync_v2(ptr + start, self.staging, size, self.stream),
                         f"{self.name}: upload")
            self.synchronize()

    def download(self, ptr: int, nbytes: int) -> np.ndarray:
        """nbytes from device address ptr, after the work queued before."""
        out = np.empty(nbytes, np.uint8)
        self.make_current()
        with self.copy_lock:
            for start in range(0, nbytes, STAGING_BYTES):
                size = min(STAGING_BYTES, nbytes - start)
                cu.check(self.lib.cuMemcpyDtoHAsync_v2(self.staging, ptr + start, size, self.stream),
                         f"{self.name}: download")
                self.synchronize()
                ctypes.memmove(out.ctypes.data + start, self.staging, size)
        return out

    def from_numpy(self, array: np.ndarray, copy: bool):
        """Always a copy (``copy=False`` only permits sharing)."""
        array = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("="))
        storage = self.alloc(array.nbytes)
        flat = array.reshape(-1).view(np.uint8)
        if flat.nbytes:
            self.upload(storage.ptr, flat)
        if array.nbytes <= HOST_COPY_BYTES:
            storage.host = flat.copy()
        return storage, None

    def to_numpy(self, storage: CudaStorage, layout: Layout, dtype) -> np.ndarray:
        """A copy of the layout's elements (read_layout)."""
        from .kernels.memory import contiguous

        return read_layout(storage, layout, dtype, lambda s, offset, n: self.download(s.ptr + offset, n), contiguous)

    def wrap(self, ptr: int, nbytes: int, owner) -> CudaStorage:
        """A storage over memory of this GPU that another library allocated (DLPack import)."""
        if nbytes:
            ordinal = ctypes.c_int(-1)
            self.make_current()
            rc = self.lib.cuPointerGetAttribute(ctypes.byref(ordinal), cu.POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr)
            if rc or ordinal.value != self.index:
                where = cu.describe(rc) if rc else f"it belongs to cuda:{ordinal.value}"
                raise DeviceError(f"{self.name}: cannot wrap address {ptr:#x} ({where})")
        return CudaStorage(self, ptr, 0, nbytes, owner)

    # ---- the rest of the contract ---------------------------------------------------------------------
    def random(self, storage: CudaStorage, dtype, n: int, dist: int, p0: float, p1: float, seed: int,
               offset: int) -> None:
        from .kernels.random import fill

        fill(storage, dtype, n, dist, p0, p1, seed, offset)

    def synchronize(self) -> None:
        self.make_current()
        cu.check(self.lib.cuStreamSynchronize(self.stream), f"{self.name}: waiting for its kernels")

    def dlpack_device(self) -> tuple[int, int]:
        return (2, self.index)  # kDLCUDA

    def get_num_threads(self) -> int:
        return 1

    def set_num_threads(self, n: int) -> None:
        """The GPU's parallelism is not the host's threads: nothing to set."""
