// Elementwise kernels: unary ops, ops with two parameters (affine, powf,
// elu, leaky_relu, clamp), binary ops, comparisons, where and cast.
//
// One kernel per (family, dtype), the op a runtime code (ops.cuh): the
// branch is the same for every thread, and it keeps the fatbins small.
// Inputs are read through a Strided layout (rank 0: contiguous); outputs
// are contiguous. map_elements (common.cuh) moves 16-byte packs when every
// operand is contiguous and aligned, ops of mixed widths (compare, where,
// cast) in packs the widest operand's 16 bytes set. f16 and bf16 compute in
// f32 and round once.
#include "scalar.cuh"

// The common float ops get a loop each, their code alone in it; the others share a loop that calls
// unary_float_any. One loop for every op had each element branch into a switch over all of them,
// inlined (15,000 lines of PTX for unary_f32), and exp f32 moved 54% of the copy bandwidth on an
// H200, gelu bf16 39%.
#define UNARY_INLINED(M) \
    M(abs) M(neg) M(sqr) M(relu) M(recip) M(sqrt) M(rsqrt) M(exp) M(log) M(tanh) M(erf) M(gelu) M(gelu_erf) M(sigmoid) M(silu)

template <typename T>
__device__ void unary_impl(T* out, const T* x, i64 n, int op, const Strided<1>& lx) {
    if constexpr (IsFloat<T>::value) {
        typedef typename Acc<T>::type C;
        auto each = [&](auto f) { map_elements(n, lx, [&](i64, T v) { return store<T>(f(load(v))); }, out, x); };
        switch (op) {
#define INLINED(name) \
    case UNARY_##name: return each([](C v) { return unary_float(UNARY_##name, v); });
            UNARY_INLINED(INLINED)
#undef INLINED
            default: return each([&](C v) { return unary_float_any(op, v); });
        }
    } else {
        map_elements(n, lx, [&](i64, T v) { return unary_int(op, v); }, out, x);
    }
}
#define UNARY(T) \
    KERNEL(unary_##T, T* out, const T* x, i64 n, i32 op, Strided<1> lx) { unary_impl<T>(out, x, n, op, lx); }
FOR_ALL(UNARY)

// Parameter ops. Floats compute in their compute type with p0, p1 converted
// to it. Integers: affine in wrapping integer arithmetic when both parameters
// are whole (whole != 0, with q0 and q1 their values), else through double and
// saturated; clamp between the integer bounds q0 <= q1 the host worked out.
template <typename T>
__device__ void param_impl(T* out, const T* x, i64 n, int op, double p0, double p1, i64 q0, i64 q1, i32 whole,
                           const Strided<1>& lx) {
    typedef typename Acc<T>::type C;
    const C c0 = (C)p0, c1 = (C)p1;
    map_elements(n, lx, [&](i64, T xv) -> T {
        if constexpr (IsFloat<T>::value) {
            C v = load(xv), r = v;
            switch (op) {
                case PARAM_affine: r = v * c0 + c1; break;
                case PARAM_powf: r = m_pow(v, c0); break;
                case PARAM_elu: r = v > C(0) ? v : c0 * m_expm1(v); break;
                case PARAM_leaky_relu: r = v > C(0) ? v : c0 * v; break;
                case PARAM_clamp: r = v < c0 ? (c0 > c1 ? c1 : c0) : v > c1 ? c1 : v; break;
            }
            return store<T>(r);
        } else {
            T v = xv;
            if (op == PARAM_affine) return whole ? w_add(w_mul(v, (T)q0), (T)q1) : saturate<T>((double)v * p0 + p1);
            return v < (T)q0 ? (T)q0 : v > (T)q1 ? (T)q1 : v;  // clamp
        }
    }, out, x);
}
#define PARAM(T)                                                                                  \
    KERNEL(param_##T, T* out, const T* x, i64 n, i32 op, f64 p0, f64 p1, i64 q0, i64 q1, i32 whole, \
           Strided<1> lx) {                                                                       \
        param_impl<T>(out, x, n, op, p0, p1, q0, q1, whole, lx);                                  \
    }
FOR_ALL(PARAM)

// Binary ops on two inputs of one shape (broadcasting is zero strides).
// Integer division, remainder or fmod by zero and negative integer powers
// are reported in err (the result there is 0).
template <typename T>
__device__ void binary_impl(T* out, const T* a, const T* b, i64 n, int op, i64* err, const Strided<2>& l) {
    map_elements(n, l, [&](i64 i, T x, T y) -> T {
        if constexpr (IsFloat<T>::value) {
            return store<T>(binary_float(op, load(x), load(y)));
        } else {
            if ((op == BINARY_div || op == BINARY_rem || op == BINARY_fmod) && y == T(0)) {
                report(err, ERR_DIV_ZERO, i);
                return T(0);
            }
            if (op == BINARY_pow && negative(y)) {
                report(err, ERR_NEG_POW, i);
                return T(0);
            }
            return binary_int(op, x, y);
        }
    }, out, a, b);
}
#define BINARY(T)                                                                                  \
    KERNEL(binary_##T, T* out, const T* a, const T* b, i64 n, i32 op, i64* err, Strided<2> l) {   \
        binary_impl<T>(out, a, b, n, op, err, l);                                                  \
    }
FOR_ALL(BINARY)

template <typename T>
__device__ void compare_impl(u8* out, const T* a, const T* b, i64 n, int op, const Strided<2>& l) {
    map_elements(n, l, [&](i64, T av, T bv) -> u8 {
        typename Acc<T>::type x = load(av), y = load(bv);
        bool r = false;
        switch (op) {
            case CMP_eq: r = x == y; break;
            case CMP_ne: r = x != y; break;
            case CMP_lt: r = x < y; break;
            case CMP_le: r = x <= y; break;
            case CMP_gt: r = x > y; break;
            case CMP_ge: r = x >= y; break;
        }
        return r ? 1 : 0;
    }, out, a, b);
}
#define COMPARE(T) \
    KERNEL(compare_##T, u8* out, const T* a, const T* b, i64 n, i32 op, Strided<2> l) { compare_impl<T>(out, a, b, n, op, l); }
FOR_ALL(COMPARE)

// where moves bits: one kernel per element width. The condition is u8 (nonzero picks t).
template <typename W>
__device__ void where_impl(W* out, const u8* c, const W* t, const W* f, i64 n, const Strided<3>& l) {
    map_elements(n, l, [](i64, u8 cv, W tv, W fv) { return cv ? tv : fv; }, out, c, t, f);
}
#define WHERE(W, name) \
    KERNEL(where_##name, W* out, const u8* c, const W* t, const W* f, i64 n, Strided<3> l) { where_impl<W>(out, c, t, f, n, l); }
WHERE(u8, 8) WHERE(u16, 16) WHERE(u32, 32) WHERE(u64, 64)

// cast from S to the dtype coded dst (ops.cuh DT_*).
template <typename D, typename S>
__device__ __forceinline__ void cast_to(void* out, const S* x, i64 n, const Strided<1>& lx) {
    map_elements(n, lx, [](i64, S v) { return convert<D, S>(v); }, (D*)out, x);
}
template <typename S>
__device__ void cast_impl(void* out, const S* x, i64 n, int dst, const Strided<1>& lx) {
    switch (dst) {
        case DT_u8: cast_to<u8>(out, x, n, lx); break;
        case DT_u32: cast_to<u32>(out, x, n, lx); break;
        case DT_i16: cast_to<i16>(out, x, n, lx); break;
        case DT_i32: cast_to<i32>(out, x, n, lx); break;
        case DT_i64: cast_to<i64>(out, x, n, lx); break;
        case DT_bf16: cast_to<bf16>(out, x, n, lx); break;
        case DT_f16: cast_to<f16>(out, x, n, lx); break;
        case DT_f32: cast_to<f32>(out, x, n, lx); break;
        case DT_f64: cast_to<f64>(out, x, n, lx); break;
    }
}
#define CAST(S) \
    KERNEL(cast_##S, void* out, const S* x, i64 n, i32 dst, Strided<1> lx) { cast_impl<S>(out, x, n, dst, lx); }
FOR_ALL(CAST)
