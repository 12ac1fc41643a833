"""The caching allocator: GPU buffers are slow to create (a driver call and
memory mapping each), and a model allocates the same sizes at every step, so
a freed storage's buffer goes to a free list of its size class and the next
allocation of that class takes it back.

Reuse needs no wait: every use of a buffer is recorded in the one command
stream (gpu.py), so work that still reads a freed buffer runs before
anything the next owner records. Size classes are four per power of two (at
most 25% of a buffer unused); cached bytes are capped (``CANDLE_WGPU_CACHE_MB``,
default 1024) and dropped when the device runs out of memory.
"""

from __future__ import annotations

import os
import threading

#: The smallest buffer (and the size granularity below 4 KiB).
MIN_BYTES = 256


def size_class(nbytes: int) -> int:
    """nbytes rounded up to its class: multiples of 256 up to 4 KiB, then four
    classes per power of two."""
    if nbytes <= 4096:
        return max(MIN_BYTES, (nbytes + 255) & ~255)
    top = 1 << (nbytes - 1).bit_length()  # the power of two at or above
    step = top >> 3                      # top/2 .. top in four steps of top/8
    return (nbytes + step - 1) // step * step


class CachingAllocator:
    """Buffers by size class; ``take`` and ``give`` are the whole interface."""

    def __init__(self, gpu):
        self.gpu = gpu
        self.free: dict[int, list] = {}
        self.cached_bytes = 0
        self.limit = int(os.environ.get("CANDLE_WGPU_CACHE_MB", "1024")) << 20
        self.created = 0      # buffers created (tests read these)
        self.reused = 0
        self.lock = threading.RLock()  # reentrant: a storage's __del__ may run inside take()

    def take(self, nbytes: int):
        """(buffer handle, capacity) for at least nbytes, or MemoryError."""
        cap = size_class(nbytes)
        with self.lock:
            bucket = self.free.get(cap)
            if bucket:
                self.cached_bytes -= cap
                self.reused += 1
                return bucket.pop(), cap
        if cap > self.gpu.max_buffer:
            raise MemoryError(f"wgpu: {nbytes} bytes exceed the adapter's largest buffer "
                              f"({self.gpu.max_buffer} bytes)")
        handle = self.gpu.create_storage_buffer(cap)
        if handle is None:  # out of device memory: give the cache back and try once more
            self.empty()
            handle = self.gpu.create_storage_buffer(cap)
            if handle is None:
                raise MemoryError(f"wgpu: out of device memory allocating {nbytes} bytes")
        self.created += 1
        return handle, cap

    def give(self, handle, cap: int) -> None:
        """Takes back a freed storage's buffer (called from the storage's __del__)."""
        with self.lock:
            if self.cached_bytes + cap <= self.limit:
                self.cached_bytes += cap
                self.free.setdefault(cap, []).append(handle)
                return
        self.gpu.release_buffer(handle)

    def empty(self) -> None:
        """Releases every cached buffer."""
        with self.lock:
            free, self.free = self.free, {}
            self.cached_bytes = 0
        for bucket in free.values():
            for handle in bucket:
                self.gpu.release_buffer(handle)
