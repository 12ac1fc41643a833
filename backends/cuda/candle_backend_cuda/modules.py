"""The kernels of one device: a module per source file (csrc/<stem>.cu),
loaded on first use, and its functions looked up once.

Where a module's code comes from, for a GPU of architecture sm_XY:

1. the fatbin built with the wheel (fatbin/<stem>.fatbin), when it holds
   machine code for sm_XY (fatbin/manifest.json lists what it holds);
2. else NVRTC compiles the source for sm_XY (cached on disk, nvrtc.py);
3. else, with no NVRTC, the fatbin's PTX, which the driver compiles, when it
   was written for sm_XY or an older architecture.

``CANDLE_CUDA_KERNELS=nvrtc`` skips step 1 (to check the fallback on a GPU
the fatbins cover).
"""

from __future__ import annotations

import ctypes
import json
import os
import threading
from pathlib import Path

from candle_api.errors import BackendUnavailableError, DeviceError

from . import driver as cu
from .kernels.signatures import signature
from .launch import Function

FATBIN_DIR = Path(__file__).resolve().parent / "fatbin"


def manifest() -> dict:
    """What the build put in the fatbins: {"archs": ["sm_80", ...], "ptx": "compute_90", "nvcc": ...}."""
    path = FATBIN_DIR / "manifest.json"
    if not path.is_file():
        return {"archs": [], "ptx": "", "nvcc": "", "fatbins": []}
    return json.loads(path.read_text())


def source_of(arch: int) -> str:
    """Where kernels for sm_<arch> come from: "fatbin", "nvrtc" or "ptx"."""
    built = manifest()
    if os.environ.get("CANDLE_CUDA_KERNELS") != "nvrtc" and f"sm_{arch}" in built["archs"]:
        return "fatbin"
    try:
        from . import nvrtc

        nvrtc.load()
        return "nvrtc"
    except BackendUnavailableError:
        ptx = built.get("ptx", "")
        if ptx and int(ptx.removeprefix("compute_")) <= arch:
            return "ptx"
        raise


def describe_kernels() -> str:
    built = manifest()
    if not built["archs"]:
        return "no fatbins built: kernels from NVRTC"
    return f"fatbins for {' '.join(built['archs'])} + {built['ptx']} PTX (nvcc {built['nvcc']}), NVRTC otherwise"


class Modules:
    """A device's modules and functions; thread-safe."""

    def __init__(self, device):
        self.device = device
        self.modules: dict[str, ctypes.c_void_p] = {}
        self.functions: dict[str, Function] = {}
        self.lock = threading.Lock()
        self.source = ""

    def function(self, stem: str, name: str) -> Function:
        """The kernel, with its signature from kernels/signatures.py."""
        fn = self.functions.get(name)
        if fn is None:
            with self.lock:
                fn = self.functions.get(name)
                if fn is None:
                    handle = ctypes.c_void_p()
                    dev = self.device
                    dev.make_current()
                    rc = dev.lib.cuModuleGetFunction(ctypes.byref(handle), self._module(stem), name.encode())
                    cu.check(rc, f"{dev.name}: kernel {name} in module {stem}")
                    fn = self.functions[name] = Function(dev, name, handle, signature(stem, name))
        return fn

    def _module(self, stem: str):
        module = self.modules.get(stem)
        if module is None:
            image = self._image(stem)
            module = ctypes.c_void_p()
            buf = ctypes.create_string_buffer(image, len(image))
            rc = self.device.lib.cuModuleLoadData(ctypes.byref(module), buf)
            cu.check(rc, f"{self.device.name}: loading the {self.source} kernels of {stem}")
            self.modules[stem] = module
        return module

    def _image(self, stem: str) -> bytes:
        arch = self.device.gpu.arch
        self.source = source_of(arch)
        if self.source == "nvrtc":
            from . import nvrtc

            return nvrtc.compile_cubin(stem, arch)
        path = FATBIN_DIR / f"{stem}.fatbin"
        if not path.is_file():
            raise DeviceError(f"{path} is missing: reinstall candle-backend-cuda (its build compiles the kernels)")
        return path.read_bytes()
