"""Finding and opening libmkl_rt (from the ``mkl`` wheel), declaring every
function the kernels call, and setting up its threads.

The library opens on first use, never at import: when the cpu device's kernel
table is built and this plugin has at least one kernel to serve. Every function
is the ``_64`` (ILP64) variant, so sizes are int64 whatever MKL_INTERFACE_LAYER
says, and every one has argtypes and restype.

MKL ends the process on a fatal error (a component library it cannot load, a
threading layer whose runtime is missing). An exit handler replaces that: the
failure is recorded, the load refuses the library with a reason, and the cpu
plugin keeps serving every kernel.
"""

from __future__ import annotations

import ctypes
import os
import re
import sys
import threading
from ctypes import CFUNCTYPE, c_char_p, c_double, c_float, c_int, c_int64, c_void_p
from pathlib import Path

from candle_api.errors import BackendUnavailableError

LIB_NAME = "libmkl_rt.so.3"
#: Set to load another libmkl_rt (tests point it at a broken one).
ENV_LIB = "CANDLE_MKL_LIB"
#: MKL's threading layer: pool (the default: MKL's sequential layer, run by the cpu plugin's thread pool),
#: intel, gnu or sequential; backends/mkl/README.md says why and benchmarks/mkl_threading.py measures them.
ENV_THREADING = "CANDLE_MKL_THREADING"
THREADING_LAYERS = {"pool": (1, "libmkl_sequential.so.3"), "intel": (0, "libmkl_intel_thread.so.3"),
                    "sequential": (1, "libmkl_sequential.so.3"), "gnu": (3, "libmkl_gnu_thread.so.3")}
DEFAULT_THREADING = "pool"

# CBLAS enums
ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112
# VM accuracy modes (mkl_vml_defines.h), each with errors ignored: an out-of-domain argument gives the
# IEEE result (NaN, inf) and nothing is printed or raised.
VML_LA, VML_HA, VML_EP, VML_ERRMODE_IGNORE = 0x1, 0x2, 0x3, 0x100

I64, P = c_int64, c_void_p
_GEMM = [c_int, c_int, c_int, I64, I64, I64]  # layout, transa, transb, m, n, k
_VM1 = (None, [I64, P, P, I64])                # vm?Func_64(n, a, r, mode)
EXIT_HANDLER = CFUNCTYPE(None, c_int)

SIGNATURES = {
    "MKL_Get_Version_String": (None, [c_char_p, c_int]),
    "MKL_Set_Exit_Handler": (P, [EXIT_HANDLER]),
    "MKL_Set_Threading_Layer": (c_int, [c_int]),
    "MKL_Set_Num_Threads": (None, [c_int]),
    "MKL_Set_Num_Threads_Local": (c_int, [c_int]),
    "MKL_Get_Max_Threads": (c_int, []),
    "cblas_sgemm_64": (None, _GEMM + [c_float, P, I64, P, I64, c_float, P, I64]),
    "cblas_dgemm_64": (None, _GEMM + [c_double, P, I64, P, I64, c_double, P, I64]),
    "cblas_gemm_bf16bf16f32_64": (None, _GEMM + [c_float, P, I64, P, I64, c_float, P, I64]),
    "cblas_sgemm_batch_strided_64": (None, _GEMM + [c_float, P, I64, I64, P, I64, I64, c_float, P, I64, I64, I64]),
    "cblas_dgemm_batch_strided_64": (None, _GEMM + [c_double, P, I64, I64, P, I64, I64, c_double, P, I64, I64, I64]),
    # layout, trans, m, n, alpha, a, lda, x, incx, beta, y, incy
    "cblas_sgemv_64": (None, [c_int, c_int, I64, I64, c_float, P, I64, P, I64, c_float, P, I64]),
    "cblas_dgemv_64": (None, [c_int, c_int, I64, I64, c_double, P, I64, P, I64, c_double, P, I64]),
    "vmsPow_64": (None, [I64, P, P, P, I64]),
    "vmdPow_64": (None, [I64, P, P, P, I64]),
    "vmsPowx_64": (None, [I64, P, c_float, P, I64]),
    "vmdPowx_64": (None, [I64, P, c_double, P, I64]),
}
#: The one-argument VM functions the kernels use (MKL's name, without the vms/vmd prefix).
VM_UNARY = ("Exp", "Expm1", "Ln", "Log1p", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Tanh",
            "Asinh", "Acosh", "Atanh", "Erf", "Sqrt", "Inv", "InvSqrt")
for _name in VM_UNARY:
    SIGNATURES[f"vms{_name}_64"] = _VM1
    SIGNATURES[f"vmd{_name}_64"] = _VM1

_lib = None
_lock = threading.Lock()
_fatal: list[int] = []  # MKL's fatal error codes, recorded by the exit handler


@EXIT_HANDLER
def _on_fatal(code: int) -> None:
    _fatal.append(code)


def candidates() -> list[Path]:
    """Where libmkl_rt may be: CANDLE_MKL_LIB alone when set, else the file the mkl wheel installed
    (``sys.prefix/lib`` for a venv, the user base for ``pip --user``)."""
    override = os.environ.get(ENV_LIB)
    if override:
        return [Path(override)]
    found = []
    try:
        from importlib import metadata

        for f in metadata.files("mkl") or ():
            if f.name == LIB_NAME:
                found.append(Path(f.locate()).resolve())
    except metadata.PackageNotFoundError:
        pass
    default = Path(sys.prefix) / "lib" / LIB_NAME
    return found + ([default] if default not in found else [])


def threading_layer() -> str:
    name = os.environ.get(ENV_THREADING, "").strip().lower() or DEFAULT_THREADING
    if name not in THREADING_LAYERS:
        raise BackendUnavailableError(f"{ENV_THREADING}={name!r}: expected one of {', '.join(THREADING_LAYERS)}")
    return name


def load():
    """The configured library; raises BackendUnavailableError saying what was tried and why it failed."""
    global _lib
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is None:
            tried = []
            for path in candidates():
                try:
                    _lib = _open(path)
                    break
                except BackendUnavailableError as exc:
                    tried.append(str(exc))
            else:
                raise BackendUnavailableError(
                    "cannot use Intel MKL: " + ("; ".join(tried) or "the mkl package is not installed")
                    + ". Install it with `pip install mkl==2026.2.0`, or turn the mkl plugin off with "
                    "CANDLE_DISABLE_PLUGINS=mkl")
    return _lib


def _open(path: Path):
    if not path.is_file():
        raise BackendUnavailableError(f"{path} (not found)")
    layer = threading_layer()
    code, layer_lib = THREADING_LAYERS[layer]
    for part in ("libmkl_core.so.3", layer_lib):  # what MKL would fail to find, said before it fails
        if not (path.parent / part).is_file():
            raise BackendUnavailableError(f"{path}: {part} is missing beside it")
    try:
        lib = ctypes.CDLL(str(path))
        for name, (restype, argtypes) in SIGNATURES.items():
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = restype, argtypes
    except (OSError, AttributeError) as exc:
        raise BackendUnavailableError(f"{path} ({exc})") from None
    _fatal.clear()
    if layer == "intel":
        # Intel OpenMP's threads spin 200 ms after a product by default, taking the cores from the cpu
        # plugin's pool; 0 puts them to sleep at once. Read when the runtime starts (MKL's first product).
        # Only libiomp5 reads it (PyTorch's libgomp does not); a value the user set is kept.
        os.environ.setdefault("KMP_BLOCKTIME", "0")
    lib.MKL_Set_Threading_Layer(code)  # first: any other call settles the layer
    lib.MKL_Set_Exit_Handler(_on_fatal)
    lib.MKL_Set_Num_Threads(1 if layer == "pool" else cpu_threads())
    _self_test(lib, path, layer)
    return lib


def _self_test(lib, path: Path, layer: str) -> None:
    """A 2x2 product: the first call loads MKL's component libraries and threading runtime."""
    a = (c_float * 4)(1, 2, 3, 4)
    c = (c_float * 4)()
    lib.cblas_sgemm_64(ROW_MAJOR, NO_TRANS, NO_TRANS, 2, 2, 2, 1.0, a, 2, a, 2, 0.0, c, 2)
    if _fatal or list(c) != [7.0, 10.0, 15.0, 22.0]:
        raise BackendUnavailableError(
            f"{path} failed its self-test with the {layer} threading layer"
            + (f" (fatal error {_fatal[0]}; MKL printed why on stderr)" if _fatal else f" (got {list(c)})"))


def cpu_threads() -> int:
    """The cpu plugin's worker count (CANDLE_NUM_THREADS, default the cores): MKL follows it."""
    from candle_backend_cpu import library as cpu_library

    return cpu_library.load().cd_get_num_threads()


def version() -> str:
    """"Intel oneMKL 2026.2 (build 20260915)" from MKL's long version string."""
    buf = ctypes.create_string_buffer(256)
    load().MKL_Get_Version_String(buf, len(buf))
    text = buf.value.decode(errors="replace")
    match = re.search(r"Version (\S+?)-Product Build (\d+)", text)
    return f"Intel oneMKL {match[1]} (build {match[2]})" if match else text.strip()


def failed() -> str:
    """A description of MKL's fatal errors since the library opened ("" when none)."""
    return f"Intel MKL reported fatal error {_fatal[-1]} (see stderr)" if _fatal else ""


def describe() -> str:
    layer = threading_layer()
    if layer == "pool":
        return f"{version()}, sequential kernels on the cpu plugin's pool ({cpu_threads()} threads)"
    return f"{version()}, {layer} threading, {load().MKL_Get_Max_Threads()} threads"
