"""Batched matrix products on any strides: (batch..., m, k) @ (batch..., k, n).

Two kernels:

- **GEMM**, tiled in workgroup memory: a workgroup of 16 x 16 threads
  computes a 64 x 64 tile of the output, each thread a 4 x 4 block, walking
  k in steps of 16: the two operand tiles are loaded once into workgroup
  memory (from any strides: a transposed weight costs nothing) and each
  loaded value serves 64 products.
- **GEMV**, for one row (m = 1, the decode step of a language model): a
  workgroup computes 8 outputs, 32 threads splitting k for each, and combines
  the partial sums in workgroup memory.

Floats multiply and add in f32 (f16 and bf16 are converted on load and
rounded once when stored); integers wrap (i64 on 32-bit word pairs). The
batch dims are merged and walked by the third workgroup dimension.
"""

from __future__ import annotations

from candle_api.layout import numel

from . import shaders as S
from .launch import bind, chunks_along, merge, narrow, pack

TILE, TK = 64, 16


def _common(dtype) -> str:
    return f"""{S.library(*S.arith(dtype))}
{S.params(3)}{S.AT}
{S.writer("o", 0, dtype)}{S.reader("a", 1, dtype)}{S.reader("b", 2, dtype)}
// P: m, n, k, batches, batch rank, a row stride, a k stride, b k stride, b column stride, out row stride,
//    out first column, batch shape, a offset, a batch strides, b offset, b batch strides
fn a_base(z: u32) -> u32 {{ let r = P[4]; return at(z, 11u + r, 11u, r); }}
fn b_base(z: u32) -> u32 {{ let r = P[4]; return at(z, 12u + 2u * r, 11u, r); }}
"""


def _mad(k: str) -> str:
    return "fma(x, y, acc)" if k == "f" else f"add_{k}(acc, mul_{k}(x, y))"


#: How the GEMM and GEMV bodies read the operands: element (row, q) of a, (q, col) of b.
LOAD_A = "a_ld(ab + {row} * P[5] + {q} * P[6])"
LOAD_B = "b_ld(bb + {q} * P[7] + {col} * P[8])"


def _gemm_source(dtype) -> str:
    return _common(dtype) + gemm_body(dtype, LOAD_A, LOAD_B)


def gemm_body(dtype, load_a: str, load_b: str) -> str:
    """The tiled GEMM's entry point over P[0..2] = m, n, k and a_base/b_base(z);
    load_a and load_b are format strings of {row}, {q}, {col}. The 4 x 4 block
    of each thread is written out as scalars (arrays indexed in loops may
    live in memory rather than registers: twice as slow on lavapipe)."""
    k, ct = S.kind(dtype), S.ctype(dtype)
    va = load_a.format(row="(row0 + r)", q="gk")
    vb = load_b.format(q="gk", col="(col0 + r)")
    blocks = [(i, j) for i in range(4) for j in range(4)]
    init = "\n".join(f"  var c{i}{j} = zero_{k}();" for i, j in blocks)
    regs = "\n".join([f"      let a{i} = ta[q * {TILE}u + lid.y * 4u + {i}u];" for i in range(4)]
                     + [f"      let b{j} = tb[q * {TILE}u + lid.x * 4u + {j}u];" for j in range(4)])
    mads = "\n".join(f"      c{i}{j} = mad(c{i}{j}, a{i}, b{j});" for i, j in blocks)
    stores = "\n".join(f"  let out_row{i} = row0 + lid.y * 4u + {i}u;" for i in range(4)) + "\n" + "\n".join(
        f"  if (out_row{i} < m && col0 + lid.x * 4u + {j}u < n) {{ "
        f"o_st((z * m + out_row{i}) * P[9] + P[10] + col0 + lid.x * 4u + {j}u, c{i}{j}); }}" for i, j in blocks)
    return f"""
var<workgroup> ta: array<{ct}, {TK * TILE}>;   // [kk][row]
var<workgroup> tb: array<{ct}, {TK * TILE}>;   // [kk][col]
fn mad(acc: {ct}, x: {ct}, y: {ct}) -> {ct} {{ return {_mad(k)}; }}
@compute @workgroup_size(16, 16)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {{
  let m = P[0]; let n = P[1]; let kk = P[2];
  let z = wid.z;
  let ab = a_base(z);
  let bb = b_base(z);
  let row0 = wid.y * {TILE}u;
  let col0 = wid.x * {TILE}u;
  let t = lid.y * 16u + lid.x;
{init}
  for (var k0 = 0u; k0 < kk; k0 += {TK}u) {{
    for (var l = 0u; l < 4u; l++) {{
      let idx = t + l * 256u;            // 1024 = 16 x 64 values of each tile
      let r = idx % {TILE}u;
      let q = idx / {TILE}u;
      let gk = k0 + q;
      var va = zero_{k}();
      var vb = zero_{k}();
      if (row0 + r < m && gk < kk) {{ va = {va}; }}
      if (col0 + r < n && gk < kk) {{ vb = {vb}; }}
      ta[q * {TILE}u + r] = va;
      tb[q * {TILE}u + r] = vb;
    }}
    workgroupBarrier();
    for (var q = 0u; q < {TK}u; q++) {{
{regs}
{mads}
    }}
    workgroupBarrier();
  }}
{stores}
}}
"""


def _gemv_source(dtype) -> str:
    return _common(dtype) + gemv_body(dtype, LOAD_A, LOAD_B)


def gemv_body(dtype, load_a: str, load_b: str) -> str:
    """The GEMV's entry point (one row of a per z), as gemm_body."""
    k, ct = S.kind(dtype), S.ctype(dtype)
    va = load_a.format(row="0u", q="q")
    vb = load_b.format(q="q", col="col")
    return f"""
var<workgroup> part: array<{ct}, 256>;
fn mad(acc: {ct}, x: {ct}, y: {ct}) -> {ct} {{ return {_mad(k)}; }}
@compute @workgroup_size(32, 8)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {{
  let n = P[1]; let kk = P[2];
  let z = wid.z;
  let col = wid.x * 8u + lid.y;
  var acc = zero_{k}();
  if (col < n) {{
    let ab = a_base(z);
    let bb = b_base(z);
    for (var q = lid.x; q < kk; q += 32u) {{ acc = mad(acc, {va}, {vb}); }}
  }}
  let t = lid.y * 32u + lid.x;
  part[t] = acc;
  workgroupBarrier();  // one barrier, then a serial sum per column: barriers are what costs on lavapipe
  if (lid.x == 0u && col < n) {{
    var s = part[t];
    for (var i = 1u; i < 32u; i++) {{ s = add_{k}(s, part[t + i]); }}
    o_st(z * P[9] + P[10] + col, s);
  }}
}}
"""


def _matmul(dtype):
    def kernel(out, a, la, b, lb):
        gpu = out.device.gpu
        *batch, m, kk = la.shape
        n = lb.shape[-1]
        bshape, (abs_, bbs) = merge(tuple(batch), [tuple(la.strides[:-2]), tuple(lb.strides[:-2])])
        batches = numel(bshape)
        if batches > gpu.max_groups:
            raise MemoryError(f"wgpu: {batches} batches exceed the {gpu.max_groups} workgroups of a dimension")
        gemv = m == 1
        key = ("gemv" if gemv else "gemm", str(dtype))
        pipe = gpu.pipeline(key, "wrr", lambda: (_gemv_source if gemv else _gemm_source)(dtype))
        ba, sa = bind(gpu, a, la, dtype.itemsize)
        # a weight beyond the binding limit: its columns in windows (a transposed (n, k) weight is
        # contiguous in each), each pass writing its columns of the output
        for c0, c1 in chunks_along(gpu, lb, len(lb.shape) - 1, dtype.itemsize):
            part = narrow(lb, len(lb.shape) - 1, c0, c1)
            bb, sb = bind(gpu, b, part, dtype.itemsize)
            words = [m, c1 - c0, kk, batches, len(bshape), la.strides[-2], la.strides[-1], lb.strides[-2],
                     lb.strides[-1], n, c0, *bshape, la.offset - sa, *abs_, part.offset - sb, *bbs]
            groups = (-(-(c1 - c0) // 8), 1) if gemv else (-(-(c1 - c0) // TILE), -(-m // TILE))
            gpu.dispatch(pipe, [bind(gpu, out, None, 1)[0], ba, bb], pack(*words), *groups, groups_z=batches)

    return kernel


KERNELS = {"matmul": _matmul}
