// Half floats on the bits, so that subnormals, infinities and NaN survive on
// any hardware (one that flushes subnormals in arithmetic included). Values
// arrive and leave in the low 16 bits of a u32.

fn f16_to_f32(h: u32) -> f32 {
  let sign = (h & 0x8000u) << 16u;
  let e = (h >> 10u) & 0x1fu;
  let m = h & 0x3ffu;
  if (e == 0x1fu) { return bitcast<f32>(sign | 0x7f800000u | (m << 13u)); }
  if (e != 0u) { return bitcast<f32>(sign | ((e + 112u) << 23u) | (m << 13u)); }
  // zero or subnormal: m * 2^-24, exact and normal in f32
  return bitcast<f32>(sign | bitcast<u32>(f32(m) * 5.9604644775390625e-8));
}

// Round to nearest even; NaN stays a quiet NaN.
fn f32_to_f16(v: f32) -> u32 {
  let x = bitcast<u32>(v);
  let sign = (x >> 16u) & 0x8000u;
  let a = x & 0x7fffffffu;
  if (a > 0x7f800000u) { return sign | 0x7e00u | ((a >> 13u) & 0x3ffu); }
  if (a >= 0x477ff000u) { return sign | 0x7c00u; }         // 65520 and above round to infinity
  if (a >= 0x38800000u) {                                 // a normal f16
    let r = a - 0x38000000u;                              // exponent rebiased from 127 to 15
    return sign | ((r + 0xfffu + ((r >> 13u) & 1u)) >> 13u);
  }
  if (a <= 0x33000000u) { return sign; }                  // 2^-25 and below round to zero
  let e = a >> 23u;                                       // a subnormal f16: m * 2^-24
  let mant = (a & 0x7fffffu) | 0x800000u;
  let shift = 126u - e;
  let q = mant >> shift;
  let rest = mant & ((1u << shift) - 1u);
  let half = 1u << (shift - 1u);
  return sign | (q + select(0u, 1u, rest > half || (rest == half && (q & 1u) == 1u)));
}

fn f32_to_bf16(v: f32) -> u32 {
  let x = bitcast<u32>(v);
  if ((x & 0x7fffffffu) > 0x7f800000u) { return (x >> 16u) | 0x40u; }
  return (x + 0x7fffu + ((x >> 16u) & 1u)) >> 16u;
}
