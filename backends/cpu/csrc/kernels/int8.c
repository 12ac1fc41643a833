/* Integer products of quantized models: u8 activations by int8 weights packed
 * once, with zero points, into int32 or (scaled) f32; and the dynamic
 * quantization of f32 activations to u8 that feeds them.
 *
 * Weights are packed (cd_pack_int8_panels) in panels of 16 columns, each
 * column's 4 consecutive k in one 32-bit group: a step of 4 in k is one
 * 64-byte vector, the layout of a VNNI dot product (u8 x s8, 4 products per
 * 32-bit lane). u8 weights are stored minus 128 (their zero point moves with
 * them), so every weight is s8; each column's sum follows the panels.
 *
 *   sum_p (a_p - za)(b_p - zb) = sum a_p b_p - zb sum_p a_p - za sum_p b_p + k za zb
 *
 * The tile (the ISA table's tile_int8) computes the raw sums; the driver
 * subtracts the zero points' terms with the rows' and columns' sums and
 * scales. The raw sums are exact in int32 for k up to 2^16 (|a b| <= 255 *
 * 128), so results do not depend on the tiling or the threads. */
#include "runtime/internal.h"
#include "runtime/isa.h"

#define NRI 16 /* columns per panel */

/* ---- dynamic quantization ----------------------------------------------------------------- */
int cd_quantize_u8_params(int64_t n, const float *x, float *params) {
    float lo = 0.0f, hi = 0.0f; /* the range includes 0, so that 0 is exact */
    for (int64_t i = 0; i < n; i++) {
        if (x[i] != x[i]) return cd_fail("dynamic quantization of a NaN");
        lo = x[i] < lo ? x[i] : lo;
        hi = x[i] > hi ? x[i] : hi;
    }
    const float scale = hi == lo ? 1.0f : (hi - lo) / 255.0f;
    const float zp = -lo / scale;
    params[0] = scale;
    params[1] = nearbyintf(zp < 0.0f ? 0.0f : zp > 255.0f ? 255.0f : zp); /* half to even */
    return 0;
}

int cd_quantize_u8(int64_t n, const float *x, const float *params, uint8_t *q) {
    const float scale = params[0], zp = params[1];
    for (int64_t i = 0; i < n; i++) {
        float v = nearbyintf(x[i] / scale) + zp;
        q[i] = (uint8_t)(v != v ? 0.0f : v < 0.0f ? 0.0f : v > 255.0f ? 255.0f : v);
    }
    return 0;
}

/* ---- packing ------------------------------------------------------------------------------ */
int cd_pack_int8_panels(int32_t dtype, const int64_t *lay, const void *vb, uint8_t *out) {
    const int64_t k = lay[0], n = lay[1], sk = lay[2], sn = lay[3];
    if (k < 0 || n < 0) return cd_fail("bad pack_int8_panels sizes");
    if (dtype != CD_u8 && dtype != CD_i16) return cd_fail("int8 weights are u8 or i16, got %s", cd_dtype_name(dtype));
    const int64_t panels = (n + NRI - 1) / NRI, groups = (k + 3) / 4;
    int8_t *dst = (int8_t *)out;
    int32_t *sums = (int32_t *)(out + panels * groups * 64);
    memset(sums, 0, (size_t)(panels * NRI) * sizeof(int32_t));
    for (int64_t p = 0; p < panels; p++)
        for (int64_t g = 0; g < groups; g++)
            for (int64_t j = 0; j < NRI; j++)
                for (int64_t q = 0; q < 4; q++) {
                    const int64_t row = 4 * g + q, col = p * NRI + j;
                    int v = 0;
                    if (row < k && col < n) {
                        const int64_t at = row * sk + col * sn;
                        v = dtype == CD_u8 ? (int)((const uint8_t *)vb)[at] - 128 : ((const int16_t *)vb)[at];
                        if (v < -128 || v > 127) return cd_fail("int8 weight %d out of range at (%lld, %lld)", v,
                                                                (long long)row, (long long)col);
                    }
                    dst[((p * groups + g) * NRI + j) * 4 + q] = (int8_t)v;
                    sums[p * NRI + j] += v;
                }
    return 0;
}

/* ---- the product -------------------------------------------------------------------------- */
typedef struct {
    const uint8_t *a;
    int64_t m, n, k, lda;
    const int8_t *panels;
    const int32_t *col_sums;
    int64_t za;
    const int32_t *zb; /* NULL: 0 */
    int64_t nzb;
    const float *a_scale, *b_scale, *bias; /* a_scale NULL: int32 output */
    int64_t nbs;
    void *out;
    int64_t rows_per_task, panels_per_task, panel_groups;
} int8_ctx;

/* The int32 sums of rows [i0, i0 + mr) with panel p (16 columns) in t, corrected and stored. */
static void finish(const int8_ctx *c, const int32_t *t, const int32_t *row_sums, int64_t i0, int64_t mr, int64_t p) {
    const int64_t j0 = p * NRI, cols = CD_MIN(NRI, c->n - j0);
    for (int64_t i = 0; i < mr; i++)
        for (int64_t j = 0; j < cols; j++) {
            const int64_t col = j0 + j;
            const int64_t zb = c->zb ? c->zb[c->nzb == 1 ? 0 : col] : 0;
            const int64_t acc = t[i * NRI + j] - zb * row_sums[i] - c->za * (int64_t)c->col_sums[col] +
                                c->k * c->za * zb; /* in int64: the terms may pass 2^31 when their sum does not */
            if (!c->a_scale) {
                ((int32_t *)c->out)[(i0 + i) * c->n + col] = (int32_t)acc;
            } else {
                float v = (float)acc * (c->a_scale[0] * c->b_scale[c->nbs == 1 ? 0 : col]);
                ((float *)c->out)[(i0 + i) * c->n + col] = c->bias ? v + c->bias[col] : v;
            }
        }
}

static int int8_task(void *vctx, int64_t begin, int64_t end) {
    const int8_ctx *c = vctx;
    const int64_t groups = (c->k + 3) / 4, width = groups * 4, MR = cd_ops.int8_mr;
    const int64_t panels = (c->n + NRI - 1) / NRI;
    uint8_t *rows = cd_scratch(c->rows_per_task * width + 64);
    int32_t *sums = cd_scratch(c->rows_per_task * (int64_t)sizeof(int32_t) + 64);
    int32_t *tile = cd_scratch(MR * NRI * (int64_t)sizeof(int32_t) + 64);
    int rc = rows && sums && tile ? 0 : -1;
    for (int64_t t = begin; t < end && rc == 0; t++) {
        const int64_t r0 = t / c->panel_groups * c->rows_per_task, r1 = CD_MIN(c->m, r0 + c->rows_per_task);
        const int64_t p0 = t % c->panel_groups * c->panels_per_task, p1 = CD_MIN(panels, p0 + c->panels_per_task);
        for (int64_t r = r0; r < r1; r++) { /* rows padded to whole groups of 4, and their sums */
            uint8_t *dst = rows + (r - r0) * width;
            memcpy(dst, c->a + r * c->lda, (size_t)c->k);
            memset(dst + c->k, 0, (size_t)(width - c->k));
            int32_t s = 0;
            for (int64_t q = 0; q < c->k; q++) s += dst[q];
            sums[r - r0] = s;
        }
        for (int64_t p = p0; p < p1; p++)
            for (int64_t i0 = r0; i0 < r1; i0 += MR) {
                const int64_t mr = CD_MIN(MR, r1 - i0);
                cd_ops.tile_int8(groups, rows + (i0 - r0) * width, width, c->panels + p * groups * 64, tile, NRI, mr);
                finish(c, tile, sums + (i0 - r0), i0, mr, p);
            }
    }
    cd_scratch_free(rows);
    cd_scratch_free(sums);
    cd_scratch_free(tile);
    return rc;
}

int cd_matmul_int8(const int64_t *desc, const uint8_t *a, const uint8_t *a_zp, const void *bp, const int32_t *b_zp,
                   const float *a_scale, const float *b_scale, const float *bias, void *out) {
    int8_ctx c = {a, desc[0], desc[1], desc[2], desc[3], bp, NULL, a_zp ? a_zp[0] : 0, b_zp, desc[4], a_scale,
                  b_scale, bias, desc[5], out, 0, 0, 0};
    if (c.m < 0 || c.n < 0 || c.k < 0 || c.k > (1 << 16)) return cd_fail("bad matmul_int8 sizes");
    if (a_scale && !b_scale) return cd_fail("matmul_int8: a scale without b's");
    const int64_t panels = (c.n + NRI - 1) / NRI, groups = (c.k + 3) / 4;
    c.col_sums = (const int32_t *)((const uint8_t *)bp + panels * groups * 64);
    if (c.m == 0 || c.n == 0) return 0;
    c.rows_per_task = 8 * cd_ops.int8_mr;
    c.panels_per_task = CD_MAX(1, CD_MIN(panels, 4));
    c.panel_groups = (panels + c.panels_per_task - 1) / c.panels_per_task;
    return cd_parallel_for(c.panel_groups * ((c.m + c.rows_per_task - 1) / c.rows_per_task), 1, int8_task, &c);
}
