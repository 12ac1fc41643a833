"""The caching allocator. cuMemAlloc and cuMemFree are slow (cuMemFree waits
for the whole device), and a model allocates the same sizes at every step,
so a freed storage's block goes to a free list of its size class and the
next allocation of that class takes it back.

Reuse is in stream order: every kernel and copy of a device runs on its one
stream, so work that still reads a freed block runs before anything its
next owner queues. Size classes are multiples of 512 bytes up to 4 KiB,
then four per power of two (at most 25% of a block unused). Out of device
memory, the cache is freed and the allocation tried once more; then
MemoryError names the size and what is held.

The driver calls go through ``self.driver`` (alloc(n) -> (status, ptr),
free(ptr)), so the bookkeeping is tested without a GPU.
"""

from __future__ import annotations

import threading

from . import driver as cu

MIN_BYTES = 512


def size_class(nbytes: int) -> int:
    if nbytes <= 4096:
        return max(MIN_BYTES, (nbytes + MIN_BYTES - 1) // MIN_BYTES * MIN_BYTES)
    top = 1 << (nbytes - 1).bit_length()  # the power of two at or above
    step = top >> 3                      # top/2 .. top in four steps of top/8
    return (nbytes + step - 1) // step * step


class CachingAllocator:
    """Blocks by size class. ``take``/``give`` are the interface; the
    counters are what ``memory_stats`` reports."""

    def __init__(self, driver, name: str):
        self.driver, self.name = driver, name
        self.free: dict[int, list[int]] = {}
        self.lock = threading.RLock()  # reentrant: a storage's __del__ may run inside take()
        self.allocated = 0  # bytes of blocks held by live storages
        self.reserved = 0   # bytes of every block from the driver, held or cached
        self.peak = 0       # the most allocated at once
        self.allocs = 0     # driver allocations (tests read these)
        self.reuses = 0

    def take(self, nbytes: int) -> tuple[int, int]:
        """(device pointer, capacity) for at least nbytes, or MemoryError."""
        cap = size_class(nbytes)
        with self.lock:
            bucket = self.free.get(cap)
            if bucket:
                ptr = bucket.pop()
                self.reuses += 1
                self._held(cap)
                return ptr, cap
        status, ptr = self.driver.alloc(cap)
        if status == cu.ERROR_OUT_OF_MEMORY:  # give the cache back, then once more
            self.empty()
            status, ptr = self.driver.alloc(cap)
        if status == cu.ERROR_OUT_OF_MEMORY:
            raise MemoryError(f"{self.name}: out of memory allocating {nbytes} bytes ({self.allocated} bytes held "
                              f"by live tensors, the cache emptied; {self.driver.free_text()})")
        cu.check(status, f"{self.name}: cuMemAlloc of {cap} bytes")
        with self.lock:
            self.allocs += 1
            self.reserved += cap
            self._held(cap)
        return ptr, cap

    def _held(self, cap: int) -> None:
        self.allocated += cap
        self.peak = max(self.peak, self.allocated)

    def give(self, ptr: int, cap: int) -> None:
        """Takes back a freed storage's block (from the storage's __del__)."""
        with self.lock:
            self.allocated -= cap
            self.free.setdefault(cap, []).append(ptr)

    def empty(self) -> int:
        """Frees every cached block; returns the bytes given back to the driver."""
        with self.lock:
            free, self.free = self.free, {}
            released = sum(cap * len(ptrs) for cap, ptrs in free.items())
            self.reserved -= released
        for ptrs in free.values():
            for ptr in ptrs:
                self.driver.free(ptr)
        return released

    def stats(self) -> dict:
        with self.lock:
            cached = sum(cap * len(ptrs) for cap, ptrs in self.free.items())
            return {"allocated": self.allocated, "reserved": self.reserved, "peak": self.peak, "cached": cached,
                    "driver_allocations": self.allocs, "reuses": self.reuses}

    def reset_peak(self) -> None:
        with self.lock:
            self.peak = self.allocated
