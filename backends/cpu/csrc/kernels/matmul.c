/* Batched matrix multiplication with arbitrary strides on both operands.
 *
 * Float dtypes go to the GEMM of the chosen instruction set
 * (templates/gemm_impl.h): packing reads any strides, so transposed, sliced or
 * broadcast operands never need a copy and never raise; bf16/f16 convert while
 * packing and accumulate in f32. Many small products (attention) run one per
 * thread; large ones thread inside the GEMM. Integers use a plain loop
 * accumulating in 64 bits. */
#include <stdlib.h>

#include "runtime/internal.h"
#include "runtime/isa.h"

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
    if (dtype == CD_f32 || dtype == CD_f64) return cd_ops.gemm(dtype, m, n, k, a, ars, acs, b, brs, bcs, out, n);
    float *tmp = cd_scratch(m * n * (int64_t)sizeof(float) + 64);
    if (!tmp) return -1;
    int rc = cd_ops.gemm(dtype, m, n, k, a, ars, acs, b, brs, bcs, tmp, n);
    if (rc == 0) {
        if (dtype == CD_bf16) cd_ops.f32_to_bf16(m * n, tmp, (uint16_t *)out);
        else cd_ops.f32_to_f16(m * n, tmp, (uint16_t *)out);
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

int cd_matmul(const int64_t *desc, const void *a, const void *b, void *out) {
    int64_t dtype = *desc++;
    if (dtype < 0 || dtype >= CD_NUM_DTYPES) return cd_fail("bad dtype %lld", (long long)dtype);
    int64_t m = desc[0], n = desc[1], k = desc[2], nb = desc[7];
    if (m < 0 || n < 0 || k < 0 || nb < 0 || nb > CD_MAX_DIMS) return cd_fail("bad matmul sizes");
    int64_t batches = 1;
    for (int64_t q = 0; q < nb; q++) batches *= desc[8 + q];
    if (batches == 0 || m == 0 || n == 0) return 0;
    batch_ctx x = {(int)dtype, desc, a, b, out};
    /* Many small products run one per thread; large ones thread internally. */
    int64_t flops = m * n * k;
    int64_t grain = flops >= (1 << 22) ? batches : CD_MAX(1, (1 << 22) / CD_MAX(1, flops));
    if (grain >= batches) return batch_task(&x, 0, batches);
    return cd_parallel_for(batches, grain, batch_task, &x);
}
