// Arithmetic of the l kind: i64 as vec2<u32>(low word, high word), two's
// complement, wrapping as 64-bit integers do. WGSL has no 64-bit integers;
// these build them from 32-bit operations.

fn l_of_i(x: i32) -> vec2<u32> { return vec2<u32>(bitcast<u32>(x), select(0u, 0xffffffffu, x < 0)); }
fn l_of_u(x: u32) -> vec2<u32> { return vec2<u32>(x, 0u); }
fn l_neg_bit(a: vec2<u32>) -> bool { return (a.y >> 31u) == 1u; }
fn zero_l() -> vec2<u32> { return vec2<u32>(0u, 0u); }
fn one_l() -> vec2<u32> { return vec2<u32>(1u, 0u); }
fn add_l(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
  let lo = a.x + b.x;
  return vec2<u32>(lo, a.y + b.y + select(0u, 1u, lo < a.x));
}
fn sub_l(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
  return vec2<u32>(a.x - b.x, a.y - b.y - select(0u, 1u, a.x < b.x));
}
fn neg_l(a: vec2<u32>) -> vec2<u32> { return sub_l(vec2<u32>(0u, 0u), a); }
fn abs_l(a: vec2<u32>) -> vec2<u32> { return select(a, neg_l(a), l_neg_bit(a)); }
// the full 64-bit product of two u32, from 16-bit halves
fn l_mul32(a: u32, b: u32) -> vec2<u32> {
  let a0 = a & 0xffffu; let a1 = a >> 16u;
  let b0 = b & 0xffffu; let b1 = b >> 16u;
  let p00 = a0 * b0; let p01 = a0 * b1; let p10 = a1 * b0; let p11 = a1 * b1;
  let mid = (p00 >> 16u) + (p01 & 0xffffu) + (p10 & 0xffffu);
  return vec2<u32>((p00 & 0xffffu) | (mid << 16u), p11 + (p01 >> 16u) + (p10 >> 16u) + (mid >> 16u));
}
fn mul_l(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
  let p = l_mul32(a.x, b.x);
  return vec2<u32>(p.x, p.y + a.x * b.y + a.y * b.x);
}
fn lt_l(a: vec2<u32>, b: vec2<u32>) -> bool {
  let ah = bitcast<i32>(a.y); let bh = bitcast<i32>(b.y);
  return ah < bh || (ah == bh && a.x < b.x);
}
fn le_l(a: vec2<u32>, b: vec2<u32>) -> bool { return !lt_l(b, a); }
fn eq_l(a: vec2<u32>, b: vec2<u32>) -> bool { return a.x == b.x && a.y == b.y; }
fn max_l(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> { return select(a, b, lt_l(a, b)); }
fn min_l(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> { return select(a, b, lt_l(b, a)); }
fn sign_l(a: vec2<u32>) -> vec2<u32> {
  if (l_neg_bit(a)) { return vec2<u32>(0xffffffffu, 0xffffffffu); }
  return select(vec2<u32>(0u, 0u), vec2<u32>(1u, 0u), a.x != 0u || a.y != 0u);
}
// unsigned quotient and remainder, one bit per step
fn l_udivmod(n: vec2<u32>, d: vec2<u32>) -> array<vec2<u32>, 2> {
  var q = vec2<u32>(0u, 0u);
  var r = vec2<u32>(0u, 0u);
  for (var i = 63; i >= 0; i--) {
    r = vec2<u32>((r.x << 1u), (r.y << 1u) | (r.x >> 31u));
    let bit = select(n.x >> u32(i), n.y >> u32(i - 32), i >= 32) & 1u;
    r.x = r.x | bit;
    if (r.y > d.y || (r.y == d.y && r.x >= d.x)) {
      r = sub_l(r, d);
      if (i >= 32) { q.y = q.y | (1u << u32(i - 32)); } else { q.x = q.x | (1u << u32(i)); }
    }
  }
  return array<vec2<u32>, 2>(q, r);
}
// truncating division: the most negative value divided by -1 wraps to itself
fn div_l(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
  let qr = l_udivmod(abs_l(a), abs_l(b));
  return select(qr[0], neg_l(qr[0]), l_neg_bit(a) != l_neg_bit(b));
}
fn fmod_l(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
  let qr = l_udivmod(abs_l(a), abs_l(b));
  return select(qr[1], neg_l(qr[1]), l_neg_bit(a));
}
fn rem_l(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
  let r = fmod_l(a, b);
  let nonzero = r.x != 0u || r.y != 0u;
  return select(r, add_l(r, b), nonzero && (l_neg_bit(r) != l_neg_bit(b)));
}
fn pow_l(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
  var r = vec2<u32>(1u, 0u);
  var base = a;
  var e = b;
  loop {
    if (e.x == 0u && e.y == 0u) { break; }
    if ((e.x & 1u) == 1u) { r = mul_l(r, base); }
    base = mul_l(base, base);
    e = vec2<u32>((e.x >> 1u) | (e.y << 31u), e.y >> 1u);
  }
  return r;
}
// to f32, rounded once to nearest even
fn l_to_f32(a: vec2<u32>) -> f32 {
  let m = abs_l(a);
  var v: f32;
  if (m.y == 0u) {
    v = f32(m.x);
  } else {
    let lz = countLeadingZeros(m.y);
    let hi = select((m.y << lz) | (m.x >> (32u - lz)), m.y, lz == 0u);
    let lo = m.x << lz;
    var mant = hi >> 8u;
    let rest = hi & 0xffu;
    if (rest > 0x80u || (rest == 0x80u && (lo != 0u || (mant & 1u) == 1u))) { mant = mant + 1u; }
    v = f32(mant) * exp2(f32(40u - lz));
  }
  return select(v, -v, l_neg_bit(a));
}
// from f32: truncated toward zero, saturating, NaN to 0
fn l_of_f32(x: f32) -> vec2<u32> {
  if ((bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u) { return vec2<u32>(0u, 0u); }
  if (x >= 9223372036854775808.0) { return vec2<u32>(0xffffffffu, 0x7fffffffu); }
  if (x <= -9223372036854775808.0) { return vec2<u32>(0u, 0x80000000u); }
  let t = trunc(abs(x));
  var m: vec2<u32>;
  if (t < 4294967296.0) {
    m = vec2<u32>(u32(t), 0u);
  } else {
    let hi = u32(t / 4294967296.0);
    m = vec2<u32>(u32(t - f32(hi) * 4294967296.0), hi);
  }
  return select(m, neg_l(m), x < 0.0);
}
