"""The entry point module (``[project.entry-points.candle_api]`` in
pyproject.toml): the device type and its kernels. Cheap to import: the
device object and the kernel table are made when first asked for."""

from candle_api.hooks import BackendSpec, KernelSet, hookimpl

#: BackendSpec.contract_version and dtypes came with hook API 2: an older candle-api refuses
#: this plugin by name instead of failing obscurely.
CANDLE_API_HOOK_VERSION = 2

DEVICE_TYPE = "toy"


def _open(index: int):
    from .device import ToyDevice

    return ToyDevice()


@hookimpl
def candle_api_backends():
    from .kernels import DTYPES

    return [
        BackendSpec(
            name=DEVICE_TYPE,
            open=_open,
            availability=lambda: (True, ""),  # nothing to detect: it runs wherever NumPy does
            device_count=lambda: 1,
            description="example backend: bytearray memory, NumPy kernels for part of the contract",
            contract_version=1,  # the kernel table version whose required rows it answers for
            dtypes=DTYPES,
        )
    ]


@hookimpl
def candle_api_kernels(device_type: str):
    if device_type != DEVICE_TYPE:
        return None
    from .kernels import build_kernels

    return KernelSet(build_kernels())
