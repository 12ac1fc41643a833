"""Utilities with candle-pyo3's names (``candle.utils``)."""

from __future__ import annotations

import numbers

from .device import get_device
from .dtype import f32
from .errors import ArgumentError, CandleError
from .registry import registry


def _available(device_type: str) -> bool:
    entry = registry().backends().get(device_type)
    if entry is None:
        return False
    try:
        return bool(entry[0].availability()[0])
    except Exception:
        return False


def cuda_is_available() -> bool:
    """True when a cuda backend plugin is installed and sees a GPU."""
    return _available("cuda")


def metal_is_available() -> bool:
    return _available("metal")


def device_count(device_type: str = "cuda") -> int:
    entry = registry().backends().get(device_type)
    return entry[0].device_count() if entry is not None and _available(device_type) else 0


def has_mkl() -> bool:
    """True when the plugin serving f32 matmul on the cpu device is the MKL one."""
    if "cpu" not in registry().backends():
        return False
    provider = registry().kernel_table("cpu").providers.get(("matmul", f32))
    return provider is not None and provider[0] == "mkl"


def has_accelerate() -> bool:
    """Apple Accelerate is not a candle-api plugin; always False."""
    return False


def _cpu_backend():
    try:
        return get_device("cpu").backend
    except CandleError:
        return None


def get_num_threads() -> int:
    """Threads the cpu backend uses (CANDLE_NUM_THREADS, default: the cores)."""
    backend = _cpu_backend()
    return backend.get_num_threads() if backend is not None else 1


#: The most worker threads set_num_threads takes (as many as a large server has cores, and then some).
MAX_THREADS = 4096


def set_num_threads(n: int) -> None:
    """Worker threads of the cpu backend: 1 to MAX_THREADS."""
    backend = _cpu_backend()
    if backend is None:
        raise CandleError("no cpu backend is installed")
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or not 1 <= n <= MAX_THREADS:
        raise ArgumentError(f"set_num_threads: the number of threads must be an integer from 1 to {MAX_THREADS}, "
                         f"got {n!r}")
    backend.set_num_threads(int(n))


# ---- files, with candle-pyo3's names (the front door is candle_api.load / save) -------------
def load_safetensors(path, device=None) -> dict:
    """name -> Tensor of a safetensors file (memory-mapped on cpu)."""
    from . import io

    return dict(io.load(path, device=device, format="safetensors"))


def save_safetensors(path, tensors) -> None:
    from . import io

    io.save(tensors, path, format="safetensors")


def load_gguf(path, device=None) -> tuple[dict, dict]:
    """(name -> QTensor, metadata) of a GGUF file."""
    from . import io

    f = io.load(path, device=device, format="gguf")
    return dict(f), dict(f.metadata)


def save_gguf(path, tensors, metadata) -> None:
    """Writes QTensors (or Tensors, stored as they are) and metadata as GGUF v3."""
    from . import io

    io.save(tensors, path, metadata, format="gguf")


def load_ggml(path, device=None) -> tuple[dict, dict, list]:
    """(name -> QTensor, hyper-parameters, vocabulary) of a legacy GGML/GGJT file."""
    from . import io

    f = io.load(path, device=device, format="ggml")
    return dict(f), dict(f.metadata.get("hparams", {})), list(f.metadata.get("vocab", []))
