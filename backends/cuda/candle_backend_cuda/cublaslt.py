"""cuBLASLt (from the nvidia-cublas wheel) through ctypes: the float GEMMs.

cuBLAS is column-major and candle-api row-major, so a row-major product
C (m, n) = A (m, k) @ B (k, n) runs as the column-major C^T = B^T @ A^T:
cuBLAS's first operand is B and its second A, each read in place when one
of its strides is 1 (transposed or not), with a leading dimension of the
other. A plan (descriptors, the algorithm cuBLASLt's heuristic chose, the
alignment of the pointers) is made once per shape and reused.

bf16 and f16 run on tensor cores with f32 accumulation; f32 in full f32
unless ``CANDLE_CUDA_TF32=1`` (TF32 tensor cores, 10-bit mantissas); f64 in
f64.
"""

from __future__ import annotations

import ctypes
import os
import threading
from ctypes import POINTER, c_char_p, c_int, c_int64, c_size_t, c_uint64, c_void_p

from candle_api.errors import KernelError

from . import libs

SIGNATURES = {
    "cublasLtGetVersion": [c_size_t],
    "cublasLtGetStatusName": [c_char_p, c_int],
    "cublasLtCreate": [c_int, POINTER(c_void_p)],
    "cublasLtMatmulDescCreate": [c_int, POINTER(c_void_p), c_int, c_int],
    "cublasLtMatmulDescDestroy": [c_int, c_void_p],
    "cublasLtMatmulDescSetAttribute": [c_int, c_void_p, c_int, c_void_p, c_size_t],
    "cublasLtMatrixLayoutCreate": [c_int, POINTER(c_void_p), c_int, c_uint64, c_uint64, c_int64],
    "cublasLtMatrixLayoutDestroy": [c_int, c_void_p],
    "cublasLtMatrixLayoutSetAttribute": [c_int, c_void_p, c_int, c_void_p, c_size_t],
    "cublasLtMatmulPreferenceCreate": [c_int, POINTER(c_void_p)],
    "cublasLtMatmulPreferenceDestroy": [c_int, c_void_p],
    "cublasLtMatmulPreferenceSetAttribute": [c_int, c_void_p, c_int, c_void_p, c_size_t],
    "cublasLtMatmulAlgoGetHeuristic": [c_int, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p,
                                       c_int, c_void_p, POINTER(c_int)],
    "cublasLtMatmul": [c_int, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p,
                       c_void_p, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p, c_size_t, c_void_p],
}

# cudaDataType and cublasComputeType_t (library_types.h, cublas_api.h)
DATA_TYPES = {"f32": 0, "f64": 1, "f16": 2, "bf16": 14}
COMPUTE_32F, COMPUTE_32F_FAST_TF32, COMPUTE_64F = 68, 77, 70
DESC_TRANSA, DESC_TRANSB = 3, 4
LAYOUT_BATCH_COUNT, LAYOUT_STRIDED_BATCH_OFFSET = 5, 6
PREF_MAX_WORKSPACE_BYTES = 1
PREF_MIN_ALIGNMENT = {"a": 5, "b": 6, "c": 7, "d": 8}
#: Split-K partial sums kept in the compute type (f32): the other schemes (in place, output type) round
#: each partial sum to an f16/bf16 output, which took a 97x600x100 f16 product past the conformance bound.
PREF_REDUCTION_SCHEME_MASK, REDUCTION_SCHEME_COMPUTE_TYPE = 3, 2
OP_N, OP_T = 0, 1
#: The workspace cuBLASLt may use per device (NVIDIA recommends 32 MiB on Hopper).
WORKSPACE_BYTES = 32 << 20


class NoAlgorithm(KernelError):
    """cuBLASLt has no algorithm for a layout (matmul.py then runs the plugin's own kernel)."""


class HeuristicResult(ctypes.Structure):
    """cublasLtMatmulHeuristicResult_t."""

    _fields_ = [("algo", c_uint64 * 8), ("workspaceSize", c_size_t), ("state", c_int), ("wavesCount", ctypes.c_float),
                ("reserved", c_int * 4)]


_lib = None
_lock = threading.Lock()


def load():
    """libcublasLt with its functions declared (BackendUnavailableError when absent)."""
    global _lib
    if _lib is None:
        with _lock:
            if _lib is None:
                lib = libs.load("cublaslt").lib
                for name, (restype, *argtypes) in SIGNATURES.items():
                    fn = getattr(lib, name)
                    fn.restype, fn.argtypes = restype, argtypes
                _lib = lib
    return _lib


def version() -> int:
    return load().cublasLtGetVersion()


def check(status: int, what: str) -> None:
    if status:
        name = load().cublasLtGetStatusName(status)
        raise KernelError(f"cuBLASLt {what}: {name.decode() if name else f'status {status}'}")


def operand(rows_stride: int, cols_stride: int, rows: int, cols: int):
    """How cuBLAS reads a row-major (rows, cols) matrix with these strides as
    the column-major (cols, rows) one it stands for: (op, ld), or None when
    neither stride is 1 (a copy is needed). Size-1 dims take any stride."""
    if cols == 1:
        cols_stride = 1
    if rows == 1:
        rows_stride = max(cols, 1) if cols_stride == 1 else 1
    if cols_stride == 1 and rows_stride >= max(cols, 1):
        return OP_N, rows_stride
    if rows_stride == 1 and cols_stride >= max(rows, 1):
        return OP_T, cols_stride
    return None


def alignment(*addresses: int) -> int:
    """The largest power of two up to 256 that divides every address."""
    align = 256
    for a in addresses:
        while a % align:
            align //= 2
    return align


class Plan:
    """The descriptors and algorithm of one GEMM shape."""

    def __init__(self, handle, dtype: str, key: tuple):
        (self.trans_a, self.lda, self.trans_b, self.ldb, m, n, k, batch, stride_a, stride_b, align) = key
        lib = load()
        compute = COMPUTE_64F if dtype == "f64" else (
            COMPUTE_32F_FAST_TF32 if dtype == "f32" and os.environ.get("CANDLE_CUDA_TF32") == "1" else COMPUTE_32F)
        scale = DATA_TYPES["f64"] if dtype == "f64" else DATA_TYPES["f32"]
        self.desc = self._make(lib.cublasLtMatmulDescCreate, "matmul descriptor", compute, scale)
        for attr, value in ((DESC_TRANSA, self.trans_a), (DESC_TRANSB, self.trans_b)):
            v = c_int(value)
            check(lib.cublasLtMatmulDescSetAttribute(self.desc, attr, ctypes.byref(v), 4), "descriptor attribute")
        t = DATA_TYPES[dtype]
        # cuBLAS's A is our B (n x k as it reads it), its B our A (k x m); D is (n x m), ld n
        a_shape = (n, k) if self.trans_a == OP_N else (k, n)
        b_shape = (k, m) if self.trans_b == OP_N else (m, k)
        self.layout_a = self._layout(t, *a_shape, self.lda, batch, stride_a)
        self.layout_b = self._layout(t, *b_shape, self.ldb, batch, stride_b)
        self.layout_d = self._layout(t, n, m, n, batch, m * n)
        self.algo, self.workspace = self._choose(handle, align)

    def _make(self, create, what, *args):
        out = c_void_p()
        check(create(ctypes.byref(out), *args), f"creating a {what}")
        return out.value

    def _layout(self, dtype: int, rows: int, cols: int, ld: int, batch: int, stride: int):
        lib = load()
        layout = self._make(lib.cublasLtMatrixLayoutCreate, "matrix layout", dtype, rows, cols, ld)
        if batch > 1:
            count, offset = c_int(batch), c_int64(stride)
            check(lib.cublasLtMatrixLayoutSetAttribute(layout, LAYOUT_BATCH_COUNT, ctypes.byref(count), 4), "batch")
            check(lib.cublasLtMatrixLayoutSetAttribute(layout, LAYOUT_STRIDED_BATCH_OFFSET, ctypes.byref(offset), 8),
                  "batch stride")
        return layout

    def _choose(self, handle, align: int):
        lib = load()
        pref = self._make(lib.cublasLtMatmulPreferenceCreate, "preference")
        try:
            ws = c_uint64(WORKSPACE_BYTES)
            check(lib.cublasLtMatmulPreferenceSetAttribute(pref, PREF_MAX_WORKSPACE_BYTES, ctypes.byref(ws), 8),
                  "workspace preference")
            a = ctypes.c_uint32(align)
            for attr in PREF_MIN_ALIGNMENT.values():
                check(lib.cublasLtMatmulPreferenceSetAttribute(pref, attr, ctypes.byref(a), 4), "alignment preference")
            scheme = ctypes.c_uint32(REDUCTION_SCHEME_COMPUTE_TYPE)
            check(lib.cublasLtMatmulPreferenceSetAttribute(pref, PREF_REDUCTION_SCHEME_MASK, ctypes.byref(scheme), 4),
                  "reduction scheme preference")
            result, count = HeuristicResult(), c_int(0)
            check(lib.cublasLtMatmulAlgoGetHeuristic(handle, self.desc, self.layout_a, self.layout_b, self.layout_d,
                                                     self.layout_d, pref, 1, ctypes.byref(result), ctypes.byref(count)),
                  "heuristic")
            if count.value < 1:
                raise NoAlgorithm("cuBLASLt found no algorithm for this matrix product")
            return result, result.workspaceSize
        finally:
            lib.cublasLtMatmulPreferenceDestroy(pref)


class Gemm:
    """One device's cuBLASLt handle, workspace and plans."""

    def __init__(self, device):
        self.device = device
        lib = load()
        device.make_current()
        handle = c_void_p()
        check(lib.cublasLtCreate(ctypes.byref(handle)), "cublasLtCreate")
        self.handle = handle.value
        self.workspace = device.alloc(WORKSPACE_BYTES)
        self.plans: dict = {}
        self.lock = threading.Lock()

    def run(self, dtype: str, out_ptr: int, a_ptr: int, a_op, b_ptr: int, b_op, m: int, n: int, k: int,
            batch: int, stride_a: int, stride_b: int) -> None:
        """out (batch, m, n) = A @ B as described by operand() for A (m, k) and B (k, n),
        with element batch strides stride_a, stride_b."""
        align = alignment(out_ptr, a_ptr, b_ptr)
        key = (b_op[0], b_op[1], a_op[0], a_op[1], m, n, k, batch, stride_b, stride_a, align)
        plan = self.plans.get((dtype, key))
        if plan is None:
            with self.lock:
                plan = self.plans.setdefault((dtype, key), Plan(self.handle, dtype, key))
        scale = ctypes.c_double if dtype == "f64" else ctypes.c_float
        one, zero = scale(1.0), scale(0.0)
        dev = self.device
        dev.make_current()
        check(load().cublasLtMatmul(self.handle, plan.desc, ctypes.byref(one), b_ptr, plan.layout_a, a_ptr,
                                    plan.layout_b, ctypes.byref(zero), out_ptr, plan.layout_d, out_ptr,
                                    plan.layout_d, ctypes.byref(plan.algo.algo), self.workspace.ptr,
                                    plan.workspace, dev.stream), f"matmul ({m}x{k} @ {k}x{n}, batch {batch}, {dtype})")
