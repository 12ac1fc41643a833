// needs: half
// Reading GGML blocks: a flat byte buffer `qb`, bound by the kernel, read a
// byte, an f16, an i8 or an f32 at a time (blocks are 17 to 292 bytes, at
// any byte offset). The decoders (one per type, `deq`) are written by
// quantized.py from the layouts of candle_api.quantized, and follow its
// reference dequantizers' f32 operations in the same order.

fn qbyte(i: u32) -> u32 { return (qb[i >> 2u] >> ((i & 3u) << 3u)) & 0xffu; }
fn qhalf(i: u32) -> f32 { return f16_to_f32(qbyte(i) | (qbyte(i + 1u) << 8u)); }
fn qi8(i: u32) -> f32 { return f32(bitcast<i32>(qbyte(i) << 24u) >> 24u); }
fn qf32(i: u32) -> f32 { return bitcast<f32>(qbyte(i) | (qbyte(i + 1u) << 8u) | (qbyte(i + 2u) << 16u) | (qbyte(i + 3u) << 24u)); }
// value j (of 32) in 16 bytes of nibbles at s: the low nibbles first, then the high ones
fn nib32(s: u32, j: u32) -> u32 { let b = qbyte(s + (j % 16u)); return select(b & 15u, b >> 4u, j >= 16u); }
// value w (of 128) in 32 bytes of 2-bit crumbs at s: byte w % 32, bits 2 (w / 32)
fn crumb128(s: u32, w: u32) -> u32 { return (qbyte(s + (w % 32u)) >> (2u * (w / 32u))) & 3u; }
// bit j of 256 in 32 bytes of bit planes at s: bit j / 32 of byte j % 32
fn plane256(s: u32, j: u32) -> u32 { return (qbyte(s + (j % 32u)) >> (j / 32u)) & 1u; }
// the 6-bit scale and min of sub-block i (of 8) packed in 12 bytes at s (Q4_K, Q5_K)
fn scale_min_k4(s: u32, i: u32) -> vec2<f32> {
  if (i < 4u) { return vec2<f32>(f32(qbyte(s + i) & 63u), f32(qbyte(s + 4u + i) & 63u)); }
  let c = qbyte(s + 4u + i);
  return vec2<f32>(f32((c & 15u) | ((qbyte(s + i - 4u) >> 6u) << 4u)), f32((c >> 4u) | ((qbyte(s + i) >> 6u) << 4u)));
}
var<private> IQ4_GRID: array<f32, 16> = array<f32, 16>(-127.0, -104.0, -83.0, -65.0, -49.0, -35.0, -22.0, -10.0,
                                                       1.0, 13.0, 25.0, 38.0, 53.0, 69.0, 89.0, 113.0);
var<private> FP4_GRID: array<f32, 16> = array<f32, 16>(0.0, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0,
                                                      0.0, -1.0, -2.0, -3.0, -4.0, -6.0, -8.0, -12.0);
