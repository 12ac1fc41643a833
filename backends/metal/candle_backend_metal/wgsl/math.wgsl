// needs: arith_f arith_l
// f32 transcendental functions with IEEE special values, accurate to a few
// ulp (the conformance suite's bounds), whatever the GPU's own builtins do:
// WGSL lets exp, log, sin... be approximate, and lets implementations ignore
// NaN and infinities, so only +, -, *, /, fma, sqrt, ldexp, frexp and bit
// operations are used, and special values are tested on the bits. WGSL's fma
// may round twice (lavapipe's does): where an exact product error is needed,
// it comes from prod_err_f.
// exp, log, tanh, erf and the gelus use the cpu backend's polynomials
// (backends/cpu/tools/fit_vmath.py); the trigonometric and inverse ones are
// Cody and Waite's reductions with Moshier's (Cephes) polynomials, and large
// arguments of sin, cos and tan are reduced with Payne and Hanek's method.

const LN2_HI: f32 = 0.693359375;
const LN2_LO: f32 = -2.12194440e-4;
const LN2: f32 = 0.69314718055994531;
const PI: f32 = 3.14159265358979324;
const PIO2: f32 = 1.57079632679489662;
const PIO4: f32 = 0.78539816339744831;

fn pow2i(k: i32) -> f32 { return bitcast<f32>(u32(k + 127) << 23u); }  // k in [-126, 127]

// v 2^k rounded once, for |v| < 2^12 and k in [-151, 128]. A subnormal result is made from its
// bits: WGSL lets a GPU flush subnormal results of arithmetic to zero (NVIDIA's Vulkan driver does).
fn scale2_f(v: f32, k: i32) -> f32 {
  if (frexp(v).exp + k > -126) {
    let k1 = k / 2;
    return v * pow2i(k1) * pow2i(k - k1);  // two steps: 2^k alone may not be a normal f32
  }
  let m = round(abs_f(v) * pow2i(k + 149));  // the result in units of the smallest subnormal, 2^-149
  return bitcast<f32>(u32(m) | (bitcast<u32>(v) & 0x80000000u));
}

// s exp(x), s applied before exp's power of two so that a normal result never passes through a
// subnormal (|s| at most 2^11 where x >= -104; beyond, s 0 as IEEE has it: -inf 0 is NaN)
fn exp_times_f(x: f32, s: f32) -> f32 {
  if (isnan_f(x)) { return x; }
  // s inf and s 0 on the bits: a compiler may fold s * 0.0 to 0 (lavapipe's does)
  if (x > 88.72283935546875) { return select(copysign_f(inf_f(), s), nan_f(), s == 0.0 || isnan_f(s)); }
  if (x < -103.972084045410) { return select(copysign_f(0.0, s), nan_f(), isinf_f(s) || isnan_f(s)); }
  let n = round(x * 1.44269504088896341);
  var r = fma(-n, LN2_HI, x);
  r = fma(-n, LN2_LO, r);
  let q = 0.49999988 + r * (0.16666518 + r * (0.041669533 + r * (0.008368916 + r * 0.0013751407)));
  let p = fma(r * r, q, r) + 1.0;
  return scale2_f(s * p, i32(n));
}

fn exp_f(x: f32) -> f32 { return exp_times_f(x, 1.0); }

fn log_f(x: f32) -> f32 {
  if (isnan_f(x) || x < 0.0) { return nan_f(); }
  if (x == 0.0) { return -inf_f(); }
  if (isinf_f(x)) { return x; }
  var v = x;
  var e = 0.0;
  if (v < 1.17549435e-38) { v = v * 8388608.0; e = -23.0; }  // subnormal: scaled by 2^23
  let bits = bitcast<u32>(v);
  e = e + f32(i32(bits >> 23u) - 127);
  var m = bitcast<f32>((bits & 0x007fffffu) | 0x3f800000u);
  if (m > 1.41421356) { m = m * 0.5; e = e + 1.0; }
  let f = m - 1.0;
  let f2 = f * f;
  let p = 0.33333355 + f * (-0.25000852 + f * (0.19999826 + f * (-0.1662137 + f * (0.14227115
          + f * (-0.13202104 + f * (0.12620327 + f * -0.07362868))))));
  let y = fma(f2 * f, p, fma(-0.5, f2, f));
  return fma(e, LN2_HI, fma(e, LN2_LO, y));
}

// Kahan's: (u - 1) x / log(u) with u = exp(x) rounded cancels the rounding of u.
fn expm1_f(x: f32) -> f32 {
  if (isnan_f(x)) { return x; }
  if (x > 80.0) { return exp_f(x); }
  if (x < -17.5) { return -1.0; }
  let u = exp_f(x);
  if (u == 1.0) { return x; }
  let um1 = u - 1.0;
  if (um1 == -1.0) { return -1.0; }
  return um1 * (x / log_f(u));
}

fn log1p_f(x: f32) -> f32 {
  if (isnan_f(x)) { return x; }
  if (x == -1.0) { return -inf_f(); }
  if (x < -1.0) { return nan_f(); }
  if (isinf_f(x)) { return x; }
  let u = 1.0 + x;
  if (u == 1.0) { return x; }
  return log_f(u) * (x / (u - 1.0));
}

// ---- sin, cos, tan ----------------------------------------------------------------------------
struct Reduced { r: f32, q: u32 }

// bits of 2/pi, after 32 zero bits (arguments below 2^16 never reach them)
var<private> TWO_OVER_PI: array<u32, 8> = array<u32, 8>(0u, 0xa2f9836eu, 0x4e441529u, 0xfc2757d1u, 0xf534ddc0u, 0xdb629599u,
                                  0x3c439041u, 0xfe5163abu);

// |x| = q pi/2 + r, |r| <= pi/4 (a >= 0, finite)
fn trig_reduce(a: f32) -> Reduced {
  if (a < 65536.0) {  // Cody and Waite: pi/2 in three parts, the first exact times any j < 2^16
    let j = round(a * 0.63661977236758134);
    var r = fma(-j, 1.5703125, a);
    r = fma(-j, 4.837512969970703125e-4, r);
    r = fma(-j, 7.54978995489188216e-8, r);
    return Reduced(r, u32(j) & 3u);
  }
  // Payne and Hanek: a = m 2^e (m an integer of 24 bits); only the bits of 2/pi from 2^-(e-1) on
  // matter modulo 4, and 96 of them give the fraction to 64 bits.
  let bits = bitcast<u32>(a);
  let m = (bits & 0x7fffffu) | 0x800000u;
  let p0 = (bits >> 23u) - 150u + 30u;  // (e - 1) + 31: the window's first bit in the table
  let w = p0 / 32u;
  let s = p0 % 32u;
  var win: array<u32, 3>;
  for (var i = 0u; i < 3u; i++) {
    win[i] = select((TWO_OVER_PI[w + i] << s) | (TWO_OVER_PI[w + i + 1u] >> (32u - s)), TWO_OVER_PI[w + i], s == 0u);
  }
  let lo = l_mul32(m, win[2]);
  let mid = l_mul32(m, win[1]);
  let hi = l_mul32(m, win[0]);
  // R = m * win as 128 bits (words R0..R3); a 2/pi = R 2^-94
  let r1 = lo.y + mid.x;
  let c1 = select(0u, 1u, r1 < lo.y);
  let r2a = mid.y + hi.x;
  let r2 = r2a + c1;
  var q = (r2 >> 30u) & 3u;
  // the fraction, 64 bits: bits 93..30 of R
  var f = vec2<u32>((r1 << 2u) | (lo.x >> 30u), ((r2 & 0x3fffffffu) << 2u) | (r1 >> 30u));
  var neg = false;
  if ((f.y >> 31u) == 1u) {  // fraction >= 1/2: the nearest multiple is the next one
    q = (q + 1u) & 3u;
    f = neg_l(f);
    neg = true;
  }
  let frac = l_to_f32(f) * 5.42101086242752217e-20;  // 2^-64
  let r = frac * PIO2;
  return Reduced(select(r, -r, neg), q);
}

fn sin_poly(r: f32) -> f32 {
  let z = r * r;
  return fma(r * z, -1.6666654611e-1 + z * (8.3321608736e-3 + z * -1.9515295891e-4), r);
}

fn cos_poly(r: f32) -> f32 {
  let z = r * r;
  return fma(z * z, 4.166664568298827e-2 + z * (-1.388731625493765e-3 + z * 2.443315711809948e-5), 1.0 - 0.5 * z);
}

fn sin_f(x: f32) -> f32 {
  if (isnan_f(x) || isinf_f(x)) { return nan_f(); }
  let t = trig_reduce(abs_f(x));
  var v = select(sin_poly(t.r), cos_poly(t.r), (t.q & 1u) == 1u);
  if (t.q >= 2u) { v = -v; }
  return select(v, -v, (bitcast<u32>(x) >> 31u) == 1u);
}

fn cos_f(x: f32) -> f32 {
  if (isnan_f(x) || isinf_f(x)) { return nan_f(); }
  let t = trig_reduce(abs_f(x));
  let v = select(cos_poly(t.r), sin_poly(t.r), (t.q & 1u) == 1u);
  return select(v, -v, t.q == 1u || t.q == 2u);
}

fn tan_f(x: f32) -> f32 {
  if (isnan_f(x) || isinf_f(x)) { return nan_f(); }
  let t = trig_reduce(abs_f(x));
  let s = sin_poly(t.r);
  let c = cos_poly(t.r);
  let v = select(s / c, -c / s, (t.q & 1u) == 1u);
  return copysign_f(1.0, x) * v;
}

// ---- inverse trigonometric ----------------------------------------------------------------------
fn asin_poly(z: f32) -> f32 {
  return (((4.2163199048e-2 * z + 2.4181311049e-2) * z + 4.5470025998e-2) * z + 7.4953002686e-2) * z
         + 1.6666752422e-1;
}

// asin(a) for 0 <= a <= 1
fn asin_pos(a: f32) -> f32 {
  if (a > 0.5) {
    let z = 0.5 * (1.0 - a);
    let s = sqrt(z);
    return PIO2 - 2.0 * fma(asin_poly(z) * z, s, s);
  }
  let z = a * a;
  return fma(asin_poly(z) * z, a, a);
}

fn asin_f(x: f32) -> f32 {
  let a = abs_f(x);
  if (isnan_f(x) || a > 1.0) { return nan_f(); }
  return copysign_f(asin_pos(a), x);
}

fn acos_f(x: f32) -> f32 {
  if (isnan_f(x) || abs_f(x) > 1.0) { return nan_f(); }
  if (x < -0.5) { return PI - 2.0 * asin_pos(sqrt(0.5 * (1.0 + x))); }
  if (x > 0.5) { return 2.0 * asin_pos(sqrt(0.5 * (1.0 - x))); }
  return PIO2 - asin_pos(abs_f(x)) * sign_f(x);
}

fn atan_f(x: f32) -> f32 {
  if (isnan_f(x)) { return x; }
  var a = abs_f(x);
  var y = 0.0;
  if (a > 2.414213562373095) {
    y = PIO2;
    a = -1.0 / a;
  } else if (a > 0.4142135623730950) {
    y = PIO4;
    a = (a - 1.0) / (a + 1.0);
  }
  let z = a * a;
  y = y + fma((((8.05374449538e-2 * z - 1.38776856032e-1) * z + 1.99777106478e-1) * z - 3.33329491539e-1) * z,
              a, a);
  return copysign_f(y, x);
}

// ---- hyperbolic ----------------------------------------------------------------------------------
// exp(a) for a up to 89.4: exp(a/2) squared, so that sinh and cosh stay finite past exp's overflow
fn exp_big(a: f32) -> f32 {
  let z = exp_f(0.5 * a);
  return (0.5 * z) * z;
}

fn sinh_f(x: f32) -> f32 {
  if (isnan_f(x)) { return x; }
  let a = abs_f(x);
  var r: f32;
  if (a < 1.0) {
    let z = x * x;
    return fma(((2.03721912945e-4 * z + 8.33028376239e-3) * z + 1.66667160211e-1) * z, x, x);
  } else if (a > 88.0) {
    r = exp_big(a);
  } else {
    let e = exp_f(a);
    r = 0.5 * e - 0.5 / e;
  }
  return copysign_f(r, x);
}

fn cosh_f(x: f32) -> f32 {
  if (isnan_f(x)) { return x; }
  let a = abs_f(x);
  if (a > 88.0) { return exp_big(a); }
  let e = exp_f(a);
  return 0.5 * e + 0.5 / e;
}

fn tanh_f(x: f32) -> f32 {
  if (isnan_f(x)) { return x; }
  let a = abs_f(x);
  if (a < 2e-4) { return x; }  // x^3/3 is below half an ulp (and -0.0 stays -0.0)
  if (a < 0.625) {
    let x2 = x * x;
    return fma(x2 * x, -0.3333333 + x2 * (0.13333212 + x2 * (-0.053947456 + x2 * (0.021704003
               + x2 * (-0.00818467 + x2 * 0.002148991)))), x);
  }
  let e = exp_f(min(a + a, 40.0));
  return copysign_f(1.0 - 2.0 / (e + 1.0), x);
}

fn asinh_f(x: f32) -> f32 {
  if (isnan_f(x)) { return x; }
  let a = abs_f(x);
  var r: f32;
  if (a > 4096.0) {
    r = log_f(a) + LN2;
  } else if (a > 0.5) {
    r = log_f(a + sqrt(a * a + 1.0));
  } else {
    r = log1p_f(a + a * a / (1.0 + sqrt(1.0 + a * a)));
  }
  return copysign_f(r, x);
}

fn acosh_f(x: f32) -> f32 {
  if (isnan_f(x) || x < 1.0) { return nan_f(); }
  if (x > 4096.0) { return log_f(x) + LN2; }
  let t = x - 1.0;
  return log1p_f(t + sqrt(2.0 * t + t * t));
}

fn atanh_f(x: f32) -> f32 {
  let a = abs_f(x);
  if (isnan_f(x) || a > 1.0) { return nan_f(); }
  if (a == 1.0) { return copysign_f(inf_f(), x); }
  return copysign_f(0.5 * log1p_f((a + a) / (1.0 - a)), x);
}

// ---- erf and the activations ------------------------------------------------------------------------
fn erf_poly(z: f32) -> f32 {
  return 1.1283792 + z * (-0.37612638 + z * (0.112837836 + z * (-0.026865475 + z * (0.0052211387
         + z * (-0.00084854383 + z * (0.00011274735 + z * -9.689734e-06))))));
}

// erfc(a) = exp(-a^2) r(A/a + B) / a, 0.5 <= a <= 9.5
var<private> ERFC_R: array<f32, 16> = array<f32, 16>(0.41955826, -0.1426488, 0.032790907, 0.0040036137, -0.011734492,
    0.009845289, -0.006254019, 0.0030625276, -0.00024470987, -0.000529526, -0.000999067, 0.00053268956, 0.0017853777,
    -0.0012988555, -0.00042242248, 0.00039841523);

// erfc(a) for a >= 0.5, given a^2 exactly as hi + lo (exp amplifies any rounding of the square)
fn erfc_big(a: f32, a2_hi: f32, a2_lo: f32) -> f32 {
  let u = 1.0 / a;
  let t = fma(u, 1.0555556, -1.1111112);
  var r = ERFC_R[15];
  for (var i = 14; i >= 0; i--) { r = fma(r, t, ERFC_R[i]); }
  let e = exp_f(-a2_hi) * (1.0 - a2_lo);
  return e * r * u;
}

fn erf_f(x: f32) -> f32 {
  if (isnan_f(x)) { return x; }
  let a = abs_f(x);
  if (a < 1.0) { return x * erf_poly(x * x); }
  let b = min(a, 10.0);
  let b2 = b * b;
  return copysign_f(1.0 - erfc_big(b, b2, prod_err_f(b, b, b2)), x);
}

// 0.5 x erfc(-x / sqrt2): the polynomial where 1 + erf(t) stays above 0.47, erfc elsewhere,
// with t^2 = x^2 / 2 taken from x exactly rather than from the rounded t.
fn gelu_erf_f(x: f32) -> f32 {
  if (isnan_f(x)) { return x; }
  if (isinf_f(x)) { return select(x, nan_f(), x < 0.0); }  // -inf * 0, as the C library gives
  let t = x * 0.70710678118654752;
  let a = abs_f(t);
  let half_x = 0.5 * x;
  if (t >= -0.5 && t < 1.0) { return half_x * (1.0 + t * erf_poly(t * t)); }
  let xc = clamp(x, -20.0, 20.0);
  let x2 = xc * xc;
  let e = erfc_big(clamp(a, 0.5, 14.2), 0.5 * x2, 0.5 * prod_err_f(xc, xc, x2));
  return select(half_x * e, fma(-half_x, e, x), t > 0.0);
}

// 0.5 x (1 + tanh(y)) = x sigmoid(2y), with 2y = t x and its rounding folded back as exp(-lo) ~ 1 - lo
fn gelu_f(x: f32) -> f32 {
  if (isnan_f(x)) { return x; }
  let k = 1.5957691216057308;
  let kc = 1.5957691216057308 * 0.044715;
  let xc = clamp(x, -20.0, 20.0);
  let x2 = xc * xc;
  let x2_lo = prod_err_f(xc, xc, x2);
  let t = fma(kc, x2_lo, fma(kc, x2, k));
  let arg = t * xc;
  let arg_lo = prod_err_f(t, xc, arg);
  let e = exp_f(-arg) * (1.0 - arg_lo);
  return x / (1.0 + e);
}

fn sigmoid_f(x: f32) -> f32 {
  if (x < -87.0) { return exp_f(x); }  // 1 / (1 + e^-x) = e^x to f32 precision, subnormals kept
  return 1.0 / (1.0 + exp_f(-x));
}

fn silu_f(x: f32) -> f32 {
  if (x < -87.0) { return exp_times_f(x, x); }
  return x / (1.0 + exp_f(-x));
}

fn softplus_f(x: f32) -> f32 {
  if (x > 20.0) { return x; }
  return log1p_f(exp_f(x));
}

// ---- pow, with C99's special cases ---------------------------------------------------------------------
fn pow_f(x: f32, y: f32) -> f32 {
  if (y == 0.0 || x == 1.0) { return 1.0; }
  if (isnan_f(x) || isnan_f(y)) { return nan_f(); }
  let ay = abs_f(y);
  let y_int = !isinf_f(y) && floor(y) == y;
  let y_odd = y_int && ay < 16777216.0 && (u32(ay) & 1u) == 1u;
  let ax = abs_f(x);
  if (isinf_f(y)) {
    if (ax == 1.0) { return 1.0; }
    return select(0.0, inf_f(), (ax > 1.0) == (y > 0.0));
  }
  if (x == 0.0 || isinf_f(x)) {
    let big = (x == 0.0) == (y < 0.0);  // 0^-y and inf^y are infinite
    let m = select(0.0, inf_f(), big);
    return select(m, copysign_f(m, x), y_odd);
  }
  if (x < 0.0 && !y_int) { return nan_f(); }
  let l = log_f(ax);
  let t = y * l;
  let t_lo = select(0.0, prod_err_f(y, l, t), abs_f(t) < 128.0 && ay < 1e30);
  let r = exp_f(t) * (1.0 + t_lo);
  return select(r, -r, x < 0.0 && y_odd);
}
