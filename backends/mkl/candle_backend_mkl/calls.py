"""How the kernels call MKL: the products and vector math, on whichever threads
the threading layer gives them (:func:`for_layer`).

- ``pool`` (the default): MKL's sequential functions, run by the cpu plugin's
  thread pool on tiles of the output (``cd_pooled_gemm``, ``cd_pooled_gemv``,
  ``cd_pooled_vm`` in libcandle_cpu). One set of threads in the process: no
  second runtime spinning on the pool's cores after a product, nor sleeping
  and paying a vCPU wake-up at the next one.
- ``intel``, ``gnu``, ``sequential``: MKL's own threading, called directly
  with the cpu plugin's thread count (:class:`MklThreads`).

Both raise KernelError instead of letting MKL end the process on a fatal error.
"""

from __future__ import annotations

import ctypes
import threading

from candle_api.errors import KernelError

from . import library

#: Product kinds, as cd_pooled_gemm numbers them.
SGEMM, DGEMM, BF16GEMM = 0, 1, 2
#: Vector-math forms, as cd_pooled_vm numbers them: f(a), f(a, scalar), f(a, b).
VM_UNARY, VM_POWX, VM_POW = 0, 1, 2

_GEMM_NAMES = {SGEMM: "cblas_sgemm_64", DGEMM: "cblas_dgemm_64", BF16GEMM: "cblas_gemm_bf16bf16f32_64"}
_BATCHED_NAMES = {SGEMM: "cblas_sgemm_batch_strided_64", DGEMM: "cblas_dgemm_batch_strided_64"}
_GEMV_NAMES = {SGEMM: "cblas_sgemv_64", DGEMM: "cblas_dgemv_64"}


def _check_fatal() -> None:
    if library.failed():
        raise KernelError(library.failed())


class Pooled:
    """MKL's sequential functions on the cpu plugin's pool."""

    def __init__(self, lib):
        from candle_backend_cpu import library as cpu_library

        self.cpu = cpu_library.load()
        self.ptr = {name: ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
                    for name in (*_GEMM_NAMES.values(), *_GEMV_NAMES.values())}
        self.vm_ptr = {}  # a vector-math function's address, taken at its first call

    def _done(self, rc: int) -> None:
        _check_fatal()
        if rc != 0:
            raise KernelError(self.cpu.cd_last_error().decode(errors="replace"))

    def gemm(self, kind, ta, tb, m, n, k, a, lda, sa, b, ldb, sb, c, ldc, sc, batch):
        self._done(self.cpu.cd_pooled_gemm(kind, self.ptr[_GEMM_NAMES[kind]], ta, tb, m, n, k, a, lda, sa, b, ldb,
                                           sb, c, ldc, sc, batch))

    def gemv(self, kind, trans, rows, cols, a, lda, x, incx, y):
        self._done(self.cpu.cd_pooled_gemv(kind, self.ptr[_GEMV_NAMES[kind]], trans, rows, cols, a, lda, x, incx, y))

    def vm(self, form, fn, size, n, a, b, scalar, r, mode):
        address = self.vm_ptr.get(fn.__name__)
        if address is None:
            address = self.vm_ptr[fn.__name__] = ctypes.cast(fn, ctypes.c_void_p).value
        self._done(self.cpu.cd_pooled_vm(form, address, size, n, a, b, scalar, r, mode))


class MklThreads:
    """MKL's functions called directly, on MKL's own threads, with the cpu plugin's thread count. Like the
    pool, one call at a time gets the threads: a call made meanwhile from another Python thread runs on one
    (MKL_Set_Num_Threads_Local(1)), so two callers never put 2n threads on n cores."""

    def __init__(self, lib):
        from candle_backend_cpu import library as cpu_library

        self.lib = lib
        self.threads_now = cpu_library.load().cd_get_num_threads
        self.owner = threading.Lock()
        self.current = 0

    def _call(self, fn, *args):
        if self.owner.acquire(False):
            try:
                n = self.threads_now()
                if n != self.current:
                    self.lib.MKL_Set_Num_Threads(n)
                    self.current = n
                fn(*args)
            finally:
                self.owner.release()
        else:
            self.lib.MKL_Set_Num_Threads_Local(1)
            try:
                fn(*args)
            finally:
                self.lib.MKL_Set_Num_Threads_Local(0)
        _check_fatal()

    def gemm(self, kind, ta, tb, m, n, k, a, lda, sa, b, ldb, sb, c, ldc, sc, batch):
        args = (library.ROW_MAJOR, ta, tb, m, n, k, 1.0)
        if batch == 1 or kind == BF16GEMM:  # MKL has no batched bf16 product: one call per matrix
            fn = getattr(self.lib, _GEMM_NAMES[kind])
            asz, csz = {SGEMM: (4, 4), DGEMM: (8, 8), BF16GEMM: (2, 4)}[kind]
            for i in range(batch):
                self._call(fn, *args, a + i * sa * asz, lda, b + i * sb * asz, ldb, 0.0, c + i * sc * csz, ldc)
        else:
            self._call(getattr(self.lib, _BATCHED_NAMES[kind]), *args, a, lda, sa, b, ldb, sb, 0.0, c, ldc, sc,
                       batch)

    def gemv(self, kind, trans, rows, cols, a, lda, x, incx, y):
        self._call(getattr(self.lib, _GEMV_NAMES[kind]), library.ROW_MAJOR, trans, rows, cols, 1.0, a, lda, x, incx,
                   0.0, y, 1)

    def vm(self, form, fn, size, n, a, b, scalar, r, mode):
        if form == VM_UNARY:
            self._call(fn, n, a, r, mode)
        elif form == VM_POWX:
            self._call(fn, n, a, scalar, r, mode)
        else:
            self._call(fn, n, a, b, r, mode)


def for_layer(lib, layer: str):
    return Pooled(lib) if layer == "pool" else MklThreads(lib)
