"""The entry point module: hook implementations only, and cheap to import.
libmkl_rt opens when the cpu device's kernel table is built, and only when
there is a kernel to serve; if it cannot, the hook raises, the registry
records why (``candle info`` shows it) and the cpu plugin serves every kernel."""

from candle_api.hooks import KernelSet, hookimpl

#: KernelSet.description came with hook API 3.
CANDLE_API_HOOK_VERSION = 3

#: Above the cpu plugin's kernels (priority 0), below a plugin that overrides kernels at the usual 10.
PRIORITY = 5


@hookimpl
def candle_api_kernels(device_type: str):
    if device_type != "cpu":
        return None
    from . import calls, kernels, library, vml

    served, why = kernels.choose()
    if not served:
        return KernelSet({}, PRIORITY, f"Intel MKL: no kernel served: {why}")
    lib = library.load()
    built = kernels.build(lib, calls.for_layer(lib, library.threading_layer()), served)
    modes = ", ".join(f"{d} {m}" for d, m in vml.MODE_NAMES.items())
    return KernelSet(built, PRIORITY, f"{library.describe()}; vector math {modes}; serving {why}")
