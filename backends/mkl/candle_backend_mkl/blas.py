"""The matmul row (``k(out, a, la, b, lb)``, any strides) through MKL's BLAS:
cblas_?gemm, cblas_?gemm_batch_strided and cblas_?gemv for f32 and f64,
cblas_gemm_bf16bf16f32 for bf16 (f32 accumulation, rounded once to bf16), through
:mod:`.calls` (the cpu plugin's pool by default).

A layout BLAS can take is one where every matrix has a unit stride along one
of its two dims and a leading dimension at least as long as the other, and the
batch dims fold into one stride per operand. Anything else (negative or zero
strides inside a matrix, a batch that does not fold, an empty inner dim) goes
back to the cpu plugin's kernel, which takes any layout.
"""

from __future__ import annotations

import ctypes

import numpy as np

from candle_api.dtype import get_dtype

from .calls import BF16GEMM, DGEMM, SGEMM
from .library import NO_TRANS, TRANS

#: The matmul shapes told apart by the per-machine choice: a matrix-vector product (m or n is 1) and the rest.
GEMV, GEMM = "gemv", "gemm"


def blas_matrix(rows: int, cols: int, rs: int, cs: int):
    """(transpose flag, leading dimension) of a row-major BLAS view of a rows x cols matrix with element
    strides (rs, cs), or None when BLAS cannot read it in place."""
    if cols <= 1 or cs == 1:
        ld = rs if rows > 1 else max(cols, 1)
        if ld >= max(cols, 1):
            return NO_TRANS, ld
    if rows <= 1 or rs == 1:
        ld = cs if cols > 1 else max(rows, 1)
        if ld >= max(rows, 1):
            return TRANS, ld
    return None


def fold_batch(shape, a_strides, b_strides):
    """(count, a's stride, b's stride) of batch dims folded into one, or None when they do not fold."""
    dims = [(n, sa, sb) for n, sa, sb in zip(shape, a_strides, b_strides) if n != 1]
    if not dims:
        return 1, 0, 0
    count, sa, sb = dims[-1]
    for n, sa_outer, sb_outer in reversed(dims[:-1]):
        if (sa_outer, sb_outer) != (sa * count, sb * count):  # (a broadcast operand has 0 for both)
            return None
        count *= n
    if sa < 0 or sb < 0:
        return None
    return count, sa, sb


class Plan:
    """How one (a's layout, b's layout) is multiplied: the BLAS arguments, or None for the cpu kernel."""

    __slots__ = ("kind", "m", "n", "k", "ta", "lda", "tb", "ldb", "batch", "sa", "sb", "inc_a", "inc_b")


def plan(la, lb):
    *batch, m, k = la.shape
    n = lb.shape[-1]
    if k == 0:
        return None
    ma = blas_matrix(m, k, la.strides[-2], la.strides[-1])
    mb = blas_matrix(k, n, lb.strides[-2], lb.strides[-1])
    folded = fold_batch(batch, la.strides[:-2], lb.strides[:-2])
    if ma is None or mb is None or folded is None:
        return None
    p = Plan()
    p.m, p.n, p.k = m, n, k
    (p.ta, p.lda), (p.tb, p.ldb) = ma, mb
    p.batch, p.sa, p.sb = folded
    p.kind = GEMV if (m == 1 or n == 1) and p.batch == 1 else GEMM
    # the vector's element stride for a GEMV: along k
    p.inc_a = la.strides[-1] if k > 1 else 1
    p.inc_b = lb.strides[-2] if k > 1 else 1
    if p.kind == GEMV and ((m == 1 and p.inc_a <= 0) or (m != 1 and p.inc_b <= 0)):
        p.kind = GEMM
    return p


def planner():
    """plan(la, lb), remembered per pair of layouts: a model multiplies the same few over and over."""
    plans: dict = {}

    def lookup(la, lb):
        key = (la.shape, la.strides, lb.shape, lb.strides)
        p = plans.get(key, False)
        if p is False:
            if len(plans) >= 1024:
                plans.clear()
            p = plans[key] = plan(la, lb)
        return p

    return lookup


def float_matmul(calls, fallback, dt, served):
    """k(out, a, la, b, lb) for f32 or f64; ``served`` holds the shape kinds (GEMM, GEMV) MKL takes, the
    others go to ``fallback``."""
    kind = SGEMM if dt.name == "f32" else DGEMM
    isz, lookup = dt.itemsize, planner()

    def kernel(out, a, la, b, lb):
        p = lookup(la, lb)
        if p is None or p.kind not in served:
            return fallback(out, a, la, b, lb)
        pa, pb = a.ptr + la.offset * isz, b.ptr + lb.offset * isz
        if p.kind == GEMV:
            _gemv(calls, kind, p, pa, pb, out.ptr)
        else:
            calls.gemm(kind, p.ta, p.tb, p.m, p.n, p.k, pa, p.lda, p.sa, pb, p.ldb, p.sb, out.ptr, p.n, p.m * p.n,
                       p.batch)

    return kernel


def _gemv(calls, kind, p, pa, pb, out):
    """out = a @ b with m == 1 (a row times b) or n == 1 (a times a column), as one matrix-vector product."""
    if p.m == 1:  # out (n) = b^T (n x k) x a (k): b read as stored, transposed when it is row-major k x n
        flip = TRANS if p.tb == NO_TRANS else NO_TRANS
        rows, cols = (p.k, p.n) if p.tb == NO_TRANS else (p.n, p.k)
        calls.gemv(kind, flip, rows, cols, pb, p.ldb, pa, p.inc_a, out)
    else:  # out (m) = a (m x k) x b (k)
        rows, cols = (p.m, p.k) if p.ta == NO_TRANS else (p.k, p.m)
        calls.gemv(kind, p.ta, rows, cols, pa, p.lda, pb, p.inc_b, out)


def bf16_matmul(calls, fallback, dt, served):
    """k(out, a, la, b, lb) for bf16: cblas_gemm_bf16bf16f32 into an f32 buffer, then rounded to bf16
    (nearest even)."""
    bf16, lookup = get_dtype("bf16"), planner()

    def kernel(out, a, la, b, lb):
        p = lookup(la, lb)
        if p is None or p.kind not in served:
            return fallback(out, a, la, b, lb)
        acc = np.empty((p.batch, p.m, p.n), np.float32)
        calls.gemm(BF16GEMM, p.ta, p.tb, p.m, p.n, p.k, a.ptr + la.offset * 2, p.lda, p.sa, b.ptr + lb.offset * 2,
                   p.ldb, p.sb, acc.ctypes.data, p.n, p.m * p.n, p.batch)
        n = p.batch * p.m * p.n
        dst = np.frombuffer((ctypes.c_char * (2 * n)).from_address(out.ptr), bf16.np)
        np.copyto(dst, acc.reshape(-1), casting="unsafe")

    return kernel
