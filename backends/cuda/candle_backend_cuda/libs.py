"""Finding NVIDIA's shared libraries the way NVIDIA's cuda-pathfinder does, so
that a machine needs a driver and pip, not a CUDA toolkit.

For a toolkit library (NVRTC, cuBLASLt), in order:

1. ``CANDLE_CUDA_<NAME>`` (``CANDLE_CUDA_NVRTC=/path/libnvrtc.so.13``): a file to load instead;
2. a copy already loaded in this process (by PyTorch or CuPy, say): two copies of
   cuBLAS in one process waste memory and can disagree;
3. the pip wheels (``nvidia-cublas``, ``nvidia-cuda-nvrtc``) in site-packages, in
   the interpreter's search order: ``nvidia/cu13/lib`` (CUDA 13 wheels), then the
   CUDA 12 layout (``nvidia/cublas/lib``...);
4. ``$CONDA_PREFIX/lib``;
5. the dynamic loader's own search (``LD_LIBRARY_PATH``, the ldconfig cache);
6. ``$CUDA_HOME`` / ``$CUDA_PATH`` (``lib64``, ``lib``).

The driver library, libcuda, comes with the driver and is never shipped in a
wheel: steps 1, 2 and 5 only. Nothing here runs at import; a library that
cannot be found raises BackendUnavailableError naming every place tried and
what to install.
"""

from __future__ import annotations

import ctypes
import os
import site
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from candle_api.errors import BackendUnavailableError


@dataclass(frozen=True)
class LibSpec:
    """One library: ``name`` (its env override is ``CANDLE_CUDA_<NAME>``),
    the sonames to look for (newest first), the wheel folders that hold it,
    the pip distribution that ships it, and whether the driver provides it."""

    name: str
    sonames: tuple
    wheel_dirs: tuple = ()
    wheel: str = ""
    driver: bool = False

    @property
    def env(self) -> str:
        return f"CANDLE_CUDA_{self.name.upper()}"


LIBS = {
    "driver": LibSpec("driver", ("libcuda.so.1",), driver=True),
    "nvrtc": LibSpec("nvrtc", ("libnvrtc.so.13", "libnvrtc.so.12"), ("nvidia/cu13/lib", "nvidia/cuda_nvrtc/lib"),
                     "nvidia-cuda-nvrtc"),
    "cublaslt": LibSpec("cublaslt", ("libcublasLt.so.13", "libcublasLt.so.12"), ("nvidia/cu13/lib",
                                                                                  "nvidia/cublas/lib"),
                        "nvidia-cublas"),
}


@dataclass(frozen=True)
class Found:
    """A library loaded: its ctypes handle, the path (or soname) and which step found it."""

    lib: ctypes.CDLL
    path: str
    via: str


def site_dirs() -> list[str]:
    """site-packages folders in the interpreter's order: sys.path first (a venv, PYTHONPATH,
    a --target install), then site's own list."""
    dirs = [p for p in sys.path if p and os.path.isdir(p)]
    try:
        dirs += site.getsitepackages()
    except AttributeError:  # a virtualenv-made site module without it
        pass
    user = site.getusersitepackages() if site.ENABLE_USER_SITE else None
    if user:
        dirs.append(user)
    return list(dict.fromkeys(os.path.abspath(d) for d in dirs))


def candidates(spec: LibSpec, env=None, sites: list[str] | None = None) -> list[tuple[str, str]]:
    """(path or soname, step) pairs to try, in order (step 2, the copy already
    loaded, is checked by :func:`load` before these)."""
    env = os.environ if env is None else env
    out: list[tuple[str, str]] = []
    if env.get(spec.env):
        return [(env[spec.env], spec.env)]
    if not spec.driver:
        roots = site_dirs() if sites is None else sites
        for rel in spec.wheel_dirs:  # the CUDA 13 layout in every site-packages first, as cuda-pathfinder
            for root in roots:
                for soname in spec.sonames:
                    out.append((str(Path(root, rel, soname)), f"site-packages ({root})"))
        if env.get("CONDA_PREFIX"):
            out += [(str(Path(env["CONDA_PREFIX"], "lib", s)), "CONDA_PREFIX") for s in spec.sonames]
    out += [(soname, "the system's library search") for soname in spec.sonames]
    if not spec.driver:
        for var in ("CUDA_HOME", "CUDA_PATH"):
            if env.get(var):
                out += [(str(Path(env[var], sub, s)), var) for sub in ("lib64", "lib") for s in spec.sonames]
    return out


def already_loaded(spec: LibSpec) -> ctypes.CDLL | None:
    """The copy of the library this process has loaded already (RTLD_NOLOAD opens nothing new)."""
    for soname in spec.sonames:
        try:
            return ctypes.CDLL(soname, mode=os.RTLD_NOLOAD | os.RTLD_GLOBAL)
        except OSError:
            continue
    return None


_loaded: dict[str, Found] = {}
_lock = threading.Lock()


def load(name: str) -> Found:
    """The library ``name`` of :data:`LIBS`, loaded once per process."""
    found = _loaded.get(name)
    if found is not None:
        return found
    with _lock:
        if name not in _loaded:
            _loaded[name] = _search(LIBS[name])
        return _loaded[name]


def _search(spec: LibSpec, cands: list[tuple[str, str]] | None = None) -> Found:
    """The first of cands (default: candidates(spec)) that loads, after a copy already loaded."""
    if not os.environ.get(spec.env):
        lib = already_loaded(spec)
        if lib is not None:
            return Found(lib, lib._name, "already loaded in this process")
    tried = []
    for path, via in candidates(spec) if cands is None else cands:
        is_file = "/" in path
        if is_file and not os.path.isfile(path):
            tried.append(path)
            continue
        try:
            lib = ctypes.CDLL(path, mode=os.RTLD_GLOBAL)  # global: cuBLASLt's kernels find NVRTC's symbols
        except OSError as exc:
            tried.append(f"{path} ({exc})")
            continue
        return Found(lib, path, via)
    raise BackendUnavailableError(_not_found(spec, tried))


def _not_found(spec: LibSpec, tried: list[str]) -> str:
    names = " or ".join(spec.sonames)
    if spec.driver:
        hint = ("no NVIDIA driver is installed (the cuda device needs one: NVIDIA's driver package, 580 or newer "
                "for CUDA 13)")
    else:
        hint = f"`pip install {spec.wheel}` provides it (a dependency of candle-backend-cuda)"
    shown = tried if len(tried) <= 12 else tried[:12] + [f"... {len(tried) - 12} more"]
    return f"{names} not found: {hint}; tried {'; '.join(shown)}"


def forget() -> None:
    """Drops the cache of loaded libraries (tests only: a library is never unloaded)."""
    with _lock:
        _loaded.clear()
