// Scalar functions of one element, shared by the elementwise, reduction and
// fused kernels: the float math of each unary op (f32 or f64, through the
// CUDA math library: no fast-math intrinsics), integer arithmetic that wraps
// (through unsigned types: signed overflow is undefined in C++), and the
// saturating float -> integer conversion of casts.
#pragma once

#include "common.cuh"
#include "ops.cuh"

// f32 and f64 overloads of the C math functions, so templates call one name.
#define MATH1(name)                                                              \
    __device__ __forceinline__ float m_##name(float x) { return name##f(x); }  \
    __device__ __forceinline__ double m_##name(double x) { return name(x); }
MATH1(exp) MATH1(expm1) MATH1(log) MATH1(log1p) MATH1(sin) MATH1(cos) MATH1(tan) MATH1(asin) MATH1(acos)
MATH1(atan) MATH1(sinh) MATH1(cosh) MATH1(tanh) MATH1(asinh) MATH1(acosh) MATH1(atanh) MATH1(erf) MATH1(erfc)
MATH1(sqrt) MATH1(ceil) MATH1(floor) MATH1(rint) MATH1(trunc) MATH1(fabs)
#undef MATH1
__device__ __forceinline__ float m_pow(float a, float b) { return powf(a, b); }
__device__ __forceinline__ double m_pow(double a, double b) { return pow(a, b); }
__device__ __forceinline__ float m_fmod(float a, float b) { return fmodf(a, b); }
__device__ __forceinline__ double m_fmod(double a, double b) { return fmod(a, b); }

// ---- floats ------------------------------------------------------------------------------------
template <typename C>
__device__ __forceinline__ C f_sign(C x) {
    return x > C(0) ? C(1) : x < C(0) ? C(-1) : (x == C(0) ? C(0) : x);  // +0 for +-0, NaN stays
}

// gelu (tanh form): x / 2 * (1 + tanh(y)) = x / (1 + exp(-2y)), no cancellation of 1 + tanh(y)
// for x < 0. The exponential amplifies any rounding of its argument, so f32 carries the
// argument's rounding error (exact through fma) into a first-order correction.
__device__ __forceinline__ double f_gelu(double x) {
    return x / (1.0 + exp(-1.5957691216057308 * (x + 0.044715 * x * x * x)));
}
__device__ __forceinline__ float f_gelu(float x) {
    if (x != x) return x;
    const float k = 1.5957691216057308f, kc = 1.5957691216057308f * 0.044715f;
    float xc = fminf(fmaxf(x, -20.0f), 20.0f);
    float x2 = xc * xc, x2_lo = fmaf(xc, xc, -x2);
    float t = fmaf(kc, x2_lo, fmaf(kc, x2, k));  // k (1 + 0.044715 x^2)
    float arg = t * xc, arg_lo = fmaf(t, xc, -arg);
    return x / (1.0f + expf(-arg) * (1.0f - arg_lo));
}

// gelu_erf: x / 2 * erfc(-x / sqrt 2), in double (the rounding of -x / sqrt 2 is amplified as above)
template <typename C>
__device__ __forceinline__ C f_gelu_erf(C x) {
    return (C)(0.5 * (double)x * erfc(-(double)x * 0.7071067811865476));
}

// Every float unary op: inlined where op is a constant (the switch folds to one case), called
// through unary_float_any where it is not.
template <typename C>
__device__ __forceinline__ C unary_float(int op, C x) {
    switch (op) {
        case UNARY_abs: return m_fabs(x);
        case UNARY_neg: return -x;
        case UNARY_sign: return f_sign(x);
        case UNARY_ceil: return m_ceil(x);
        case UNARY_floor: return m_floor(x);
        case UNARY_round: return m_rint(x);  // half to even
        case UNARY_trunc: return m_trunc(x);
        case UNARY_sqr: return x * x;
        case UNARY_relu: return x != x ? x : (x > C(0) ? x : C(0));
        case UNARY_recip: return C(1) / x;
        case UNARY_sqrt: return m_sqrt(x);
        case UNARY_exp: return m_exp(x);
        case UNARY_expm1: return m_expm1(x);
        case UNARY_log: return m_log(x);
        case UNARY_log1p: return m_log1p(x);
        case UNARY_sin: return m_sin(x);
        case UNARY_cos: return m_cos(x);
        case UNARY_tan: return m_tan(x);
        case UNARY_asin: return m_asin(x);
        case UNARY_acos: return m_acos(x);
        case UNARY_atan: return m_atan(x);
        case UNARY_sinh: return m_sinh(x);
        case UNARY_cosh: return m_cosh(x);
        case UNARY_tanh: return m_tanh(x);
        case UNARY_asinh: return m_asinh(x);
        case UNARY_acosh: return m_acosh(x);
        case UNARY_atanh: return m_atanh(x);
        case UNARY_erf: return m_erf(x);
        case UNARY_gelu: return f_gelu(x);
        case UNARY_gelu_erf: return f_gelu_erf(x);
        case UNARY_rsqrt: return C(1) / m_sqrt(x);
        case UNARY_sigmoid: {  // below 0 as e / (1 + e), e = exp(x) small: 1 / (1 + exp(-x)) adds two
            C e = m_exp(-m_fabs(x));  // roundings to exp's error in a large value (3.1 ulp on an H200)
            return x < C(0) ? e / (C(1) + e) : C(1) / (C(1) + e);
        }
        case UNARY_silu: return x / (C(1) + m_exp(-x));
        case UNARY_softplus: return x > C(20) ? x : mx(x, C(0)) + m_log1p(m_exp(-m_fabs(x)));
        default: return x;
    }
}

template <typename C>
__device__ __noinline__ C unary_float_any(int op, C x) {
    return unary_float(op, x);
}

// Python's remainder: the sign of the divisor (a zero takes the divisor's sign, as numpy's)
template <typename C>
__device__ __forceinline__ C f_rem(C a, C b) {
    C r = m_fmod(a, b);
    if (r != C(0)) return ((r < C(0)) != (b < C(0))) ? r + b : r;
    return b < C(0) ? -C(0) : C(0);
}

template <typename C>
__device__ C binary_float(int op, C a, C b) {
    switch (op) {
        case BINARY_add: return a + b;
        case BINARY_sub: return a - b;
        case BINARY_mul: return a * b;
        case BINARY_div: return a / b;
        case BINARY_maximum: return a != a ? a : (b != b ? b : (a > b ? a : b));
        case BINARY_minimum: return a != a ? a : (b != b ? b : (a < b ? a : b));
        case BINARY_pow: return m_pow(a, b);
        case BINARY_rem: return f_rem(a, b);
        case BINARY_fmod: return m_fmod(a, b);
        default: return a;
    }
}

// ---- integers: wrapping arithmetic through the unsigned type of the same width ---------------------
template <typename T> struct Wide { typedef u32 type; };  // u8, i16, u32, i32: 32-bit arithmetic wraps
template <> struct Wide<i64> { typedef u64 type; };

template <typename T> __device__ __forceinline__ T w_add(T a, T b) {
    typedef typename Wide<T>::type W;
    return (T)(W(a) + W(b));
}
template <typename T> __device__ __forceinline__ T w_sub(T a, T b) {
    typedef typename Wide<T>::type W;
    return (T)(W(a) - W(b));
}
template <typename T> __device__ __forceinline__ T w_mul(T a, T b) {
    typedef typename Wide<T>::type W;
    return (T)(W(a) * W(b));
}
template <typename T> __device__ __forceinline__ T w_neg(T a) { return w_sub(T(0), a); }

// Truncating division; the most negative value divided by -1 wraps to itself.
template <typename T> __device__ __forceinline__ T i_div(T a, T b) {
    if (IsSigned<T>::value && b == T(-1)) return w_neg(a);
    return (T)(a / b);
}
template <typename T> __device__ __forceinline__ T i_fmod(T a, T b) {  // the sign of a
    if (IsSigned<T>::value && b == T(-1)) return T(0);
    return (T)(a % b);
}
template <typename T> __device__ __forceinline__ T i_rem(T a, T b) {  // the sign of b
    T r = i_fmod(a, b);
    return (r != T(0) && negative(r) != negative(b)) ? w_add(r, b) : r;
}
template <typename T> __device__ T i_pow(T a, T e) {
    T r = T(1);
    while (e != T(0)) {
        if (e & T(1)) r = w_mul(r, a);
        a = w_mul(a, a);
        e = (T)(e >> 1);
    }
    return r;
}

template <typename T>
__device__ T unary_int(int op, T x) {
    switch (op) {
        case UNARY_abs: return negative(x) ? w_neg(x) : x;
        case UNARY_neg: return w_neg(x);
        case UNARY_sign: return x > T(0) ? T(1) : negative(x) ? T(-1) : T(0);
        case UNARY_sqr: return w_mul(x, x);
        case UNARY_relu: return x > T(0) ? x : T(0);
        default: return x;  // ceil, floor, round, trunc: an integer is its own
    }
}

// b == 0 (division, remainder) or b < 0 (power) are reported by the caller before this runs.
template <typename T>
__device__ T binary_int(int op, T a, T b) {
    switch (op) {
        case BINARY_add: return w_add(a, b);
        case BINARY_sub: return w_sub(a, b);
        case BINARY_mul: return w_mul(a, b);
        case BINARY_div: return i_div(a, b);
        case BINARY_maximum: return a > b ? a : b;
        case BINARY_minimum: return a < b ? a : b;
        case BINARY_pow: return i_pow(a, b);
        case BINARY_rem: return i_rem(a, b);
        case BINARY_fmod: return i_fmod(a, b);
        default: return a;
    }
}

// ---- conversions --------------------------------------------------------------------------------
template <typename T> struct Limits;
template <> struct Limits<u8> { static __device__ __forceinline__ double lo() { return 0.0; } static __device__ __forceinline__ double hi() { return 255.0; } };
template <> struct Limits<u32> { static __device__ __forceinline__ double lo() { return 0.0; } static __device__ __forceinline__ double hi() { return 4294967295.0; } };
template <> struct Limits<i16> { static __device__ __forceinline__ double lo() { return -32768.0; } static __device__ __forceinline__ double hi() { return 32767.0; } };
template <> struct Limits<i32> { static __device__ __forceinline__ double lo() { return -2147483648.0; } static __device__ __forceinline__ double hi() { return 2147483647.0; } };
template <> struct Limits<i64> { static __device__ __forceinline__ double lo() { return -9223372036854775808.0; } static __device__ __forceinline__ double hi() { return 9223372036854775807.0; } };

// A float into an integer type: truncated toward zero, saturated, NaN as 0 (Rust's `as`).
template <typename T>
__device__ __forceinline__ T saturate(double v) {
    if (v != v) return T(0);
    if (v <= Limits<T>::lo()) return (T)(i64)Limits<T>::lo();
    if (v >= Limits<T>::hi()) {  // 2^63 - 1 is no double: hi() rounds to 2^63
        if (sizeof(T) == 8) return (T)9223372036854775807LL;
        return (T)(i64)Limits<T>::hi();
    }
    return (T)(i64)v;
}

// Any dtype to any other: floats through their own precision (f64 -> f16/bf16 rounds once),
// integers wrap into narrower ones, floats saturate into integers.
template <typename D, typename S>
__device__ __forceinline__ D convert(S x) {
    if constexpr (IsFloat<D>::value && IsFloat<S>::value) {
        if constexpr (IsSame<S, f64>::value && IsSame<D, f16>::value) return __double2half(x);
        else if constexpr (IsSame<S, f64>::value && IsSame<D, bf16>::value) return __double2bfloat16(x);
        else return store<D>((typename Acc<D>::type)load<S>(x));
    } else if constexpr (IsFloat<D>::value) {
        return store<D>((typename Acc<D>::type)x);  // i64 -> f16/bf16 goes through f32
    } else if constexpr (IsFloat<S>::value) {
        return saturate<D>((double)load<S>(x));
    } else {
        return (D)x;  // two's complement wrap
    }
}
