/* Fused optimizer updates, in place over contiguous parameter, gradient and
 * state buffers: one pass over memory instead of a dozen elementwise ops. */
#include "runtime/internal.h"

typedef struct {
    int dtype;
    char *p, *m, *v;
    const char *g;
    double lr, b1, b2, eps, wd, c1, c2, momentum, dampening;
    int nesterov, first;
} optim_ctx;

/* AdamW (decoupled weight decay); c1, c2 are the bias corrections 1 - beta^t. */
#define GEN_ADAMW(T)                                                                         \
    static void adamw_##T(const optim_ctx *o, int64_t i0, int64_t i1) {                      \
        T *p = (T *)o->p, *m = (T *)o->m, *v = (T *)o->v;                                    \
        const T *g = (const T *)o->g;                                                        \
        const T lr = (T)o->lr, b1 = (T)o->b1, b2 = (T)o->b2, eps = (T)o->eps;                \
        const T decay = (T)(1.0 - o->lr * o->wd), s1 = (T)(1.0 / o->c1), s2 = (T)(1.0 / o->c2); \
        _Pragma("omp simd")                                                                  \
        for (int64_t i = i0; i < i1; i++) {                                                  \
            const T mi = b1 * m[i] + (1 - b1) * g[i], vi = b2 * v[i] + (1 - b2) * g[i] * g[i]; \
            m[i] = mi;                                                                       \
            v[i] = vi;                                                                       \
            p[i] = p[i] * decay - lr * (mi * s1) / (sqrt(vi * s2) + eps);                    \
        }                                                                                    \
    }
GEN_ADAMW(float)
GEN_ADAMW(double)

/* SGD with optional momentum (m is the buffer; first: the buffer starts as g),
 * dampening, Nesterov and L2 weight decay, as torch.optim.SGD. */
#define GEN_SGD(T)                                                                           \
    static void sgd_##T(const optim_ctx *o, int64_t i0, int64_t i1) {                        \
        T *p = (T *)o->p, *m = (T *)o->m;                                                    \
        const T *g = (const T *)o->g;                                                        \
        const T lr = (T)o->lr, wd = (T)o->wd, mu = (T)o->momentum, damp = (T)(1.0 - o->dampening); \
        for (int64_t i = i0; i < i1; i++) {                                                  \
            T d = g[i] + wd * p[i];                                                          \
            if (m) {                                                                         \
                const T buf = o->first ? d : mu * m[i] + damp * d;                           \
                m[i] = buf;                                                                  \
                d = o->nesterov ? d + mu * buf : buf;                                        \
            }                                                                                \
            p[i] -= lr * d;                                                                  \
        }                                                                                    \
    }
GEN_SGD(float)
GEN_SGD(double)

static int adamw_task(void *vctx, int64_t begin, int64_t end) {
    const optim_ctx *o = vctx;
    if (o->dtype == CD_f32) adamw_float(o, begin, end);
    else adamw_double(o, begin, end);
    return 0;
}

static int sgd_task(void *vctx, int64_t begin, int64_t end) {
    const optim_ctx *o = vctx;
    if (o->dtype == CD_f32) sgd_float(o, begin, end);
    else sgd_double(o, begin, end);
    return 0;
}

static int check_dtype(int32_t dtype) {
    if (dtype != CD_f32 && dtype != CD_f64)
        return cd_fail("fused optimizer updates take f32 or f64, got %s", cd_dtype_name(dtype));
    return 0;
}

int cd_adamw(int32_t dtype, int64_t n, void *p, const void *g, void *m, void *v, const double *hp) {
    if (check_dtype(dtype)) return -1;
    optim_ctx o = {.dtype = dtype, .p = p, .g = g, .m = m, .v = v, .lr = hp[0], .b1 = hp[1], .b2 = hp[2],
                   .eps = hp[3], .wd = hp[4], .c1 = hp[5], .c2 = hp[6]};
    return n > 0 ? cd_parallel_for(n, CD_GRAIN, adamw_task, &o) : 0;
}

int cd_sgd(int32_t dtype, int64_t n, void *p, const void *g, void *m, const double *hp, int32_t first,
           int32_t nesterov) {
    if (check_dtype(dtype)) return -1;
    optim_ctx o = {.dtype = dtype, .p = p, .g = g, .m = m, .lr = hp[0], .wd = hp[1], .momentum = hp[2],
                   .dampening = hp[3], .first = first, .nesterov = nesterov};
    return n > 0 ? cd_parallel_for(n, CD_GRAIN, sgd_task, &o) : 0;
}
