"""The CUDA driver API (libcuda, from the driver) through ctypes: every
function this plugin calls, each with its argtypes and restype (an
undeclared argument would truncate a 64-bit pointer), and the mapping of
its status codes to Python exceptions.

Only the ``_v2`` entry points of functions that have one are used: the
unsuffixed names are the 32-bit-size ABI kept for old binaries.
"""

from __future__ import annotations

import ctypes
import threading
from ctypes import POINTER, c_char_p, c_float, c_int, c_size_t, c_ubyte, c_uint, c_uint64, c_void_p

from candle_api.errors import BackendUnavailableError, DeviceError, KernelError

from . import libs

CUresult = c_int
CUdeviceptr = c_uint64
_p = POINTER

SIGNATURES = {
    "cuGetErrorName": [CUresult, c_int, _p(c_char_p)],
    "cuGetErrorString": [CUresult, c_int, _p(c_char_p)],
    "cuInit": [CUresult, c_uint],
    "cuDriverGetVersion": [CUresult, _p(c_int)],
    "cuDeviceGetCount": [CUresult, _p(c_int)],
    "cuDeviceGet": [CUresult, _p(c_int), c_int],
    "cuDeviceGetName": [CUresult, c_char_p, c_int, c_int],
    "cuDeviceGetAttribute": [CUresult, _p(c_int), c_int, c_int],
    "cuDeviceTotalMem_v2": [CUresult, _p(c_size_t), c_int],
    "cuDevicePrimaryCtxRetain": [CUresult, _p(c_void_p), c_int],
    "cuDevicePrimaryCtxRelease_v2": [CUresult, c_int],
    "cuCtxSetCurrent": [CUresult, c_void_p],
    "cuCtxSynchronize": [CUresult],
    "cuStreamCreate": [CUresult, _p(c_void_p), c_uint],
    "cuStreamSynchronize": [CUresult, c_void_p],
    "cuEventCreate": [CUresult, _p(c_void_p), c_uint],
    "cuEventRecord": [CUresult, c_void_p, c_void_p],
    "cuEventSynchronize": [CUresult, c_void_p],
    "cuEventElapsedTime": [CUresult, _p(c_float), c_void_p, c_void_p],
    "cuEventDestroy_v2": [CUresult, c_void_p],
    "cuMemAlloc_v2": [CUresult, _p(CUdeviceptr), c_size_t],
    "cuMemFree_v2": [CUresult, CUdeviceptr],
    "cuMemGetInfo_v2": [CUresult, _p(c_size_t), _p(c_size_t)],
    "cuMemHostAlloc": [CUresult, _p(c_void_p), c_size_t, c_uint],
    "cuMemFreeHost": [CUresult, c_void_p],
    "cuMemHostGetDevicePointer_v2": [CUresult, _p(CUdeviceptr), c_void_p, c_uint],
    "cuMemcpyHtoDAsync_v2": [CUresult, CUdeviceptr, c_void_p, c_size_t, c_void_p],
    "cuMemcpyDtoHAsync_v2": [CUresult, c_void_p, CUdeviceptr, c_size_t, c_void_p],
    "cuMemcpyDtoDAsync_v2": [CUresult, CUdeviceptr, CUdeviceptr, c_size_t, c_void_p],
    "cuMemcpyPeerAsync": [CUresult, CUdeviceptr, c_void_p, CUdeviceptr, c_void_p, c_size_t, c_void_p],
    "cuMemsetD8Async": [CUresult, CUdeviceptr, c_ubyte, c_size_t, c_void_p],
    "cuPointerGetAttribute": [CUresult, c_void_p, c_int, CUdeviceptr],
    "cuModuleLoadData": [CUresult, _p(c_void_p), c_void_p],
    "cuModuleGetFunction": [CUresult, _p(c_void_p), c_void_p, c_char_p],
    "cuFuncSetAttribute": [CUresult, c_void_p, c_int, c_int],
    "cuLaunchKernel": [CUresult, c_void_p, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_void_p,
                       c_void_p, c_void_p],
}

# ---- constants (cuda.h) ----------------------------------------------------------------------------
SUCCESS = 0
ERROR_OUT_OF_MEMORY = 2
ERROR_NOT_INITIALIZED = 3
ERROR_NO_DEVICE = 100
ERROR_NO_BINARY_FOR_GPU = 209
ERROR_UNSUPPORTED_PTX_VERSION = 222
ERROR_INVALID_PTX = 218
ERROR_JIT_COMPILER_NOT_FOUND = 221
#: Errors after which the context is unusable: every later call fails the same way.
STICKY = {700: "an illegal memory access", 710: "a device-side assertion", 714: "a misaligned address",
          715: "an invalid instruction", 716: "a misaligned address", 719: "a kernel failure",
          720: "a cooperative launch too large"}
ATTR_MAX_THREADS_PER_BLOCK = 1
ATTR_MAX_SHARED_MEMORY_PER_BLOCK = 8
ATTR_MULTIPROCESSOR_COUNT = 16
ATTR_COMPUTE_CAPABILITY_MAJOR = 75
ATTR_COMPUTE_CAPABILITY_MINOR = 76
ATTR_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97
FUNC_ATTR_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
MEMHOSTALLOC_PORTABLE = 1
MEMHOSTALLOC_DEVICEMAP = 2
POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9
LAUNCH_PARAM_END = 0
LAUNCH_PARAM_BUFFER_POINTER = 1
LAUNCH_PARAM_BUFFER_SIZE = 2

_lib = None
_lock = threading.Lock()


def load():
    """libcuda with every function declared; raises BackendUnavailableError
    when the driver is missing or lacks a function this plugin calls."""
    global _lib
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is None:
            found = libs.load("driver")
            lib = found.lib
            for name, (restype, *argtypes) in SIGNATURES.items():
                try:
                    fn = getattr(lib, name)
                except AttributeError:
                    raise BackendUnavailableError(f"{found.path} has no {name}: the NVIDIA driver is too old for "
                                                  "candle-backend-cuda (CUDA 13 needs 580 or newer)") from None
                fn.restype = restype
                fn.argtypes = argtypes
            _lib = lib
    return _lib


def error_name(code: int) -> str:
    """CUDA_ERROR_NO_DEVICE and the like (cuGetErrorName needs no cuInit)."""
    name = c_char_p()
    if _lib is not None and _lib.cuGetErrorName(code, ctypes.byref(name)) == SUCCESS and name.value:
        return name.value.decode()
    return f"CUDA error {code}"


def error_text(code: int) -> str:
    text = c_char_p()
    if _lib is not None and _lib.cuGetErrorString(code, ctypes.byref(text)) == SUCCESS and text.value:
        return text.value.decode()
    return ""


def describe(code: int) -> str:
    """``CUDA_ERROR_X (what it means)``."""
    text = error_text(code)
    return f"{error_name(code)} ({text})" if text else error_name(code)


def check(code: int, what: str) -> None:
    """Raises for a status other than success: MemoryError for out of memory,
    DeviceError otherwise (saying so when the context can no longer be used)."""
    if code == SUCCESS:
        return
    raise exception(code, what)


def exception(code: int, what: str) -> Exception:
    if code == ERROR_OUT_OF_MEMORY:
        return MemoryError(f"{what}: {describe(code)}")
    if code in STICKY:
        return KernelError(f"{what}: {describe(code)}: a kernel made {STICKY[code]}; the CUDA context of this "
                           "process can no longer be used (restart the process)")
    return DeviceError(f"{what}: {describe(code)}")
