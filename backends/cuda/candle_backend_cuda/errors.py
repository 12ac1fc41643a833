"""Errors found on the device, raised as Python exceptions at the op that
caused them.

A kernel that can fail (integer division by zero, a negative integer
power, an index outside its dimension) takes the device's error word: two
int64 in device memory, {code, lowest position}, which it sets instead of
computing garbage or touching memory outside its tensors. The host clears
the word, launches, reads the word back (which waits for the stream): the
op raises KernelError or
IndexOutOfRangeError with the message every backend gives. Ops on indices
sent from the host check them there instead (no wait; see index.py).
"""

from __future__ import annotations

import ctypes
import threading

from candle_api.errors import IndexOutOfRangeError, KernelError

from . import driver as cu

DIV_ZERO, NEG_POW, INDEX = 1, 2, 3  # csrc/common.cuh's ERR_*
NO_POSITION = (1 << 63) - 1


class ErrorWord:
    """One device's error word; ``run(launch, ...)`` serializes its users."""

    def __init__(self, device):
        self.device = device
        self.storage = device.alloc(16)
        self.ptr = self.storage.ptr
        self.cleared = (ctypes.c_int64 * 2)(0, NO_POSITION)
        self.word = (ctypes.c_int64 * 2)()
        self.lock = threading.Lock()

    def _copy(self, to_device: bool) -> None:
        dev = self.device
        dev.make_current()
        if to_device:
            rc = dev.lib.cuMemcpyHtoDAsync_v2(self.ptr, ctypes.addressof(self.cleared), 16, dev.stream)
        else:
            rc = dev.lib.cuMemcpyDtoHAsync_v2(ctypes.addressof(self.word), self.ptr, 16, dev.stream)
        cu.check(rc, f"{dev.name}: copying the error word")

    def run(self, launch, on_index=None) -> None:
        """Calls launch(error word address), waits, and raises what the kernels reported.
        on_index(position) names the index at a position for IndexOutOfRangeError."""
        with self.lock:
            self._copy(to_device=True)
            launch(self.ptr)
            self._copy(to_device=False)
            self.device.synchronize()
            code, pos = self.word[0], self.word[1]
        if code == DIV_ZERO:
            raise KernelError("integer division by zero")
        if code == NEG_POW:
            raise KernelError("integers to negative integer powers are not allowed")
        if code == INDEX:
            raise IndexOutOfRangeError(on_index(pos) if on_index else f"an index at position {pos} is out of "
                                                                       "range for a dimension")
        if code:
            raise KernelError(f"{self.device.name}: a kernel reported error code {code}")
