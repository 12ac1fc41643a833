"""The quantized rows: dequantize, qmatmul and qembedding on GGML blocks,
decoded in the shader: the weights stay quantized on the device (their
bytes as a flat u8 storage) and each kernel decodes the values it reads.

Every GGML type candle-api knows is decoded here (Q4_0, Q4_1, Q5_0, Q5_1,
Q8_0, Q8_1, Q2_K to Q6_K, Q8_K, IQ4_NL, IQ4_XS, MXFP4). Decoding follows
the reference dequantizers (candle_api.quantized) operation for operation
in f32, so dequantize is bit-exact with ggml where the GPU rounds each
operation (as lavapipe does; a compiler that contracts a * b + c into one
fused operation rounds once where ggml rounds twice). qmatmul multiplies the
decoded weights by f32 activations (no activation quantization): the
GEMV for one row, the tiled GEMM (matmul.py) with the weight tile decoded
as it is loaded for more. ``quantize`` is left to its decomposition (the
reference codec on the host: a file format's job, not a per-token one).
"""

from __future__ import annotations

import math

from candle_api.layout import Layout
from candle_api.quantized import GGML_TYPE_IDS

from . import shaders as S
from .hostcheck import indices
from .launch import bind, chunks_along, narrow, pack
from .matmul import TILE, gemm_body, gemv_body

#: ggml name -> WGSL body of deq(blk, j) (blk: the block's first byte; j: the value's index in the block)
DECODERS = {
    "q4_0": "return (f32(nib32(blk + 2u, j)) - 8.0) * qhalf(blk);",
    "q4_1": "return f32(nib32(blk + 4u, j)) * qhalf(blk) + qhalf(blk + 2u);",
    "q5_0": "let q = nib32(blk + 6u, j) | (((qbyte(blk + 2u + j / 8u) >> (j % 8u)) & 1u) << 4u);\n"
            "  return (f32(q) - 16.0) * qhalf(blk);",
    "q5_1": "let q = nib32(blk + 8u, j) | (((qbyte(blk + 4u + j / 8u) >> (j % 8u)) & 1u) << 4u);\n"
            "  return f32(q) * qhalf(blk) + qhalf(blk + 2u);",
    "q8_0": "return qi8(blk + 2u + j) * qhalf(blk);",
    "q8_1": "return qi8(blk + 4u + j) * qhalf(blk);",
    "q2k": "let sc = qbyte(blk + j / 16u);\n"
           "  let q = crumb128(blk + 16u + (j / 128u) * 32u, j % 128u);\n"
           "  return qhalf(blk + 80u) * f32(sc & 15u) * f32(q) - qhalf(blk + 82u) * f32(sc >> 4u);",
    "q3k": "let sub = j / 16u;\n"
           "  let nib = select(qbyte(blk + 96u + sub) & 15u, qbyte(blk + 88u + sub) >> 4u, sub >= 8u);\n"
           "  let level = nib | (((qbyte(blk + 104u + sub % 4u) >> (2u * (sub / 4u))) & 3u) << 4u);\n"
           "  let low = i32(crumb128(blk + 32u + (j / 128u) * 32u, j % 128u));\n"
           "  let q = low - select(4, 0, plane256(blk, j) == 1u);\n"
           "  return qhalf(blk + 108u) * (f32(level) - 32.0) * f32(q);",
    "q4k": "let sm = scale_min_k4(blk + 4u, j / 32u);\n"
           "  let b = qbyte(blk + 16u + (j / 64u) * 32u + j % 32u);\n"
           "  let q = select(b & 15u, b >> 4u, j % 64u >= 32u);\n"
           "  return qhalf(blk) * sm.x * f32(q) - qhalf(blk + 2u) * sm.y;",
    "q5k": "let sm = scale_min_k4(blk + 4u, j / 32u);\n"
           "  let b = qbyte(blk + 48u + (j / 64u) * 32u + j % 32u);\n"
           "  let q = select(b & 15u, b >> 4u, j % 64u >= 32u) | (plane256(blk + 16u, j) << 4u);\n"
           "  return qhalf(blk) * sm.x * f32(q) - qhalf(blk + 2u) * sm.y;",
    "q6k": "let w = j % 128u;\n"
           "  let b = qbyte(blk + (j / 128u) * 64u + w % 64u);\n"
           "  let low = select(b & 15u, b >> 4u, w >= 64u);\n"
           "  let q = i32(low | (crumb128(blk + 128u + (j / 128u) * 32u, w) << 4u)) - 32;\n"
           "  return qhalf(blk + 208u) * qi8(blk + 192u + j / 16u) * f32(q);",
    "q8k": "return qi8(blk + 4u + j) * qf32(blk);",
    "iq4_nl": "return qhalf(blk) * IQ4_GRID[nib32(blk + 2u, j)];",
    "iq4_xs": "let sub = j / 32u;\n"
              "  let lo = select(qbyte(blk + 4u + sub / 2u) & 15u, qbyte(blk + 4u + sub / 2u) >> 4u, sub % 2u == 1u);\n"
              "  let hi = ((qbyte(blk + 2u) | (qbyte(blk + 3u) << 8u)) >> (2u * sub)) & 3u;\n"
              "  let dl = qhalf(blk) * (f32(lo | (hi << 4u)) - 32.0);\n"
              "  return dl * IQ4_GRID[nib32(blk + 8u + sub * 16u, j % 32u)];",
    "mxfp4": "let e = qbyte(blk);\n"
             "  let scale = bitcast<f32>(select((e - 1u) << 23u, 0x00200000u << e, e < 2u));\n"
             "  return FP4_GRID[nib32(blk + 1u, j)] * scale;",
}


def _ggml(qtype: int):
    return GGML_TYPE_IDS[qtype]


def _decoder(qtype: int, binding: int) -> str:
    """The blocks binding `qb`, this type's `deq(blk, j)`, and `wq(first, row,
    c, row_bytes)`: element (row, c) of a weight whose blocks start at byte
    first (the source includes the "quant" library too)."""
    t = _ggml(qtype)
    return f"""@group(0) @binding({binding}) var<storage, read> qb: array<u32>;
fn deq(blk: u32, j: u32) -> f32 {{
  {DECODERS[t.name]}
}}
fn wq(first: u32, row: u32, c: u32, row_bytes: u32) -> f32 {{
  return deq(first + row * row_bytes + (c / {t.block_size}u) * {t.type_size}u, c % {t.block_size}u);
}}
"""


def dequantize(_dtype):
    def kernel(out, blocks, lblocks, qtype):
        t = _ggml(qtype)
        gpu = out.device.gpu
        nblocks = lblocks.numel // t.type_size

        def source():
            return f"""{S.library("arith_f", "quant")}
{S.params(2)}
{S.writer("o", 0, "f32")}{_decoder(qtype, 1)}
{S.ENTRY}  if (u >= P[0]) {{ return; }}
  o_st(u, wq(P[1], 0u, u, 0u));
}}
"""

        pipe = gpu.pipeline(("dequantize", t.name), "wr", source)
        # the values in windows that fit a binding (the blocks' bytes are fewer), each starting aligned
        values = Layout((nblocks, t.block_size), (t.block_size, 1), 0)
        aligned = gpu.offset_align // math.gcd(t.block_size * 4, gpu.offset_align)
        for b0, b1 in chunks_along(gpu, values, 0, 4, aligned):
            n = (b1 - b0) * t.block_size
            bq, sq = bind(gpu, blocks, Layout(((b1 - b0) * t.type_size,), (1,), lblocks.offset + b0 * t.type_size), 1)
            bo, _ = bind(gpu, out, Layout((n,), (1,), b0 * t.block_size), 4)
            gpu.dispatch(pipe, [bo, bq], pack(n, lblocks.offset + b0 * t.type_size - sq), -(-n // S.WG))

    return kernel


def qmatmul(_dtype):
    def kernel(out, x, lx, blocks, lblocks, qtype, n):
        t = _ggml(qtype)
        gpu = out.device.gpu
        kk = lx.shape[-1]
        m = lx.numel // kk if kk else 0
        row_bytes = kk // t.block_size * t.type_size
        gemv = m == 1

        def source():
            body = (gemv_body if gemv else gemm_body)("f32", "a_ld(ab + {row} * P[5] + {q})",
                                                      "wq(P[8], {col}, {q}, P[7])")
            return f"""{S.library("arith_f", "quant")}
{S.params(3)}
{S.writer("o", 0, "f32")}{S.reader("a", 1, "f32")}{_decoder(qtype, 2)}
fn a_base(z: u32) -> u32 {{ return P[11]; }}
fn b_base(z: u32) -> u32 {{ return 0u; }}
{body}"""

        pipe = gpu.pipeline(("qmatmul", t.name, "gemv" if gemv else "gemm"), "wrr", source)
        bx, sx = bind(gpu, x, lx, 4)
        # as matmul's parameter block (batch rank 0), the weight's rows of blocks in windows that fit a binding
        weight = Layout((n, row_bytes), (row_bytes, 1), lblocks.offset)
        for c0, c1 in chunks_along(gpu, weight, 0, 1):
            bq, sq = bind(gpu, blocks, narrow(weight, 0, c0, c1), 1)
            words = [m, c1 - c0, kk, 1, 0, kk, 1, row_bytes, weight.offset + c0 * row_bytes - sq, n, c0,
                     lx.offset - sx]
            groups = (-(-(c1 - c0) // 8), 1) if gemv else (-(-(c1 - c0) // TILE), -(-m // TILE))
            gpu.dispatch(pipe, [bind(gpu, out, None, 1)[0], bx, bq], pack(*words), *groups)

    return kernel


def qembedding(_dtype):
    def kernel(out, blocks, lblocks, ids, lids, ids_dtype, qtype, k):
        t = _ggml(qtype)
        gpu = out.device.gpu
        row_bytes = k // t.block_size * t.type_size
        rows = lblocks.numel // row_bytes if row_bytes else 0
        indices("qembedding", ids, lids, ids_dtype, rows)
        n = lids.numel * k
        bi, si = bind(gpu, ids, lids, ids_dtype.itemsize)
        id_of = {"u": "v", "i": "bitcast<u32>(v)", "l": "v.x"}[S.kind(ids_dtype)]

        def source():
            return f"""{S.library("arith_f", "quant", *S.arith(ids_dtype))}
{S.params(3)}
{S.writer("o", 0, "f32")}{_decoder(qtype, 1)}{S.reader("ids", 2, ids_dtype)}
// P: n, k, row bytes, blocks offset, ids offset, the window's first and end rows (a table beyond the
//    binding limit is read a window of rows at a time; each pass writes the rows in its window)
{S.ENTRY}  if (u >= P[0]) {{ return; }}
  let v = ids_ld(P[4] + u / P[1]);
  let row = {id_of};
  if (row < P[5] || row >= P[6]) {{ return; }}
  o_st(u, wq(P[3], row - P[5], u % P[1], P[2]));
}}
"""

        pipe = gpu.pipeline(("qembedding", t.name, str(ids_dtype)), "wrr", source)
        table = Layout((rows, row_bytes), (row_bytes, 1), lblocks.offset)
        for r0, r1 in chunks_along(gpu, table, 0, 1):
            bq, sq = bind(gpu, blocks, narrow(table, 0, r0, r1), 1)
            words = [n, k, row_bytes, table.offset + r0 * row_bytes - sq, lids.offset - si, r0, r1]
            gpu.dispatch(pipe, [bind(gpu, out, None, 1)[0], bq, bi], pack(*words), -(-n // S.WG))

    return kernel


KERNELS = {"dequantize": dequantize, "qmatmul": qmatmul, "qembedding": qembedding}
