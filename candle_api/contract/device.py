"""What a backend's device object and its storages provide: the other half of
the contract (the kernels are in :mod:`candle_api.contract.table`).

``BackendSpec.open(index)`` returns a :class:`BackendDevice`; the core checks
it against this Protocol when the device is first made and names whatever is
missing. Storages are opaque to the core except for the attributes of
:class:`Storage`; kernels of the same plugin know what else they hold.

Optional, outside the Protocol: ``bind_decode_step(spec)``, a bound decoding step
of a Llama-family model run in one call (candle_models.decode_step passes the
spec; the cpu plugin's candle_backend_cpu/decode.py documents it).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Storage(Protocol):
    """A buffer owned by a backend: host memory, a device pointer, a GPU buffer."""

    #: Size in bytes.
    nbytes: int
    #: False for memory the caller may not change (a read-only map, a bytes
    #: object, a read-only DLPack producer); in-place ops refuse such storages.
    writable: bool


@runtime_checkable
class BackendDevice(Protocol):
    """One device of a backend (Candle's BackendDevice)."""

    def alloc(self, nbytes: int) -> Storage:
        """Uninitialized memory. Raises MemoryError when it cannot, including for
        sizes the backend cannot even be asked for (the core does not bound
        ``nbytes``: a broadcast of views can ask for more than 2^64 bytes)."""

    def from_numpy(self, array, copy: bool) -> tuple[Storage, Any]:
        """Host to device: ``(storage, layout)``, layout None for a contiguous copy.
        With ``copy=False`` a host backend may share the array's memory (and
        returns the layout that views it)."""

    def to_numpy(self, storage: Storage, layout, dtype):
        """Device to host: an ndarray of ``layout.shape`` (a read-only view is
        fine for host memory)."""

    def wrap(self, ptr: int, nbytes: int, owner) -> Storage:
        """A storage over foreign memory of this device kept alive by ``owner``
        (DLPack import). A backend that cannot wrap raises DeviceError."""

    def random(self, storage: Storage, dtype, n: int, dist: int, p0: float, p1: float, seed: int,
               offset: int) -> None:
        """Fills n values: uniform in [p0, p1) (``dist`` 0) or normal with mean p0
        and std p1 (``dist`` 1). Counter-based: element i uses the stream
        position ``offset + i`` of ``seed``, so draws are reproducible."""

    def synchronize(self) -> None:
        """Waits until queued work on this device is done."""

    def dlpack_device(self) -> tuple[int, int]:
        """The DLPack ``(device_type, device_id)``: 1 cpu, 2 cuda, 8 metal, 15 webgpu..."""

    def get_num_threads(self) -> int:
        """Worker threads the kernels use (1 where that has no meaning)."""

    def set_num_threads(self, n: int) -> None:
        """Sets the worker threads (a no-op where that has no meaning)."""


def missing_members(backend) -> list[str]:
    """The BackendDevice methods the object lacks (empty when it conforms)."""
    return [name for name in _DEVICE_METHODS if not callable(getattr(backend, name, None))]


_DEVICE_METHODS = tuple(name for name in vars(BackendDevice) if not name.startswith("_"))
