"""Finding the GPUs: the driver loaded, cuInit called, and each device
described, once per process and only when the device is first asked about.
A machine without a driver or a GPU gets the reason instead: the library
that was not found, or the name of cuInit's error."""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass

from candle_api.errors import BackendUnavailableError

from . import driver as cu


@dataclass(frozen=True)
class GpuInfo:
    """What one GPU is: its name, compute capability (major, minor), SM count,
    memory and the largest shared memory a block may opt in to."""

    index: int
    name: str
    capability: tuple
    sms: int
    memory: int
    max_shared: int

    @property
    def arch(self) -> int:
        """The compute capability as nvcc writes it: 90 for sm_90."""
        return self.capability[0] * 10 + self.capability[1]

    def describe(self) -> str:
        return f"{self.name} (sm_{self.arch}, {self.sms} SMs, {self.memory / 2**30:.0f} GiB)"


class _Probe:
    def __init__(self):
        self.gpus: list[GpuInfo] = []
        self.reason = ""
        self.driver_version = 0


_probe: _Probe | None = None
_lock = threading.Lock()


def probe() -> _Probe:
    global _probe
    if _probe is None:
        with _lock:
            if _probe is None:
                _probe = _find()
    return _probe


def _find() -> _Probe:
    found = _Probe()
    try:
        lib = cu.load()
    except BackendUnavailableError as exc:
        found.reason = str(exc)
        return found
    rc = lib.cuInit(0)
    if rc != cu.SUCCESS:
        found.reason = f"cuInit failed: {cu.describe(rc)}"
        return found
    version, count = ctypes.c_int(), ctypes.c_int()
    cu.check(lib.cuDriverGetVersion(ctypes.byref(version)), "cuDriverGetVersion")
    cu.check(lib.cuDeviceGetCount(ctypes.byref(count)), "cuDeviceGetCount")
    found.driver_version = version.value
    found.gpus = [_describe(lib, i) for i in range(count.value)]
    if not found.gpus:
        found.reason = "the NVIDIA driver found no CUDA device"
    return found


def _describe(lib, index: int) -> GpuInfo:
    handle = ctypes.c_int()
    cu.check(lib.cuDeviceGet(ctypes.byref(handle), index), f"cuDeviceGet({index})")
    name = ctypes.create_string_buffer(256)
    cu.check(lib.cuDeviceGetName(name, 256, handle), "cuDeviceGetName")
    memory = ctypes.c_size_t()
    cu.check(lib.cuDeviceTotalMem_v2(ctypes.byref(memory), handle), "cuDeviceTotalMem")

    def attribute(code: int) -> int:
        value = ctypes.c_int()
        cu.check(lib.cuDeviceGetAttribute(ctypes.byref(value), code, handle), f"cuDeviceGetAttribute({code})")
        return value.value

    return GpuInfo(index, name.value.decode(errors="replace"),
                   (attribute(cu.ATTR_COMPUTE_CAPABILITY_MAJOR), attribute(cu.ATTR_COMPUTE_CAPABILITY_MINOR)),
                   attribute(cu.ATTR_MULTIPROCESSOR_COUNT), memory.value,
                   attribute(cu.ATTR_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN))


def availability() -> tuple[bool, str]:
    found = probe()
    return (True, "") if found.gpus else (False, found.reason)


def gpu(index: int) -> GpuInfo:
    found = probe()
    if not found.gpus:
        raise BackendUnavailableError(found.reason)
    return found.gpus[index]


def driver_version() -> str:
    v = probe().driver_version
    return f"{v // 1000}.{v % 1000 // 10}"


def reset() -> None:
    """Forgets the probe (tests that change the environment between probes)."""
    global _probe
    with _lock:
        _probe = None
