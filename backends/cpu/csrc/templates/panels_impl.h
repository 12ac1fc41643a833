/* The portable parts of the products with packed weights (kernels/panels.c)
 * that every instruction set compiles with its own flags, so that the
 * compiler vectorizes them for it: the plane of a depthwise convolution and
 * the epilogue. The including file defines PANELS_NAME(name), which suffixes
 * a name with the set's, and includes runtime/internal.h and runtime/isa.h. */

/* Lanes of the depthwise loop, a vector of GCC's vector extensions: one zmm
 * register on AVX-512, two ymm on AVX2, four xmm on the portable build. */
#define DW_LANES 16
typedef float PANELS_NAME(dw_vec) __attribute__((vector_size(DW_LANES * sizeof(float))));

/* The plane zero-padded and split into its sw column phases (phase r holds the
 * padded columns r, r + sw, ...), each row of a phase followed by DW_LANES
 * spare columns: then every tap reads one phase contiguously, with no bounds
 * to check, and a run of DW_LANES outputs never reads past the buffer. */
static void PANELS_NAME(dw_phases)(const cd_dw_geom *g, const float *x, float *ph, int64_t rows, int64_t pstride) {
    const int64_t sw = g->sw;
    if (sw == 1 && g->xs_w == 1) { /* zeros where no input goes: the padding rows, each row's margins */
        memset(ph, 0, (size_t)(g->ph * pstride) * sizeof(float));
        memset(ph + (g->ph + g->h) * pstride, 0, (size_t)((rows - g->ph - g->h) * pstride) * sizeof(float));
        for (int64_t sy = 0; sy < g->h; sy++) {
            float *row = ph + (sy + g->ph) * pstride;
            memset(row, 0, (size_t)g->pw * sizeof(float));
            memcpy(row + g->pw, x + sy * g->xs_h, (size_t)g->w * sizeof(float));
            memset(row + g->pw + g->w, 0, (size_t)(pstride - g->pw - g->w) * sizeof(float));
        }
        return;
    }
    memset(ph, 0, (size_t)(sw * rows * pstride) * sizeof(float));
    for (int64_t sy = 0; sy < g->h; sy++) {
        const float *src = x + sy * g->xs_h;
        float *row = ph + (sy + g->ph) * pstride;
        for (int64_t r = 0; r < sw; r++) { /* padded column t * sw + r is input column t * sw + r - pw */
            float *phase = row + r * rows * pstride;
            int64_t t = g->pw > r ? (g->pw - r + sw - 1) / sw : 0, sx = t * sw + r - g->pw;
            if (sw == 2 && g->xs_w == 1) { /* a constant stride: the compiler vectorizes the gather */
                for (int64_t k = 0; k < (g->w - sx + 1) / 2; k++) phase[t + k] = src[sx + 2 * k];
                continue;
            }
            for (; sx < g->w; t++, sx += sw) phase[t] = src[sx * g->xs_w];
        }
    }
}

/* Floats of dw_plane's phases, rounded up to an even count: the taps' int64_t
 * offsets that follow them stay 8-byte aligned. */
static int64_t PANELS_NAME(dw_phase_floats)(const cd_dw_geom *g) {
    const int64_t rows = g->h + 2 * g->ph, pstride = (g->w + 2 * g->pw + g->sw - 1) / g->sw + DW_LANES;
    return (g->sw * rows * pstride + 1) & ~(int64_t)1;
}

/* Floats of scratch the plane of dw_plane needs: the phases, then the taps' offsets. */
static int64_t PANELS_NAME(dw_scratch)(const cd_dw_geom *g) {
    return PANELS_NAME(dw_phase_floats)(g) + 2 * g->kh * g->kw;
}

/* Runs of DW_LANES outputs, DW_RUNS at a time (anywhere in the plane: rows of a
 * tall plane, stretches of a long row), each summing all the taps in a register
 * and stored once; the runs' sums are independent, so the multiply-adds overlap
 * instead of waiting on one another (eight where the registers hold them: the
 * including file may set DW_RUNS to 8). Tap t reads at offset[t] from a run's
 * place in phase 0. The sums are named variables (an array of vectors spills). */
/* R output rows x C runs of DW_LANES columns of a K x K window (rows one
 * apart, output rows SH input rows apart), all summed at once: each input
 * vector is loaded once and feeds every output row it reaches, with the taps
 * wv already broadcast (a plane's loads, not its multiply-adds, bound the
 * general loop below), and the R * C sums are independent (four or more
 * keep the multiply-adds from waiting on one another). K, SH, R and C are
 * constants at every call: the loops unroll and the sums stay in registers.
 * len: the columns of the last run to store. */
static inline __attribute__((always_inline)) void PANELS_NAME(dw_rows)(const int K, const int SH, const int R,
                                                                      const int C, const PANELS_NAME(dw_vec) *wv,
                                                                      const float *base, const int64_t *col,
                                                                      int64_t pstride, float bias, float *out,
                                                                      int64_t ow, int64_t len) {
    typedef PANELS_NAME(dw_vec) vec;
    vec acc[8];
#pragma GCC unroll 8
    for (int k = 0; k < R * C; k++) acc[k] = (vec){0} + bias;
#pragma GCC unroll 20
    for (int rr = 0; rr < (R - 1) * SH + K; rr++)
#pragma GCC unroll 5
        for (int j = 0; j < K; j++)
#pragma GCC unroll 4
            for (int c = 0; c < C; c++) {
                vec v;
                memcpy(&v, base + rr * pstride + col[j] + c * DW_LANES, sizeof v);
#pragma GCC unroll 8
                for (int k = 0; k < R; k++)
                    if (rr - k * SH >= 0 && rr - k * SH < K) acc[k * C + c] += wv[(rr - k * SH) * K + j] * v;
            }
#pragma GCC unroll 8
    for (int k = 0; k < R; k++)
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) {
            float *o = out + k * ow + c * DW_LANES;
            if (c < C - 1 || len == DW_LANES)
                memcpy(o, &acc[k * C + c], sizeof acc[0]);
            else
                memcpy(o, &acc[k * C + c], (size_t)len * sizeof(float));
        }
}

/* R output rows of the plane by dw_rows: C runs at a time, the rest one by one. */
static inline __attribute__((always_inline)) void PANELS_NAME(dw_band)(const int K, const int SH, const int R,
                                                                      const int C, const PANELS_NAME(dw_vec) *wv,
                                                                      const cd_dw_geom *g, const float *base,
                                                                      const int64_t *col, int64_t pstride, float bias,
                                                                      float *out) {
    int64_t ox0 = 0;
    if (C > 1)
        for (; ox0 + C * DW_LANES <= g->ow; ox0 += C * DW_LANES)
            PANELS_NAME(dw_rows)(K, SH, R, C, wv, base + ox0, col, pstride, bias, out + ox0, g->ow, DW_LANES);
    for (; ox0 < g->ow; ox0 += DW_LANES)
        PANELS_NAME(dw_rows)(K, SH, R, 1, wv, base + ox0, col, pstride, bias, out + ox0, g->ow,
                             CD_MIN(DW_LANES, g->ow - ox0));
}

/* The plane of a K x K window (K = 3 or 5) by dw_band: four rows at a time
 * (eight sums for K = 3, where the registers hold them beside the taps),
 * then two, then one, with more runs of columns at once. col[j] is tap (0,
 * j)'s offset from a run's place in the phases ph. */
static inline __attribute__((always_inline)) void PANELS_NAME(dw_window)(const int K, const int SH,
                                                                        const cd_dw_geom *g, const float *ph,
                                                                        const int64_t *col, int64_t pstride,
                                                                        const float *taps, int64_t tap_step,
                                                                        float bias, float *out) {
    typedef PANELS_NAME(dw_vec) vec;
    vec wv[25];
#pragma GCC unroll 25
    for (int t = 0; t < K * K; t++) wv[t] = (vec){0} + taps[t * tap_step];
    int64_t oy = 0;
    for (; oy + 4 <= g->oh; oy += 4)
        PANELS_NAME(dw_band)(K, SH, 4, K == 3 ? 2 : 1, wv, g, ph + oy * SH * pstride, col, pstride, bias,
                             out + oy * g->ow);
    for (; oy + 2 <= g->oh; oy += 2)
        PANELS_NAME(dw_band)(K, SH, 2, K == 3 ? 4 : 2, wv, g, ph + oy * SH * pstride, col, pstride, bias,
                             out + oy * g->ow);
    if (oy < g->oh)
        PANELS_NAME(dw_band)(K, SH, 1, 4, wv, g, ph + oy * SH * pstride, col, pstride, bias, out + oy * g->ow);
}

/* Whether dw_window took the plane: 3 x 3 and 5 x 5 windows, rows one apart, stride 1 or 2 down. */
static int PANELS_NAME(dw_windowed)(const cd_dw_geom *g, const float *ph, const int64_t *col, int64_t pstride,
                                    const float *taps, int64_t tap_step, float bias, float *out) {
    if (g->dh != 1 || g->kh != g->kw || (g->sh != 1 && g->sh != 2)) return 0;
    const int s2 = g->sh == 2;
    if (g->kh == 3 && s2) PANELS_NAME(dw_window)(3, 2, g, ph, col, pstride, taps, tap_step, bias, out);
    else if (g->kh == 3) PANELS_NAME(dw_window)(3, 1, g, ph, col, pstride, taps, tap_step, bias, out);
    else if (g->kh == 5 && s2) PANELS_NAME(dw_window)(5, 2, g, ph, col, pstride, taps, tap_step, bias, out);
    else if (g->kh == 5) PANELS_NAME(dw_window)(5, 1, g, ph, col, pstride, taps, tap_step, bias, out);
    else return 0;
    return 1;
}

#ifndef DW_RUNS
#define DW_RUNS 4
#endif
#define DW_EACH(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)

static void PANELS_NAME(dw_plane)(const cd_dw_geom *g, const float *x, const float *taps, int64_t tap_step,
                                  float bias, float *out, float *scratch) {
    typedef PANELS_NAME(dw_vec) vec;
    const int64_t rows = g->h + 2 * g->ph, pstride = (g->w + 2 * g->pw + g->sw - 1) / g->sw + DW_LANES;
    const int64_t ntaps = g->kh * g->kw, chunks = (g->ow + DW_LANES - 1) / DW_LANES, runs = g->oh * chunks;
    int64_t *offset = (int64_t *)(scratch + PANELS_NAME(dw_phase_floats)(g)); /* 2 floats per int64_t */
    for (int64_t j = 0, r = 0, q = 0; j < g->kw; j++) { /* column j * dw = q * sw + r, without divisions */
        for (int64_t i = 0; i < g->kh; i++) offset[i * g->kw + j] = (r * rows + i * g->dh) * pstride + q;
        for (r += g->dw; r >= g->sw; r -= g->sw) q++;
    }
    PANELS_NAME(dw_phases)(g, x, scratch, rows, pstride);
    if (PANELS_NAME(dw_windowed)(g, scratch, offset, pstride, taps, tap_step, bias, out)) return;
    for (int64_t r0 = 0; r0 < runs; r0 += DW_RUNS) {
        const float *base[DW_RUNS];
        int64_t at[DW_RUNS], len[DW_RUNS];
        for (int k = 0; k < DW_RUNS; k++) { /* past the last run: the last again, not stored */
            const int64_t run = CD_MIN(r0 + k, runs - 1), oy = run / chunks, ox0 = run % chunks * DW_LANES;
            base[k] = scratch + oy * g->sh * pstride + ox0;
            at[k] = oy * g->ow + ox0;
            len[k] = r0 + k < runs ? CD_MIN(DW_LANES, g->ow - ox0) : 0;
        }
#define DW_INIT(k) vec a##k = (vec){0} + bias;
        DW_EACH(DW_INIT)
#undef DW_INIT
        for (int64_t t = 0; t < ntaps; t++) {
            const float w = taps[t * tap_step];
            const int64_t o = offset[t];
#define DW_TAP(k)                                  \
    if (k < DW_RUNS) {                             \
        vec v;                                     \
        memcpy(&v, base[k % DW_RUNS] + o, sizeof v); \
        a##k += w * v;                             \
    }
            DW_EACH(DW_TAP)
#undef DW_TAP
        }
#define DW_STORE(k) \
    if (k < DW_RUNS) memcpy(out + at[k % DW_RUNS], &a##k, (size_t)len[k % DW_RUNS] * sizeof(float));
        DW_EACH(DW_STORE)
#undef DW_STORE
    }
}

/* Floats of scratch dw_block needs. */
static int64_t PANELS_NAME(dw_block_scratch)(const cd_dw_geom *g) {
    return ((g->h + 2 * g->ph) * (g->w + 2 * g->pw) + g->kh * g->kw) * DW_LANES;
}

/* Up to DW_LANES small planes at once, vectors along the channels: the planes
 * go zero-padded into a channels-last buffer (lane l = plane l), the taps
 * beside them (or read in place where they already lie so: a panel of
 * cd_pack_panels holds sixteen channels' taps side by side), and the output
 * pixels of all the planes are runs of multiply-adds, DW_PIXELS pixels at a
 * time (independent sums: one alone waits on each multiply-add). Plane l is
 * x + l * xs_c, its taps taps + l * ch_step (tap t at t * tap_step), its
 * output out + l * oh * ow. */
#define DW_PIXELS 4
static void PANELS_NAME(dw_block)(const cd_dw_geom *g, const float *x, int64_t xs_c, int64_t planes,
                                  const float *taps, int64_t ch_step, int64_t tap_step, const float *bias,
                                  float *out, float *scratch) {
    typedef PANELS_NAME(dw_vec) vec;
    const int64_t pw_ = g->w + 2 * g->pw, ph_ = g->h + 2 * g->ph, ntaps = g->kh * g->kw, n = g->oh * g->ow;
    float *pad = scratch;
    const float *w = taps;
    memset(pad, 0, (size_t)(ph_ * pw_ * DW_LANES) * sizeof(float));
    if (ch_step != 1 || tap_step != DW_LANES) {
        float *wl = scratch + ph_ * pw_ * DW_LANES;
        memset(wl, 0, (size_t)(ntaps * DW_LANES) * sizeof(float));
        for (int64_t l = 0; l < planes; l++)
            for (int64_t t = 0; t < ntaps; t++) wl[t * DW_LANES + l] = taps[l * ch_step + t * tap_step];
        w = wl;
    }
    vec init = (vec){0};
    for (int64_t l = 0; l < planes; l++) {
        const float *plane = x + l * xs_c;
        for (int64_t y = 0; y < g->h; y++)
            for (int64_t xx = 0; xx < g->w; xx++)
                pad[((y + g->ph) * pw_ + xx + g->pw) * DW_LANES + l] = plane[y * g->xs_h + xx * g->xs_w];
        if (bias) init[l] = bias[l];
    }
    for (int64_t p0 = 0; p0 < n; p0 += DW_PIXELS) {
        const float *at[DW_PIXELS];
        vec acc[DW_PIXELS];
        for (int k = 0; k < DW_PIXELS; k++) { /* past the last pixel: the last again, not stored */
            const int64_t p = CD_MIN(p0 + k, n - 1), oy = p / g->ow, ox = p % g->ow;
            at[k] = pad + (oy * g->sh * pw_ + ox * g->sw) * DW_LANES;
            acc[k] = init;
        }
        for (int64_t i = 0; i < g->kh; i++)
            for (int64_t j = 0; j < g->kw; j++) {
                const int64_t o = (i * g->dh * pw_ + j * g->dw) * DW_LANES;
                vec wv;
                memcpy(&wv, w + (i * g->kw + j) * DW_LANES, sizeof wv);
#pragma GCC unroll 4
                for (int k = 0; k < DW_PIXELS; k++) {
                    vec v;
                    memcpy(&v, at[k] + o, sizeof v);
                    acc[k] += wv * v;
                }
            }
        for (int k = 0; k < DW_PIXELS && p0 + k < n; k++)
            for (int64_t l = 0; l < planes; l++) out[l * n + p0 + k] = acc[k][l];
    }
}

/* The epilogue's passes over a rows x n block (row stride ld): one loop nest
 * per activation, the choice made once per block (tiles' rows are short). */
#define EPI_EACH(stmt)                                    \
    for (int64_t r = 0; r < rows; r++) {                  \
        float *restrict yr = y + r * ld;                  \
        for (int64_t i = 0; i < n; i++) {                 \
            const float v = yr[i];                        \
            stmt;                                         \
        }                                                 \
    }

static void PANELS_NAME(epilogue)(float *y, int64_t rows, int64_t n, int64_t ld, const float *res, const cd_act *act) {
    if (res)
        for (int64_t r = 0; r < rows; r++) {
            float *restrict yr = y + r * ld;
            const float *restrict rr = res + r * ld;
            for (int64_t i = 0; i < n; i++) yr[i] += rr[i];
        }
    const float a = act->alpha, b = act->beta;
    switch (act->code) { /* NaN stays NaN, as in the ops these fuse */
    case CD_ACT_relu: EPI_EACH(yr[i] = v <= 0 ? 0.0f : v) break;
    case CD_ACT_leaky_relu: EPI_EACH(yr[i] = v > 0 ? v : a * v) break;
    case CD_ACT_clip: EPI_EACH(yr[i] = v < a ? a : v > b ? b : v) break;
    case CD_ACT_hard_sigmoid: EPI_EACH(const float h = a * v + b; yr[i] = h < 0 ? 0.0f : h > 1 ? 1.0f : h) break;
    case CD_ACT_hard_swish: /* ONNX HardSwish: alpha = 1/6 (a multiply, not a divide) */
        EPI_EACH(const float h = v * (1.0f / 6.0f) + 0.5f; yr[i] = v * (h < 0 ? 0.0f : h > 1 ? 1.0f : h)) break;
    case CD_ACT_sigmoid:
        for (int64_t r = 0; r < rows; r++) cd_unary_loop(CD_UNARY_sigmoid, CD_f32)(n, y + r * ld, y + r * ld);
        break;
    case CD_ACT_tanh:
        for (int64_t r = 0; r < rows; r++) cd_unary_loop(CD_UNARY_tanh, CD_f32)(n, y + r * ld, y + r * ld);
        break;
    case CD_ACT_gelu_erf:
        for (int64_t r = 0; r < rows; r++) cd_unary_loop(CD_UNARY_gelu_erf, CD_f32)(n, y + r * ld, y + r * ld);
        break;
    case CD_ACT_silu:
        for (int64_t r = 0; r < rows; r++) cd_unary_loop(CD_UNARY_silu, CD_f32)(n, y + r * ld, y + r * ld);
        break;
    default: break;
    }
    if (act->scale != 1.0f || act->shift != 0.0f) {
        const float sc = act->scale, sh = act->shift;
        EPI_EACH(yr[i] = v * sc + sh)
    }
}
#undef EPI_EACH

/* Fills the set's entries (its tile is set by the including file). */
static void PANELS_NAME(fill_panels)(cd_isa_ops *ops) {
    ops->dw_plane_f32 = PANELS_NAME(dw_plane);
    ops->dw_scratch_f32 = PANELS_NAME(dw_scratch);
    ops->dw_block_f32 = PANELS_NAME(dw_block);
    ops->dw_block_scratch_f32 = PANELS_NAME(dw_block_scratch);
    ops->epilogue_f32 = PANELS_NAME(epilogue);
}
