"""Batched matmul on any strides. Floats go through cuBLASLt (cublaslt.py),
each operand read in place when one of its two matrix strides is 1, else
through a contiguous copy; integers (which wrap) and, with
``CANDLE_CUDA_GEMM=kernel``, floats too, through the tiled kernel of
csrc/matmul.cu. Batch dims that do not merge into one run as one launch per
outer batch position."""

from __future__ import annotations

import os

from candle_api.layout import Layout, numel

from ..launch import MAXD, address, merge, positions, strided
from .memory import contiguous

MODULE = "matmul"
TILE = 16
MAX_GRID_Z = 65535


def use_cublaslt(dtype) -> bool:
    return dtype.is_float and os.environ.get("CANDLE_CUDA_GEMM", "cublaslt") != "kernel"


def _batch(la: Layout, lb: Layout):
    """The batch dims merged over a, b and the contiguous output: (shape, a strides, b strides, out strides)."""
    batch = la.shape[:-2]
    m, n = la.shape[-2], lb.shape[-1]
    out_strides, acc = [], m * n
    for d in reversed(batch):
        out_strides.insert(0, acc)
        acc *= d
    shape, (sa, sb, so) = merge(batch, [la.strides[:-2], lb.strides[:-2], tuple(out_strides)])
    return shape, sa, sb, so


def _kernel_gemm(dev, dtype, out, a, la, b, lb) -> None:
    isz = dtype.itemsize
    m, k, n = la.shape[-2], la.shape[-1], lb.shape[-1]
    shape, sa, sb, so = _batch(la, lb)
    if len(shape) > MAXD:
        a, la = contiguous(a, la, dtype), Layout.contig(la.shape)
        b, lb = contiguous(b, lb, dtype), Layout.contig(lb.shape)
        shape, sa, sb, so = _batch(la, lb)
    fn = dev.function(MODULE, f"matmul_{dtype}")
    nbatch = numel(shape)
    gx, gy = -(-n // TILE), -(-m // TILE)
    fn.launch((gx, gy, max(1, min(nbatch, MAX_GRID_Z))), (TILE, TILE), out.ptr, address(a, la, isz),
              address(b, lb, isz), nbatch, m, n, k, la.strides[-2], la.strides[-1], lb.strides[-2],
              lb.strides[-1], *strided(shape, sa, sb))


def _cublaslt_gemm(dev, dtype, out, a, la, b, lb) -> None:
    from ..cublaslt import operand

    isz = dtype.itemsize
    m, k, n = la.shape[-2], la.shape[-1], lb.shape[-1]
    a_op = operand(la.strides[-2], la.strides[-1], m, k)
    if a_op is None:
        a, la = contiguous(a, la, dtype), Layout.contig(la.shape)
        a_op = operand(la.strides[-2], la.strides[-1], m, k)
    b_op = operand(lb.strides[-2], lb.strides[-1], k, n)
    if b_op is None:
        b, lb = contiguous(b, lb, dtype), Layout.contig(lb.shape)
        b_op = operand(lb.strides[-2], lb.strides[-1], k, n)
    shape, sa, sb, so = _batch(la, lb)
    pa, pb = address(a, la, isz), address(b, lb, isz)
    gemm = dev.gemm()
    # The last batch dim is cuBLASLt's strided batch, unless an operand repeats along it (a stride
    # of 0); the other batch dims are host loops.
    split = len(shape) - 1 if shape and sa[-1] and sb[-1] else len(shape)
    inner = shape[-1] if split < len(shape) else 1
    strides = [sa[:split], sb[:split], so[:split]]
    for offs in positions(shape[:split], strides):
        gemm.run(str(dtype), out.ptr + offs[2] * isz, pa + offs[0] * isz, a_op, pb + offs[1] * isz, b_op, m, n, k,
                 inner, sa[-1] if inner > 1 else 0, sb[-1] if inner > 1 else 0)


def matmul(dtype):
    """k(out, a, la, b, lb)."""

    def kernel(out, a, la, b, lb):
        dev = out.device
        if la.shape[-1] == 0:  # k = 0: the sum of nothing
            dev.memset(out.ptr, 0, out.nbytes)
            return
        if use_cublaslt(dtype):
            from ..cublaslt import NoAlgorithm

            try:
                return _cublaslt_gemm(dev, dtype, out, a, la, b, lb)
            except NoAlgorithm:  # a layout cuBLASLt has no algorithm for: the plugin's own kernel
                pass
        _kernel_gemm(dev, dtype, out, a, la, b, lb)

    return kernel


KERNELS = {"matmul": matmul}
