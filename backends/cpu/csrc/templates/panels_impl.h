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

/* Floats of scratch the plane of dw_plane needs: the phases, then the taps' offsets. */
static int64_t PANELS_NAME(dw_scratch)(const cd_dw_geom *g) {
    const int64_t rows = g->h + 2 * g->ph, pstride = (g->w + 2 * g->pw + g->sw - 1) / g->sw + DW_LANES;
    return g->sw * rows * pstride + 2 * g->kh * g->kw;
}

/* Each run of DW_LANES outputs of a row sums all the taps in a register and is
 * stored once; tap t reads at offset[t] from the run's place in phase 0. */
static void PANELS_NAME(dw_plane)(const cd_dw_geom *g, const float *x, const float *taps, int64_t tap_step,
                                  float bias, float *out, float *scratch) {
    typedef PANELS_NAME(dw_vec) vec;
    const int64_t rows = g->h + 2 * g->ph, pstride = (g->w + 2 * g->pw + g->sw - 1) / g->sw + DW_LANES;
    const int64_t ntaps = g->kh * g->kw;
    int64_t *offset = (int64_t *)(scratch + g->sw * rows * pstride); /* 2 floats per int64_t */
    for (int64_t j = 0, r = 0, q = 0; j < g->kw; j++) { /* column j * dw = q * sw + r, without divisions */
        for (int64_t i = 0; i < g->kh; i++) offset[i * g->kw + j] = (r * rows + i * g->dh) * pstride + q;
        for (r += g->dw; r >= g->sw; r -= g->sw) q++;
    }
    PANELS_NAME(dw_phases)(g, x, scratch, rows, pstride);
    for (int64_t oy = 0; oy < g->oh; oy++) {
        const float *base = scratch + oy * g->sh * pstride;
        for (int64_t ox0 = 0; ox0 < g->ow; ox0 += DW_LANES) {
            vec acc = (vec){0} + bias;
            for (int64_t t = 0; t < ntaps; t++) {
                vec v;
                memcpy(&v, base + ox0 + offset[t], sizeof v);
                acc += taps[t * tap_step] * v;
            }
            memcpy(out + oy * g->ow + ox0, &acc, (size_t)CD_MIN(DW_LANES, g->ow - ox0) * sizeof(float));
        }
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
    ops->epilogue_f32 = PANELS_NAME(epilogue);
}
