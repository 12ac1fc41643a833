"""The entry point module: hook implementations only, and cheap to import."""

from candle_api.hooks import BackendSpec, KernelSet, hookimpl

#: KernelSet.aliasing came with hook API 4 (BackendSpec.variants with 3): an older candle-api refuses
#: this plugin by name.
CANDLE_API_HOOK_VERSION = 4


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


#: The instruction sets of the library, best first: each runs on a machine that runs the one before.
ISAS = ("avx512", "avx2", "scalar")


def _variants() -> dict:
    """The instruction set in use and those below it, each selected by CANDLE_CPU_ISA."""
    from . import library

    current = library.load().cd_isa().decode()
    below = ISAS[ISAS.index(current):] if current in ISAS else (current,)
    return {isa: {"CANDLE_CPU_ISA": isa} for isa in below}


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
            variants=_variants,
            contract_version=3,  # with the quantized (2), recurrent layer, panels, int8 and packed quantized (3) rows
        )
    ]


@hookimpl
def candle_api_kernels(device_type: str):
    if device_type != "cpu":
        return None
    from .kernels import build_kernels

    return KernelSet(build_kernels(), priority=0, aliasing=True)  # elementwise loops read each element first
