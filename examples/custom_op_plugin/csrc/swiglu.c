/* The swiglu kernel: out = a * sigmoid(beta * a) * b, elementwise.
 *
 * This is a plain C library (no Python headers), compiled by setup.py at
 * `pip install` and called from Python through ctypes (native.py). The core
 * hands a kernel its inputs as (storage, layout) pairs: the layout's strides
 * are in elements and may be anything (a transpose, a slice with step, zero
 * for a broadcast dim, negative for a flip), so the kernel walks them instead
 * of assuming contiguous memory. The output is always a fresh contiguous
 * buffer, and the core never calls a kernel with an empty output.
 */
#include <math.h>
#include <stdint.h>

#define SWIGLU_MAX_DIMS 32 /* candle_api.layout.MAX_DIMS */

/* Computed in double and rounded once: the f32 result is within an ulp of exact. */
static inline double swiglu1(double a, double b, double beta)
{
    return a / (1.0 + exp(-beta * a)) * b;
}

/* One function per dtype. `a` and `b` point at the first element of each view
 * (the layout's offset already applied); sa and sb are their strides. The
 * last dim is the inner loop; the other dims advance like an odometer. */
#define DEFINE_SWIGLU(NAME, T)                                                          \
    int NAME(int32_t ndim, const int64_t *shape, const T *a, const int64_t *sa,         \
             const T *b, const int64_t *sb, T *out, double beta)                        \
    {                                                                                   \
        int64_t idx[SWIGLU_MAX_DIMS] = {0};                                             \
        int64_t rows = 1, n, sa_in, sb_in, oa = 0, ob = 0, o = 0;                       \
        if (ndim < 0 || ndim > SWIGLU_MAX_DIMS)                                         \
            return -1;                                                                  \
        if (ndim == 0) { /* a 0-d tensor: one element */                                \
            out[0] = (T)swiglu1(a[0], b[0], beta);                                      \
            return 0;                                                                   \
        }                                                                               \
        for (int32_t d = 0; d < ndim - 1; d++)                                          \
            rows *= shape[d];                                                           \
        n = shape[ndim - 1];                                                            \
        sa_in = sa[ndim - 1];                                                           \
        sb_in = sb[ndim - 1];                                                           \
        for (int64_t r = 0; r < rows; r++) {                                            \
            for (int64_t i = 0; i < n; i++)                                             \
                out[o++] = (T)swiglu1(a[oa + i * sa_in], b[ob + i * sb_in], beta);      \
            for (int32_t d = ndim - 2; d >= 0; d--) { /* next row */                    \
                oa += sa[d];                                                            \
                ob += sb[d];                                                            \
                if (++idx[d] < shape[d])                                                \
                    break;                                                              \
                oa -= sa[d] * shape[d];                                                 \
                ob -= sb[d] * shape[d];                                                 \
                idx[d] = 0;                                                             \
            }                                                                           \
        }                                                                               \
        return 0;                                                                       \
    }

DEFINE_SWIGLU(swiglu_f32, float)
DEFINE_SWIGLU(swiglu_f64, double)
