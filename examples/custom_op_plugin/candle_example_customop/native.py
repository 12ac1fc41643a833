"""The C kernel (csrc/swiglu.c, built by setup.py), loaded with ctypes on
first use, and the Python function the core calls for each dtype."""

import ctypes
import threading
from ctypes import POINTER, c_double, c_int, c_int32, c_int64, c_void_p
from pathlib import Path

from candle_api import BackendUnavailableError, KernelError
from candle_api.dtype import get_dtype

from .plugin import DEFAULT_BETA

LIB_PATH = Path(__file__).resolve().parent / "libswiglu.so"
FUNCTIONS = ("swiglu_f32", "swiglu_f64")
# int swiglu_T(int32 ndim, const int64 *shape, const T *a, const int64 *sa, const T *b, const int64 *sb,
#              T *out, double beta). Every argument is declared: ctypes would pass an undeclared
# Python int as a C int and cut a 64-bit address in half.
ARGTYPES = [c_int32, POINTER(c_int64), c_void_p, POINTER(c_int64), c_void_p, POINTER(c_int64), c_void_p, c_double]

_lib = None
_lock = threading.Lock()


def load() -> ctypes.CDLL:
    """The library, opened on the first call."""
    global _lib
    if _lib is None:
        with _lock:
            if _lib is None:
                _lib = _open()
    return _lib


def _open() -> ctypes.CDLL:
    """Opens the library and declares its functions; a missing or broken library
    is an error naming its path and how to rebuild it."""
    try:
        lib = ctypes.CDLL(str(LIB_PATH))
    except OSError as exc:
        raise BackendUnavailableError(
            f"candle-example-customop: cannot load its kernel library {LIB_PATH} ({exc}). It is compiled when "
            "the package is installed: reinstall it on a machine with gcc, e.g. "
            "`pip install --force-reinstall --no-deps ./examples/custom_op_plugin`") from None
    for name in FUNCTIONS:
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = c_int, ARGTYPES
    return lib


def kernel(dtype: str):
    """The cpu kernel for one dtype. The core calls it as ``k(out, [(a, la), (b, lb)],
    params)``: cpu storages (``.ptr`` is the host address), layouts (``.shape``,
    ``.strides`` in elements, ``.offset``), and the op's keyword arguments."""
    name, itemsize = f"swiglu_{dtype}", get_dtype(dtype).itemsize

    def swiglu_kernel(out, inputs, params):
        (a, la), (b, lb) = inputs
        fn = getattr(load(), name)
        dims = c_int64 * len(la.shape)
        rc = fn(len(la.shape), dims(*la.shape), a.ptr + la.offset * itemsize, dims(*la.strides),
                b.ptr + lb.offset * itemsize, dims(*lb.strides), out.ptr, params.get("beta", DEFAULT_BETA))
        if rc:
            raise KernelError(f"swiglu: the kernel refused a {len(la.shape)}-d input")

    return swiglu_kernel
