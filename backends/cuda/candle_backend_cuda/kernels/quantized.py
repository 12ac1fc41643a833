"""The quantized rows on GGML blocks (csrc/quantized.cu): dequantize,
qembedding and qmatmul decode the blocks on the GPU, so weights stay
quantized there. qmatmul runs the warp-per-column kernel for a few rows of
activations (decode) and, for many (prefill), decodes the weight once into
f32 and multiplies through matmul (cuBLASLt). ``quantize`` is left to its
decomposition (the reference codec on the host: a file format's job)."""

from __future__ import annotations

from candle_api.layout import Layout
from candle_api.quantized import GGML_TYPE_IDS

from .common import THREADS, grid
from .index import checked_ids
from .matmul import matmul, use_cublaslt

MODULE = "quantized"
#: Rows of activations above which qmatmul decodes the weight and runs a GEMM.
GEMM_ROWS = 16
WARPS = 4  # output columns per block of the qmatmul kernel


def _type(qtype: int) -> tuple[int, int]:
    t = GGML_TYPE_IDS[qtype]
    return t.block_size, t.type_size


def _dequantize(dev, out_ptr: int, blocks_ptr: int, n: int, qtype: int) -> None:
    bs, ts = _type(qtype)
    dev.function(MODULE, "dequantize").launch(grid(dev, n), THREADS, out_ptr, blocks_ptr, n, qtype, bs, ts)


def dequantize(_dtype):
    """k(out, blocks, lblocks, qtype): out (values,) f32."""

    def kernel(out, blocks, lblocks, qtype):
        dev = out.device
        _dequantize(dev, out.ptr, blocks.ptr + lblocks.offset, out.nbytes // 4, qtype)

    return kernel


def qmatmul(dtype):
    """k(out, x, lx, blocks, lblocks, qtype, n): out (..., n) = x (..., k) @ W^T."""
    gemm = matmul(dtype)

    def kernel(out, x, lx, blocks, lblocks, qtype, n):
        dev = out.device
        k = lx.shape[-1]
        m = lx.numel // k if k else 0
        bptr = blocks.ptr + lblocks.offset
        if m > GEMM_ROWS and use_cublaslt(dtype):
            w = dev.alloc(4 * n * k)
            _dequantize(dev, w.ptr, bptr, n * k, qtype)
            # out (m, n) = x (m, k) @ W^T: W (n, k) read transposed
            gemm(out, x, Layout((m, k), (k, 1), lx.offset), w, Layout((k, n), (1, k)))
            return
        bs, ts = _type(qtype)
        dev.function(MODULE, "qmatmul").launch(
            (-(-n // WARPS), max(1, min(-(-m // 8), 65535))), 32 * WARPS, out.ptr, x.ptr + 4 * lx.offset, bptr, m,
            n, k, qtype, bs, ts)

    return kernel


def qembedding(_dtype):
    """k(out, blocks, lblocks, ids, lids, ids_dtype, qtype, k): rows ids of W (rows, k)."""

    def kernel(out, blocks, lblocks, ids, lids, ids_dtype, qtype, k):
        dev = out.device
        bs, ts = _type(qtype)
        rows = lblocks.numel // (k // bs * ts) if k else 0
        cids = checked_ids("qembedding", ids, lids, ids_dtype, rows)
        n = lids.numel * k
        dev.function(MODULE, "qembedding").launch(
            grid(dev, n), THREADS, out.ptr, blocks.ptr + lblocks.offset, cids.ptr, lids.numel, k, qtype, bs, ts)

    return kernel


KERNELS = {"dequantize": dequantize, "qmatmul": qmatmul, "qembedding": qembedding}
