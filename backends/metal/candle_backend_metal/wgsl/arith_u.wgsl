// Arithmetic of the u kind (u8 and u32, in u32; u8 wraps when stored).
// Divisors were checked for zero on the host before the kernel ran.

fn zero_u() -> u32 { return 0u; }
fn one_u() -> u32 { return 1u; }
fn add_u(a: u32, b: u32) -> u32 { return a + b; }
fn sub_u(a: u32, b: u32) -> u32 { return a - b; }
fn mul_u(a: u32, b: u32) -> u32 { return a * b; }
fn div_u(a: u32, b: u32) -> u32 { return a / b; }
fn fmod_u(a: u32, b: u32) -> u32 { return a % b; }
fn rem_u(a: u32, b: u32) -> u32 { return a % b; }
fn max_u(a: u32, b: u32) -> u32 { return max(a, b); }
fn min_u(a: u32, b: u32) -> u32 { return min(a, b); }
fn neg_u(x: u32) -> u32 { return 0u - x; }
fn abs_u(x: u32) -> u32 { return x; }
fn sign_u(x: u32) -> u32 { return select(0u, 1u, x > 0u); }
fn lt_u(a: u32, b: u32) -> bool { return a < b; }
fn le_u(a: u32, b: u32) -> bool { return a <= b; }
fn eq_u(a: u32, b: u32) -> bool { return a == b; }
fn pow_u(a: u32, b: u32) -> u32 {
  var r = 1u;
  var base = a;
  var e = b;
  loop {
    if (e == 0u) { break; }
    if ((e & 1u) == 1u) { r = r * base; }
    base = base * base;
    e = e >> 1u;
  }
  return r;
}
