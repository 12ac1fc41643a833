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
    memset(ph, 0, (size_t)(sw * rows * pstride) * sizeof(float));
    for (int64_t sy = 0; sy < g->h; sy++) {
        const float *src = x + sy * g->xs_h;
        float *row = ph + (sy + g->ph) * pstride;
        if (sw == 1 && g->xs_w == 1) {
            memcpy(row + g->pw, src, (size_t)g->w * sizeof(float));
            continue;
        }
        for (int64_t r = 0; r < sw; r++) { /* padded column t * sw + r is input column t * sw + r - pw */
            float *phase = row + r * rows * pstride;
            int64_t t = g->pw > r ? (g->pw - r + sw - 1) / sw : 0;
            for (int64_t sx = t * sw + r - g->pw; sx < g->w; t++, sx += sw) phase[t] = src[sx * g->xs_w];
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
 * beside them, and each output pixel of all the planes is one run of
 * multiply-adds. Plane l is x + l * xs_c, its taps taps + l * ch_step (tap t
 * at t * tap_step), its output out + l * oh * ow. */
static void PANELS_NAME(dw_block)(const cd_dw_geom *g, const float *x, int64_t xs_c, int64_t planes,
                                  const float *taps, int64_t ch_step, int64_t tap_step, const float *bias,
                                  float *out, float *scratch) {
    typedef PANELS_NAME(dw_vec) vec;
    const int64_t pw_ = g->w + 2 * g->pw, ph_ = g->h + 2 * g->ph, ntaps = g->kh * g->kw, n = g->oh * g->ow;
    float *pad = scratch, *w = scratch + ph_ * pw_ * DW_LANES;
    memset(pad, 0, (size_t)(ph_ * pw_ * DW_LANES) * sizeof(float));
    memset(w, 0, (size_t)(ntaps * DW_LANES) * sizeof(float));
    vec init = (vec){0};
    for (int64_t l = 0; l < planes; l++) {
        const float *plane = x + l * xs_c;
        for (int64_t y = 0; y < g->h; y++)
            for (int64_t xx = 0; xx < g->w; xx++)
                pad[((y + g->ph) * pw_ + xx + g->pw) * DW_LANES + l] = plane[y * g->xs_h + xx * g->xs_w];
        for (int64_t t = 0; t < ntaps; t++) w[t * DW_LANES + l] = taps[l * ch_step + t * tap_step];
        if (bias) init[l] = bias[l];
    }
    for (int64_t oy = 0; oy < g->oh; oy++)
        for (int64_t ox = 0; ox < g->ow; ox++) {
            vec acc = init;
            for (int64_t i = 0; i < g->kh; i++) {
                const float *row = pad + ((oy * g->sh + i * g->dh) * pw_ + ox * g->sw) * DW_LANES;
                for (int64_t j = 0; j < g->kw; j++) {
                    vec v, wv;
                    memcpy(&v, row + j * g->dw * DW_LANES, sizeof v);
                    memcpy(&wv, w + (i * g->kw + j) * DW_LANES, sizeof wv);
                    acc += wv * v;
                }
            }
            for (int64_t l = 0; l < planes; l++) out[l * n + oy * g->ow + ox] = acc[l];
        }
}

static void PANELS_NAME(epilogue)(float *restrict y, int64_t n, const float *restrict res, const cd_act *act) {
    if (res)
        for (int64_t i = 0; i < n; i++) y[i] += res[i];
    const float a = act->alpha, b = act->beta;
    switch (act->code) { /* NaN stays NaN, as in the ops these fuse */
    case CD_ACT_relu:
        for (int64_t i = 0; i < n; i++) y[i] = y[i] <= 0 ? 0.0f : y[i];
        break;
    case CD_ACT_leaky_relu:
        for (int64_t i = 0; i < n; i++) y[i] = y[i] > 0 ? y[i] : a * y[i];
        break;
    case CD_ACT_clip:
        for (int64_t i = 0; i < n; i++) y[i] = y[i] < a ? a : y[i] > b ? b : y[i];
        break;
    case CD_ACT_hard_sigmoid:
        for (int64_t i = 0; i < n; i++) {
            float v = a * y[i] + b;
            y[i] = v < 0 ? 0.0f : v > 1 ? 1.0f : v;
        }
        break;
    case CD_ACT_hard_swish:
        for (int64_t i = 0; i < n; i++) {
            float v = y[i] / 6.0f + 0.5f;
            y[i] *= v < 0 ? 0.0f : v > 1 ? 1.0f : v;
        }
        break;
    case CD_ACT_sigmoid: cd_unary_loop(CD_UNARY_sigmoid, CD_f32)(n, y, y); break;
    case CD_ACT_tanh: cd_unary_loop(CD_UNARY_tanh, CD_f32)(n, y, y); break;
    case CD_ACT_gelu_erf: cd_unary_loop(CD_UNARY_gelu_erf, CD_f32)(n, y, y); break;
    case CD_ACT_silu: cd_unary_loop(CD_UNARY_silu, CD_f32)(n, y, y); break;
    default: break;
    }
    if (act->scale != 1.0f || act->shift != 0.0f) {
        const float sc = act->scale, sh = act->shift;
        for (int64_t i = 0; i < n; i++) y[i] = y[i] * sc + sh;
    }
}

/* Fills the set's entries (its tile is set by the including file). */
static void PANELS_NAME(fill_panels)(cd_isa_ops *ops) {
    ops->dw_plane_f32 = PANELS_NAME(dw_plane);
    ops->dw_scratch_f32 = PANELS_NAME(dw_scratch);
    ops->dw_block_f32 = PANELS_NAME(dw_block);
    ops->dw_block_scratch_f32 = PANELS_NAME(dw_block_scratch);
    ops->epilogue_f32 = PANELS_NAME(epilogue);
}
