"""Strided copy and fill, in place on any layout of the destination, and the
contiguous copy other kernels take of an input they cannot read strided.

Both move bits only: their pipelines are keyed by element width (8, 16, 32
or 64 bits), not by dtype. A destination narrower than a word is written
through atomics (shaders.writer), since a strided view may share its words
with elements it does not own.
"""

from __future__ import annotations

from candle_api.layout import Layout

from . import shaders as S
from .launch import bind, fits_whole, merge, narrow_rows, pack, row_chunks


def copy_kernel(dtype):
    raw = S.raw_dtype(dtype)

    def kernel(dst, ldst, src, lsrc):
        strided_copy(dst, ldst, src, lsrc, raw)

    return kernel


def strided_copy(dst, ldst: Layout, src, lsrc: Layout, raw: str) -> None:
    gpu = dst.device.gpu
    dst.host = None  # written in place: a host copy of its upload is stale
    if src.buffer == dst.buffer:  # one buffer may not be bound for reading and writing at once
        src, lsrc = contiguous(src, lsrc, raw), Layout.contig(lsrc.shape)
    shape, (sd, ss) = merge(ldst.shape, [ldst.strides, lsrc.strides])
    isz = S.bits(raw) // 8
    pipe = gpu.pipeline(("copy", raw), "wr", lambda: _copy_source(raw))
    chunks = [(0, shape[0] if shape else 1)] if fits_whole(gpu, dst, src) else \
        row_chunks(gpu, shape, [(sd, isz), (ss, isz)], 0)
    for r0, r1 in chunks:
        d, s = narrow_rows(ldst, shape, sd, r0, r1), narrow_rows(lsrc, shape, ss, r0, r1)
        bd, shift_d = bind(gpu, dst, d, isz)
        bs, shift_s = bind(gpu, src, s, isz)
        words = [d.numel, len(d.shape), *d.shape, d.offset - shift_d, *sd, s.offset - shift_s, *ss]
        gpu.dispatch(pipe, [bd, bs], pack(*words), max(1, -(-d.numel // S.WG)))


def _copy_source(raw: str) -> str:
    return f"""{S.library(*S.arith(raw))}
{S.params(2)}{S.AT}
{S.writer("o", 0, raw)}{S.reader("x", 1, raw)}
{S.ENTRY}  let rank = P[1];
  if (u >= P[0]) {{ return; }}
  let d = at(u, 2u + rank, 2u, rank);
  let s = at(u, 3u + 2u * rank, 2u, rank);
  o_st(d, x_ld(s));
}}
"""


def fill_kernel(dtype):
    raw = S.raw_dtype(dtype)

    def kernel(dst, ldst, value):
        gpu = dst.device.gpu
        dst.host = None
        shape, (sd,) = merge(ldst.shape, [ldst.strides])
        isz = S.bits(raw) // 8
        bits = int.from_bytes(bytes(value), "little")
        pipe = gpu.pipeline(("fill", raw), "w", lambda: _fill_source(raw))
        chunks = [(0, shape[0] if shape else 1)] if fits_whole(gpu, dst) else row_chunks(gpu, shape, [(sd, isz)], 0)
        for r0, r1 in chunks:
            d = narrow_rows(ldst, shape, sd, r0, r1)
            bd, shift = bind(gpu, dst, d, isz)
            words = [d.numel, len(d.shape), bits & 0xFFFFFFFF, bits >> 32, *d.shape, d.offset - shift, *sd]
            gpu.dispatch(pipe, [bd], pack(*words), max(1, -(-d.numel // S.WG)))

    return kernel


def _fill_source(raw: str) -> str:
    value = {"u": "P[2]", "i": "bitcast<i32>(P[2])", "l": "vec2<u32>(P[2], P[3])"}[S.kind(raw)]
    return f"""{S.library(*S.arith(raw))}
{S.params(1)}{S.AT}
{S.writer("o", 0, raw)}
{S.ENTRY}  let rank = P[1];
  if (u >= P[0]) {{ return; }}
  o_st(at(u, 4u + rank, 4u, rank), {value});
}}
"""


def contiguous(storage, layout: Layout, dtype):
    """A new storage holding layout's elements in order."""
    raw = S.raw_dtype(dtype)
    out = storage.device.alloc(layout.numel * S.bits(raw) // 8)
    strided_copy(out, Layout.contig(layout.shape), storage, layout, raw)
    return out


KERNELS = {"copy": copy_kernel, "fill": fill_kernel}
