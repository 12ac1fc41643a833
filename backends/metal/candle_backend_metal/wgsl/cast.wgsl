// needs: arith_l
// Floats into integers as Rust's `as` (which Candle inherits): truncated
// toward zero, saturated at the integer's range, NaN to 0. The bounds are
// compared as f32 (f32(hi) may round up past hi: values at or above it saturate).

fn f2u_sat(x: f32, hi: u32) -> u32 {
  if ((bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u || x <= 0.0) { return 0u; }
  if (x >= f32(hi)) { return hi; }
  return u32(x);
}

fn f2i_sat(x: f32, lo: i32, hi: i32) -> i32 {
  if ((bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u) { return 0; }
  if (x >= f32(hi)) { return hi; }
  if (x <= f32(lo)) { return lo; }
  return i32(x);
}
