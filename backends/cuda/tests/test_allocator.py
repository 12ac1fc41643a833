"""The caching allocator's bookkeeping, against a fake driver (no GPU):
size classes, reuse, statistics, and running out of memory (the cache
given back and the allocation tried once more, then MemoryError naming the
size and what is held)."""

import pytest

from candle_backend_cuda import driver as cu
from candle_backend_cuda.allocator import CachingAllocator, size_class


class FakeDriver:
    """Device memory of `capacity` bytes: alloc(n) -> (status, ptr), free(ptr)."""

    def __init__(self, capacity: int):
        self.capacity, self.used, self.next, self.live = capacity, 0, 0x1000, {}
        self.frees = 0

    def alloc(self, n: int):
        if self.used + n > self.capacity:
            return cu.ERROR_OUT_OF_MEMORY, 0
        ptr, self.next = self.next, self.next + n
        self.live[ptr] = n
        self.used += n
        return cu.SUCCESS, ptr

    def free(self, ptr: int) -> None:
        self.used -= self.live.pop(ptr)
        self.frees += 1

    def free_text(self) -> str:
        return f"{self.capacity - self.used} of {self.capacity} bytes free on the device"


def test_size_classes():
    assert [size_class(n) for n in (1, 512, 513, 4096)] == [512, 512, 1024, 4096]
    assert size_class(4097) == 5120 and size_class(8192) == 8192  # four classes per power of two
    for n in range(1, 1 << 20, 997):
        cap = size_class(n)
        assert n <= cap and (cap <= 4096 or cap < 1.25 * n + 1)


def test_a_freed_block_is_reused_and_counted():
    alloc = CachingAllocator(FakeDriver(1 << 20), "cuda:0")
    ptr, cap = alloc.take(1000)
    assert (cap, alloc.stats()["allocated"], alloc.stats()["reserved"]) == (1024, 1024, 1024)
    alloc.give(ptr, cap)
    assert alloc.stats()["allocated"] == 0 and alloc.stats()["cached"] == 1024
    again, _ = alloc.take(700)  # the same class
    assert again == ptr
    stats = alloc.stats()
    assert (stats["driver_allocations"], stats["reuses"], stats["peak"]) == (1, 1, 1024)


def test_empty_gives_the_cache_back():
    driver = FakeDriver(1 << 20)
    alloc = CachingAllocator(driver, "cuda:0")
    blocks = [alloc.take(5000) for _ in range(3)]
    for ptr, cap in blocks:
        alloc.give(ptr, cap)
    assert alloc.empty() == 3 * 5120
    assert driver.used == 0 and alloc.stats()["reserved"] == 0


def test_out_of_memory_empties_the_cache_and_retries():
    driver = FakeDriver(8192)
    alloc = CachingAllocator(driver, "cuda:0")
    ptr, cap = alloc.take(4096)
    alloc.give(ptr, cap)          # cached: the driver still holds it
    big, _ = alloc.take(8000)     # fits only once the cache is given back
    assert driver.frees == 1 and big


def test_out_of_memory_twice_names_the_size_and_what_is_held():
    alloc = CachingAllocator(FakeDriver(8192), "cuda:0")
    alloc.take(4096)
    with pytest.raises(MemoryError, match=r"cuda:0: out of memory allocating 6000 bytes \(4096 bytes held by live "
                                          r"tensors, the cache emptied; 4096 of 8192 bytes free"):
        alloc.take(6000)
