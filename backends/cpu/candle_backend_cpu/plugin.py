"""The entry point module: hook implementations only, and cheap to import."""

from candle_api.hooks import BackendSpec, KernelSet, hookimpl


def _availability() -> tuple[bool, str]:
    from . import library

    try:
        library.load()
    except Exception as exc:
        return False, str(exc)
    return True, ""


def _open(index: int):
    from .device import CpuDevice

    return CpuDevice()


def _details() -> str:
    from . import library

    return library.describe()


@hookimpl
def candle_api_backends():
    return [
        BackendSpec(
            name="cpu",
            open=_open,
            availability=_availability,
            device_count=lambda: 1,
            description="C kernels (libcandle_cpu)",
            details=_details,
            contract_version=3,  # with the quantized and the panels rows
        )
    ]


@hookimpl
def candle_api_kernels(device_type: str):
    if device_type != "cpu":
        return None
    from .kernels import build_kernels

    return KernelSet(build_kernels(), priority=0)
