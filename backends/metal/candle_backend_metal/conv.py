"""Convolutions, pooling and nearest upsampling over (batch, channels, h, w),
one thread per output element, reading the input and the weights on any
strides. params, as the core passes them (see the contract's rows):
conv (b, c_in, h, w, c_out, kh, kw, sh, sw, ph, pw, dh, dw, groups, oh, ow,
oph, opw); pool (b, c, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow,
count_include_pad). 1-d convolutions arrive with h = 1.

A transposed convolution gathers rather than scatters: output (oy, ox)
takes the input taps (iy, ix) with iy * sh + ky * dh = oy + ph, so each
output is written once and no atomics are needed.
"""

from __future__ import annotations

from . import shaders as S
from .launch import bind, pack, run

#: WGSL of the output position of thread e: b, channel, y, x (P[20..23] hold the output's dims).
_POSITION = """
  let ox = e % P[23u];
  let oy = (e / P[23u]) % P[22u];
  let co = (e / (P[23u] * P[22u])) % P[21u];
  let bb = e / (P[23u] * P[22u] * P[21u]);
"""


def _conv_source(dtype, transposed: bool) -> str:
    if transposed:  # w (c_in, c_out / groups, kh, kw)
        taps = """
      let ty = oy + ph - ky * dh;
      let tx = ox + pw - kx * dw;
      if (ty % sh != 0u || tx % sw != 0u) { continue; }
      let iy = ty / sh;
      let ix = tx / sw;
      if (ty > 0x7fffffffu || tx > 0x7fffffffu || iy >= h || ix >= wd) { continue; }
      acc = fma(x_ld(xo + iy * P[27u] + ix * P[28u]), w_ld(wo(ci, co % cog, ky, kx)), acc);"""
    else:  # w (c_out, c_in / groups, kh, kw)
        taps = """
      let iy = oy * sh + ky * dh - ph;
      let ix = ox * sw + kx * dw - pw;
      if (iy > 0x7fffffffu || ix > 0x7fffffffu || iy >= h || ix >= wd) { continue; }
      acc = fma(x_ld(xo + iy * P[27u] + ix * P[28u]), w_ld(wo(co, ci - g * cig, ky, kx)), acc);"""
    return f"""{S.library(*S.arith(dtype))}
{S.params(3)}
{S.writer("o", 0, dtype, scattered=False)}{S.reader("x", 1, dtype)}{S.reader("w", 2, dtype)}
// P: n, the conv params at 1..18, (b, c_out, oh, ow) at 20..23, x offset and strides at 24..28,
//    w offset and strides at 29..33
fn wo(i0: u32, i1: u32, ky: u32, kx: u32) -> u32 {{
  return P[29u] + i0 * P[30u] + i1 * P[31u] + ky * P[32u] + kx * P[33u];
}}
fn value(e: u32) -> f32 {{
{_POSITION}
  let h = P[3u]; let wd = P[4u]; let kh = P[6u]; let kw = P[7u];
  let sh = P[8u]; let sw = P[9u]; let ph = P[10u]; let pw = P[11u]; let dh = P[12u]; let dw = P[13u];
  let groups = P[14u];
  let cig = P[2u] / groups;
  let cog = P[5u] / groups;
  let g = co / cog;
  var acc = 0.0;
  for (var ci = g * cig; ci < (g + 1u) * cig; ci++) {{
    let xo = P[24u] + bb * P[25u] + ci * P[26u];
    for (var ky = 0u; ky < kh; ky++) {{
      for (var kx = 0u; kx < kw; kx++) {{{taps}
      }}
    }}
  }}
  return acc;
}}
{S.ENTRY}  {S.store_units("o", dtype, "value", "P[0]")}
}}
"""


def _conv(transposed: bool):
    op = "conv_transpose2d" if transposed else "conv2d"

    def make(dtype):
        def kernel(out, x, lx, w, lw, params):
            gpu = out.device.gpu
            b, _, _, _, c_out, *_ = params
            oh, ow = params[14], params[15]
            n = b * c_out * oh * ow
            bx, sx = bind(gpu, x, lx, dtype.itemsize)
            bw, sw = bind(gpu, w, lw, dtype.itemsize)
            words = [n, *params, 0, b, c_out, oh, ow, lx.offset - sx, *lx.strides, lw.offset - sw, *lw.strides]
            run(gpu, (op, str(dtype)), "wrr", lambda: _conv_source(dtype, transposed),
                [bind(gpu, out, None, 1)[0], bx, bw], pack(*words), S.units(dtype, n))

        return kernel

    return make


def _pool_source(dtype, average: bool) -> str:
    k, ct = S.kind(dtype), S.ctype(dtype)
    if average:
        init, step, final = "0.0", "acc = acc + f32(x_ld(xo + iy * P[27u] + ix * P[28u]));", (
            "let q = acc / f32(max(count, 1u));\n  return " + ("q;" if k == "f" else f"{ct}(trunc(q));"))
    else:
        lowest = {"f": "-inf_f()", "u": "0u", "i": "bitcast<i32>(0x80000000u)"}[k]
        init, step, final = lowest, "acc = max_" + k + "(acc, x_ld(xo + iy * P[27u] + ix * P[28u]));", "return acc;"
    return f"""{S.library(*S.arith(dtype))}
{S.params(2)}
{S.writer("o", 0, dtype, scattered=False)}{S.reader("x", 1, dtype)}
// P: n, the pool params at 1..15, (b, c, oh, ow) at 20..23, x offset and strides at 24..28
fn value(e: u32) -> {ct} {{
{_POSITION}
  let h = P[3u]; let wd = P[4u]; let kh = P[5u]; let kw = P[6u];
  let sh = P[7u]; let sw = P[8u]; let ph = P[9u]; let pw = P[10u]; let dh = P[11u]; let dw = P[12u];
  let xo = P[24u] + bb * P[25u] + co * P[26u];
  var acc = {"0.0" if average else init};
  var count = 0u;
  for (var ky = 0u; ky < kh; ky++) {{
    for (var kx = 0u; kx < kw; kx++) {{
      let py = oy * sh + ky * dh;   // in the padded image
      let px = ox * sw + kx * dw;
      if (P[15u] != 0u && py < h + 2u * ph && px < wd + 2u * pw) {{ count++; }}
      let iy = py - ph;
      let ix = px - pw;
      if (py < ph || px < pw || iy >= h || ix >= wd) {{ continue; }}
      if (P[15u] == 0u) {{ count++; }}
      {step}
    }}
  }}
  {final}
}}
{S.ENTRY}  {S.store_units("o", dtype, "value", "P[0]")}
}}
"""


def _pool(average: bool):
    op = "avg_pool2d" if average else "max_pool2d"

    def make(dtype):
        def kernel(out, x, lx, params):
            gpu = out.device.gpu
            b, c = params[0], params[1]
            oh, ow = params[12], params[13]
            n = b * c * oh * ow
            bx, sx = bind(gpu, x, lx, dtype.itemsize)
            words = [n, *params, 0, 0, 0, 0, b, c, oh, ow, lx.offset - sx, *lx.strides]
            run(gpu, (op, str(dtype)), "wr", lambda: _pool_source(dtype, average),
                [bind(gpu, out, None, 1)[0], bx], pack(*words), S.units(dtype, n))

        return kernel

    return make


def _upsample_source(raw) -> str:
    return f"""{S.library(*S.arith(raw))}
{S.params(2)}
{S.writer("o", 0, raw, scattered=False)}{S.reader("x", 1, raw)}
// P: n, h, w, (b, c, out_h, out_w) at 20..23, x offset and strides at 24..28 (the pools' places)
fn value(e: u32) -> {S.ctype(raw)} {{
{_POSITION}
  let iy = oy * P[1u] / P[22u];
  let ix = ox * P[2u] / P[23u];
  return x_ld(P[24u] + bb * P[25u] + co * P[26u] + iy * P[27u] + ix * P[28u]);
}}
{S.ENTRY}  {S.store_units("o", raw, "value", "P[0]")}
}}
"""


def upsample_nearest2d(dtype):
    from candle_api.dtype import get_dtype

    raw = get_dtype(S.raw_dtype(dtype))

    def kernel(out, x, lx, out_h, out_w, align_corners):
        gpu = out.device.gpu
        b, c, h, w = lx.shape
        n = b * c * out_h * out_w
        bx, sx = bind(gpu, x, lx, raw.itemsize)
        words = [n, h, w, *([0] * 17), b, c, out_h, out_w, lx.offset - sx, *lx.strides]
        run(gpu, ("upsample_nearest2d", str(raw)), "wr", lambda: _upsample_source(raw),
            [bind(gpu, out, None, 1)[0], bx], pack(*words), S.units(raw, n))

    return kernel


KERNELS = {"conv2d": _conv(False), "conv_transpose2d": _conv(True), "max_pool2d": _pool(False),
           "avg_pool2d": _pool(True), "upsample_nearest2d": upsample_nearest2d}
