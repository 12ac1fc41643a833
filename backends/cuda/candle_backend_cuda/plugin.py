"""The entry point module: hook implementations only, and cheap to import (the
driver is loaded, and the GPUs probed, when the device is first asked about)."""

from candle_api.dtype import get_dtype
from candle_api.hooks import BackendSpec, KernelSet, hookimpl

from . import CONTRACT_VERSION, DTYPES


def _open(index: int):
    from .device import CudaDevice

    return CudaDevice(index)


def _availability():
    from .probe import availability

    return availability()


def _count() -> int:
    from .probe import probe

    return len(probe().gpus)


def _details() -> str:
    from .modules import describe_kernels
    from .probe import driver_version, probe

    gpus = "; ".join(f"cuda:{g.index} {g.describe()}" for g in probe().gpus)
    return f"{gpus}; driver CUDA {driver_version()}; {describe_kernels()}"


@hookimpl
def candle_api_backends():
    return [
        BackendSpec(
            name="cuda",
            open=_open,
            availability=_availability,
            device_count=_count,
            description="CUDA kernels (fatbins, NVRTC for other GPUs) and cuBLASLt through the driver API",
            details=_details,
            contract_version=CONTRACT_VERSION,
            dtypes=DTYPES,
        )
    ]


@hookimpl
def candle_api_kernels(device_type: str):
    if device_type != "cuda":
        return None
    from .kernels import build_kernels
    from .kernels.matmul import use_cublaslt

    gemm = "cuBLASLt" if use_cublaslt(get_dtype("f32")) else "the plugin's kernel (CANDLE_CUDA_GEMM=kernel)"
    return KernelSet(build_kernels(), description=f"candle-backend-cuda kernels; float GEMM through {gemm}")
