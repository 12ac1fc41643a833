"""Fused rows: softmax and log_softmax over the last dim, layer_norm,
rms_norm, rope and rope_i, and scaled-dot-product attention (sdpa). Each is
an optional row of the contract; these kernels beat their decompositions by
reading the input once or twice instead of once per primitive op.

Row kernels (softmax, the norms) take a workgroup per row: its threads
stride over the row and combine partial maxima and sums in workgroup memory.
Attention takes a workgroup per query row and walks the keys in blocks of
256 with an online softmax (Milakov and Gimelshein; FlashAttention's
recurrence), so no score matrix is ever stored: each thread scores one key of
the block, and then accumulates its share of the output's columns.
"""

from __future__ import annotations

from candle_api.layout import numel

from . import shaders as S
from .launch import bind, merge, pack, run

ROW_HEAD = """
// the row's elements: leading dims merged (rank, shape, offset, strides at 3..), last-dim stride at P[2]
fn row_at(r: u32) -> u32 { let rank = P[3]; return at(r, 4u + rank, 4u, rank); }
"""

ROW_ENTRY = """
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
  let r = min(wid.x + wid.y * nwg.x, P[0] - 1u);  // spare workgroups redo the last row (same values)
  let n = P[1];
  let xs = P[2];
  let base = row_at(r);
"""


def _rows(gpu, x, lx, dtype) -> tuple[int, tuple, list]:
    """(rows, x's binding, the parameter words from P[2] on) of a row kernel's input:
    last-dim stride, then the leading dims merged (rank, shape, offset, strides)."""
    lead, (strides,) = merge(lx.shape[:-1], [lx.strides[:-1]])
    rows = numel(lead)
    binding, shift = bind(gpu, x, lx, dtype.itemsize)
    return rows, binding, [lx.strides[-1], len(lead), *lead, lx.offset - shift, *strides]


def _softmax_source(dtype, log: bool) -> str:
    finish = "o_st(r * n + j, v - shift);" if log else "o_st(r * n + j, exp_f(v - m) * inv);"
    return f"""{S.library("math", "workgroup")}
{S.params(2)}{S.AT}
{S.writer("o", 0, dtype)}{S.reader("x", 1, dtype)}{ROW_HEAD}{ROW_ENTRY}
  var m = -inf_f();
  for (var j = t; j < n; j += 256u) {{ m = max_f(m, x_ld(base + j * xs)); }}
  m = wg_max(t, m);
  var s = 0.0;
  for (var j = t; j < n; j += 256u) {{ s = s + exp_f(x_ld(base + j * xs) - m); }}
  s = wg_sum(t, s);
  let inv = 1.0 / s;
  let shift = m + log_f(s);
  for (var j = t; j < n; j += 256u) {{
    let v = x_ld(base + j * xs);
    {finish}
  }}
}}
"""


def _softmax(log: bool):
    op = "log_softmax_last" if log else "softmax_last"

    def make(dtype):
        def kernel(out, x, lx):
            gpu = out.device.gpu
            rows, bx, words = _rows(gpu, x, lx, dtype)
            pipe = gpu.pipeline((op, str(dtype)), "wr", lambda: _softmax_source(dtype, log))
            gpu.dispatch(pipe, [bind(gpu, out, None, 1)[0], bx], pack(rows, lx.shape[-1], *words), rows)

        return kernel

    return make


def _norm_source(dtype, rms: bool, bias: bool) -> str:
    # after the row words: eps, then the offsets of w and b
    tail = "let tail = 5u + 2u * P[3];"
    mean = "0.0" if rms else "wg_sum(t, sum) / f32(n)"
    shift = " + b_ld(P[tail + 2u] + j)" if bias else ""
    return f"""{S.library("workgroup")}
{S.params(3 + bias)}{S.AT}
{S.writer("o", 0, dtype)}{S.reader("x", 1, dtype)}{S.reader("w", 2, dtype)}{S.reader("b", 3, dtype) if bias else ""}
{ROW_HEAD}{ROW_ENTRY}  {tail}
  var sum = 0.0;
  for (var j = t; j < n && {"false" if rms else "true"}; j += 256u) {{ sum = sum + x_ld(base + j * xs); }}
  let mean = {mean};
  var sq = 0.0;
  for (var j = t; j < n; j += 256u) {{
    let d = x_ld(base + j * xs) - mean;
    sq = fma(d, d, sq);
  }}
  let scale = 1.0 / sqrt(wg_sum(t, sq) / f32(n) + bitcast<f32>(P[tail]));
  for (var j = t; j < n; j += 256u) {{
    o_st(r * n + j, (x_ld(base + j * xs) - mean) * scale * w_ld(P[tail + 1u] + j){shift});
  }}
}}
"""


def _norm(rms: bool):
    op = "rms_norm" if rms else "layer_norm"

    def make(dtype):
        def kernel(out, x, lx, w, lw, *rest):
            gpu = out.device.gpu
            b, lb, eps = (None, None, rest[0]) if rms else rest
            rows, bx, words = _rows(gpu, x, lx, dtype)
            bw, sw = bind(gpu, w, lw, dtype.itemsize)
            buffers = [bind(gpu, out, None, 1)[0], bx, bw]
            words += [float(eps), lw.offset - sw, 0]
            if b is not None:
                bb, sb = bind(gpu, b, lb, dtype.itemsize)
                buffers.append(bb)
                words[-1] = lb.offset - sb
            key = (op, str(dtype), b is not None)
            pipe = gpu.pipeline(key, "w" + "r" * (len(buffers) - 1), lambda: _norm_source(dtype, rms, b is not None))
            gpu.dispatch(pipe, buffers, pack(rows, lx.shape[-1], *words), rows)

        return kernel

    return make


def _rope_source(dtype, interleaved: bool) -> str:
    if interleaved:
        pair = """  let i = di / 2u;
  let x1 = x_ld(xo + 2u * i * P[10u]);
  let x2 = x_ld(xo + (2u * i + 1u) * P[10u]);"""
        rotate = "select(fma(x1, s, x2 * c), fma(x1, c, -(x2 * s)), di % 2u == 0u)"
    else:
        pair = """  let i = di % half;
  let x1 = x_ld(xo + i * P[10u]);
  let x2 = x_ld(xo + (i + half) * P[10u]);"""
        rotate = "select(fma(x2, c, x1 * s), fma(x1, c, -(x2 * s)), di < half)"
    return f"""{S.library("arith_f")}
{S.params(4)}
{S.writer("o", 0, dtype, scattered=False)}{S.reader("x", 1, dtype)}{S.reader("cs", 2, dtype)}{S.reader("sn", 3, dtype)}
// P: n, b, h, t, d, cos/sin batched, x offset, x strides (4), cos offset, sin offset
fn value(e: u32) -> f32 {{
  let d = P[4u];
  let t = P[3u];
  let half = d / 2u;
  let di = e % d;
  let ti = (e / d) % t;
  let hi = (e / (d * t)) % P[2u];
  let bi = e / (d * t * P[2u]);
  let xo = P[6u] + bi * P[7u] + hi * P[8u] + ti * P[9u];
{pair}
  let ci = select(0u, bi * t * half, P[5u] != 0u) + ti * half + i;
  let c = cs_ld(P[11u] + ci);
  let s = sn_ld(P[12u] + ci);
  return {rotate};
}}
{S.ENTRY}  {S.store_units("o", dtype, "value", "P[0]")}
}}
"""


def _rope(interleaved: bool):
    op = "rope_i" if interleaved else "rope"

    def make(dtype):
        def kernel(out, x, lx, cos, lcos, sin, lsin):
            gpu = out.device.gpu
            b, h, t, d = lx.shape
            n = b * h * t * d
            bx, sx = bind(gpu, x, lx, dtype.itemsize)
            bc, sc = bind(gpu, cos, lcos, dtype.itemsize)
            bs, ss = bind(gpu, sin, lsin, dtype.itemsize)
            words = [n, b, h, t, d, int(len(lcos.shape) == 3), lx.offset - sx, *lx.strides, lcos.offset - sc,
                     lsin.offset - ss]
            run(gpu, (op, str(dtype)), "wrrr", lambda: _rope_source(dtype, interleaved),
                [bind(gpu, out, None, 1)[0], bx, bc, bs], pack(*words), S.units(dtype, n))

        return kernel

    return make


#: The largest head dims the attention kernel holds (wgsl/attention.wgsl: the query row in workgroup
#: memory, output columns four per thread).
MAX_HEAD = 1024


def _sdpa_source(dtype, mask_dtype) -> str:
    mask = {None: "return s;", "u": "return select(s, -inf_f(), m_ld(i) == 0u);",
            "f": "return s + m_ld(i);"}[mask_dtype and S.kind(mask_dtype)]
    mask_reader = S.reader("m", 4, mask_dtype) if mask_dtype is not None else ""
    return f"""{S.library("attention")}
{S.params(5 if mask_dtype is not None else 4)}{S.AT}
{S.writer("o", 0, dtype)}{S.reader("q", 1, dtype)}{S.reader("k", 2, dtype)}{S.reader("v", 3, dtype)}{mask_reader}
fn mask_score(s: f32, i: u32) -> f32 {{ {mask} }}
"""


def sdpa(dtype):
    def kernel(out, q, lq, k, lk, v, lv, mask, lmask, mask_dtype, causal, scale):
        from candle_api.errors import KernelError

        gpu = out.device.gpu
        *batch, nl, ne = lq.shape
        ns, nv = lk.shape[-2], lv.shape[-1]
        if ne > MAX_HEAD or nv > MAX_HEAD:
            raise KernelError(f"sdpa on wgpu: head dims up to {MAX_HEAD}, got {ne} and {nv}")
        layouts = [lq, lk, lv] + ([lmask] if mask is not None else [])
        bshape, bstrides = merge(tuple(batch), [tuple(lay.strides[:-2]) for lay in layouts])
        total = nl * numel(bshape)
        buffers = [bind(gpu, out, None, 1)[0]]
        words = [nl, ns, ne, nv, int(bool(causal)), float(scale), len(bshape), *bshape]
        sizes = [dtype.itemsize] * 3 + [mask_dtype.itemsize if mask is not None else 1]
        for storage, lay, size, strides in zip([q, k, v, mask], layouts, sizes, bstrides):
            binding, shift = bind(gpu, storage, lay, size)
            buffers.append(binding)
            words += [lay.offset - shift, *strides, *lay.strides[-2:]]
        if mask is None:
            words += [0] * (len(bshape) + 3)
        words.append(total)
        mdt = mask_dtype if mask is not None else None
        key = ("sdpa", str(dtype), str(mdt))
        pipe = gpu.pipeline(key, "w" + "r" * (len(buffers) - 1), lambda: _sdpa_source(dtype, mdt))
        gpu.dispatch(pipe, buffers, pack(*words), total)

    return kernel


KERNELS = {"softmax_last": _softmax(False), "log_softmax_last": _softmax(True), "layer_norm": _norm(False),
           "rms_norm": _norm(True), "rope": _rope(False), "rope_i": _rope(True), "sdpa": sdpa}
