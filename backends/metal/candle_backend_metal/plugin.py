"""The entry point module: hook implementations only, and cheap to import
(wgpu-native is loaded, and the GPU probed, when the device is first asked about)."""

from candle_api.hooks import BackendSpec, KernelSet, hookimpl

from . import CONTRACT_VERSION, DTYPES

#: BackendSpec.aliases came with hook API 3: an older candle-api refuses this plugin by name.
CANDLE_API_HOOK_VERSION = 3


def _open(index: int):
    from .device import WgpuDevice

    return WgpuDevice(index)


def _availability():
    from .adapter import availability

    return availability()


def _count() -> int:
    from .adapter import probe

    return len(probe().adapters)


def _details() -> str:
    from .adapter import probe

    return "; ".join(f"wgpu:{i} {a.describe()}" for i, a in enumerate(probe().adapters))


def _aliases() -> tuple:
    """The adapters' backends: `metal` on macOS, `vulkan` on Linux, `d3d12` on Windows."""
    from .adapter import probe

    return tuple(sorted({a.backend for a in probe().adapters}))


@hookimpl
def candle_api_backends():
    return [
        BackendSpec(
            name="wgpu",
            open=_open,
            availability=_availability,
            device_count=_count,
            description="WGSL kernels through WebGPU (wgpu-native): Metal, Vulkan, D3D12",
            details=_details,
            contract_version=CONTRACT_VERSION,
            dtypes=DTYPES,
            aliases=_aliases,
        )
    ]


@hookimpl
def candle_api_kernels(device_type: str):
    if device_type != "wgpu":
        return None
    from .kernels import build_kernels

    return KernelSet(build_kernels())
