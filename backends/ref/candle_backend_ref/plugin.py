"""The entry point module: hook implementations only, and cheap to import
(the kernels are built when the ref device is first used)."""

from candle_api.contract import ALL
from candle_api.hooks import BackendSpec, KernelSet, hookimpl

from . import CONTRACT_VERSION

#: KernelSet.aliasing came with hook API 4 (BackendSpec.contract_version and dtypes with 2): an older
#: candle-api refuses this plugin by name instead of failing obscurely.
CANDLE_API_HOOK_VERSION = 4


def _open(index: int):
    from .device import RefDevice

    return RefDevice()


def _details() -> str:
    import numpy

    return f"numpy {numpy.__version__}"


@hookimpl
def candle_api_backends():
    return [
        BackendSpec(
            name="ref",
            open=_open,
            availability=lambda: (True, ""),
            description="pure-NumPy reference kernels",
            details=_details,
            contract_version=CONTRACT_VERSION,
            dtypes=ALL,
        )
    ]


@hookimpl
def candle_api_kernels(device_type: str):
    if device_type != "ref":
        return None
    from .kernels import build_kernels

    # aliasing: every elementwise kernel reads its inputs whole before it writes out
    return KernelSet(build_kernels(), aliasing=True)
