"""Host storages and the cpu backend device object (the BackendDevice contract,
docs/backend-contract.md)."""

from __future__ import annotations

import ctypes

import numpy as np

from candle_api.layout import Layout

from . import library


# Small blocks are recycled through per-size free lists on the Python side: a
# malloc/free pair through ctypes costs more than a whole small op otherwise.
SMALL_BLOCK = 1024
_FREE_LISTS = {cap: [] for cap in range(64, SMALL_BLOCK + 1, 64)}
_FREE_LIST_DEPTH = 256
#: no allocation reaches this size (2^62 bytes): the check keeps sizes within what ctypes passes intact
MAX_BYTES = 1 << 62


class CpuStorage:
    """A block of host memory: ``ptr`` (address), ``nbytes`` and ``owner``.

    owner is None when the library allocated the block (freed or recycled on
    collection), else the object keeping foreign memory alive (a numpy array, a
    DLPack producer); ``writable`` is False for read-only foreign memory."""

    __slots__ = ("ptr", "nbytes", "owner", "writable", "pool", "__weakref__")

    def __del__(self):
        # pool: the free list of the block's size class (None for large blocks and foreign memory)
        pool = self.pool
        if pool is not None and len(pool) < _FREE_LIST_DEPTH:
            pool.append(self.ptr)
        elif self.owner is None and _free is not None:
            _free(self.ptr)


_new = object.__new__
_free = None  # set when the library loads; None during interpreter shutdown is fine


def _storage(ptr: int, nbytes: int, owner, writable: bool = True) -> CpuStorage:
    s = _new(CpuStorage)
    s.ptr = ptr
    s.nbytes = nbytes
    s.owner = owner
    s.writable = writable
    s.pool = None
    return s


class CpuDevice:
    """The cpu backend device: allocation, host transfers, random fill, threads."""

    def __init__(self) -> None:
        global _free
        lib = library.load()
        _free = lib.cd_free
        self._lib = lib
        alloc = lib.cd_alloc
        error = library.error

        free_lists = _FREE_LISTS

        def alloc_storage(nbytes: int) -> CpuStorage:
            if nbytes >= MAX_BYTES:  # ctypes would wrap the size silently: a tiny buffer behind a huge shape
                raise MemoryError(f"cannot allocate {nbytes} bytes")
            cap = (nbytes + 63) & -64 or 64
            free_list = free_lists.get(cap)
            ptr = 0
            if free_list:
                try:
                    ptr = free_list.pop()
                except IndexError:  # another thread took the last one
                    pass
            if not ptr:
                ptr = alloc(cap if free_list is not None else nbytes)
                if not ptr:
                    raise MemoryError(str(error()))
            s = _new(CpuStorage)  # _storage(), inlined: this runs once per op
            s.ptr, s.nbytes, s.owner, s.writable, s.pool = ptr, nbytes, None, True, free_list
            return s

        # The hot allocation path is a closure: no attribute lookups per call.
        self.alloc = alloc_storage

    # ---- host transfers ----------------------------------------------------------------
    def from_numpy(self, arr: np.ndarray, copy: bool):
        """(storage, layout or None for contiguous). copy=False shares arr's memory
        when its byte order is native, its data aligned (the kernels load whole
        elements) and its strides non-negative multiples of the item size;
        otherwise the data is copied."""
        if not arr.dtype.isnative:
            arr = arr.astype(arr.dtype.newbyteorder("="))
            copy = False
        isz = arr.itemsize
        if not copy and arr.flags.aligned and all(s >= 0 and s % isz == 0 for s in arr.strides):
            layout = Layout(tuple(arr.shape), tuple(s // isz for s in arr.strides), 0)
            lo, hi = layout.span()
            ptr = arr.__array_interface__["data"][0] if arr.size else 0
            return _storage(ptr, (hi - lo) * isz, arr, bool(arr.flags.writeable)), layout
        arr = np.ascontiguousarray(arr)
        storage = self.alloc(arr.nbytes)
        if arr.nbytes:
            ctypes.memmove(storage.ptr, arr.__array_interface__["data"][0], arr.nbytes)
        return storage, None

    def to_numpy(self, storage: CpuStorage, layout: Layout, dtype) -> np.ndarray:
        """A read-only numpy view of the storage (the storage stays alive with it)."""
        isz = dtype.itemsize
        if layout.numel == 0:  # no data to view, whatever the offset
            arr = np.empty(layout.shape, dtype.np)
            arr.flags.writeable = False
            return arr
        buf = (ctypes.c_char * storage.nbytes).from_address(storage.ptr)
        buf._keep = storage
        arr = np.ndarray(layout.shape, dtype.np, buf, layout.offset * isz, tuple(s * isz for s in layout.strides))
        arr.flags.writeable = False
        return arr

    def wrap(self, ptr: int, nbytes: int, owner) -> CpuStorage:
        """A storage over foreign memory kept alive by owner (used by DLPack)."""
        return _storage(ptr, nbytes, owner)

    def synchronize(self) -> None:
        """Kernels run synchronously on the cpu."""

    def dlpack_device(self) -> tuple[int, int]:
        return (1, 0)

    # ---- random numbers -----------------------------------------------------------------
    def random(self, storage, dtype, n: int, dist: int, p0: float, p1: float, seed: int, offset: int) -> None:
        if self._lib.cd_random(dtype.code, dist, n, storage.ptr, seed, offset, p0, p1):
            raise library.error()

    # ---- a decoding step in one call (optional: candle_models.decode_step) ----------------
    def bind_decode_step(self, spec: dict):
        """``run(pos, x_ptr, cos_ptr, sin_ptr, logits_ptr)``: a bound decoding step's kernels in one
        call, or None where its plan is not one the C step serves (candle_backend_cpu.decode)."""
        from . import decode

        return decode.bind(self._lib, self.alloc, spec)

    # ---- threads ------------------------------------------------------------------------
    def get_num_threads(self) -> int:
        return self._lib.cd_get_num_threads()

    def set_num_threads(self, n: int) -> None:
        if self._lib.cd_set_num_threads(n):
            raise library.error()
