"""NVRTC, the run-time CUDA compiler (from the nvidia-cuda-nvrtc wheel): it
compiles a kernel source (csrc/*.cu) to a CUBIN for the GPU in hand when the
fatbins built with the wheel lack its architecture. CUBIN rather than PTX:
a driver may refuse PTX from an NVRTC newer than itself, while machine code
for its GPU always loads.

The headers the sources include (cuda_fp16.h, cuda_bf16.h) come from the
nvidia-cuda-runtime wheel beside NVRTC, or from a toolkit. Results are
cached on disk (``CANDLE_CUDA_CACHE``, default ~/.cache/candle-api/cuda),
keyed by the source, the headers' folder, NVRTC's version and the
architecture.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import threading
from ctypes import POINTER, c_char_p, c_int, c_size_t, c_void_p
from pathlib import Path

from candle_api.errors import BackendUnavailableError, DeviceError

from . import libs

CSRC = Path(__file__).resolve().parent / "csrc"

SIGNATURES = {
    "nvrtcVersion": [c_int, POINTER(c_int), POINTER(c_int)],
    "nvrtcGetErrorString": [c_char_p, c_int],
    "nvrtcCreateProgram": [c_int, POINTER(c_void_p), c_char_p, c_char_p, c_int, c_void_p, c_void_p],
    "nvrtcDestroyProgram": [c_int, POINTER(c_void_p)],
    "nvrtcCompileProgram": [c_int, c_void_p, c_int, POINTER(c_char_p)],
    "nvrtcGetProgramLogSize": [c_int, c_void_p, POINTER(c_size_t)],
    "nvrtcGetProgramLog": [c_int, c_void_p, c_char_p],
    "nvrtcGetCUBINSize": [c_int, c_void_p, POINTER(c_size_t)],
    "nvrtcGetCUBIN": [c_int, c_void_p, c_char_p],
}

_lib = None
_path = ""
_lock = threading.Lock()


def load():
    """libnvrtc with its functions declared (BackendUnavailableError when absent)."""
    global _lib, _path
    if _lib is None:
        with _lock:
            if _lib is None:
                found = libs.load("nvrtc")
                for name, (restype, *argtypes) in SIGNATURES.items():
                    fn = getattr(found.lib, name)
                    fn.restype, fn.argtypes = restype, argtypes
                _lib, _path = found.lib, found.path
    return _lib


def version() -> tuple[int, int]:
    major, minor = c_int(), c_int()
    load().nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    return major.value, minor.value


def include_dir() -> Path:
    """Where cuda_fp16.h is: beside the NVRTC library found (the wheels' nvidia/cu13/include),
    else CUDA_HOME's include folder."""
    load()
    candidates = []
    if "/" in _path:
        candidates.append(Path(_path).resolve().parent.parent / "include")
    candidates += [Path(os.environ[v], "include") for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
    candidates.append(Path("/usr/local/cuda/include"))
    for c in candidates:
        if (c / "cuda_fp16.h").is_file():
            return c
    raise BackendUnavailableError("NVRTC needs cuda_fp16.h: `pip install nvidia-cuda-runtime` provides it "
                                  f"(a dependency of candle-backend-cuda); looked in {', '.join(map(str, candidates))}")


def cache_dir() -> Path:
    return Path(os.environ.get("CANDLE_CUDA_CACHE", Path.home() / ".cache" / "candle-api" / "cuda"))


def compile_cubin(stem: str, arch: int) -> bytes:
    """csrc/<stem>.cu compiled for sm_<arch>, from the cache when it was compiled before."""
    source = (CSRC / f"{stem}.cu").read_bytes()
    include = include_dir()
    key = hashlib.sha256(source)
    for header in sorted(CSRC.glob("*.cuh")):
        key.update(header.read_bytes())
    key.update(f"{include}|{version()}|{arch}".encode())
    cached = cache_dir() / f"{stem}-sm_{arch}-{key.hexdigest()[:16]}.cubin"
    if cached.is_file():
        return cached.read_bytes()
    cubin = _compile(source, f"{stem}.cu", arch, [str(CSRC), str(include)])
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        partial = cached.with_suffix(f".{os.getpid()}.tmp")
        partial.write_bytes(cubin)
        partial.replace(cached)
    except OSError:  # a read-only home: compile again next time
        pass
    return cubin


def _compile(source: bytes, name: str, arch: int, includes: list[str]) -> bytes:
    lib = load()
    prog = c_void_p()
    _check(lib.nvrtcCreateProgram(ctypes.byref(prog), source, name.encode(), 0, None, None), "nvrtcCreateProgram")
    try:
        # -default-device: NVRTC 13.0 takes the kernels' generic lambdas (auto parameters) for host
        # functions, which JIT mode refuses; the sources hold device code only
        options = [f"--gpu-architecture=sm_{arch}", "-std=c++17", "-default-device",
                   *(f"--include-path={i}" for i in includes)]
        argv = (c_char_p * len(options))(*(o.encode() for o in options))
        rc = lib.nvrtcCompileProgram(prog, len(options), argv)
        if rc:
            raise DeviceError(f"NVRTC could not compile {name} for sm_{arch}: {_error(rc)}\n{_log(prog)}")
        size = c_size_t()
        _check(lib.nvrtcGetCUBINSize(prog, ctypes.byref(size)), "nvrtcGetCUBINSize")
        out = ctypes.create_string_buffer(size.value)
        _check(lib.nvrtcGetCUBIN(prog, out), "nvrtcGetCUBIN")
        return out.raw
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))


def _log(prog) -> str:
    lib = load()
    size = c_size_t()
    if lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size)) or size.value <= 1:
        return ""
    buf = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(prog, buf)
    return buf.value.decode(errors="replace")


def _error(rc: int) -> str:
    text = load().nvrtcGetErrorString(rc)
    return text.decode() if text else f"NVRTC error {rc}"


def _check(rc: int, what: str) -> None:
    if rc:
        raise DeviceError(f"{what}: {_error(rc)}")
