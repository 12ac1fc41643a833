/* The portable entries of the ISA table: what runs where no instruction set
 * beyond plain C is in use (CANDLE_CPU_ISA=scalar, or a CPU without one), and
 * the base every other set writes its own entries over. */
#include "runtime/internal.h"
#include "runtime/isa.h"

/* ---- half-precision blocks ------------------------------------------------------ */
static void f16_to_f32(int64_t n, const uint16_t *src, float *dst) {
    for (int64_t i = 0; i < n; i++) dst[i] = cd_f16_to_f32(src[i]);
}
static void f32_to_f16(int64_t n, const float *src, uint16_t *dst) {
    for (int64_t i = 0; i < n; i++) dst[i] = cd_f32_to_f16(src[i]);
}
static void bf16_to_f32(int64_t n, const uint16_t *src, float *dst) {
    for (int64_t i = 0; i < n; i++) dst[i] = cd_bf16_to_f32(src[i]);
}
static void f32_to_bf16(int64_t n, const float *src, uint16_t *dst) {
    for (int64_t i = 0; i < n; i++) dst[i] = cd_f32_to_bf16(src[i]);
}

/* ---- f32 rows (kernels/nn.c) ------------------------------------------------------ */
static void softmax_row(const float *x, float *y, int64_t n, int take_log) {
    float mx = -INFINITY;
    for (int64_t i = 0; i < n; i++) mx = x[i] > mx || x[i] != x[i] ? x[i] : mx;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) {
        float e = expf(x[i] - mx);
        sum += e;
        if (!take_log) y[i] = e;
    }
    if (take_log) {
        float lse = mx + (float)log(sum);
        for (int64_t i = 0; i < n; i++) y[i] = x[i] - lse;
    } else {
        float inv = (float)(1.0 / sum);
        for (int64_t i = 0; i < n; i++) y[i] *= inv;
    }
}

static void norm_row(const float *x, float *y, int64_t n, const float *w, const float *b, float eps, int rms) {
    double mean = 0, var = 0;
    if (!rms) {
        for (int64_t i = 0; i < n; i++) mean += x[i];
        mean /= (double)n;
    }
    for (int64_t i = 0; i < n; i++) var += (x[i] - mean) * (x[i] - mean);
    float scale = (float)(1.0 / sqrt(var / (double)n + eps)), m = (float)mean;
    for (int64_t i = 0; i < n; i++) {
        float v = (x[i] - m) * scale * w[i];
        y[i] = b ? v + b[i] : v;
    }
}

/* ---- contiguous f32 runs (kernels/reduce.c) ------------------------------------------ */
static double sum_f32(const float *x, int64_t n) {
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) s0 += x[i], s1 += x[i + 1], s2 += x[i + 2], s3 += x[i + 3];
    for (; i < n; i++) s0 += x[i];
    return (s0 + s1) + (s2 + s3);
}

static float extreme_f32(const float *x, int64_t n, int is_max) {
    float r = x[0];
    for (int64_t i = 0; i < n; i++) {
        if (x[i] != x[i]) return x[i];
        if (is_max ? x[i] > r : x[i] < r) r = x[i];
    }
    return r;
}

static void dot_rows_f32(const float *w, int nw, const float *x, int64_t m, int64_t k, float *y, int64_t ldy) {
    for (int64_t i = 0; i < m; i++)
        for (int j = 0; j < nw; j++) {
            float s = 0;
            for (int64_t p = 0; p < k; p++) s += x[i * k + p] * w[j * k + p];
            y[i * ldy + j] = s;
        }
}

static void axpy_rows_f32(const float *p, int64_t ldp, int64_t m, int64_t k, const float *v, int64_t ldv, int64_t n,
                          float *acc) {
    for (int64_t j = 0; j < k; j++)
        for (int64_t i = 0; i < m; i++)
            for (int64_t e = 0; e < n; e++) acc[i * n + e] += p[i * ldp + j] * v[j * ldv + e];
}

void cd_isa_fill_generic(cd_isa_ops *ops) {
    *ops = (cd_isa_ops){.gemm = cd_gemm_generic,
                        .panels = &cd_gemm_generic_panels,
                        .f16_to_f32 = f16_to_f32,
                        .bf16_to_f32 = bf16_to_f32,
                        .f32_to_f16 = f32_to_f16,
                        .f32_to_bf16 = f32_to_bf16,
                        .softmax_row = softmax_row,
                        .norm_row = norm_row,
                        .sum_f32 = sum_f32,
                        .extreme_f32 = extreme_f32,
                        .dot_rows_f32 = dot_rows_f32,
                        .axpy_rows_f32 = axpy_rows_f32};
    cd_qdot_generic(ops);
    cd_panels_generic(ops);
}
