"""Kernels on GGML-quantized weights: the blocks are a flat u8 storage, the
type is ggml's id (the core passes contiguous inputs, see the contract's
"quantized" rows)."""

from __future__ import annotations

import math
from functools import partial

from candle_api.errors import KernelError
from candle_api.quantized.ggml_types import GGML_TYPE_IDS

from ..library import error


def _contiguous(op: str, *layouts) -> None:
    if not all(lay.contiguous for lay in layouts):
        raise KernelError(f"{op}: the cpu kernel takes contiguous inputs")


def dequantize(fn, dt):
    """k(out, blocks, lblocks, qtype): out holds every value of the blocks, f32."""

    def kernel(out, blocks, lb, qtype):
        _contiguous("dequantize", lb)
        t = GGML_TYPE_IDS[qtype]
        if fn(qtype, 1, lb.numel // t.type_size * t.block_size, blocks.ptr + lb.offset, out.ptr):
            raise error()

    return kernel


def quantize(fn, dt):
    """k(out, x, lx, qtype): x's values, rows of whole blocks, into out's blocks."""

    def kernel(out, x, lx, qtype):
        _contiguous("quantize", lx)
        if fn(qtype, 1, lx.numel, x.ptr + lx.offset * 4, out.ptr):
            raise error()

    return kernel


def qmatmul(fn, dt, op="qmatmul"):
    """k(out, x, lx, blocks, lblocks, qtype, n): out (..., n) = x (..., k) @ W^T (qmatmul_packed: the
    blocks packed by qpack)."""

    def kernel(out, x, lx, blocks, lb, qtype, n):
        if not (lx.contiguous and lb.contiguous):
            _contiguous(op, lx, lb)
        k = lx.shape[-1]
        if fn(qtype, math.prod(lx.shape[:-1]), n, k, blocks.ptr + lb.offset, x.ptr + lx.offset * 4, out.ptr):
            raise error()

    return kernel


def qpack(fn, dt):
    """k(out, blocks, lblocks, qtype, n): W's blocks (n rows) in the packed layout."""

    def kernel(out, blocks, lb, qtype, n):
        _contiguous("qpack", lb)
        t = GGML_TYPE_IDS[qtype]
        if fn(qtype, n, lb.numel // t.type_size * t.block_size // max(n, 1), blocks.ptr + lb.offset, out.ptr):
            raise error()

    return kernel


def qembedding(fn, dt):
    """k(out, blocks, lblocks, ids, lids, ids_dtype, qtype, k): rows ids of W (rows, k)."""

    def kernel(out, blocks, lb, ids, lids, id_dtype, qtype, k):
        _contiguous("qembedding", lb, lids)
        t = GGML_TYPE_IDS[qtype]
        rows = lb.numel // (k // t.block_size * t.type_size)
        if fn(qtype, rows, k, blocks.ptr + lb.offset, id_dtype.code, lids.numel,
              ids.ptr + lids.offset * id_dtype.itemsize, out.ptr):
            raise error()

    return kernel


def makers(lib) -> dict:
    return {"dequantize": partial(dequantize, lib.cd_dequantize), "quantize": partial(quantize, lib.cd_quantize),
            "qmatmul": partial(qmatmul, lib.cd_qmatmul), "qembedding": partial(qembedding, lib.cd_qembedding),
            "qpack": partial(qpack, lib.cd_qpack),
            "qmatmul_packed": partial(qmatmul, lib.cd_qmatmul_packed, op="qmatmul_packed")}
