// Arithmetic of the i kind (i16 and i32, in i32, wrapping: WGSL defines
// i32 overflow, and the most negative value divided by -1, as wrapping).
// Divisors were checked for zero, and exponents for signs, on the host.

fn zero_i() -> i32 { return 0; }
fn one_i() -> i32 { return 1; }
fn add_i(a: i32, b: i32) -> i32 { return a + b; }
fn sub_i(a: i32, b: i32) -> i32 { return a - b; }
fn mul_i(a: i32, b: i32) -> i32 { return a * b; }
fn div_i(a: i32, b: i32) -> i32 { return a / b; }
// The remainder from the truncated quotient, not WGSL's %: NVIDIA's Vulkan driver gave wrong
// remainders of negative operands (H200, driver 580) where lavapipe's were right.
fn fmod_i(a: i32, b: i32) -> i32 { return a - b * (a / b); }
fn rem_i(a: i32, b: i32) -> i32 {
  let r = fmod_i(a, b);
  return select(r, r + b, r != 0 && ((r < 0) != (b < 0)));
}
fn max_i(a: i32, b: i32) -> i32 { return max(a, b); }
fn min_i(a: i32, b: i32) -> i32 { return min(a, b); }
fn neg_i(x: i32) -> i32 { return -x; }
fn abs_i(x: i32) -> i32 { return abs(x); }
fn sign_i(x: i32) -> i32 { return select(select(0, 1, x > 0), -1, x < 0); }
fn lt_i(a: i32, b: i32) -> bool { return a < b; }
fn le_i(a: i32, b: i32) -> bool { return a <= b; }
fn eq_i(a: i32, b: i32) -> bool { return a == b; }
fn pow_i(a: i32, b: i32) -> i32 {
  var r = 1;
  var base = a;
  var e = bitcast<u32>(b);
  loop {
    if (e == 0u) { break; }
    if ((e & 1u) == 1u) { r = r * base; }
    base = base * base;
    e = e >> 1u;
  }
  return r;
}
