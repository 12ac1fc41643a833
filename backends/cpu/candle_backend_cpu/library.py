"""Loading libcandle_cpu.so and declaring every function it exports.

Every function gets explicit argtypes and restype (an undeclared argument would
truncate a 64-bit pointer to a C int). The library's ABI version and dtype
codes are checked against this package's at load time.
"""

from __future__ import annotations

import ctypes
import os
import threading
from ctypes import CFUNCTYPE, c_char_p, c_double, c_int, c_int32, c_int64, c_uint64, c_void_p
from pathlib import Path

from candle_api.dtype import NUMERIC_DTYPES
from candle_api.errors import BackendUnavailableError, IndexOutOfRangeError, KernelError

LIB_NAME = "libcandle_cpu.so"
ABI_VERSION = 8
#: Set to load another build of the library (a sanitizer build in CI, say).
ENV_OVERRIDE = "CANDLE_CPU_LIB"

UNARY_FN = CFUNCTYPE(c_int, c_int64, c_void_p, c_void_p)
PARAM_FN = CFUNCTYPE(c_int, c_int64, c_void_p, c_void_p, c_double, c_double)
BINARY_FN = CFUNCTYPE(c_int, c_int64, c_void_p, c_void_p, c_void_p)

# name: (restype, argtypes); c_char_p arguments take packed int64 descriptors (bytes).
SIGNATURES = {
    "cd_abi_version": (c_int, []),
    "cd_last_error": (c_char_p, []),
    "cd_names": (c_char_p, [c_char_p]),
    "cd_isa": (c_char_p, []),
    "cd_has_avx512bf16": (c_int, []),
    "cd_cache_bytes": (c_int64, [c_int32]),
    "cd_alloc": (c_void_p, [c_int64]),
    "cd_free": (None, [c_void_p]),
    "cd_get_num_threads": (c_int, []),
    "cd_set_num_threads": (c_int, [c_int]),
    "cd_unary_kernel": (c_void_p, [c_int32, c_int32]),
    "cd_param_kernel": (c_void_p, [c_int32, c_int32]),
    "cd_binary_kernel": (c_void_p, [c_int32, c_int32]),
    "cd_cmp_kernel": (c_void_p, [c_int32, c_int32]),
    "cd_cast_kernel": (c_void_p, [c_int32, c_int32]),
    "cd_unary_strided": (c_int, [c_int32, c_int32, c_char_p, c_void_p, c_void_p]),
    "cd_param_strided": (c_int, [c_int32, c_int32, c_char_p, c_void_p, c_void_p, c_double, c_double]),
    "cd_binary_strided": (c_int, [c_int32, c_int32, c_char_p, c_void_p, c_void_p, c_void_p]),
    "cd_cmp_strided": (c_int, [c_int32, c_int32, c_char_p, c_void_p, c_void_p, c_void_p]),
    "cd_cast_strided": (c_int, [c_int32, c_int32, c_char_p, c_void_p, c_void_p]),
    "cd_where": (c_int, [c_int32, c_char_p, c_void_p, c_void_p, c_void_p, c_void_p]),
    "cd_copy": (c_int, [c_int32, c_char_p, c_void_p, c_void_p]),
    "cd_fill": (c_int, [c_int32, c_char_p, c_void_p, c_char_p]),
    "cd_reduce": (c_int, [c_int32, c_int32, c_char_p, c_void_p, c_void_p]),
    "cd_cumsum": (c_int, [c_int32, c_char_p, c_void_p, c_void_p]),
    "cd_matmul": (c_int, [c_char_p, c_void_p, c_void_p, c_void_p]),
    "cd_index_select": (c_int, [c_int32, c_int32, c_char_p, c_void_p, c_void_p, c_int64, c_void_p]),
    "cd_gather": (c_int, [c_int32, c_int32, c_char_p, c_void_p, c_void_p, c_void_p]),
    "cd_scatter": (c_int, [c_int32, c_int32, c_char_p, c_void_p, c_void_p, c_void_p, c_int32]),
    "cd_index_add": (c_int, [c_int32, c_int32, c_char_p, c_void_p, c_void_p, c_void_p]),
    "cd_conv2d": (c_int, [c_int32, c_char_p, c_char_p, c_void_p, c_void_p, c_void_p]),
    "cd_conv_transpose2d": (c_int, [c_int32, c_char_p, c_char_p, c_void_p, c_void_p, c_void_p]),
    "cd_conv2d_backward_weight": (c_int, [c_int32, c_char_p, c_char_p, c_void_p, c_void_p, c_void_p]),
    "cd_pool2d": (c_int, [c_int32, c_int32, c_char_p, c_char_p, c_void_p, c_void_p]),
    "cd_pool2d_backward": (c_int, [c_int32, c_int32, c_char_p, c_char_p, c_void_p, c_void_p, c_void_p]),
    "cd_upsample2d": (c_int, [c_int32, c_int32, c_char_p, c_char_p, c_void_p, c_void_p]),
    "cd_softmax_last": (c_int, [c_int32, c_char_p, c_void_p, c_void_p, c_int32]),
    "cd_norm_last": (c_int, [c_int32, c_char_p, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p, c_double,
                             c_int32]),
    "cd_rope": (c_int, [c_int32, c_char_p, c_char_p, c_void_p, c_void_p, c_void_p, c_void_p, c_int32, c_int32]),
    "cd_silu_mul": (c_int, [c_int32, c_int64, c_int64, c_void_p, c_void_p]),
    "cd_bias_gelu": (c_int, [c_int32, c_int64, c_int64, c_void_p, c_void_p, c_void_p, c_int32]),
    "cd_sdpa": (c_int, [c_int32, c_char_p, c_void_p, c_void_p, c_void_p, c_void_p, c_int32, c_void_p, c_double]),
    "cd_rnn": (c_int, [c_int32, c_int32, c_char_p, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p,
                        c_void_p, c_void_p, c_void_p, c_void_p, c_double]),
    "cd_sort": (c_int, [c_int32, c_char_p, c_void_p, c_int64, c_int32, c_void_p, c_void_p]),
    "cd_adamw": (c_int, [c_int32, c_int64, c_void_p, c_void_p, c_void_p, c_void_p, c_char_p]),
    "cd_sgd": (c_int, [c_int32, c_int64, c_void_p, c_void_p, c_void_p, c_char_p, c_int32, c_int32]),
    "cd_quantize": (c_int, [c_int32, c_int64, c_int64, c_void_p, c_void_p]),
    "cd_dequantize": (c_int, [c_int32, c_int64, c_int64, c_void_p, c_void_p]),
    "cd_qmatmul": (c_int, [c_int32, c_int64, c_int64, c_int64, c_void_p, c_void_p, c_void_p]),
    "cd_qpack": (c_int, [c_int32, c_int64, c_int64, c_void_p, c_void_p]),
    "cd_qmatmul_packed": (c_int, [c_int32, c_int64, c_int64, c_int64, c_void_p, c_void_p, c_void_p]),
    "cd_pooled_gemm": (c_int, [c_int32, c_void_p, c_int32, c_int32, c_int64, c_int64, c_int64, c_void_p, c_int64,
                               c_int64, c_void_p, c_int64, c_int64, c_void_p, c_int64, c_int64, c_int64]),
    "cd_pooled_gemv": (c_int, [c_int32, c_void_p, c_int32, c_int64, c_int64, c_void_p, c_int64, c_void_p, c_int64,
                               c_void_p]),
    "cd_pooled_vm": (c_int, [c_int32, c_void_p, c_int32, c_int64, c_void_p, c_void_p, c_double, c_void_p, c_int64]),
    "cd_qembedding": (c_int, [c_int32, c_int64, c_int64, c_void_p, c_int32, c_int64, c_void_p, c_void_p]),
    "cd_pack_panels": (c_int, [c_int32, c_char_p, c_void_p, c_void_p]),
    "cd_linear_panels": (c_int, [c_int32, c_char_p, c_void_p, c_void_p, c_void_p, c_void_p, c_int32, c_double,
                                 c_double]),
    "cd_conv2d_panels": (c_int, [c_int32, c_char_p, c_char_p, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p,
                                 c_int32, c_double, c_double, c_double, c_double]),
    "cd_quantize_u8_params": (c_int, [c_int64, c_void_p, c_void_p]),
    "cd_quantize_u8": (c_int, [c_int64, c_void_p, c_void_p, c_void_p]),
    "cd_pack_int8_panels": (c_int, [c_int32, c_char_p, c_void_p, c_void_p]),
    "cd_matmul_int8": (c_int, [c_char_p, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p,
                               c_void_p]),
    "cd_random": (c_int, [c_int32, c_int32, c_int64, c_void_p, c_uint64, c_uint64, c_double, c_double]),
    # the plan: a cd_dplan (candle_backend_cpu.decode.Plan)
    "cd_decode_step": (c_int, [c_void_p, c_int64, c_void_p, c_void_p, c_void_p, c_void_p]),
}

_lib = None
_lock = threading.Lock()


def candidates() -> list[Path]:
    override = os.environ.get(ENV_OVERRIDE)
    return [Path(override)] if override else [Path(__file__).resolve().parent / LIB_NAME]


def load():
    """The loaded library; raises BackendUnavailableError saying what was tried."""
    global _lib
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        tried = []
        for path in candidates():
            if not path.exists():
                tried.append(f"{path} (not found)")
                continue
            try:
                lib = ctypes.CDLL(str(path))
            except OSError as exc:
                tried.append(f"{path} ({exc})")
                continue
            _declare(lib, path)
            _lib = lib
            return lib
        raise BackendUnavailableError(
            "cannot load the cpu kernels library; tried: " + "; ".join(tried)
            + ". It is built when candle-backend-cpu is installed: reinstall it from a checkout of candle-api with "
            "`pip install --force-reinstall --no-deps ./backends/cpu` on a machine with gcc"
            + (f", or unset {ENV_OVERRIDE}" if os.environ.get(ENV_OVERRIDE) else "")
        )


def _declare(lib, path: Path) -> None:
    lib.cd_abi_version.restype, lib.cd_abi_version.argtypes = c_int, []
    version = lib.cd_abi_version()  # first: an older library lacks the newer functions
    if version != ABI_VERSION:
        raise BackendUnavailableError(
            f"{path} has ABI version {version}, this candle-backend-cpu expects {ABI_VERSION}: reinstall the plugin"
        )
    for name, (restype, argtypes) in SIGNATURES.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    names = lib.cd_names(b"dtypes").decode().rstrip(",").split(",")
    expected = [d.name for d in sorted(NUMERIC_DTYPES, key=lambda d: d.code)]
    if names != expected:
        raise BackendUnavailableError(f"{path} dtype codes {names} differ from candle-api's {expected}")


def op_names(table: str) -> list[str]:
    """Op names of a kernel family, in code order, as the library defines them."""
    return load().cd_names(table.encode()).decode().rstrip(",").split(",")


def describe() -> str:
    try:
        lib = load()
    except BackendUnavailableError:
        return "library not loaded"
    l1, l2, l3 = (lib.cd_cache_bytes(level) >> 10 for level in (1, 2, 3))
    isa = lib.cd_isa().decode() + (" + bf16 dot products" if lib.cd_has_avx512bf16() else "")
    return f"cpu features: {isa}, {lib.cd_get_num_threads()} threads, L1d {l1} KiB, L2 {l2} KiB, L3 {l3} KiB"


def error() -> Exception:
    """The exception for the library's last error on this thread."""
    message = (_lib.cd_last_error() or b"unknown error").decode(errors="replace")
    if "out of range for a dimension" in message:
        return IndexOutOfRangeError(message)
    return KernelError(message)
