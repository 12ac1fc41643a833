/* Batched matrix multiplication with arbitrary strides on both operands.
 *
 * The float path is a BLIS-style GEMM: B is packed into KC x NR panels, A into
 * MC x KC blocks of MR-row panels, and a register-tiled microkernel computes
 * MR x NR tiles of C. Packing reads any strides, so transposed, sliced or
 * broadcast operands never need a copy and never raise. bf16/f16 are converted
 * while packing and accumulate in f32. The K loop is never split across
 * threads, so results do not depend on the thread count.
 *
 * Integers use a plain loop accumulating in 64 bits. */
#include <pthread.h>
#include <stdlib.h>

#include "gemm.h"
#include "internal.h"

/* ---- packing --------------------------------------------------------------------
 * pack_a: rows [i0, i0+mc) x cols [p0, p0+kc) of A into panels of MR rows, each
 * panel k-major (MR values per k), zero-padded past mc. pack_b: the same for
 * B's kc x nc block into panels of NR columns. */
#define GEN_PACK(dt, T)                                                                           \
    static void pack_a_##dt(const void *va, int64_t rs, int64_t cs, int64_t mc, int64_t kc,       \
                            int mr_full, void *vdst) {                                            \
        const CD_T_##dt *a = va;                                                                  \
        T *dst = vdst;                                                                            \
        for (int64_t i = 0; i < mc; i += mr_full) {                                               \
            int64_t mr = CD_MIN(mr_full, mc - i);                                                 \
            for (int64_t p = 0; p < kc; p++) {                                                    \
                const CD_T_##dt *src = a + i * rs + p * cs;                                       \
                int64_t r = 0;                                                                    \
                for (; r < mr; r++) dst[r] = (T)CD_LD_##dt(src[r * rs]);                          \
                for (; r < mr_full; r++) dst[r] = 0;                                              \
                dst += mr_full;                                                                   \
            }                                                                                     \
        }                                                                                         \
    }                                                                                             \
    static void pack_b_##dt(const void *vb, int64_t rs, int64_t cs, int64_t kc, int64_t nc,       \
                            int nr_full, void *vdst) {                                            \
        const CD_T_##dt *b = vb;                                                                  \
        T *dst = vdst;                                                                            \
        for (int64_t j = 0; j < nc; j += nr_full) {                                               \
            int64_t nr = CD_MIN(nr_full, nc - j);                                                 \
            for (int64_t p = 0; p < kc; p++) {                                                    \
                const CD_T_##dt *src = b + p * rs + j * cs;                                       \
                int64_t c = 0;                                                                    \
                if (cs == 1)                                                                      \
                    for (; c < nr; c++) dst[c] = (T)CD_LD_##dt(src[c]);                           \
                else                                                                              \
                    for (; c < nr; c++) dst[c] = (T)CD_LD_##dt(src[c * cs]);                      \
                for (; c < nr_full; c++) dst[c] = 0;                                              \
                dst += nr_full;                                                                   \
            }                                                                                     \
        }                                                                                         \
    }
GEN_PACK(f32, float)
GEN_PACK(bf16, float)
GEN_PACK(f16, float)
GEN_PACK(f64, double)

/* ---- driver --------------------------------------------------------------------- */
typedef void (*pack_fn)(const void *src, int64_t rs, int64_t cs, int64_t r, int64_t c, int full, void *dst);

typedef struct {
    int esz;                  /* bytes per packed element (4 or 8) */
    int isz;                  /* bytes per source element */
    pack_fn pack_a, pack_b;
    const cd_gemm_kernel *k;
} gemm_type;

typedef struct {
    const gemm_type *t;
    const char *a, *b;
    int64_t ars, acs, brs, bcs;
    int64_t m, n, kc, nc;     /* current block: all rows of A, kc x nc of B */
    int64_t p0, j0;
    char *c;                  /* packed-element typed output (f32 or f64) */
    int64_t ldc;
    const char *bpack;
    int accumulate;
} block_ctx;

/* One task: rows [i*MC, ...) of the current (p0, j0) block. */
static int ic_task(void *vctx, int64_t begin, int64_t end) {
    const block_ctx *x = vctx;
    const gemm_type *t = x->t;
    const cd_gemm_kernel *k = t->k;
    int64_t i0 = begin * k->mc, i1 = CD_MIN(x->m, end * k->mc);
    char *apack = cd_scratch((int64_t)k->mc * x->kc * t->esz + 64);
    if (!apack) return -1;
    for (int64_t ic = i0; ic < i1; ic += k->mc) {
        int64_t mc = CD_MIN(k->mc, i1 - ic);
        t->pack_a(x->a + (ic * x->ars + x->p0 * x->acs) * t->isz, x->ars, x->acs, mc, x->kc, k->mr, apack);
        for (int64_t jr = 0; jr < x->nc; jr += k->nr) {
            int nr = (int)CD_MIN(k->nr, x->nc - jr);
            const char *bp = x->bpack + jr * x->kc * t->esz;
            for (int64_t ir = 0; ir < mc; ir += k->mr) {
                int mr = (int)CD_MIN(k->mr, mc - ir);
                char *cp = x->c + ((ic + ir) * x->ldc + x->j0 + jr) * t->esz;
                k->micro(x->kc, apack + ir * x->kc * t->esz, bp, cp, x->ldc, mr, nr, x->accumulate);
            }
        }
    }
    cd_scratch_free(apack);
    return 0;
}

typedef struct {
    const gemm_type *t;
    const char *b;
    int64_t brs, bcs, kc, nc;
    char *bpack;
} packb_ctx;

static int packb_task(void *vctx, int64_t begin, int64_t end) {
    const packb_ctx *x = vctx;
    int nr = x->t->k->nr;
    int64_t j0 = begin * nr, j1 = CD_MIN(x->nc, end * nr);
    x->t->pack_b(x->b + j0 * x->bcs * x->t->isz, x->brs, x->bcs, x->kc, j1 - j0, nr,
                 x->bpack + j0 * x->kc * x->t->esz);
    return 0;
}

/* C (m x n, row-major, ldc, in the packed element type) = A @ B. */
static int gemm(const gemm_type *t, int64_t m, int64_t n, int64_t kdim, const char *a, int64_t ars,
                int64_t acs, const char *b, int64_t brs, int64_t bcs, char *c, int64_t ldc) {
    const cd_gemm_kernel *k = t->k;
    if (kdim == 0) {
        for (int64_t i = 0; i < m; i++) memset(c + i * ldc * t->esz, 0, (size_t)(n * t->esz));
        return 0;
    }
    int64_t kc_max = CD_MIN(k->kc, kdim), nc_max = CD_MIN(k->nc, (n + k->nr - 1) / k->nr * k->nr);
    char *bpack = cd_scratch(kc_max * nc_max * t->esz + 64);
    if (!bpack) return -1;
    int rc = 0;
    for (int64_t j0 = 0; j0 < n && rc == 0; j0 += k->nc) {
        int64_t nc = CD_MIN(k->nc, n - j0);
        for (int64_t p0 = 0; p0 < kdim && rc == 0; p0 += k->kc) {
            int64_t kc = CD_MIN(k->kc, kdim - p0);
            packb_ctx pb = {t, b + (p0 * brs + j0 * bcs) * t->isz, brs, bcs, kc, nc, bpack};
            int64_t panels = (nc + k->nr - 1) / k->nr;
            rc = cd_parallel_for(panels, CD_MAX(1, 4096 / kc), packb_task, &pb);
            if (rc) break;
            block_ctx bc = {t, a, b, ars, acs, brs, bcs, m, n, kc, nc, p0, j0, c, ldc, bpack, p0 > 0};
            int64_t blocks = (m + k->mc - 1) / k->mc;
            /* A block is worth a thread when it carries enough flops. */
            int64_t grain = CD_MAX(1, (int64_t)(1 << 20) / CD_MAX(1, k->mc * kc * nc));
            rc = cd_parallel_for(blocks, grain, ic_task, &bc);
        }
    }
    cd_scratch_free(bpack);
    return rc;
}

static gemm_type types[CD_NUM_DTYPES];
static pthread_once_t types_once = PTHREAD_ONCE_INIT;

static void init_types(void) {
    types[CD_f32] = (gemm_type){4, 4, pack_a_f32, pack_b_f32, cd_gemm_f32()};
    types[CD_bf16] = (gemm_type){4, 2, pack_a_bf16, pack_b_bf16, cd_gemm_f32()};
    types[CD_f16] = (gemm_type){4, 2, pack_a_f16, pack_b_f16, cd_gemm_f32()};
    types[CD_f64] = (gemm_type){8, 8, pack_a_f64, pack_b_f64, cd_gemm_f64()};
}

static const gemm_type *gemm_type_for(int dtype) {
    pthread_once(&types_once, init_types);
    return &types[dtype];
}

int cd_gemm(int32_t dtype, int64_t m, int64_t n, int64_t k, const void *a, int64_t ars, int64_t acs,
            const void *b, int64_t brs, int64_t bcs, void *c, int64_t ldc) {
    if (dtype != CD_f32 && dtype != CD_f64) return cd_fail("cd_gemm supports f32 and f64");
    return gemm(gemm_type_for(dtype), m, n, k, a, ars, acs, b, brs, bcs, c, ldc);
}

/* ---- integers ---------------------------------------------------------------------- */
typedef struct {
    int dtype;
    int64_t m, n, k, ars, acs, brs, bcs;
    const char *a, *b;
    char *c;
} int_ctx;

#define GEN_INT_MM(dt)                                                                           \
    static void int_mm_##dt(const int_ctx *x, int64_t i0, int64_t i1) {                          \
        const CD_T_##dt *a = (const CD_T_##dt *)x->a, *b = (const CD_T_##dt *)x->b;              \
        CD_T_##dt *c = (CD_T_##dt *)x->c;                                                        \
        for (int64_t i = i0; i < i1; i++)                                                        \
            for (int64_t j = 0; j < x->n; j++) {                                                 \
                uint64_t acc = 0;                                                                \
                for (int64_t p = 0; p < x->k; p++)                                               \
                    acc += (uint64_t)(int64_t)a[i * x->ars + p * x->acs] *                       \
                           (uint64_t)(int64_t)b[p * x->brs + j * x->bcs];                        \
                c[i * x->n + j] = (CD_T_##dt)acc;                                                \
            }                                                                                    \
    }
CD_INT_DTYPES(GEN_INT_MM)

static int int_task(void *vctx, int64_t begin, int64_t end) {
    const int_ctx *x = vctx;
    switch (x->dtype) {
    case CD_u8: int_mm_u8(x, begin, end); break;
    case CD_u32: int_mm_u32(x, begin, end); break;
    case CD_i16: int_mm_i16(x, begin, end); break;
    case CD_i32: int_mm_i32(x, begin, end); break;
    default: int_mm_i64(x, begin, end); break;
    }
    return 0;
}

/* ---- entry point ---------------------------------------------------------------- */
typedef struct {
    int dtype;
    const int64_t *desc;
    const char *a, *b;
    char *out;
} batch_ctx;

static int one_matmul(int dtype, const int64_t *d, const char *a, const char *b, char *out) {
    int64_t m = d[0], n = d[1], k = d[2], ars = d[3], acs = d[4], brs = d[5], bcs = d[6];
    if (!cd_dtype_is_float(dtype)) {
        int_ctx x = {dtype, m, n, k, ars, acs, brs, bcs, a, b, out};
        return cd_parallel_for(m, CD_MAX(1, (1 << 16) / CD_MAX(1, n * k)), int_task, &x);
    }
    const gemm_type *t = gemm_type_for(dtype);
    if (dtype == CD_f32 || dtype == CD_f64) return gemm(t, m, n, k, a, ars, acs, b, brs, bcs, out, n);
    float *tmp = cd_scratch(m * n * (int64_t)sizeof(float) + 64);
    if (!tmp) return -1;
    int rc = gemm(t, m, n, k, a, ars, acs, b, brs, bcs, (char *)tmp, n);
    if (rc == 0) {
        if (dtype == CD_bf16) cd_f32_to_bf16_n(m * n, tmp, (uint16_t *)out);
        else cd_f32_to_f16_n(m * n, tmp, (uint16_t *)out);
    }
    cd_scratch_free(tmp);
    return rc;
}

/* Offsets (in elements) of batch `bi` in A and B. */
static void batch_offsets(const int64_t *d, int64_t bi, int64_t *oa, int64_t *ob) {
    int64_t nb = d[7];
    const int64_t *shape = d + 8, *sa = d + 8 + nb, *sb = d + 8 + 2 * nb;
    *oa = *ob = 0;
    for (int64_t q = nb - 1; q >= 0; q--) {
        int64_t i = bi % shape[q];
        bi /= shape[q];
        *oa += i * sa[q];
        *ob += i * sb[q];
    }
}

static int batch_task(void *vctx, int64_t begin, int64_t end) {
    const batch_ctx *x = vctx;
    const int64_t *d = x->desc;
    int isz = cd_dtype_size(x->dtype);
    for (int64_t bi = begin; bi < end; bi++) {
        int64_t oa, ob;
        batch_offsets(d, bi, &oa, &ob);
        int rc = one_matmul(x->dtype, d, x->a + oa * isz, x->b + ob * isz, x->out + bi * d[0] * d[1] * isz);
        if (rc) return rc;
    }
    return 0;
}

int cd_matmul(int32_t dtype, const int64_t *desc, const void *a, const void *b, void *out) {
    if (dtype < 0 || dtype >= CD_NUM_DTYPES) return cd_fail("bad dtype %d", dtype);
    int64_t m = desc[0], n = desc[1], k = desc[2], nb = desc[7];
    if (m < 0 || n < 0 || k < 0 || nb < 0 || nb > CD_MAX_DIMS) return cd_fail("bad matmul sizes");
    int64_t batches = 1;
    for (int64_t q = 0; q < nb; q++) batches *= desc[8 + q];
    if (batches == 0 || m == 0 || n == 0) return 0;
    batch_ctx x = {dtype, desc, a, b, out};
    /* Many small products run one per thread; large ones thread internally. */
    int64_t flops = m * n * k;
    int64_t grain = flops >= (1 << 22) ? batches : CD_MAX(1, (1 << 22) / CD_MAX(1, flops));
    if (grain >= batches) return batch_task(&x, 0, batches);
    return cd_parallel_for(batches, grain, batch_task, &x);
}
