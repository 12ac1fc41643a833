"""Finding and loading wgpu-native, the WebGPU implementation inside the
``wgpu`` wheel (``wgpu/resources/libwgpu_native-release.so``, ``.dylib`` or
``.dll``), without importing the wgpu package itself: its Python API is not
used (see docs/metal.md for why), only its shared library.

Nothing opens at import: :func:`load` runs when the wgpu device is first
probed, and a failure says which library, which paths were tried and what to
install.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import sys
import threading
from pathlib import Path

from candle_api.errors import BackendUnavailableError

from .webgpu import SIGNATURES

#: Set to load another build of wgpu-native.
ENV_OVERRIDE = "CANDLE_WGPU_LIB"
#: The wgpu-native release whose headers webgpu.py declares (wgpu 0.32's).
EXPECTED_VERSION = (29, 0)

_NAMES = {"linux": "libwgpu_native-release.so", "darwin": "libwgpu_native-release.dylib",
          "win32": "wgpu_native-release.dll"}

_lib = None
_error = ""
_lock = threading.Lock()


def candidates() -> list[Path]:
    """Where the library may be: $CANDLE_WGPU_LIB, then the wgpu package's resources."""
    if os.environ.get(ENV_OVERRIDE):
        return [Path(os.environ[ENV_OVERRIDE])]
    name = _NAMES.get(sys.platform, _NAMES["linux"])
    spec = importlib.util.find_spec("wgpu")
    if spec is None or not spec.submodule_search_locations:
        return []
    return [Path(p) / "resources" / name for p in spec.submodule_search_locations]


def version(lib) -> tuple[int, int, int, int]:
    """wgpu-native's version, (major, minor, patch, build) from wgpuGetVersion."""
    v = lib.wgpuGetVersion()
    return (v >> 24) & 0xFF, (v >> 16) & 0xFF, (v >> 8) & 0xFF, v & 0xFF


def load():
    """The loaded library with every function declared; BackendUnavailableError
    naming the paths tried when it cannot be loaded."""
    global _lib, _error
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is None:
            if _error:
                raise BackendUnavailableError(_error)
            try:
                _lib = _open()
            except BackendUnavailableError as exc:
                _error = str(exc)
                raise
    return _lib


def _open():
    paths = candidates()
    if not paths:
        raise BackendUnavailableError("wgpu-native not found: the `wgpu` package is not installed "
                                      "(pip install wgpu==0.32.0, or set CANDLE_WGPU_LIB to the library)")
    errors = []
    for path in paths:
        if not path.is_file():
            errors.append(f"{path}: no such file")
            continue
        try:
            lib = ctypes.CDLL(str(path))
        except OSError as exc:
            errors.append(f"{path}: {exc}")
            continue
        for name, (restype, argtypes) in SIGNATURES.items():
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = restype, argtypes
        found = version(lib)
        if found[:2] != EXPECTED_VERSION:
            raise BackendUnavailableError(
                f"{path} is wgpu-native {'.'.join(map(str, found))}; candle-backend-metal is declared against "
                f"{'.'.join(map(str, EXPECTED_VERSION))}.x (pip install wgpu==0.32.0)")
        return lib
    raise BackendUnavailableError("cannot load wgpu-native: " + "; ".join(errors))
