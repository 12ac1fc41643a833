// needs: half
// Arithmetic of the f kind (f32, and f16/bf16 computed in f32). NaN is
// tested on the bits: a compiler allowed to assume no NaN may fold x != x.

fn isnan_f(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }
fn isinf_f(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) == 0x7f800000u; }
fn nan_f() -> f32 { return bitcast<f32>(0x7fc00000u); }
fn inf_f() -> f32 { return bitcast<f32>(0x7f800000u); }
fn copysign_f(m: f32, s: f32) -> f32 {
  return bitcast<f32>((bitcast<u32>(m) & 0x7fffffffu) | (bitcast<u32>(s) & 0x80000000u));
}
// a as hi + lo of 12 significant bits each, so that their products are exact: split by masking
// the low mantissa bits, not by Veltkamp's 4097 a, which a compiler's contraction of 4097 a - a
// into a fused multiply-add breaks (NVIDIA's Vulkan driver: gelu_erf off by 35 ulp)
fn split_f(a: f32) -> vec2<f32> {
  let hi = bitcast<f32>(bitcast<u32>(a) & 0xfffff000u);
  return vec2<f32>(hi, a - hi);
}
// The rounding error of p = a * b, exactly (Dekker's product on halves of 12 bits): WGSL's fma may
// round twice, so it cannot give it. For a b finite and far from underflow.
fn prod_err_f(a: f32, b: f32, p: f32) -> f32 {
  let x = split_f(a);
  let y = split_f(b);
  return ((x.x * y.x - p) + x.x * y.y + x.y * y.x) + x.y * y.y;
}
fn zero_f() -> f32 { return 0.0; }
fn one_f() -> f32 { return 1.0; }
fn add_f(a: f32, b: f32) -> f32 { return a + b; }
fn sub_f(a: f32, b: f32) -> f32 { return a - b; }
fn mul_f(a: f32, b: f32) -> f32 { return a * b; }
// a / b correctly rounded: WGSL's / may be 2.5 ulp off (NVIDIA's Vulkan driver's is), so the
// quotient is corrected once by its exact residual a - q b (Sterbenz: a - p is exact)
fn div_f(a: f32, b: f32) -> f32 {
  let q = a / b;
  let p = q * b;
  if (q == 0.0 || isinf_f(q) || isnan_f(q) || isinf_f(p)) { return q; }
  let r = (a - p) - prod_err_f(q, b, p);
  return q + r / b;
}
fn max_f(a: f32, b: f32) -> f32 {
  if (isnan_f(a)) { return a; }
  if (isnan_f(b)) { return b; }
  return select(b, a, a > b);
}
fn min_f(a: f32, b: f32) -> f32 {
  if (isnan_f(a)) { return a; }
  if (isnan_f(b)) { return b; }
  return select(b, a, a < b);
}
fn neg_f(x: f32) -> f32 { return bitcast<f32>(bitcast<u32>(x) ^ 0x80000000u); }
fn abs_f(x: f32) -> f32 { return bitcast<f32>(bitcast<u32>(x) & 0x7fffffffu); }
fn sign_f(x: f32) -> f32 {
  if (isnan_f(x)) { return x; }
  return select(select(0.0, 1.0, x > 0.0), -1.0, x < 0.0);
}
fn lt_f(a: f32, b: f32) -> bool { return a < b; }
fn le_f(a: f32, b: f32) -> bool { return a <= b; }
fn eq_f(a: f32, b: f32) -> bool { return a == b; }

// C's fmod, exact: one bit of the quotient per step, each subtraction exact
// (Sterbenz), so any exponent difference gives the exact remainder.
fn fmod_f(a: f32, b: f32) -> f32 {
  if (isnan_f(a) || isnan_f(b) || isinf_f(a) || b == 0.0) { return nan_f(); }
  let ab = abs_f(b);
  var r = abs_f(a);
  if (isinf_f(b) || r < ab) { return a; }
  loop {
    if (r < ab) { break; }
    var d = ldexp(ab, frexp(r).exp - frexp(ab).exp);
    if (d > r) { d = d * 0.5; }
    r = r - d;
  }
  return copysign_f(r, a);
}

// Python's (and numpy's) remainder: the sign of b.
fn rem_f(a: f32, b: f32) -> f32 {
  let r = fmod_f(a, b);
  if (isnan_f(r)) { return r; }
  if (r == 0.0) { return copysign_f(0.0, b); }
  if ((r < 0.0) != (b < 0.0)) { return r + b; }
  return r;
}
