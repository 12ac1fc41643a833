"""Fused kernels: softmax and log_softmax over the last dim, layer_norm and
rms_norm (csrc/fused.cu), rotary embeddings, and scaled-dot-product
attention (csrc/attention.cu)."""

from __future__ import annotations

from candle_api.layout import Layout, numel

from ..launch import MAXD, address, merge, strided
from .memory import contiguous

#: Query rows (warps) per block of the attention kernel.
ATTENTION_WARPS = 4
#: The tiled attention kernel (attention_tiled<D>_<dtype>, csrc/attention.cu): query rows (threads) per
#: block, its dtypes. It takes heads of at most 64 dims and batch entries of at least half a block of
#: query rows (a decode step's single row keeps a warp per row).
TILED_ROWS = 64
TILED_DTYPES = ("bf16", "f16", "f32")
#: csrc/fused.cu's cached row kernels: the elements a thread holds (ROW_CACHE), the block variant's
#: most threads (ROW_BLOCK), and the rows (warps) a block of the warp variant takes.
ROW_CACHE, ROW_BLOCK, ROW_WARPS = 16, 512, 4


def _rows(dev, x, lx: Layout, dtype):
    """(x, layout, rows shape, rows strides) with the leading dims merged (a contiguous copy past MAXD)."""
    shape, (st,) = merge(lx.shape[:-1], [lx.strides[:-1]])
    if len(shape) > MAXD:
        x, lx = contiguous(x, lx, dtype), Layout.contig(lx.shape)
        shape, (st,) = merge(lx.shape[:-1], [lx.strides[:-1]])
    return x, lx, shape, st


def _block(n: int, most: int) -> int:
    """Threads per row: the power of two from 32 to most nearest above n."""
    threads = 32
    while threads < most and threads < n:
        threads *= 2
    return threads


def _launch(dev, family: str, dtype, d: int, n_rows: int, step: int, row_strides, ptrs, *args) -> None:
    """Launches family's kernel for rows of d: a warp per row or a block per row holding the row in
    registers when the rows are contiguous, d a multiple of a 16-byte pack and every pointer and row
    16-byte aligned (the cached kernels' vector accesses need all of it), else the block per row
    that reads the row on each pass."""
    isz = dtype.itemsize
    cached = (step == 1 and d * isz % 16 == 0 and d <= ROW_BLOCK * ROW_CACHE and not any(p % 16 for p in ptrs)
              and not any(s * isz % 16 for s in row_strides))
    if cached and d <= 32 * ROW_CACHE:
        name, grid, block = f"{family}_warp_{dtype}", min(-(-n_rows // ROW_WARPS), 64 * dev.gpu.sms), 32 * ROW_WARPS
    elif cached:
        name, grid = f"{family}_block_{dtype}", min(n_rows, 64 * dev.gpu.sms)
        block = _block(-(-d // ROW_CACHE), ROW_BLOCK)
    else:
        name, grid, block = f"{family}_{dtype}", min(n_rows, 64 * dev.gpu.sms), _block(d, 256)
    dev.function("fused", name).launch(grid, block, *ptrs, *args)


def softmax(log: int, dtype):
    """k(out, x, lx): softmax_last (log 0) and log_softmax_last (1)."""
    isz = dtype.itemsize

    def kernel(out, x, lx):
        dev = out.device
        x, lx, shape, st = _rows(dev, x, lx, dtype)
        d, n_rows = lx.shape[-1], numel(lx.shape[:-1])
        _launch(dev, "softmax", dtype, d, n_rows, lx.strides[-1], st, (out.ptr, address(x, lx, isz)), n_rows, d,
                lx.strides[-1], log, *strided(shape, st))

    return kernel


def norm(rms: int, dtype):
    """k(out, x, lx, w, lw, b, lb, eps) for layer_norm (rms 0), k(out, x, lx, w, lw, eps) for rms_norm (1)."""
    isz = dtype.itemsize

    def kernel(out, x, lx, w, lw, *rest):
        dev = out.device
        if rms:
            b_ptr, eps = 0, rest[0]
        else:
            b, lb, eps = rest
            b_ptr = address(b, lb, isz) if b is not None else 0
        x, lx, shape, st = _rows(dev, x, lx, dtype)
        d, n_rows = lx.shape[-1], numel(lx.shape[:-1])
        ptrs = (out.ptr, address(x, lx, isz), address(w, lw, isz), b_ptr)
        _launch(dev, "norm", dtype, d, n_rows, lx.strides[-1], st, ptrs, n_rows, d, lx.strides[-1], float(eps), rms,
                *strided(shape, st))

    return kernel


def rope(interleaved: int, dtype):
    """k(out, x, lx, cos, lcos, sin, lsin): x (b, h, t, d); cos/sin contiguous (t, d/2) or (b, t, d/2)."""
    isz = dtype.itemsize

    def kernel(out, x, lx, cos, lcos, sin, lsin):
        dev = out.device
        b, h, t, d = lx.shape
        n = b * h * t * (d // 2)
        dev.function("fused", f"rope_{dtype}").launch(
            max(1, min(-(-n // 256), 32 * dev.gpu.sms)), 256, out.ptr, address(x, lx, isz),
            address(cos, lcos, isz), address(sin, lsin, isz), b, h, t, d, *lx.strides, interleaved,
            int(len(lcos.shape) == 3))

    return kernel


#: The tensor-core attention kernel (flash_attention_e<E>_<dtype>, csrc/attention.cu): query rows and
#: keys per tile, threads per block, and the head dims it is built for.
FLASH_ROWS, FLASH_KEYS, FLASH_THREADS = 64, 64, 128
FLASH_DIMS = (32, 64, 128)


def _flash_fits(dtype, e: int, ev: int, *operands_and_batch_strides) -> bool:
    """Whether the tensor-core kernel takes this call: bf16 or f16, E == Ev in FLASH_DIMS, and q, k, v
    with a contiguous last dim, 16-byte aligned rows (cp.async copies 16 bytes) and row and batch
    strides in whole 16-byte chunks. The rest goes to the warp-per-row kernel."""
    *operands, batch_strides = operands_and_batch_strides
    if str(dtype) not in ("bf16", "f16") or e != ev or e not in FLASH_DIMS:
        return False
    per = 16 // dtype.itemsize
    for (storage, lay), bs in zip(operands, batch_strides):
        if lay.strides[-1] != 1 or (storage.ptr + lay.offset * dtype.itemsize) % 16:
            return False
        if lay.shape[-2] > 1 and lay.strides[-2] % per:
            return False
        if any(st % per for st in bs):
            return False
    return True


def sdpa(dtype):
    """k(out, q, lq, k, lk, v, lv, mask, lmask, mask_dtype, causal, scale)."""
    isz = dtype.itemsize

    def kernel(out, q, lq, k, lk, v, lv, mask, lm, mask_dtype, causal, scale):
        dev = out.device
        *batch, length, e = lq.shape
        s, ev = lk.shape[-2], lv.shape[-1]
        nb = len(batch)
        if mask is None:
            mask_kind, m_ptr, mst = 0, 0, (0,) * (nb + 2)
        else:
            mask_kind = 1 if not mask_dtype.is_float else 2
            m_ptr, mst = address(mask, lm, mask_dtype.itemsize), lm.strides
        layouts = [lq, lk, lv]
        bshape, bst = merge(tuple(batch), [lay.strides[:nb] for lay in layouts] + [tuple(mst[:nb])])
        if len(bshape) > MAXD:  # more batch dims than a launch takes: read through contiguous copies
            q, k, v = (contiguous(s_, l_, dtype) for s_, l_ in ((q, lq), (k, lk), (v, lv)))
            lq, lk, lv = Layout.contig(lq.shape), Layout.contig(lk.shape), Layout.contig(lv.shape)
            return kernel(out, q, lq, k, lk, v, lv, mask, lm, mask_dtype, causal, scale)
        n_batch = numel(batch)
        if dev.gpu.arch >= 80 and _flash_fits(dtype, e, ev, (q, lq), (k, lk), (v, lv), bst[:3]):
            tiles = n_batch * -(-length // FLASH_ROWS)
            if tiles:
                row_strides = (lq.strides[-2], 1, lk.strides[-2], 1, lv.strides[-2], 1, mst[-2], mst[-1])
                dev.function("attention", f"flash_attention_e{e}_{dtype}").launch(
                    tiles, FLASH_THREADS, out.ptr, address(q, lq, isz), address(k, lk, isz), address(v, lv, isz),
                    m_ptr, n_batch, length, s, mask_kind, int(causal), float(scale), *row_strides,
                    *strided(bshape, *bst), shared=2 * FLASH_KEYS * (e + 8) * isz)
            return
        row_strides = (lq.strides[-2], lq.strides[-1], lk.strides[-2], lk.strides[-1], lv.strides[-2],
                       lv.strides[-1], mst[-2], mst[-1])
        operands = (out.ptr, address(q, lq, isz), address(k, lk, isz), address(v, lv, isz), m_ptr)
        tail = (length, s, e, ev, mask_kind, int(causal), float(scale), *row_strides, *strided(bshape, *bst))
        if dtype.name in TILED_DTYPES and max(e, ev) <= 64 and length >= TILED_ROWS // 2:
            blocks = n_batch * -(-length // TILED_ROWS)
            width = 32 if max(e, ev) <= 32 else 64
            dev.function("attention", f"attention_tiled{width}_{dtype}").launch(
                max(1, min(blocks, 64 * dev.gpu.sms)), TILED_ROWS, *operands, n_batch, *tail)
            return
        warps_needed = -(-(n_batch * length) // ATTENTION_WARPS)
        dev.function("attention", f"attention_{dtype}").launch(
            max(1, min(warps_needed, 64 * dev.gpu.sms)), 32 * ATTENTION_WARPS, *operands, n_batch * length, *tail)

    return kernel


KERNELS = {
    "softmax_last": lambda dt: softmax(0, dt),
    "log_softmax_last": lambda dt: softmax(1, dt),
    "layer_norm": lambda dt: norm(0, dt),
    "rms_norm": lambda dt: norm(1, dt),
    "rope": lambda dt: rope(0, dt),
    "rope_i": lambda dt: rope(1, dt),
    "sdpa": sdpa,
}
