/* The block codecs of the GGML types (kernels/quant.h) and the exported
 * cd_quantize / cd_dequantize.
 *
 * Every codec gives the bytes and floats of ggml's reference code bit for bit
 * (quantize_row_*_ref, dequantize_row_*; for IQ4_NL quantize_iq4_nl without
 * importance weights, what llama.cpp writes to a file). That holds because the
 * float operations are ggml's, in ggml's order: sums run left to right from 0,
 * products associate as ggml writes them, scales are rounded to f16 where ggml
 * rounds them, and rounding is ties-to-even (nearest_int), ties-away (roundf)
 * or truncation, each where ggml uses it. build_native.py compiles this file
 * with -ffp-contract=off: a fused multiply-add would round differently. */
#include <float.h>

#include "kernels/quant.h"
#include "runtime/internal.h"

const int8_t cd_kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
const int8_t cd_kvalues_mxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* A group whose largest magnitude is below this counts as all zero. */
#define GROUP_MAX_EPS 1e-15f

/* ---- rounding and scales ---------------------------------------------------- */

/* Round to nearest, ties to even, as ggml does it: adding 1.5 * 2^23 leaves the
 * integer in the low mantissa bits (valid for |v| < 2^22). */
static inline int nearest_int(float v) {
    const float f = v + 12582912.0f;
    int32_t bits;
    memcpy(&bits, &f, 4);
    return (bits & 0x007fffff) - 0x00400000;
}

/* C's truncating float to int conversion, with x86's INT_MIN where C leaves it
 * undefined (NaN, out of range): ggml relies on x86 there when a block's scale
 * is so small that its inverse overflows. */
static inline int trunc_int(float v) { return v >= -2147483648.0f && v < 2147483648.0f ? (int)v : INT32_MIN; }

static inline int clamp_int(int v, int lo, int hi) { return CD_MAX(lo, CD_MIN(hi, v)); }

/* The first of the values of largest magnitude, sign kept (0 when all are 0). */
static float signed_absmax(const float *x, int n) {
    float amax = 0, max = 0;
    for (int i = 0; i < n; i++) {
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            max = x[i];
        }
    }
    return max;
}

/* The index of the grid value nearest x (the upper one on a tie); grid ascends. */
static int nearest_index(const int8_t *grid, int n, float x) {
    if (x <= grid[0]) return 0;
    if (x >= grid[n - 1]) return n - 1;
    int lo = 0, hi = n - 1; /* grid[lo] < x < grid[hi] */
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (x < grid[mid]) hi = mid;
        else lo = mid;
    }
    return x - grid[lo] < grid[hi] - x ? lo : hi;
}

/* ---- bit packings ------------------------------------------------------------- */

/* 2n levels into n bytes: level j in the low nibble of byte j, level n + j in
 * its high nibble (only the low 4 bits of each level are kept). */
static void pack_nibbles(const uint8_t *q, uint8_t *out, int n) {
    for (int j = 0; j < n; j++) out[j] = (uint8_t)((q[j] & 15) | (q[n + j] << 4));
}

static void unpack_nibbles(const uint8_t *b, uint8_t *q, int n) {
    for (int j = 0; j < n; j++) {
        q[j] = b[j] & 15;
        q[n + j] = b[j] >> 4;
    }
}

/* 2-bit values in groups of 4 * width: byte l of a group holds values l,
 * l + width, l + 2 width and l + 3 width at bits 0, 2, 4 and 6. */
static void pack_crumbs(const uint8_t *q, int n, int width, uint8_t *out) {
    for (int g = 0; g < n; g += 4 * width) {
        for (int l = 0; l < width; l++) {
            const uint8_t *v = q + g + l;
            out[g / 4 + l] = (uint8_t)((v[0] & 3) | (v[width] & 3) << 2 | (v[2 * width] & 3) << 4 | (v[3 * width] & 3) << 6);
        }
    }
}

static int crumb(const uint8_t *b, int e, int width) {
    return (b[e / (4 * width) * width + e % width] >> (2 * (e % (4 * width) / width))) & 3;
}

/* Bit `bit` of 256 levels as 8 planes of 32 bytes: level e at bit e / 32 of byte e % 32. */
static void pack_bit_planes(const uint8_t *q, int bit, uint8_t out[32]) {
    memset(out, 0, 32);
    for (int e = 0; e < CD_QK_K; e++) out[e % 32] |= (uint8_t)(((q[e] >> bit) & 1) << (e / 32));
}

static int plane_bit(const uint8_t planes[32], int e) { return (planes[e % 32] >> (e / 32)) & 1; }

/* Bit 4 of 32 levels, level j at bit j of a little-endian u32 (Q5_0, Q5_1). */
static void pack_fifth_bits(const uint8_t *q, uint8_t qh[4]) {
    memset(qh, 0, 4);
    for (int j = 0; j < CD_QK; j++) qh[j / 8] |= (uint8_t)(((q[j] >> 4) & 1) << (j % 8));
}

static void add_fifth_bits(const uint8_t qh[4], uint8_t *q) {
    for (int j = 0; j < CD_QK; j++) q[j] |= (uint8_t)(((qh[j / 8] >> (j % 8)) & 1) << 4);
}

/* Q4_K and Q5_K: eight 6-bit scales and mins in 12 bytes. Sub-blocks 0-3 take
 * the low 6 bits of bytes 0-3 (scales) and 4-7 (mins); sub-blocks 4-7 keep
 * their low nibbles in bytes 8-11 and their top 2 bits in the top of bytes 0-7. */
static void pack_scale_min_k4(const uint8_t *ls, const uint8_t *lm, uint8_t s[CD_K_SCALE_SIZE]) {
    for (int j = 0; j < 4; j++) {
        s[j] = (uint8_t)(ls[j] | (ls[j + 4] >> 4) << 6);
        s[j + 4] = (uint8_t)(lm[j] | (lm[j + 4] >> 4) << 6);
        s[j + 8] = (uint8_t)((ls[j + 4] & 15) | (lm[j + 4] & 15) << 4);
    }
}

static void unpack_scale_min_k4(const uint8_t s[CD_K_SCALE_SIZE], uint8_t *ls, uint8_t *lm) {
    for (int j = 0; j < 4; j++) {
        ls[j] = s[j] & 63;
        lm[j] = s[j + 4] & 63;
        ls[j + 4] = (uint8_t)((s[j + 8] & 15) | (s[j] >> 6) << 4);
        lm[j + 4] = (uint8_t)((s[j + 8] >> 4) | (s[j + 4] >> 6) << 4);
    }
}

/* Q3_K: sixteen 6-bit scales in 12 bytes, low nibbles in bytes 0-7, top 2 bits in bytes 8-11. */
static void pack_q3_scales(const uint8_t *levels, uint8_t s[12]) {
    pack_nibbles(levels, s, 8);
    uint8_t top[16];
    for (int j = 0; j < 16; j++) top[j] = levels[j] >> 4;
    pack_crumbs(top, 16, 4, s + 8);
}

static void unpack_q3_scales(const uint8_t s[12], uint8_t *levels) {
    unpack_nibbles(s, levels, 8);
    for (int j = 0; j < 16; j++) levels[j] |= (uint8_t)(crumb(s + 8, j, 4) << 4);
}

/* ---- the simple types: blocks of 32 with an f16 scale ------------------------- */

/* Q4_0, Q5_0: d = (value of largest magnitude) / -half, levels x/d + half
 * rounded half up (0.5 added, then truncated to a byte). Returns d. */
static float symmetric_levels(const float *x, int half, uint8_t *q) {
    const float d = signed_absmax(x, CD_QK) / (float)-half;
    const float id = d ? 1.0f / d : 0.0f;
    const float offset = (float)half + 0.5f;
    for (int j = 0; j < CD_QK; j++) q[j] = (uint8_t)CD_MIN(2 * half - 1, (int8_t)trunc_int(x[j] * id + offset));
    return d;
}

/* Q4_1, Q5_1: d = (max - min) / top, levels (x - min)/d rounded half up. Returns d, sets *min. */
static float affine_levels(const float *x, int top, uint8_t *q, float *min_out) {
    float min = FLT_MAX, max = -FLT_MAX;
    for (int j = 0; j < CD_QK; j++) {
        if (x[j] < min) min = x[j];
        if (x[j] > max) max = x[j];
    }
    const float d = (max - min) / (float)top;
    const float id = d ? 1.0f / d : 0.0f;
    for (int j = 0; j < CD_QK; j++) q[j] = (uint8_t)CD_MIN(top, (int8_t)trunc_int((x[j] - min) * id + 0.5f));
    *min_out = min;
    return d;
}

static void dequant_symmetric(const uint8_t *q, int n, int offset, float d, float *y) {
    for (int j = 0; j < n; j++) y[j] = (float)(q[j] - offset) * d;
}

static void dequant_affine(const uint8_t *q, int n, float d, float m, float *y) {
    for (int j = 0; j < n; j++) y[j] = (float)q[j] * d + m;
}

static void quantize_block_q4_0(const float *x, cd_block_q4_0 *y) {
    uint8_t q[CD_QK];
    y->d = cd_f32_to_f16(symmetric_levels(x, 8, q));
    pack_nibbles(q, y->qs, CD_QK / 2);
}

static void dequantize_block_q4_0(const cd_block_q4_0 *b, float *y) {
    uint8_t q[CD_QK];
    unpack_nibbles(b->qs, q, CD_QK / 2);
    dequant_symmetric(q, CD_QK, 8, cd_f16_to_f32(b->d), y);
}

static void quantize_block_q4_1(const float *x, cd_block_q4_1 *y) {
    uint8_t q[CD_QK];
    float min;
    y->d = cd_f32_to_f16(affine_levels(x, 15, q, &min));
    y->m = cd_f32_to_f16(min);
    pack_nibbles(q, y->qs, CD_QK / 2);
}

static void dequantize_block_q4_1(const cd_block_q4_1 *b, float *y) {
    uint8_t q[CD_QK];
    unpack_nibbles(b->qs, q, CD_QK / 2);
    dequant_affine(q, CD_QK, cd_f16_to_f32(b->d), cd_f16_to_f32(b->m), y);
}

static void quantize_block_q5_0(const float *x, cd_block_q5_0 *y) {
    uint8_t q[CD_QK];
    y->d = cd_f32_to_f16(symmetric_levels(x, 16, q));
    pack_fifth_bits(q, y->qh);
    pack_nibbles(q, y->qs, CD_QK / 2);
}

static void dequantize_block_q5_0(const cd_block_q5_0 *b, float *y) {
    uint8_t q[CD_QK];
    unpack_nibbles(b->qs, q, CD_QK / 2);
    add_fifth_bits(b->qh, q);
    dequant_symmetric(q, CD_QK, 16, cd_f16_to_f32(b->d), y);
}

static void quantize_block_q5_1(const float *x, cd_block_q5_1 *y) {
    uint8_t q[CD_QK];
    float min;
    y->d = cd_f32_to_f16(affine_levels(x, 31, q, &min));
    y->m = cd_f32_to_f16(min);
    pack_fifth_bits(q, y->qh);
    pack_nibbles(q, y->qs, CD_QK / 2);
}

static void dequantize_block_q5_1(const cd_block_q5_1 *b, float *y) {
    uint8_t q[CD_QK];
    unpack_nibbles(b->qs, q, CD_QK / 2);
    add_fifth_bits(b->qh, q);
    dequant_affine(q, CD_QK, cd_f16_to_f32(b->d), cd_f16_to_f32(b->m), y);
}

/* Q8_0, Q8_1: d = absmax / 127, levels x/d rounded half away from zero (roundf). Returns d. */
static float q8_levels(const float *x, int8_t *q) {
    float amax = 0;
    for (int j = 0; j < CD_QK; j++) amax = CD_MAX(amax, fabsf(x[j])); /* as ggml, NaN included */
    const float d = amax / 127;
    const float id = d ? 1.0f / d : 0.0f;
    for (int j = 0; j < CD_QK; j++) q[j] = (int8_t)trunc_int(roundf(x[j] * id));
    return d;
}

static void quantize_block_q8_0(const float *x, cd_block_q8_0 *y) { y->d = cd_f32_to_f16(q8_levels(x, y->qs)); }

static void dequantize_block_q8_0(const cd_block_q8_0 *b, float *y) {
    const float d = cd_f16_to_f32(b->d);
    for (int j = 0; j < CD_QK; j++) y[j] = (float)b->qs[j] * d;
}

static void quantize_block_q8_1(const float *x, cd_block_q8_1 *y) {
    const float d = q8_levels(x, y->qs);
    int sum = 0;
    for (int j = 0; j < CD_QK; j++) sum += y->qs[j];
    y->d = cd_f32_to_f16(d);
    y->s = cd_f32_to_f16((float)sum * d); /* the f32 d, not the rounded one */
}

static void dequantize_block_q8_1(const cd_block_q8_1 *b, float *y) {
    const float d = cd_f16_to_f32(b->d);
    for (int j = 0; j < CD_QK; j++) y[j] = (float)b->qs[j] * d;
}

/* ---- K-quant scale searches (one sub-block) ------------------------------------- */

static void affine_trial(const float *x, int n, float iscale, float min, int nmax, uint8_t *L) {
    for (int i = 0; i < n; i++) L[i] = (uint8_t)clamp_int(nearest_int(iscale * (x[i] - min)), 0, nmax);
}

/* sum of w * err with err = scale * L + min - x: |err| when mad, else err^2. */
static float affine_error(const float *x, const float *w, int n, const uint8_t *L, float scale, float min, int mad) {
    float total = 0;
    for (int i = 0; i < n; i++) {
        float diff = scale * L[i] + min - x[i];
        diff = mad ? fabsf(diff) : diff * diff;
        total += w[i] * diff;
    }
    return total;
}

/* Levels 0..nmax with x ~ scale * L - min, min >= 0 (ggml's make_qkx2_quants):
 * the plain min/max fit, then nstep + 1 trial scales, each refitted by weighted
 * least squares; the least weighted error wins. A trial that wins moves the
 * min, and later trials start from it. Returns the scale, sets *min_out. */
static float fit_affine(const float *x, const float *w, int n, int nmax, float rmin, float rdelta, int nstep, int mad,
                        uint8_t *L, float *min_out) {
    float min = x[0], max = x[0], sum_w = w[0], sum_x = w[0] * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        memset(L, 0, (size_t)n);
        *min_out = -min;
        return 0;
    }
    float iscale = nmax / (max - min), scale = 1 / iscale;
    affine_trial(x, n, iscale, min, nmax, L);
    float best = affine_error(x, w, n, L, scale, min, mad);
    for (int is = 0; is <= nstep; is++) {
        uint8_t trial[32];
        affine_trial(x, n, (rmin + rdelta * is + nmax) / (max - min), min, nmax, trial);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            const float l = trial[i];
            sum_l += w[i] * l;
            sum_l2 += w[i] * l * l;
            sum_xl += w[i] * l * x[i];
        }
        const float det = sum_w * sum_l2 - sum_l * sum_l;
        if (!(det > 0)) continue;
        float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
        float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
        if (this_min > 0) { /* the min may only lower values: refit the scale alone */
            this_min = 0;
            this_scale = sum_xl / sum_l2;
        }
        const float err = affine_error(x, w, n, trial, this_scale, this_min, mad);
        if (err < best) {
            memcpy(L, trial, (size_t)n);
            best = err;
            scale = this_scale;
            min = this_min;
        }
    }
    *min_out = -min;
    return scale;
}

static void symmetric_trial(const float *x, int n, float iscale, int nmax, int8_t *L) {
    for (int i = 0; i < n; i++) L[i] = (int8_t)clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1);
}

/* sum of w x l and of w l l with w = x^2: the least-squares fit of x ~ scale * l. */
static void symmetric_sums(const float *x, int n, const int8_t *L, float *sumlx, float *suml2) {
    float slx = 0, sl2 = 0;
    for (int i = 0; i < n; i++) {
        const float w = x[i] * x[i];
        slx += w * x[i] * L[i];
        sl2 += w * L[i] * L[i];
    }
    *sumlx = slx;
    *suml2 = sl2;
}

/* Q3_K's levels -nmax..nmax-1 (ggml's make_q3_quants with rmse): from the
 * largest magnitude, then single levels move while the x^2-weighted fit
 * improves, 5 passes at most. Levels come back offset by nmax (0 for an
 * all-zero sub-block); returns the scale. */
static float fit_q3(const float *x, int n, int nmax, uint8_t *out) {
    const float max = signed_absmax(x, n);
    if (fabsf(max) < GROUP_MAX_EPS) {
        memset(out, 0, (size_t)n);
        return 0;
    }
    int8_t L[16];
    symmetric_trial(x, n, -nmax / max, nmax, L);
    float sumlx, suml2;
    symmetric_sums(x, n, L, &sumlx, &suml2);
    for (int pass = 0; pass < 5; pass++) {
        int changed = 0;
        for (int i = 0; i < n; i++) {
            const float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * L[i];
            if (!(slx > 0)) continue;
            float sl2 = suml2 - w * L[i] * L[i];
            const int l = clamp_int(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
            if (l == L[i]) continue;
            slx += w * x[i] * l;
            sl2 += w * l * l;
            if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                L[i] = (int8_t)l;
                sumlx = slx;
                suml2 = sl2;
                changed++;
            }
        }
        if (!changed) break;
    }
    for (int i = 0; i < n; i++) out[i] = (uint8_t)(L[i] + nmax);
    return suml2 > 0 ? sumlx / suml2 : 0;
}

/* Q6_K's levels -nmax..nmax-1 (ggml's make_qx_quants, rmse type 1): the best
 * of 19 trial scales around -nmax / max by x^2-weighted least squares. Levels
 * come back offset by nmax (0 for an all-zero sub-block); returns the scale. */
static float fit_qx(const float *x, int n, int nmax, uint8_t *out) {
    const float max = signed_absmax(x, n);
    if (fabsf(max) < GROUP_MAX_EPS) {
        memset(out, 0, (size_t)n);
        return 0;
    }
    int8_t L[16], trial[16];
    float sumlx, suml2;
    symmetric_trial(x, n, -nmax / max, nmax, L);
    symmetric_sums(x, n, L, &sumlx, &suml2);
    float scale = suml2 ? sumlx / suml2 : 0.0f, best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        symmetric_trial(x, n, -(nmax + 0.1f * is) / max, nmax, trial);
        symmetric_sums(x, n, trial, &sumlx, &suml2);
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            memcpy(L, trial, (size_t)n);
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    for (int i = 0; i < n; i++) out[i] = (uint8_t)(L[i] + nmax);
    return scale;
}

/* Sub-block scales (or mins) as levels of the largest positive one / top:
 * nearest_int wrapped to a byte as ggml stores it, then capped at cap (a
 * negative value is possible in principle, never in practice). Returns the
 * f16 step. */
static uint16_t scale_levels(const float *v, int n, int top, int cap, uint8_t *levels) {
    float vmax = 0;
    for (int i = 0; i < n; i++)
        if (v[i] > vmax) vmax = v[i];
    const float iscale = vmax > 0 ? top / vmax : 0.0f;
    for (int i = 0; i < n; i++) levels[i] = (uint8_t)CD_MIN(cap, (uint8_t)nearest_int(iscale * v[i]));
    return cd_f32_to_f16(vmax / top);
}

/* Levels against the step d and offset dm actually stored; a sub-block whose
 * step is 0 keeps the levels of its search. */
static void requantize_affine(const float *x, int n, float d, float dm, int nmax, uint8_t *L) {
    if (!d) return;
    for (int i = 0; i < n; i++) L[i] = (uint8_t)clamp_int(nearest_int((x[i] + dm) / d), 0, nmax);
}

static void requantize_symmetric(const float *x, int n, float d, int nmax, uint8_t *L) {
    if (!d) return;
    for (int i = 0; i < n; i++) L[i] = (uint8_t)(clamp_int(nearest_int(x[i] / d), -nmax, nmax - 1) + nmax);
}

/* ---- Q2_K ------------------------------------------------------------------------ */

static void quantize_block_q2_K(const float *x, cd_block_q2_K *y) {
    uint8_t L[CD_QK_K], ls[16], lm[16];
    float scales[16], mins[16], w[16];
    for (int j = 0; j < 16; j++) {
        for (int l = 0; l < 16; l++) w[l] = fabsf(x[16 * j + l]);
        scales[j] = fit_affine(x + 16 * j, w, 16, 3, -0.5f, 0.1f, 15, 1, L + 16 * j, &mins[j]);
    }
    y->d = scale_levels(scales, 16, 15, 255, ls);
    y->dmin = scale_levels(mins, 16, 15, 255, lm);
    for (int j = 0; j < 16; j++) {
        y->scales[j] = (uint8_t)(ls[j] | lm[j] << 4);
        requantize_affine(x + 16 * j, 16, cd_f16_to_f32(y->d) * (y->scales[j] & 15),
                          cd_f16_to_f32(y->dmin) * (y->scales[j] >> 4), 3, L + 16 * j);
    }
    pack_crumbs(L, CD_QK_K, 32, y->qs);
}

static void dequantize_block_q2_K(const cd_block_q2_K *b, float *y) {
    const float d = cd_f16_to_f32(b->d), dmin = cd_f16_to_f32(b->dmin);
    for (int j = 0; j < 16; j++) {
        const float dl = d * (b->scales[j] & 15), ml = dmin * (b->scales[j] >> 4);
        for (int e = 16 * j; e < 16 * j + 16; e++) y[e] = dl * crumb(b->qs, e, 32) - ml;
    }
}

/* ---- Q3_K ------------------------------------------------------------------------ */

static void quantize_block_q3_K(const float *x, cd_block_q3_K *y) {
    uint8_t L[CD_QK_K], levels[16] = {0};
    float scales[16];
    for (int j = 0; j < 16; j++) scales[j] = fit_q3(x + 16 * j, 16, 4, L + 16 * j);
    const float max_scale = signed_absmax(scales, 16);
    float d = 0;
    if (max_scale) {
        const float iscale = -32.f / max_scale;
        for (int j = 0; j < 16; j++) levels[j] = (uint8_t)(clamp_int((int8_t)nearest_int(iscale * scales[j]), -32, 31) + 32);
        d = 1 / iscale;
    }
    y->d = cd_f32_to_f16(d);
    pack_q3_scales(levels, y->scales);
    for (int j = 0; j < 16; j++) requantize_symmetric(x + 16 * j, 16, cd_f16_to_f32(y->d) * (levels[j] - 32), 4, L + 16 * j);
    pack_bit_planes(L, 2, y->hmask);
    pack_crumbs(L, CD_QK_K, 32, y->qs);
}

static void dequantize_block_q3_K(const cd_block_q3_K *b, float *y) {
    uint8_t levels[16];
    unpack_q3_scales(b->scales, levels);
    const float d = cd_f16_to_f32(b->d);
    for (int j = 0; j < 16; j++) {
        const float dl = d * (levels[j] - 32);
        for (int e = 16 * j; e < 16 * j + 16; e++) y[e] = dl * (crumb(b->qs, e, 32) - (plane_bit(b->hmask, e) ? 0 : 4));
    }
}

/* ---- Q4_K and Q5_K ---------------------------------------------------------------- */

/* Their shared encoding: sub-blocks of 32 weighted by rms + |x|, 6-bit scales
 * and mins. Fills d, dmin, the packed scales and the levels. */
static void quantize_q45_K(const float *x, int nmax, float rmin, int nstep, uint16_t *d, uint16_t *dmin,
                           uint8_t packed[CD_K_SCALE_SIZE], uint8_t *L) {
    float scales[8], mins[8], w[32];
    uint8_t ls[8], lm[8];
    for (int j = 0; j < 8; j++) {
        const float *xs = x + 32 * j;
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++) sum_x2 += xs[l] * xs[l];
        const float rms = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++) w[l] = rms + fabsf(xs[l]);
        scales[j] = fit_affine(xs, w, 32, nmax, rmin, 0.1f, nstep, 0, L + 32 * j, &mins[j]);
    }
    *d = scale_levels(scales, 8, 63, 63, ls);
    *dmin = scale_levels(mins, 8, 63, 63, lm);
    pack_scale_min_k4(ls, lm, packed);
    for (int j = 0; j < 8; j++)
        requantize_affine(x + 32 * j, 32, cd_f16_to_f32(*d) * ls[j], cd_f16_to_f32(*dmin) * lm[j], nmax, L + 32 * j);
}

/* 256 levels as 4-bit values, 64 per 32 bytes (the first 32 in the low nibbles). */
static void pack_nibbles_by_64(const uint8_t *L, uint8_t *qs) {
    for (int g = 0; g < CD_QK_K; g += 64) pack_nibbles(L + g, qs + g / 2, 32);
}

static void unpack_nibbles_by_64(const uint8_t *qs, uint8_t *L) {
    for (int g = 0; g < CD_QK_K; g += 64) unpack_nibbles(qs + g / 2, L + g, 32);
}

static void dequant_q45_K(uint16_t d16, uint16_t dmin16, const uint8_t *packed, const uint8_t *L, float *y) {
    uint8_t ls[8], lm[8];
    unpack_scale_min_k4(packed, ls, lm);
    const float d = cd_f16_to_f32(d16), dmin = cd_f16_to_f32(dmin16);
    for (int j = 0; j < 8; j++) {
        const float dl = d * ls[j], ml = dmin * lm[j];
        for (int e = 32 * j; e < 32 * j + 32; e++) y[e] = dl * L[e] - ml;
    }
}

static void quantize_block_q4_K(const float *x, cd_block_q4_K *y) {
    uint8_t L[CD_QK_K];
    quantize_q45_K(x, 15, -1.0f, 20, &y->d, &y->dmin, y->scales, L);
    pack_nibbles_by_64(L, y->qs);
}

static void dequantize_block_q4_K(const cd_block_q4_K *b, float *y) {
    uint8_t L[CD_QK_K];
    unpack_nibbles_by_64(b->qs, L);
    dequant_q45_K(b->d, b->dmin, b->scales, L, y);
}

static void quantize_block_q5_K(const float *x, cd_block_q5_K *y) {
    uint8_t L[CD_QK_K];
    quantize_q45_K(x, 31, -0.5f, 15, &y->d, &y->dmin, y->scales, L);
    pack_bit_planes(L, 4, y->qh);
    pack_nibbles_by_64(L, y->qs);
}

static void dequantize_block_q5_K(const cd_block_q5_K *b, float *y) {
    uint8_t L[CD_QK_K];
    unpack_nibbles_by_64(b->qs, L);
    for (int e = 0; e < CD_QK_K; e++) L[e] |= (uint8_t)(plane_bit(b->qh, e) << 4);
    dequant_q45_K(b->d, b->dmin, b->scales, L, y);
}

/* ---- Q6_K ------------------------------------------------------------------------ */

static void quantize_block_q6_K(const float *x, cd_block_q6_K *y) {
    uint8_t L[CD_QK_K], top[CD_QK_K];
    float scales[16];
    for (int j = 0; j < 16; j++) scales[j] = fit_qx(x + 16 * j, 16, 32, L + 16 * j);
    const float max_scale = signed_absmax(scales, 16);
    if (fabsf(max_scale) < GROUP_MAX_EPS) {
        memset(y, 0, sizeof *y);
        return;
    }
    const float iscale = -128.f / max_scale;
    y->d = cd_f32_to_f16(1 / iscale);
    for (int j = 0; j < 16; j++) {
        y->scales[j] = (int8_t)CD_MIN(127, nearest_int(iscale * scales[j]));
        requantize_symmetric(x + 16 * j, 16, cd_f16_to_f32(y->d) * y->scales[j], 32, L + 16 * j);
    }
    /* per 128 values: low nibbles of 0-63 | 64-127 in ql, the top 2 bits as crumbs in qh */
    for (int g = 0; g < CD_QK_K; g += 128) pack_nibbles(L + g, y->ql + g / 2, 64);
    for (int e = 0; e < CD_QK_K; e++) top[e] = L[e] >> 4;
    pack_crumbs(top, CD_QK_K, 32, y->qh);
}

static void dequantize_block_q6_K(const cd_block_q6_K *b, float *y) {
    uint8_t L[CD_QK_K];
    for (int g = 0; g < CD_QK_K; g += 128) unpack_nibbles(b->ql + g / 2, L + g, 64);
    const float d = cd_f16_to_f32(b->d);
    for (int e = 0; e < CD_QK_K; e++) y[e] = d * b->scales[e / 16] * ((L[e] | crumb(b->qh, e, 32) << 4) - 32);
}

/* ---- Q8_K ------------------------------------------------------------------------ */

static void quantize_block_q8_K(const float *x, cd_block_q8_K *y) {
    const float max = signed_absmax(x, CD_QK_K);
    if (!max) { /* ggml leaves bsums as they were here; they are 0 */
        memset(y, 0, sizeof *y);
        return;
    }
    const float iscale = -127.f / max;
    for (int j = 0; j < CD_QK_K; j++) y->qs[j] = (int8_t)CD_MIN(127, nearest_int(iscale * x[j]));
    for (int j = 0; j < CD_QK_K / 16; j++) {
        int sum = 0;
        for (int l = 0; l < 16; l++) sum += y->qs[16 * j + l];
        y->bsums[j] = (int16_t)sum;
    }
    y->d = 1 / iscale;
}

static void dequantize_block_q8_K(const cd_block_q8_K *b, float *y) {
    for (int j = 0; j < CD_QK_K; j++) y[j] = b->d * b->qs[j];
}

/* ---- IQ4_NL and IQ4_XS: 4-bit indices into a non-linear grid ---------------------- */

static void iq4_levels(const float *x, int n, float id, uint8_t *L) {
    for (int j = 0; j < n; j++) L[j] = (uint8_t)nearest_index(cd_kvalues_iq4nl, 16, id * x[j]);
}

/* sum of w q x and of w q q over 32 values on the grid (inverse scale id), w = x^2. */
static void iq4_sums(const float *x, float id, float *sumqx, float *sumq2) {
    float sqx = 0, sq2 = 0;
    for (int j = 0; j < 32; j++) {
        const float q = cd_kvalues_iq4nl[nearest_index(cd_kvalues_iq4nl, 16, id * x[j])];
        const float w = x[j] * x[j];
        sqx += w * q * x[j];
        sq2 += w * q * q;
    }
    *sumqx = sqx;
    *sumq2 = sq2;
}

/* The scale of 32 values: the best by x^2-weighted least squares of the grid
 * fitted to the largest magnitude and 15 trial scales around it (0 for an
 * all-zero sub-block). */
static float fit_iq4(const float *x) {
    const float max = signed_absmax(x, 32);
    if (fabsf(max) < GROUP_MAX_EPS) return 0;
    const float v0 = cd_kvalues_iq4nl[0];
    float sumqx, sumq2;
    iq4_sums(x, 1 / (-max / v0), &sumqx, &sumq2);
    float d = sumq2 > 0 ? sumqx / sumq2 : 0.f, best = d * sumqx;
    for (int itry = -7; itry <= 7; itry++) {
        iq4_sums(x, (itry + cd_kvalues_iq4nl[0]) / max, &sumqx, &sumq2);
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    return d;
}

static void dequant_iq4(const uint8_t *qs, float d, float *y) {
    uint8_t q[32];
    unpack_nibbles(qs, q, 16);
    for (int j = 0; j < 32; j++) y[j] = d * cd_kvalues_iq4nl[q[j]];
}

/* ggml's quantize_row_iq4_nl_ref runs a reduced search (no trial scales, the
 * grid flipped) meant for activations, and leaves an all-zero block's indices
 * undefined; this is quantize_iq4_nl's encoding, as llama.cpp writes files. */
static void quantize_block_iq4_nl(const float *x, cd_block_iq4_nl *y) {
    uint8_t L[CD_QK];
    const float d = fit_iq4(x);
    y->d = cd_f32_to_f16(d);
    iq4_levels(x, CD_QK, d ? 1 / d : 0.f, L);
    pack_nibbles(L, y->qs, CD_QK / 2);
}

static void dequantize_block_iq4_nl(const cd_block_iq4_nl *b, float *y) { dequant_iq4(b->qs, cd_f16_to_f32(b->d), y); }

static void quantize_block_iq4_xs(const float *x, cd_block_iq4_xs *y) {
    uint8_t L[CD_QK_K], levels[8];
    float scales[8];
    for (int ib = 0; ib < 8; ib++) scales[ib] = fit_iq4(x + 32 * ib);
    const float d = -signed_absmax(scales, 8) / 32;
    const float id = d ? 1 / d : 0.f;
    y->d = cd_f32_to_f16(d);
    y->scales_h = 0;
    for (int ib = 0; ib < 8; ib++) {
        const int l = clamp_int(nearest_int(id * scales[ib]), -32, 31);
        const float dl = d * l;
        iq4_levels(x + 32 * ib, 32, dl ? 1 / dl : 0.f, L + 32 * ib);
        levels[ib] = (uint8_t)(l + 32);
        y->scales_h |= (uint16_t)((levels[ib] >> 4) << (2 * ib));
        pack_nibbles(L + 32 * ib, y->qs + 16 * ib, 16);
    }
    for (int k = 0; k < 4; k++) y->scales_l[k] = (uint8_t)((levels[2 * k] & 15) | (levels[2 * k + 1] & 15) << 4);
}

static void dequantize_block_iq4_xs(const cd_block_iq4_xs *b, float *y) {
    const float d = cd_f16_to_f32(b->d);
    for (int ib = 0; ib < 8; ib++) {
        const int ls = ((b->scales_l[ib / 2] >> (4 * (ib % 2))) & 15) | ((b->scales_h >> (2 * ib)) & 3) << 4;
        dequant_iq4(b->qs + 16 * ib, d * (ls - 32), y + 32 * ib);
    }
}

/* ---- MXFP4: E2M1 values with a shared power-of-two (E8M0) scale ------------------ */

/* The E2M1 value nearest x at scale d (the first on a tie). */
static int nearest_fp4(float x, float d) {
    int best = 0;
    float best_err = fabsf(cd_kvalues_mxfp4[0] * d - x);
    for (int i = 1; i < 16; i++) {
        const float err = fabsf(cd_kvalues_mxfp4[i] * d - x);
        if (err < best_err) {
            best = i;
            best_err = err;
        }
    }
    return best;
}

static void quantize_block_mxfp4(const float *x, cd_block_mxfp4 *y) {
    uint8_t q[CD_QK];
    const float amax = fabsf(signed_absmax(x, CD_QK));
    /* ggml converts this float to the byte directly: below 2^-125 it is
     * negative and wraps through the int, as here */
    y->e = amax > 0 ? (uint8_t)trunc_int(floorf(log2f(amax)) - 2 + 127) : 0;
    const float d = cd_e8m0_to_f32_half(y->e);
    for (int j = 0; j < CD_QK; j++) q[j] = (uint8_t)nearest_fp4(x[j], d);
    pack_nibbles(q, y->qs, CD_QK / 2);
}

static void dequantize_block_mxfp4(const cd_block_mxfp4 *b, float *y) {
    uint8_t q[CD_QK];
    unpack_nibbles(b->qs, q, CD_QK / 2);
    const float d = cd_e8m0_to_f32_half(b->e);
    for (int j = 0; j < CD_QK; j++) y[j] = cd_kvalues_mxfp4[q[j]] * d;
}

/* ---- the table ------------------------------------------------------------------ */

/* X(ggml id, candle name, block struct suffix, values per block, act_type) */
#define CD_QTYPES(X)                                 \
    X(CD_Q4_0, "q4_0", q4_0, CD_QK, CD_Q8_0)         \
    X(CD_Q4_1, "q4_1", q4_1, CD_QK, CD_Q8_1)         \
    X(CD_Q5_0, "q5_0", q5_0, CD_QK, CD_Q8_0)         \
    X(CD_Q5_1, "q5_1", q5_1, CD_QK, CD_Q8_1)         \
    X(CD_Q8_0, "q8_0", q8_0, CD_QK, CD_Q8_0)         \
    X(CD_Q8_1, "q8_1", q8_1, CD_QK, -1)              \
    X(CD_Q2_K, "q2k", q2_K, CD_QK_K, CD_Q8_K)        \
    X(CD_Q3_K, "q3k", q3_K, CD_QK_K, CD_Q8_K)        \
    X(CD_Q4_K, "q4k", q4_K, CD_QK_K, CD_Q8_K)        \
    X(CD_Q5_K, "q5k", q5_K, CD_QK_K, CD_Q8_K)        \
    X(CD_Q6_K, "q6k", q6_K, CD_QK_K, CD_Q8_K)        \
    X(CD_Q8_K, "q8k", q8_K, CD_QK_K, -1)             \
    X(CD_IQ4_NL, "iq4_nl", iq4_nl, CD_QK, CD_Q8_0)   \
    X(CD_IQ4_XS, "iq4_xs", iq4_xs, CD_QK_K, CD_Q8_K) \
    X(CD_MXFP4, "mxfp4", mxfp4, CD_QK, CD_Q8_0)

/* Row codecs from the block codecs: n values are n / block_size blocks. */
#define CD_ROW_CODECS(id, name, T, bs, act)                                                   \
    static void quantize_row_##T(const float *x, void *blocks, int64_t n) {                   \
        cd_block_##T *b = blocks;                                                             \
        for (int64_t i = 0; i < n / (bs); i++) quantize_block_##T(x + i * (bs), &b[i]);       \
    }                                                                                         \
    static void dequantize_row_##T(const void *blocks, float *y, int64_t n) {                 \
        const cd_block_##T *b = blocks;                                                       \
        for (int64_t i = 0; i < n / (bs); i++) dequantize_block_##T(&b[i], y + i * (bs));     \
    }
CD_QTYPES(CD_ROW_CODECS)

#define CD_QTYPE_ENTRY(id, name, T, bs, act) \
    [id] = {name, id, bs, (int32_t)sizeof(cd_block_##T), act, dequantize_row_##T, quantize_row_##T},
static const cd_qtype_info QTYPES[CD_QTYPE_COUNT] = {CD_QTYPES(CD_QTYPE_ENTRY)};

/* Blocks are read through their structs: pointers must be aligned for them. */
#define CD_QTYPE_ALIGN(id, name, T, bs, act) [id] = (uint8_t)_Alignof(cd_block_##T),
static const uint8_t QTYPE_ALIGN[CD_QTYPE_COUNT] = {CD_QTYPES(CD_QTYPE_ALIGN)};

#define CD_QTYPE_NAME(id, name, T, bs, act) " " name
static const char QTYPE_NAMES[] = CD_QTYPES(CD_QTYPE_NAME);

const cd_qtype_info *cd_qtype(int32_t id) {
    return id >= 0 && id < CD_QTYPE_COUNT && QTYPES[id].name ? &QTYPES[id] : NULL;
}

/* ---- exported: whole rows, blocks split over threads ----------------------------- */

typedef struct {
    const cd_qtype_info *t;
    const void *src;
    void *dst;
    int quantize;
} codec_job;

/* Blocks are independent, so any split of them gives the same bytes. */
static int codec_task(void *ctx, int64_t b0, int64_t b1) {
    const codec_job *job = ctx;
    const int64_t bs = job->t->block_size, ts = job->t->type_size;
    if (job->quantize)
        job->t->quantize((const float *)job->src + b0 * bs, (char *)job->dst + b0 * ts, (b1 - b0) * bs);
    else
        job->t->dequantize((const char *)job->src + b0 * ts, (float *)job->dst + b0 * bs, (b1 - b0) * bs);
    return 0;
}

static int run_codec(const char *fn, int32_t type, int64_t nrows, int64_t ncols, const void *src, void *dst,
                     int quantize) {
    const cd_qtype_info *t = cd_qtype(type);
    if (!t) return cd_fail("%s: GGML type id %d is not a block type candle-api handles (those are:%s)", fn, type, QTYPE_NAMES);
    if (nrows < 0 || ncols < 0)
        return cd_fail("%s: negative size: %lld rows of %lld values", fn, (long long)nrows, (long long)ncols);
    if (ncols % t->block_size)
        return cd_fail("%s: %s stores rows in blocks of %d values, and %lld values per row is not a multiple of %d", fn,
                       t->name, t->block_size, (long long)ncols, t->block_size);
    if (ncols && nrows > INT64_MAX / 2 / ncols) /* the bytes (at most 1.15 per value) must fit too */
        return cd_fail("%s: %lld rows of %lld values is too large", fn, (long long)nrows, (long long)ncols);
    const int64_t nblocks = nrows * (ncols / t->block_size);
    if (nblocks == 0) return 0;
    if (!src || !dst) return cd_fail("%s: NULL buffer", fn);
    const void *blocks = quantize ? dst : src, *floats = quantize ? src : dst;
    if ((uintptr_t)blocks % QTYPE_ALIGN[t->id] || (uintptr_t)floats % _Alignof(float))
        return cd_fail("%s: misaligned buffer (%s blocks need %d-byte alignment, f32 values 4)", fn, t->name,
                       QTYPE_ALIGN[t->id]);
    codec_job job = {t, src, dst, quantize};
    /* a K-type block takes microseconds to quantize, nanoseconds to dequantize */
    const int64_t grain_values = quantize ? 4096 : CD_GRAIN;
    return cd_parallel_for(nblocks, CD_MAX(1, grain_values / t->block_size), codec_task, &job);
}

int cd_quantize(int32_t type, int64_t nrows, int64_t ncols, const float *src, void *dst) {
    return run_codec("cd_quantize", type, nrows, ncols, src, dst, 1);
}

int cd_dequantize(int32_t type, int64_t nrows, int64_t ncols, const void *src, float *dst) {
    return run_codec("cd_dequantize", type, nrows, ncols, src, dst, 0);
}
