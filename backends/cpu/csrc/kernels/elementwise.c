/* Elementwise kernels: unary, unary with parameters, binary, comparisons, casts,
 * where, strided copy and fill.
 *
 * Each (op, dtype) pair has one serial contiguous loop, generated from a scalar
 * expression. bf16/f16 loops convert blocks to f32 and reuse the f32 loop.
 * Strided views never get loops of their own: the strided drivers gather each
 * run of the innermost dim into a contiguous chunk when its stride is not 1
 * and call the same contiguous loop. Everything runs on the thread pool. */
#include <float.h>
#include <stdlib.h>

#include "runtime/internal.h"
#include "runtime/isa.h"

#define CD_WHEN_1(...) __VA_ARGS__
#define CD_WHEN_0(...)

/* ---- scalar expressions ------------------------------------------------------
 * Float ops take (T, S, x): T the compute type, S the libm suffix ("f" or none). */
#define UF_abs(T, S, x) fabs##S(x)
#define UF_neg(T, S, x) (-(x))
#define UF_sqr(T, S, x) ((x) * (x))
#define UF_sign(T, S, x) ((x) > 0 ? (T)1 : (x) < 0 ? (T)-1 : (x) == 0 ? (T)0 : (x)) /* NaN stays NaN */
#define UF_relu(T, S, x) ((x) <= 0 ? (T)0 : (x))
#define UF_ceil(T, S, x) ceil##S(x)
#define UF_floor(T, S, x) floor##S(x)
#define UF_round(T, S, x) nearbyint##S(x) /* half to even, as numpy and PyTorch */
#define UF_trunc(T, S, x) trunc##S(x)
#define UF_recip(T, S, x) ((T)1 / (x))
#define UF_sqrt(T, S, x) sqrt##S(x)
#define UF_rsqrt(T, S, x) ((T)1 / sqrt##S(x))
#define UF_exp(T, S, x) exp##S(x)
#define UF_expm1(T, S, x) expm1##S(x)
#define UF_log(T, S, x) log##S(x)
#define UF_log1p(T, S, x) log1p##S(x)
#define UF_sin(T, S, x) sin##S(x)
#define UF_cos(T, S, x) cos##S(x)
#define UF_tan(T, S, x) tan##S(x)
#define UF_asin(T, S, x) asin##S(x)
#define UF_acos(T, S, x) acos##S(x)
#define UF_atan(T, S, x) atan##S(x)
#define UF_sinh(T, S, x) sinh##S(x)
#define UF_cosh(T, S, x) cosh##S(x)
#define UF_tanh(T, S, x) tanh##S(x)
#define UF_asinh(T, S, x) asinh##S(x)
#define UF_acosh(T, S, x) acosh##S(x)
#define UF_atanh(T, S, x) atanh##S(x)
#define UF_erf(T, S, x) erf##S(x)
/* gelu: 0.5 x (1 + tanh(y)) written as x sigmoid(2y), and gelu_erf as
 * 0.5 x erfc(-x / sqrt2): the same functions without cancellation for x < 0.
 * Evaluated in double: the exponential amplifies any rounding of its argument
 * (the vector versions in templates/vmath_impl.h take care of that their own way). */
#define UF_gelu(T, S, x) \
    ((T)((double)(x) / (1 + exp(-1.5957691216057308 * ((double)(x) + 0.044715 * (double)(x) * (x) * (x))))))
#define UF_gelu_erf(T, S, x) ((T)(0.5 * (double)(x) * erfc(-(double)(x) * 0.7071067811865476)))
#define UF_silu(T, S, x) ((x) / ((T)1 + exp##S(-(x))))
#define UF_sigmoid(T, S, x) ((T)1 / ((T)1 + exp##S(-(x))))
#define UF_softplus(T, S, x) ((x) > (T)20 ? (x) : log1p##S(exp##S(x)))

/* Integer ops take (T, x); arithmetic wraps (the library is built with -fwrapv). */
#define UI_abs(T, x) ((x) < 0 ? (T)(-(x)) : (x))
#define UI_neg(T, x) ((T)(-(x)))
#define UI_sqr(T, x) ((T)((x) * (x)))
#define UI_sign(T, x) ((x) > 0 ? (T)1 : (x) < 0 ? (T)(-1) : (T)0)
#define UI_relu(T, x) ((x) > 0 ? (x) : (T)0)
#define UI_ceil(T, x) (x)
#define UI_floor(T, x) (x)
#define UI_round(T, x) (x)
#define UI_trunc(T, x) (x)

/* Parameterised float ops: p0, p1 already converted to T. */
#define PF_affine(T, S, x, p0, p1) ((x) * (p0) + (p1))
#define PF_powf(T, S, x, p0, p1) pow##S((x), (p0))
#define PF_elu(T, S, x, p0, p1) ((x) > 0 ? (x) : (p0) * expm1##S(x))
#define PF_leaky_relu(T, S, x, p0, p1) ((x) > 0 ? (x) : (p0) * (x))
/* min(max(x, p0), p1): p1 everywhere when p0 > p1 (PyTorch's and NumPy's rule); NaN propagates */
#define PF_clamp(T, S, x, p0, p1) ((x) < (p0) ? ((p0) > (p1) ? (p1) : (p0)) : (x) > (p1) ? (p1) : (x))

/* Binary float ops; maximum/minimum propagate NaN like numpy and PyTorch. */
#define BF_add(T, S, a, b) ((a) + (b))
#define BF_sub(T, S, a, b) ((a) - (b))
#define BF_mul(T, S, a, b) ((a) * (b))
#define BF_div(T, S, a, b) ((a) / (b))
#define BF_maximum(T, S, a, b) ((a) != (a) ? (a) : (a) > (b) ? (a) : (b))
#define BF_minimum(T, S, a, b) ((a) != (a) ? (a) : (a) < (b) ? (a) : (b))
#define BF_pow(T, S, a, b) pow##S((a), (b))
#define BF_fmod(T, S, a, b) fmod##S((a), (b))
/* Python's remainder: the sign follows the divisor. */
#define BF_rem(T, S, a, b) py_rem##S((a), (b))
static inline float py_remf(float a, float b) {
    float r = fmodf(a, b);
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
static inline double py_rem(double a, double b) {
    double r = fmod(a, b);
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

#define CMP_eq(a, b) ((a) == (b))
#define CMP_ne(a, b) ((a) != (b))
#define CMP_lt(a, b) ((a) < (b))
#define CMP_le(a, b) ((a) <= (b))
#define CMP_gt(a, b) ((a) > (b))
#define CMP_ge(a, b) ((a) >= (b))

/* ---- loops for f32 / f64 ----------------------------------------------------- */
#define GEN_UNARY_F(op, dt, S)                                           \
    static int u_##op##_##dt(int64_t n, const void *vx, void *vy) {      \
        const CD_T_##dt *x = vx;                                         \
        CD_T_##dt *y = vy;                                               \
        for (int64_t i = 0; i < n; i++) y[i] = UF_##op(CD_T_##dt, S, x[i]); \
        return 0;                                                        \
    }
#define GEN_PARAM_F(op, dt, S)                                                              \
    static int p_##op##_##dt(int64_t n, const void *vx, void *vy, double dp0, double dp1) { \
        const CD_T_##dt *x = vx;                                                            \
        CD_T_##dt *y = vy;                                                                  \
        const CD_T_##dt p0 = (CD_T_##dt)dp0, p1 = (CD_T_##dt)dp1;                           \
        CD_UNUSED(p1);                                                                      \
        for (int64_t i = 0; i < n; i++) y[i] = PF_##op(CD_T_##dt, S, x[i], p0, p1);        \
        return 0;                                                                           \
    }
#define GEN_BINARY_F(op, dt, S)                                                     \
    static int b_##op##_##dt(int64_t n, const void *va, const void *vb, void *vo) { \
        const CD_T_##dt *a = va, *b = vb;                                           \
        CD_T_##dt *o = vo;                                                          \
        for (int64_t i = 0; i < n; i++) o[i] = BF_##op(CD_T_##dt, S, a[i], b[i]);  \
        return 0;                                                                   \
    }
#define GEN_CMP(op, dt)                                                             \
    static int c_##op##_##dt(int64_t n, const void *va, const void *vb, void *vo) { \
        const CD_T_##dt *a = va, *b = vb;                                           \
        uint8_t *o = vo;                                                            \
        for (int64_t i = 0; i < n; i++) o[i] = (uint8_t)CMP_##op(a[i], b[i]);      \
        return 0;                                                                   \
    }

/* ---- loops for integers -------------------------------------------------------- */
#define GEN_UNARY_I(op, dt)                                          \
    static int u_##op##_##dt(int64_t n, const void *vx, void *vy) {  \
        const CD_T_##dt *x = vx;                                     \
        CD_T_##dt *y = vy;                                           \
        for (int64_t i = 0; i < n; i++) y[i] = UI_##op(CD_T_##dt, x[i]); \
        return 0;                                                    \
    }

#define CD_LO_u8 0
#define CD_HI_u8 UINT8_MAX
#define CD_LO_u32 0
#define CD_HI_u32 UINT32_MAX
#define CD_LO_i16 INT16_MIN
#define CD_HI_i16 INT16_MAX
#define CD_LO_i32 INT32_MIN
#define CD_HI_i32 INT32_MAX
#define CD_LO_i64 INT64_MIN
#define CD_HI_i64 INT64_MAX
#define CD_SIGNED_u8 0
#define CD_SIGNED_u32 0
#define CD_SIGNED_i16 1
#define CD_SIGNED_i32 1
#define CD_SIGNED_i64 1
#define CD_SAT(dt, v) CD_SAT_CAST(CD_T_##dt, CD_LO_##dt, CD_HI_##dt, (v))

/* Integer parameter ops: affine stays in integer arithmetic when both parameters
 * are whole numbers (exact for any i64), else goes through double and saturates. */
static int whole(double v) { return v == v && fabs(v) < 9.2e18 && v == (double)(int64_t)v; }

#define GEN_PARAM_I(dt)                                                                          \
    static int p_affine_##dt(int64_t n, const void *vx, void *vy, double p0, double p1) {        \
        const CD_T_##dt *x = vx;                                                                 \
        CD_T_##dt *y = vy;                                                                       \
        if (whole(p0) && whole(p1)) {                                                            \
            const CD_T_##dt m = (CD_T_##dt)(int64_t)p0, a = (CD_T_##dt)(int64_t)p1;              \
            for (int64_t i = 0; i < n; i++) y[i] = (CD_T_##dt)(x[i] * m + a);                    \
        } else {                                                                                 \
            for (int64_t i = 0; i < n; i++) y[i] = CD_SAT(dt, (double)x[i] * p0 + p1);           \
        }                                                                                        \
        return 0;                                                                                \
    }                                                                                            \
    static int p_clamp_##dt(int64_t n, const void *vx, void *vy, double p0, double p1) {         \
        const CD_T_##dt *x = vx;                                                                 \
        CD_T_##dt *y = vy;                                                                       \
        const CD_T_##dt hi = CD_SAT(dt, floor(p1)), lo = CD_MIN(CD_SAT(dt, ceil(p0)), hi);      \
        for (int64_t i = 0; i < n; i++) y[i] = x[i] < lo ? lo : x[i] > hi ? hi : x[i];          \
        return 0;                                                                                \
    }

/* Integer binary ops. Division by zero is an error (as in PyTorch), not a crash;
 * the most negative value divided by -1 wraps instead of trapping. */
static int int_pow_error(void) { return cd_fail("integers to negative integer powers are not allowed"); }
static int div_zero_error(void) { return cd_fail("integer division by zero"); }

/* Integer binary expressions over a, b of dtype dt. */
#define IB_add(dt, a, b) ((CD_T_##dt)((a) + (b)))
#define IB_sub(dt, a, b) ((CD_T_##dt)((a) - (b)))
#define IB_mul(dt, a, b) ((CD_T_##dt)((a) * (b)))
#define IB_maximum(dt, a, b) ((a) > (b) ? (a) : (b))
#define IB_minimum(dt, a, b) ((a) < (b) ? (a) : (b))
#define IB_div(dt, a, b) \
    (CD_SIGNED_##dt && (b) == (CD_T_##dt)(-1) ? (CD_T_##dt)(-(a)) : (CD_T_##dt)((a) / (b)))
#define IB_fmod(dt, a, b) (CD_SIGNED_##dt && (b) == (CD_T_##dt)(-1) ? (CD_T_##dt)0 : (CD_T_##dt)((a) % (b)))
#define IB_rem(dt, a, b) py_rem_##dt((a), (b))

/* checks_zero: the op divides, so a zero divisor is an error. */
#define GEN_BIN_I(op, dt, checks_zero)                                                   \
    static int b_##op##_##dt(int64_t n, const void *va, const void *vb, void *vo) {      \
        const CD_T_##dt *a = va, *b = vb;                                                \
        CD_T_##dt *o = vo;                                                               \
        for (int64_t i = 0; i < n; i++) {                                                \
            if (checks_zero && b[i] == 0) return div_zero_error();                       \
            o[i] = IB_##op(dt, a[i], b[i]);                                              \
        }                                                                                \
        return 0;                                                                        \
    }

#define GEN_BINARY_I(dt)                                                                        \
    static inline CD_T_##dt py_rem_##dt(CD_T_##dt a, CD_T_##dt b) {                            \
        CD_T_##dt r = IB_fmod(dt, a, b);                                                        \
        return (r != 0 && ((r < 0) != (b < 0))) ? (CD_T_##dt)(r + b) : r;                       \
    }                                                                                           \
    GEN_BIN_I(add, dt, 0) GEN_BIN_I(sub, dt, 0) GEN_BIN_I(mul, dt, 0) GEN_BIN_I(maximum, dt, 0) \
    GEN_BIN_I(minimum, dt, 0) GEN_BIN_I(div, dt, 1) GEN_BIN_I(fmod, dt, 1) GEN_BIN_I(rem, dt, 1) \
    static int b_pow_##dt(int64_t n, const void *va, const void *vb, void *vo) {                \
        const CD_T_##dt *a = va, *b = vb;                                                       \
        CD_T_##dt *o = vo;                                                                      \
        for (int64_t i = 0; i < n; i++) {                                                       \
            if (b[i] < 0) return int_pow_error();                                               \
            CD_T_##dt base = a[i], r = 1;                                                       \
            for (uint64_t e = (uint64_t)b[i]; e; e >>= 1) {                                     \
                if (e & 1) r = (CD_T_##dt)(r * base);                                           \
                base = (CD_T_##dt)(base * base);                                                \
            }                                                                                   \
            o[i] = r;                                                                           \
        }                                                                                       \
        return 0;                                                                               \
    }

/* The portable loops (the table is filled in below, once they are generated). */
static cd_unary_fn UNARY[CD_UNARY_COUNT][CD_NUM_DTYPES];

/* The loop of a unary (op, dtype): the instruction set's f32 loop where it has one. */
static inline cd_unary_fn unary_loop(int op, int dtype) {
    const cd_unary_fn fast = dtype == CD_f32 ? cd_ops.unary_f32[op] : NULL;
    return fast ? fast : UNARY[op][dtype];
}

cd_unary_fn cd_unary_loop(int op, int dtype) { return unary_loop(op, dtype); }

/* ---- bf16 / f16 through f32 blocks ------------------------------------------ */
#define HALF_BLOCK 256

/* The f32 loop of a unary op, or of a parametrized one with its parameters. */
typedef struct {
    cd_unary_fn unary;
    cd_param_fn param;
    double p0, p1;
} f32_loop;

static int half_map(const f32_loop *f, cd_half_to_f32 up, cd_f32_to_half down, int64_t n, const void *vx, void *vy) {
    const uint16_t *x = vx;
    uint16_t *y = vy;
    float bx[HALF_BLOCK], by[HALF_BLOCK];
    for (int64_t i = 0; i < n; i += HALF_BLOCK) {
        int64_t m = CD_MIN(HALF_BLOCK, n - i);
        up(m, x + i, bx);
        int rc = f->unary ? f->unary(m, bx, by) : f->param(m, bx, by, f->p0, f->p1);
        if (rc) return rc;
        down(m, by, y + i);
    }
    return 0;
}

/* down == NULL: the f32 loop writes u8 (comparisons) straight to the output. */
static int half_binary(cd_binary_fn f, cd_half_to_f32 up, cd_f32_to_half down, int64_t n, const void *va,
                       const void *vb, void *vo) {
    const uint16_t *a = va, *b = vb;
    float ba[HALF_BLOCK], bb[HALF_BLOCK], bo[HALF_BLOCK];
    for (int64_t i = 0; i < n; i += HALF_BLOCK) {
        int64_t m = CD_MIN(HALF_BLOCK, n - i);
        up(m, a + i, ba);
        up(m, b + i, bb);
        int rc;
        if (down) {
            rc = f(m, ba, bb, bo);
            if (!rc) down(m, bo, (uint16_t *)vo + i);
        } else {
            rc = f(m, ba, bb, (uint8_t *)vo + i);
        }
        if (rc) return rc;
    }
    return 0;
}

/* Through the f32 table entry, so an instruction-set specific f32 loop serves the halves too. */
#define GEN_UNARY_H(op, dt)                                                   \
    static int u_##op##_##dt(int64_t n, const void *x, void *y) {             \
        const f32_loop f = {unary_loop(CD_UNARY_##op, CD_f32), NULL, 0, 0};   \
        return half_map(&f, cd_ops.dt##_to_f32, cd_ops.f32_to_##dt, n, x, y); \
    }
#define GEN_PARAM_H(op, dt)                                                             \
    static int p_##op##_##dt(int64_t n, const void *x, void *y, double p0, double p1) { \
        const f32_loop f = {NULL, p_##op##_f32, p0, p1};                                \
        return half_map(&f, cd_ops.dt##_to_f32, cd_ops.f32_to_##dt, n, x, y);           \
    }
#define GEN_BINARY_H(op, dt)                                                                  \
    static int b_##op##_##dt(int64_t n, const void *a, const void *b, void *o) {              \
        return half_binary(b_##op##_f32, cd_ops.dt##_to_f32, cd_ops.f32_to_##dt, n, a, b, o); \
    }
#define GEN_CMP_H(op, dt)                                                        \
    static int c_##op##_##dt(int64_t n, const void *a, const void *b, void *o) { \
        return half_binary(c_##op##_f32, cd_ops.dt##_to_f32, NULL, n, a, b, o);  \
    }

/* ---- instantiate ---------------------------------------------------------------- */
#define INST_UNARY(op, ints)                                                                  \
    GEN_UNARY_F(op, f32, f) GEN_UNARY_F(op, f64, ) GEN_UNARY_H(op, bf16) GEN_UNARY_H(op, f16) \
    CD_WHEN_##ints(GEN_UNARY_I(op, u8) GEN_UNARY_I(op, u32) GEN_UNARY_I(op, i16)              \
                   GEN_UNARY_I(op, i32) GEN_UNARY_I(op, i64))
CD_UNARY_OPS(INST_UNARY)

#define INST_PARAM(op, ints) \
    GEN_PARAM_F(op, f32, f) GEN_PARAM_F(op, f64, ) GEN_PARAM_H(op, bf16) GEN_PARAM_H(op, f16)
CD_PARAM_OPS(INST_PARAM)
CD_INT_DTYPES(GEN_PARAM_I)

#define INST_BINARY(op, ints) \
    GEN_BINARY_F(op, f32, f) GEN_BINARY_F(op, f64, ) GEN_BINARY_H(op, bf16) GEN_BINARY_H(op, f16)
CD_BINARY_OPS(INST_BINARY)
CD_INT_DTYPES(GEN_BINARY_I)

#define INST_CMP(op, ints)                                                                  \
    GEN_CMP(op, f32) GEN_CMP(op, f64) GEN_CMP_H(op, bf16) GEN_CMP_H(op, f16) GEN_CMP(op, u8) \
    GEN_CMP(op, u32) GEN_CMP(op, i16) GEN_CMP(op, i32) GEN_CMP(op, i64)
CD_CMP_OPS(INST_CMP)

/* ---- tables ------------------------------------------------------------------------ */
#define ROW_FLOATS(pfx, op) [CD_f32] = pfx##op##_f32, [CD_f64] = pfx##op##_f64, \
                            [CD_bf16] = pfx##op##_bf16, [CD_f16] = pfx##op##_f16
#define ROW_INTS(pfx, op) [CD_u8] = pfx##op##_u8, [CD_u32] = pfx##op##_u32, [CD_i16] = pfx##op##_i16, \
                          [CD_i32] = pfx##op##_i32, [CD_i64] = pfx##op##_i64

#define TAB_UNARY(op, ints) [CD_UNARY_##op] = {ROW_FLOATS(u_, op) CD_WHEN_##ints(, ROW_INTS(u_, op))},
static cd_unary_fn UNARY[CD_UNARY_COUNT][CD_NUM_DTYPES] = {CD_UNARY_OPS(TAB_UNARY)};

static cd_param_fn PARAM[CD_PARAM_COUNT][CD_NUM_DTYPES] = {
    [CD_PARAM_affine] = {ROW_FLOATS(p_, affine), ROW_INTS(p_, affine)},
    [CD_PARAM_powf] = {ROW_FLOATS(p_, powf)},
    [CD_PARAM_elu] = {ROW_FLOATS(p_, elu)},
    [CD_PARAM_leaky_relu] = {ROW_FLOATS(p_, leaky_relu)},
    [CD_PARAM_clamp] = {ROW_FLOATS(p_, clamp), ROW_INTS(p_, clamp)},
};

#define TAB_BINARY(op, ints) [CD_BINARY_##op] = {ROW_FLOATS(b_, op), ROW_INTS(b_, op)},
static cd_binary_fn BINARY[CD_BINARY_COUNT][CD_NUM_DTYPES] = {CD_BINARY_OPS(TAB_BINARY)};

#define TAB_CMP(op, ints) [CD_CMP_##op] = {ROW_FLOATS(c_, op), ROW_INTS(c_, op)},
static cd_binary_fn CMP[CD_CMP_COUNT][CD_NUM_DTYPES] = {CD_CMP_OPS(TAB_CMP)};

/* ---- casts --------------------------------------------------------------------------
 * Values are loaded to their compute kind (I integer, F float, D double) and
 * converted to the destination storage type. Floats saturate into integers
 * (NaN -> 0); f64 and integers reach bf16/f16 through a round-to-odd f32 so
 * the result is rounded once. */
static inline float f64_to_f32_odd(double d) {
    float f = (float)d;
    if (f == f && (double)f != d && fabsf(f) != INFINITY) {
        uint32_t bits;
        memcpy(&bits, &f, 4);
        if (fabs((double)f) > fabs(d)) bits -= 1; /* step toward zero */
        bits |= 1u;                                /* sticky bit */
        memcpy(&f, &bits, 4);
    }
    return f;
}

#define CD_K_u8 I
#define CD_K_u32 I
#define CD_K_i16 I
#define CD_K_i32 I
#define CD_K_i64 I
#define CD_K_bf16 F
#define CD_K_f16 F
#define CD_K_f32 F
#define CD_K_f64 D
#define TO_INT(dt, kind, v) TO_INT_##kind(dt, v)
#define TO_INT_I(dt, v) ((CD_T_##dt)(v))
#define TO_INT_F(dt, v) CD_SAT(dt, (double)(v))
#define TO_INT_D(dt, v) CD_SAT(dt, (v))
#define TO_f32(kind, v) ((float)(v))
#define TO_f64(kind, v) ((double)(v))
#define TO_HALF(dt, kind, v) TO_HALF_##kind(dt, v)
#define TO_HALF_I(dt, v) cd_f32_to_##dt(f64_to_f32_odd((double)(v)))
#define TO_HALF_F(dt, v) cd_f32_to_##dt(v)
#define TO_HALF_D(dt, v) cd_f32_to_##dt(f64_to_f32_odd(v))
#define CONVERT_u8(k, v) TO_INT(u8, k, v)
#define CONVERT_u32(k, v) TO_INT(u32, k, v)
#define CONVERT_i16(k, v) TO_INT(i16, k, v)
#define CONVERT_i32(k, v) TO_INT(i32, k, v)
#define CONVERT_i64(k, v) TO_INT(i64, k, v)
#define CONVERT_bf16(k, v) TO_HALF(bf16, k, v)
#define CONVERT_f16(k, v) TO_HALF(f16, k, v)
#define CONVERT_f32(k, v) TO_f32(k, v)
#define CONVERT_f64(k, v) TO_f64(k, v)
#define CONVERT(dst, kind, v) CONVERT2(dst, kind, v)
#define CONVERT2(dst, kind, v) CONVERT_##dst(kind, v)

/* f32 <-> bf16/f16 run on the vector converters of the instruction set in use
 * (F16C, AVX512-BF16), which round exactly as the scalar code does; the
 * conditions are constants, so each cast keeps one of the two bodies. */
#define GEN_CAST(src, dst)                                                                      \
    static int cast_##src##_##dst(int64_t n, const void *vx, void *vy) {                        \
        const CD_T_##src *x = vx;                                                               \
        CD_T_##dst *y = vy;                                                                     \
        if (CD_##src == CD_f32 && CD_##dst == CD_bf16) cd_ops.f32_to_bf16(n, vx, vy);           \
        else if (CD_##src == CD_f32 && CD_##dst == CD_f16) cd_ops.f32_to_f16(n, vx, vy);        \
        else if (CD_##src == CD_bf16 && CD_##dst == CD_f32) cd_ops.bf16_to_f32(n, vx, vy);      \
        else if (CD_##src == CD_f16 && CD_##dst == CD_f32) cd_ops.f16_to_f32(n, vx, vy);        \
        else                                                                                    \
            for (int64_t i = 0; i < n; i++) y[i] = CONVERT(dst, CD_K_##src, CD_LD_##src(x[i])); \
        return 0;                                                                               \
    }
/* M(src, dst) for every destination dtype. */
#define FOR_EACH_DST(M, src) \
    M(src, u8) M(src, u32) M(src, i16) M(src, i32) M(src, i64) M(src, bf16) M(src, f16) M(src, f32) M(src, f64)
#define GEN_CAST_FROM(src) FOR_EACH_DST(GEN_CAST, src)
CD_ALL_DTYPES(GEN_CAST_FROM)

#define CAST_ROW(src) [CD_##src] = {ROW_FLOATS(cast_, src), ROW_INTS(cast_, src)},
static cd_unary_fn CAST[CD_NUM_DTYPES][CD_NUM_DTYPES] = {CD_ALL_DTYPES(CAST_ROW)};

/* ---- contiguous drivers ------------------------------------------------------------- */
enum { K_UNARY, K_PARAM, K_BINARY };

/* The loop of a unary, parameterised or binary op (K_* says which). */
typedef union {
    cd_unary_fn unary;
    cd_param_fn param;
    cd_binary_fn binary;
} any_loop;

typedef struct {
    int kind;
    any_loop f;
    const char *a, *b;
    char *out;
    int isa, isb, iso;
    double p0, p1;
} contig_ctx;

static int contig_task(void *vctx, int64_t begin, int64_t end) {
    const contig_ctx *c = vctx;
    int64_t n = end - begin;
    const char *a = c->a + begin * c->isa;
    char *o = c->out + begin * c->iso;
    switch (c->kind) {
    case K_UNARY: return c->f.unary(n, a, o);
    case K_PARAM: return c->f.param(n, a, o, c->p0, c->p1);
    default: return c->f.binary(n, a, c->b + begin * c->isb, o);
    }
}

static int run_contig(contig_ctx *c, int64_t n) {
    if (n < CD_GRAIN) return contig_task(c, 0, n);
    return cd_parallel_for(n, CD_GRAIN, contig_task, c);
}

/* Per (op, dtype) entry points that match cd_unary_fn and friends. A C function
 * pointer cannot carry the op, so each pair gets a tiny wrapper. */

/* M(op, dtype) for the float dtypes, and the integer ones when ints is 1. */
#define FOR_DTYPES(M, op, ints)                          \
    M(op, f32) M(op, f64) M(op, bf16) M(op, f16)         \
    CD_WHEN_##ints(M(op, u8) M(op, u32) M(op, i16) M(op, i32) M(op, i64))
#define WRAP_UNARY(op, dt)                                                                      \
    static int w_u_##op##_##dt(int64_t n, const void *x, void *y) {                             \
        contig_ctx c = {.kind = K_UNARY, .f.unary = unary_loop(CD_UNARY_##op, CD_##dt), .a = x, \
                        .out = y, .isa = sizeof(CD_T_##dt), .iso = sizeof(CD_T_##dt)};          \
        return run_contig(&c, n);                                                               \
    }
#define WRAP_UNARY_ALL(op, ints) FOR_DTYPES(WRAP_UNARY, op, ints)
CD_UNARY_OPS(WRAP_UNARY_ALL)
#define TAB_W_UNARY(op, ints) [CD_UNARY_##op] = {ROW_FLOATS(w_u_, op) CD_WHEN_##ints(, ROW_INTS(w_u_, op))},
static const cd_unary_fn W_UNARY[CD_UNARY_COUNT][CD_NUM_DTYPES] = {CD_UNARY_OPS(TAB_W_UNARY)};

#define WRAP_PARAM(op, dt)                                                                        \
    static int w_p_##op##_##dt(int64_t n, const void *x, void *y, double p0, double p1) {         \
        contig_ctx c = {.kind = K_PARAM, .f.param = PARAM[CD_PARAM_##op][CD_##dt], .a = x, .out = y, \
                        .isa = sizeof(CD_T_##dt), .iso = sizeof(CD_T_##dt), .p0 = p0, .p1 = p1};  \
        return run_contig(&c, n);                                                                 \
    }
#define WRAP_PARAM_ALL(op, ints) FOR_DTYPES(WRAP_PARAM, op, ints)
CD_PARAM_OPS(WRAP_PARAM_ALL)
#define TAB_W_PARAM(op, ints) [CD_PARAM_##op] = {ROW_FLOATS(w_p_, op) CD_WHEN_##ints(, ROW_INTS(w_p_, op))},
static const cd_param_fn W_PARAM[CD_PARAM_COUNT][CD_NUM_DTYPES] = {CD_PARAM_OPS(TAB_W_PARAM)};

#define WRAP_BINARY(tab, pfx, code, op, dt, osz)                                                   \
    static int w_##pfx##_##op##_##dt(int64_t n, const void *a, const void *b, void *o) {              \
        contig_ctx c = {.kind = K_BINARY, .f.binary = tab[code][CD_##dt], .a = a, .b = b, .out = o,    \
                        .isa = sizeof(CD_T_##dt), .isb = sizeof(CD_T_##dt), .iso = osz};              \
        return run_contig(&c, n);                                                                     \
    }
#define WRAP_B(op, dt) WRAP_BINARY(BINARY, b, CD_BINARY_##op, op, dt, sizeof(CD_T_##dt))
#define WRAP_C(op, dt) WRAP_BINARY(CMP, c, CD_CMP_##op, op, dt, 1)
#define WRAP_B_ALL(op, ints) FOR_DTYPES(WRAP_B, op, 1)
#define WRAP_C_ALL(op, ints) FOR_DTYPES(WRAP_C, op, 1)
CD_BINARY_OPS(WRAP_B_ALL)
CD_CMP_OPS(WRAP_C_ALL)
#define TAB_W_BINARY(op, ints) [CD_BINARY_##op] = {ROW_FLOATS(w_b_, op), ROW_INTS(w_b_, op)},
#define TAB_W_CMP(op, ints) [CD_CMP_##op] = {ROW_FLOATS(w_c_, op), ROW_INTS(w_c_, op)},
static const cd_binary_fn W_BINARY[CD_BINARY_COUNT][CD_NUM_DTYPES] = {CD_BINARY_OPS(TAB_W_BINARY)};
static const cd_binary_fn W_CMP[CD_CMP_COUNT][CD_NUM_DTYPES] = {CD_CMP_OPS(TAB_W_CMP)};

#define WRAP_CAST(src, dst)                                                                       \
    static int w_cast_##src##_##dst(int64_t n, const void *x, void *y) {                          \
        contig_ctx c = {.kind = K_UNARY, .f.unary = cast_##src##_##dst, .a = x, .out = y,         \
                        .isa = sizeof(CD_T_##src), .iso = sizeof(CD_T_##dst)};                    \
        return run_contig(&c, n);                                                                 \
    }
#define WRAP_CAST_FROM(src) FOR_EACH_DST(WRAP_CAST, src)
CD_ALL_DTYPES(WRAP_CAST_FROM)
#define W_CAST_ROW(src) [CD_##src] = {ROW_FLOATS(w_cast_, src), ROW_INTS(w_cast_, src)},
static const cd_unary_fn W_CAST[CD_NUM_DTYPES][CD_NUM_DTYPES] = {CD_ALL_DTYPES(W_CAST_ROW)};

static int valid(int32_t op, int32_t count, int32_t dtype) {
    return op >= 0 && op < count && dtype >= 0 && dtype < CD_NUM_DTYPES;
}

cd_unary_fn cd_unary_kernel(int32_t op, int32_t dtype) {
    return valid(op, CD_UNARY_COUNT, dtype) ? W_UNARY[op][dtype] : NULL;
}
cd_param_fn cd_param_kernel(int32_t op, int32_t dtype) {
    return valid(op, CD_PARAM_COUNT, dtype) ? W_PARAM[op][dtype] : NULL;
}
cd_binary_fn cd_binary_kernel(int32_t op, int32_t dtype) {
    return valid(op, CD_BINARY_COUNT, dtype) ? W_BINARY[op][dtype] : NULL;
}
cd_binary_fn cd_cmp_kernel(int32_t op, int32_t dtype) {
    return valid(op, CD_CMP_COUNT, dtype) ? W_CMP[op][dtype] : NULL;
}
cd_unary_fn cd_cast_kernel(int32_t src, int32_t dst) {
    return valid(src, CD_NUM_DTYPES, dst) && dst >= 0 && dst < CD_NUM_DTYPES ? W_CAST[src][dst] : NULL;
}

/* ---- strided drivers --------------------------------------------------------------
 * Operands 0..nin-1 are inputs, operand nin is the contiguous output. Each run
 * of the innermost dim is cut to CD_CHUNK elements; inputs whose stride is not
 * 1 are gathered into a stack buffer first. */
typedef struct {
    cd_iter it;
    int nin;
    int isz[3], osz;
    const char *in[3];
    char *out;
    int kind;
    any_loop f;
    double p0, p1;
} strided_ctx;

static int strided_task(void *vctx, int64_t begin, int64_t end) {
    const strided_ctx *c = vctx;
    const cd_iter *it = &c->it;
    const int inner = it->ndim - 1;
    char buf[3][CD_CHUNK * 8];
    cd_pos pos;
    cd_iter_seek(it, &pos, begin);
    for (int64_t cur = begin; cur < end;) {
        int64_t n = CD_MIN(CD_MIN(it->shape[inner] - pos.idx[inner], end - cur), CD_CHUNK);
        const char *p[3];
        for (int k = 0; k < c->nin; k++) {
            const char *src = c->in[k] + pos.off[k] * c->isz[k];
            int64_t s = it->strides[k][inner];
            if (s == 1) {
                p[k] = src;
            } else {
                cd_gather_run(c->isz[k], n, src, s, buf[k]);
                p[k] = buf[k];
            }
        }
        char *o = c->out + cur * c->osz;
        int rc;
        switch (c->kind) {
        case K_UNARY: rc = c->f.unary(n, p[0], o); break;
        case K_PARAM: rc = c->f.param(n, p[0], o, c->p0, c->p1); break;
        default: rc = c->f.binary(n, p[0], p[1], o); break;
        }
        if (rc) return rc;
        cur += n;
        cd_iter_advance(it, &pos, n);
    }
    return 0;
}

static int run_strided(strided_ctx *c, const int64_t *lay) {
    if (cd_iter_init(&c->it, lay, c->nin, 0)) return -1;
    int64_t n = c->it.numel;
    if (n < CD_GRAIN) return n ? strided_task(c, 0, n) : 0;
    return cd_parallel_for(n, CD_GRAIN, strided_task, c);
}

static int unsupported(const char *what, const char *op, int32_t dtype) {
    return cd_fail("%s %s is not implemented for dtype %s", what, op, cd_dtype_name(dtype));
}

int cd_unary_strided(int32_t op, int32_t dtype, const int64_t *lay, const void *x, void *y) {
    if (!valid(op, CD_UNARY_COUNT, dtype) || !UNARY[op][dtype]) return unsupported("unary op", "", dtype);
    strided_ctx c = {.nin = 1, .isz = {cd_dtype_size(dtype)}, .osz = cd_dtype_size(dtype), .in = {x},
                     .out = y, .kind = K_UNARY, .f.unary = unary_loop(op, dtype)};
    return run_strided(&c, lay);
}

int cd_param_strided(int32_t op, int32_t dtype, const int64_t *lay, const void *x, void *y, double p0,
                     double p1) {
    if (!valid(op, CD_PARAM_COUNT, dtype) || !PARAM[op][dtype]) return unsupported("unary op", "", dtype);
    strided_ctx c = {.nin = 1, .isz = {cd_dtype_size(dtype)}, .osz = cd_dtype_size(dtype), .in = {x},
                     .out = y, .kind = K_PARAM, .f.param = PARAM[op][dtype], .p0 = p0, .p1 = p1};
    return run_strided(&c, lay);
}

static int binary_like(cd_binary_fn f, int32_t dtype, int osz, const int64_t *lay, const void *a,
                       const void *b, void *out) {
    int isz = cd_dtype_size(dtype);
    strided_ctx c = {.nin = 2, .isz = {isz, isz}, .osz = osz, .in = {a, b}, .out = out,
                     .kind = K_BINARY, .f.binary = f};
    return run_strided(&c, lay);
}

int cd_binary_strided(int32_t op, int32_t dtype, const int64_t *lay, const void *a, const void *b,
                      void *out) {
    if (!valid(op, CD_BINARY_COUNT, dtype) || !BINARY[op][dtype]) return unsupported("binary op", "", dtype);
    return binary_like(BINARY[op][dtype], dtype, cd_dtype_size(dtype), lay, a, b, out);
}

int cd_cmp_strided(int32_t op, int32_t dtype, const int64_t *lay, const void *a, const void *b, void *out) {
    if (!valid(op, CD_CMP_COUNT, dtype) || !CMP[op][dtype]) return unsupported("comparison", "", dtype);
    return binary_like(CMP[op][dtype], dtype, 1, lay, a, b, out);
}

int cd_cast_strided(int32_t src, int32_t dst, const int64_t *lay, const void *x, void *y) {
    if (!valid(src, CD_NUM_DTYPES, dst) || dst < 0 || dst >= CD_NUM_DTYPES) return cd_fail("bad dtype");
    strided_ctx c = {.nin = 1, .isz = {cd_dtype_size(src)}, .osz = cd_dtype_size(dst), .in = {x}, .out = y,
                     .kind = K_UNARY, .f.unary = CAST[src][dst]};
    return run_strided(&c, lay);
}

/* ---- where ----------------------------------------------------------------------- */
typedef struct {
    cd_iter it;
    int isz;
    const uint8_t *cond;
    const char *t, *f;
    char *out;
} where_ctx;

static int where_task(void *vctx, int64_t begin, int64_t end) {
    const where_ctx *c = vctx;
    const cd_iter *it = &c->it;
    const int inner = it->ndim - 1, isz = c->isz;
    const int64_t sc = it->strides[0][inner], st = it->strides[1][inner], sf = it->strides[2][inner];
    cd_pos pos;
    cd_iter_seek(it, &pos, begin);
    for (int64_t cur = begin; cur < end;) {
        int64_t n = CD_MIN(it->shape[inner] - pos.idx[inner], end - cur);
        const uint8_t *cp = c->cond + pos.off[0];
        const char *tp = c->t + pos.off[1] * isz, *fp = c->f + pos.off[2] * isz;
        char *o = c->out + cur * isz;
        for (int64_t i = 0; i < n; i++)
            memcpy(o + i * isz, cp[i * sc] ? tp + i * st * isz : fp + i * sf * isz, (size_t)isz);
        cur += n;
        cd_iter_advance(it, &pos, n);
    }
    return 0;
}

int cd_where(int32_t dtype, const int64_t *lay, const uint8_t *cond, const void *t, const void *f, void *out) {
    if (dtype < 0 || dtype >= CD_NUM_DTYPES) return cd_fail("bad dtype %d", dtype);
    where_ctx c = {.isz = cd_dtype_size(dtype), .cond = cond, .t = t, .f = f, .out = out};
    if (cd_iter_init(&c.it, lay, 3, 0)) return -1;
    return cd_parallel_for(c.it.numel, CD_GRAIN, where_task, &c);
}

/* ---- copy and fill --------------------------------------------------------------- */
typedef struct {
    cd_iter it;
    int isz;
    const char *src;
    char *dst;
    const char *value;
} copy_ctx;

static int copy_task(void *vctx, int64_t begin, int64_t end) {
    const copy_ctx *c = vctx;
    const cd_iter *it = &c->it;
    const int inner = it->ndim - 1, isz = c->isz;
    const int64_t ss = it->strides[0][inner], ds = it->strides[1][inner];
    cd_pos pos;
    cd_iter_seek(it, &pos, begin);
    for (int64_t cur = begin; cur < end;) {
        int64_t n = CD_MIN(it->shape[inner] - pos.idx[inner], end - cur);
        const char *s = c->src + pos.off[0] * isz;
        char *d = c->dst + pos.off[1] * isz;
        if (ss == 1 && ds == 1) memcpy(d, s, (size_t)(n * isz));
        else if (ds == 1) cd_gather_run(isz, n, s, ss, d);
        else if (ss == 1) cd_scatter_run(isz, n, s, d, ds);
        else for (int64_t i = 0; i < n; i++) memcpy(d + i * ds * isz, s + i * ss * isz, (size_t)isz);
        cur += n;
        cd_iter_advance(it, &pos, n);
    }
    return 0;
}

static int check_itemsize(int32_t isz) {
    return (isz == 1 || isz == 2 || isz == 4 || isz == 8) ? 0 : cd_fail("bad item size %d", isz);
}

int cd_copy(int32_t itemsize, const int64_t *lay, const void *src, void *dst) {
    if (check_itemsize(itemsize)) return -1;
    copy_ctx c = {.isz = itemsize, .src = src, .dst = dst};
    if (cd_iter_init(&c.it, lay, 2, 0)) return -1;
    return cd_parallel_for(c.it.numel, CD_GRAIN * 4, copy_task, &c);
}

/* n contiguous items of isz bytes set to *value: a typed loop that vectorizes (a memcpy per item
 * does not: 12x slower on a 64k-float ConstantOfShape). */
static void fill_run(int isz, char *d, int64_t n, const void *value) {
#define FILL_WORDS(W)                                                                                    \
    do {                                                                                                 \
        W v, *w = (W *)(void *)d;                                                                        \
        memcpy(&v, value, sizeof v);                                                                     \
        for (int64_t i = 0; i < n; i++) w[i] = v;                                                        \
    } while (0)
    switch (isz) { /* 1, 2, 4 or 8 (check_itemsize) */
    case 1: memset(d, *(const unsigned char *)value, (size_t)n); break;
    case 2: FILL_WORDS(uint16_t); break;
    case 4: FILL_WORDS(uint32_t); break;
    default: FILL_WORDS(uint64_t); break;
    }
#undef FILL_WORDS
}

static int fill_task(void *vctx, int64_t begin, int64_t end) {
    const copy_ctx *c = vctx;
    const cd_iter *it = &c->it;
    const int inner = it->ndim - 1, isz = c->isz;
    const int64_t ds = it->strides[0][inner];
    cd_pos pos;
    cd_iter_seek(it, &pos, begin);
    for (int64_t cur = begin; cur < end;) {
        int64_t n = CD_MIN(it->shape[inner] - pos.idx[inner], end - cur);
        char *d = c->dst + pos.off[0] * isz;
        if (ds == 1) fill_run(isz, d, n, c->value);
        else for (int64_t i = 0; i < n; i++) memcpy(d + i * ds * isz, c->value, (size_t)isz);
        cur += n;
        cd_iter_advance(it, &pos, n);
    }
    return 0;
}

int cd_fill(int32_t itemsize, const int64_t *lay, void *dst, const void *value) {
    if (check_itemsize(itemsize)) return -1;
    copy_ctx c = {.isz = itemsize, .dst = dst, .value = value};
    if (cd_iter_init(&c.it, lay, 1, 0)) return -1;
    return cd_parallel_for(c.it.numel, CD_GRAIN * 4, fill_task, &c);
}
