"""Finding the GPU: a WebGPU instance over the native backends (Vulkan,
Metal, D3D12; not OpenGL, whose compute support is too thin), the adapters it
enumerates, and what ``candle info`` says about them.

``wgpu:N`` is the N-th adapter, discrete GPUs first, then integrated ones,
then CPU implementations (lavapipe). The probe runs once per process, when
the device is first asked about (never at import), and a machine without a
driver gets the reason instead of an adapter.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import threading
from dataclasses import dataclass

from candle_api.errors import BackendUnavailableError

from . import library
from . import webgpu as w

#: Set to see what the drivers print while adapters are enumerated (silenced otherwise).
ENV_VERBOSE = "CANDLE_WGPU_VERBOSE"
#: Restricts the backends looked at: a comma list of vulkan, metal, dx12 (default: all three).
ENV_BACKENDS = "CANDLE_WGPU_BACKENDS"
_BACKEND_BITS = {"vulkan": w.INSTANCE_BACKEND_VULKAN, "metal": w.INSTANCE_BACKEND_METAL,
                 "dx12": w.INSTANCE_BACKEND_DX12, "d3d12": w.INSTANCE_BACKEND_DX12}
#: Discrete GPUs first, then integrated, unknown, CPU.
_ORDER = {1: 0, 2: 1, 4: 2, 3: 3}


@dataclass(frozen=True)
class AdapterDesc:
    """What one adapter is: ``handle`` (a WGPUAdapter), its name, backend
    ("vulkan", "metal", "d3d12"...), type, limits and whether it has shader-f16."""

    handle: int
    name: str
    backend: str
    adapter_type: int
    driver: str
    limits: w.Limits
    shader_f16: bool

    @property
    def is_cpu(self) -> bool:
        return self.adapter_type == w.ADAPTER_CPU

    def describe(self) -> str:
        kind = w.ADAPTER_TYPES.get(self.adapter_type, "unknown")
        cpu = ", a CPU implementation" if self.is_cpu else ""
        return f"{self.name} ({self.backend}, {kind}{cpu}; {self.driver})".replace("; )", ")")


class _Probe:
    def __init__(self):
        self.instance = None
        self.adapters: list[AdapterDesc] = []
        self.reason = ""


_probe: _Probe | None = None
_lock = threading.Lock()


def probe() -> _Probe:
    """The instance and its adapters, found once per process."""
    global _probe
    if _probe is None:
        with _lock:
            if _probe is None:
                _probe = _find()
    return _probe


def backends_mask() -> int:
    wanted = os.environ.get(ENV_BACKENDS, "vulkan,metal,dx12")
    mask = 0
    for name in filter(None, (n.strip().lower() for n in wanted.split(","))):
        if name not in _BACKEND_BITS:
            raise BackendUnavailableError(f"{ENV_BACKENDS}={wanted!r}: unknown backend {name!r} "
                                          f"(choose among {', '.join(sorted(_BACKEND_BITS))})")
        mask |= _BACKEND_BITS[name]
    return mask


def _find() -> _Probe:
    found = _Probe()
    try:
        lib = library.load()
        mask = backends_mask()
    except BackendUnavailableError as exc:
        found.reason = str(exc)
        return found
    extras = w.InstanceExtras()
    extras.chain.sType = w.STYPE_INSTANCE_EXTRAS
    extras.backends = mask
    desc = w.InstanceDescriptor(ctypes.cast(ctypes.pointer(extras), ctypes.c_void_p), 0, None, None)
    instance = lib.wgpuCreateInstance(ctypes.byref(desc))
    if not instance:
        found.reason = "wgpu-native could not create an instance"
        return found
    options = w.InstanceEnumerateAdapterOptions(None, mask)
    with quiet_stderr():
        count = lib.wgpuInstanceEnumerateAdapters(instance, ctypes.byref(options), None)
        handles = (ctypes.c_void_p * max(count, 1))()
        count = lib.wgpuInstanceEnumerateAdapters(instance, ctypes.byref(options), handles)
    adapters = [_describe(lib, handles[i]) for i in range(count)]
    found.instance = instance
    found.adapters = sorted(adapters, key=lambda a: _ORDER.get(a.adapter_type, 2))
    if not adapters:
        found.reason = ("no WebGPU adapter: no Vulkan, Metal or D3D12 driver found (on Linux without a GPU, "
                        "`apt-get install mesa-vulkan-drivers` provides lavapipe, a CPU Vulkan driver)")
    return found


@contextlib.contextmanager
def quiet_stderr():
    """Silences file descriptor 2 around adapter enumeration: Vulkan drivers check
    presentation support there, and on a machine without a display session
    libwayland prints "XDG_RUNTIME_DIR is invalid" (a failure to find an adapter
    is reported as the reason instead). CANDLE_WGPU_VERBOSE=1 keeps it."""
    if os.environ.get(ENV_VERBOSE):
        yield
        return
    sys.stderr.flush()
    saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def _describe(lib, handle) -> AdapterDesc:
    info = w.AdapterInfo()
    lib.wgpuAdapterGetInfo(handle, ctypes.byref(info))
    limits = w.Limits()
    lib.wgpuAdapterGetLimits(handle, ctypes.byref(limits))
    desc = AdapterDesc(handle, info.device.text() or info.vendor.text() or "unnamed adapter",
                       w.BACKEND_NAMES.get(info.backendType, f"backend {info.backendType}"), info.adapterType,
                       info.description.text(), limits, bool(lib.wgpuAdapterHasFeature(handle, w.FEATURE_SHADER_F16)))
    lib.wgpuAdapterInfoFreeMembers(info)
    return desc


def availability() -> tuple[bool, str]:
    found = probe()
    return (True, "") if found.adapters else (False, found.reason)


def adapter(index: int) -> AdapterDesc:
    found = probe()
    if not found.adapters:
        raise BackendUnavailableError(found.reason)
    return found.adapters[index]
