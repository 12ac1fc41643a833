/* Products with weights packed once: a model's constant weights go through
 * cd_pack_panels when it is loaded, and every later product reads them as panels
 * of 16 rows (each step of the sum one contiguous run of 16 values), while
 * the activations are read in place. Small products, where packing the
 * weights on every call costs as much as the product itself (a sentence
 * through an encoder, a batch-1 convolution net), then do no packing at all;
 * the bias, a residual and the activation are applied while the output tile
 * is still in cache.
 *
 * linear: out (m x n) = x (m x k) @ M^T with M (n x k) packed: the tile
 *   broadcasts x's values and loads M's panels (vectors along n).
 * conv2d: out[c_out][pixel] = W (c_out x K) @ col (K x pixels), W packed per
 *   group: the tile broadcasts W's values and loads rows of col (vectors along
 *   the pixels), col being the image itself for a pointwise convolution, else
 *   its im2col. Depthwise convolutions run plane by plane (dw_plane).
 *
 * Every output value is one tile's sum over the whole of k, in order, so
 * results do not depend on how the tiles are spread over the threads. */
#include "kernels/conv.h"
#include "kernels/panels.h"
#include "runtime/internal.h"
#include "runtime/isa.h"

static int check_act(int32_t act, double alpha, double beta, double scale, double shift, cd_act *out) {
    if (act < 0 || act >= CD_ACT_COUNT) return cd_fail("unknown activation %d", (int)act);
    *out = (cd_act){act, (float)alpha, (float)beta, (float)scale, (float)shift};
    return 0;
}

static int has_epilogue(const cd_act *act) {
    return act->code != CD_ACT_none || act->scale != 1.0f || act->shift != 0.0f;
}

/* ---- packing --------------------------------------------------------------------------- */
int cd_pack_panels(int32_t dtype, const int64_t *lay, const void *vw, void *vout) {
    if (dtype != CD_f32) return cd_fail("pack_panels is implemented for f32, got %s", cd_dtype_name(dtype));
    const int64_t batch = lay[0], rows = lay[1], depth = lay[2], sb = lay[3], sr = lay[4], sd = lay[5];
    if (batch < 0 || rows < 0 || depth < 0) return cd_fail("bad pack_panels sizes");
    const float *w = vw;
    float *out = vout;
    const int64_t panels = (rows + CD_PANEL - 1) / CD_PANEL;
    for (int64_t b = 0; b < batch; b++)
        for (int64_t p = 0; p < panels; p++)
            for (int64_t d = 0; d < depth; d++) {
                float *dst = out + ((b * panels + p) * depth + d) * CD_PANEL;
                for (int64_t i = 0; i < CD_PANEL; i++) {
                    const int64_t r = p * CD_PANEL + i;
                    dst[i] = r < rows ? w[b * sb + r * sr + d * sd] : 0.0f;
                }
            }
    return 0;
}

/* ---- linear ---------------------------------------------------------------------------- */
typedef struct {
    const float *x, *wp, *bias;
    float *out;
    int64_t m, n, k, xr, xc;
    int64_t col_blocks, rows_per_task;
    cd_act act;
    const int64_t *b_rows; /* p * CD_PANEL: the rows of a panel */
} lin_ctx;

static int lin_task(void *vctx, int64_t begin, int64_t end) {
    const lin_ctx *c = vctx;
    const int64_t MR = cd_ops.tile_mr, NR = cd_ops.tile_nr, panel = c->k * CD_PANEL;
    for (int64_t t = begin; t < end; t++) {
        const int64_t j0 = t % c->col_blocks * NR, nr = CD_MIN(NR, c->n - j0);
        const int64_t r0 = t / c->col_blocks * c->rows_per_task, r1 = CD_MIN(c->m, r0 + c->rows_per_task);
        const float *b = c->wp + j0 / CD_PANEL * panel;
        for (int64_t i0 = r0; i0 < r1; i0 += MR) {
            const int64_t mr = CD_MIN(MR, r1 - i0);
            float *out = c->out + i0 * c->n + j0;
            cd_ops.tile_f32(c->k, c->x + i0 * c->xr, c->xr, c->xc, b, c->b_rows, panel, out, c->n, mr, nr, NULL,
                            c->bias ? c->bias + j0 : NULL);
            if (has_epilogue(&c->act))
                cd_ops.epilogue_f32(out, mr, nr, c->n, NULL, &c->act);
        }
    }
    return 0;
}

/* b_rows[p] = p * step for p < k (cd_scratch: the caller frees it); NULL + error when out of memory. */
static int64_t *row_table(int64_t k, int64_t step) {
    int64_t *rows = cd_scratch(CD_MAX(k, 1) * (int64_t)sizeof(int64_t));
    for (int64_t p = 0; rows && p < k; p++) rows[p] = p * step;
    return rows;
}

static int run_linear(lin_ctx *c) {
    if (c->m == 0 || c->n == 0) return 0;
    int64_t *rows = row_table(c->k, CD_PANEL);
    if (!rows) return -1;
    c->b_rows = rows;
    c->col_blocks = (c->n + cd_ops.tile_nr - 1) / cd_ops.tile_nr;
    c->rows_per_task = 8 * cd_ops.tile_mr;
    int rc = cd_parallel_for(c->col_blocks * ((c->m + c->rows_per_task - 1) / c->rows_per_task), 1, lin_task, c);
    cd_scratch_free(rows);
    return rc;
}

int cd_linear_panels(int32_t dtype, const int64_t *desc, const void *x, const void *wp, const void *bias, void *out,
                     int32_t act, double alpha, double beta) {
    if (dtype != CD_f32) return cd_fail("linear_panels is implemented for f32, got %s", cd_dtype_name(dtype));
    lin_ctx c = {x, wp, bias, out, desc[0], desc[1], desc[2], desc[3], desc[4], 0, 0, {0, 0, 0, 1, 0}, NULL};
    if (c.m < 0 || c.n < 0 || c.k < 0) return cd_fail("bad linear_panels sizes");
    if (check_act(act, alpha, beta, 1.0, 0.0, &c.act)) return -1;
    return run_linear(&c);
}

/* ---- conv2d ---------------------------------------------------------------------------- */
/* Tasks cover PANELS_PER_TASK panels of output channels by COL_TILES tiles of pixels,
 * or output rows: ROWS_PER_TASK of them read from the padded image (a stride-1
 * convolution's taps read the image's rows in place: no im2col), or, from an im2col
 * of their own, as many as take about ROW_BLOCK_FLOATS of columns (ROW_BLOCK_MIN_COLS
 * columns at least: each block streams every weight once). */
#define PANELS_PER_TASK 4
#define COL_TILES 4
#define ROWS_PER_TASK 2
#define ROW_BLOCK_FLOATS 32768
#define ROW_BLOCK_MIN_COLS 128

typedef struct {
    const conv_params *q;
    const int64_t *xs;
    const float *x, *wp, *bias, *res, *cols;
    float *out;
    int64_t b, g;          /* the image and group the tiles are of */
    const int64_t *b_rows; /* where B's rows start (in cols, or in pad) */
    const float *pad;      /* the group's input zero-padded (stride-1 convolutions) */
    int64_t pad_w, pad_plane;
    int64_t panel_groups, col_blocks, rows_per_task;
    cd_act act;
    int64_t row_cols;      /* implicit: output columns a task takes of its rows (all of them, or a run) */
} panels_conv_ctx;

/* The tile of output channels [ch, ch + mr) of panel pn by output pixels [at, at + nr) of
 * the group: B = b with rows at b_rows (the epilogue goes over whole blocks: conv_epilogue). */
static void conv_tile(const panels_conv_ctx *c, int64_t pn, int64_t i0, int64_t mr, const float *b, int64_t at,
                      int64_t nr) {
    const conv_params *q = c->q;
    const int64_t N = q->oh * q->ow, cout_g = q->cout / q->groups, K = q->cin / q->groups * q->kh * q->kw;
    const int64_t panels_g = (cout_g + CD_PANEL - 1) / CD_PANEL, ch = pn * CD_PANEL + i0;
    float *out = c->out + (c->b * q->cout + c->g * cout_g + ch) * N + at;
    cd_ops.tile_f32(K, c->wp + (c->g * panels_g + pn) * K * CD_PANEL + i0, 1, CD_PANEL, b, c->b_rows, CD_PANEL, out, N,
                    mr, nr, c->bias ? c->bias + c->g * cout_g + ch : NULL, NULL);
}

/* The residual and activation over output channels [p0, p1) * CD_PANEL of the group by pixels
 * [at, at + n), once the tiles are done (while they are still in cache): one call a block. */
static void conv_epilogue(const panels_conv_ctx *c, int64_t p0, int64_t p1, int64_t at, int64_t n) {
    const conv_params *q = c->q;
    if (!has_epilogue(&c->act) && !c->res) return;
    const int64_t N = q->oh * q->ow, cout_g = q->cout / q->groups, ch0 = p0 * CD_PANEL;
    const int64_t first = (c->b * q->cout + c->g * cout_g + ch0) * N + at;
    cd_ops.epilogue_f32(c->out + first, CD_MIN(cout_g, p1 * CD_PANEL) - ch0, n, N, c->res ? c->res + first : NULL,
                        &c->act);
}

/* Every tile of panels [p0, p1) over output pixels [j0, j1) (B from cols + j - origin), then their epilogue. */
static void run_tiles(const panels_conv_ctx *c, const float *cols, int64_t origin, int64_t j0, int64_t j1,
                      int64_t p0, int64_t p1) {
    const int64_t MR = cd_ops.tile_mr, NR = cd_ops.tile_nr, cout_g = c->q->cout / c->q->groups;
    for (int64_t j = j0; j < j1; j += NR)
        for (int64_t pn = p0; pn < p1; pn++) {
            const int64_t rows = CD_MIN(CD_PANEL, cout_g - pn * CD_PANEL);
            for (int64_t i0 = 0; i0 < rows; i0 += MR)
                conv_tile(c, pn, i0, CD_MIN(MR, rows - i0), cols + j - origin, j, CD_MIN(NR, j1 - j));
        }
    conv_epilogue(c, p0, p1, j0, j1 - j0);
}

/* Task t: PANELS_PER_TASK panels by COL_TILES tiles of columns of the shared c->cols. */
static int conv_tiles_task(void *vctx, int64_t begin, int64_t end) {
    const panels_conv_ctx *c = vctx;
    const conv_params *q = c->q;
    const int64_t NR = cd_ops.tile_nr, N = q->oh * q->ow;
    const int64_t panels_g = (q->cout / q->groups + CD_PANEL - 1) / CD_PANEL;
    for (int64_t t = begin; t < end; t++) {
        const int64_t p0 = t / c->col_blocks * PANELS_PER_TASK, p1 = CD_MIN(panels_g, p0 + PANELS_PER_TASK);
        const int64_t j0 = t % c->col_blocks * COL_TILES * NR, j1 = CD_MIN(N, j0 + COL_TILES * NR);
        run_tiles(c, c->cols, 0, j0, j1, p0, p1);
    }
    return 0;
}

/* Task t: output rows [t * rows_per_task, ...) of every panel, from an im2col of
 * its own (a block of columns that stays in cache, instead of the whole image's). */
static int conv_rows_task(void *vctx, int64_t begin, int64_t end) {
    const panels_conv_ctx *vc = vctx;
    panels_conv_ctx c = *vc;
    const conv_params *q = c.q;
    const int64_t cin_g = q->cin / q->groups, K = cin_g * q->kh * q->kw, rb = c.rows_per_task;
    const int64_t panels_g = (q->cout / q->groups + CD_PANEL - 1) / CD_PANEL;
    const char *image = (const char *)(c.x + c.b * c.xs[0] + c.g * cin_g * c.xs[1]);
    float *col = cd_scratch(K * rb * q->ow * (int64_t)sizeof(float) + 64);
    int64_t *rows = row_table(K, rb * q->ow);
    int rc = col && rows ? 0 : -1;
    c.b_rows = rows;
    for (int64_t t = begin; t < end && rc == 0; t++) {
        const int64_t oy0 = t * rb, oy1 = CD_MIN(q->oh, oy0 + rb), n = (oy1 - oy0) * q->ow;
        cd_conv_im2col(CD_f32, CD_f32, q, c.xs, image, col, 0, K, oy0, oy1);
        if (n != rb * q->ow)
            for (int64_t p = 0; p < K; p++) rows[p] = p * n;
        run_tiles(&c, col, oy0 * q->ow, oy0 * q->ow, oy1 * q->ow, 0, panels_g);
    }
    cd_scratch_free(col);
    cd_scratch_free(rows);
    return rc;
}

/* Task t: ROWS_PER_TASK output rows of PANELS_PER_TASK panels, a run of c->row_cols columns of
 * them, each tile a run of an output row whose taps read the rows of the padded image (stride 1
 * along rows). */
static int conv_implicit_task(void *vctx, int64_t begin, int64_t end) {
    const panels_conv_ctx *c = vctx;
    const conv_params *q = c->q;
    const int64_t MR = cd_ops.tile_mr, NR = cd_ops.tile_nr, cout_g = q->cout / q->groups;
    const int64_t panels_g = (cout_g + CD_PANEL - 1) / CD_PANEL;
    const int64_t row_tasks = (q->oh + ROWS_PER_TASK - 1) / ROWS_PER_TASK;
    const int64_t runs = (q->ow + c->row_cols - 1) / c->row_cols;
    for (int64_t t = begin; t < end; t++) {
        const int64_t oy0 = t % row_tasks * ROWS_PER_TASK, oy1 = CD_MIN(q->oh, oy0 + ROWS_PER_TASK);
        const int64_t x0 = t / row_tasks % runs * c->row_cols, x1 = CD_MIN(q->ow, x0 + c->row_cols);
        const int64_t p0 = t / (row_tasks * runs) * PANELS_PER_TASK, p1 = CD_MIN(panels_g, p0 + PANELS_PER_TASK);
        for (int64_t oy = oy0; oy < oy1; oy++)
            for (int64_t ox = x0; ox < x1; ox += NR)
                for (int64_t pn = p0; pn < p1; pn++) {
                    const int64_t rows = CD_MIN(CD_PANEL, cout_g - pn * CD_PANEL);
                    for (int64_t i0 = 0; i0 < rows; i0 += MR)
                        conv_tile(c, pn, i0, CD_MIN(MR, rows - i0), c->pad + oy * q->sh * c->pad_w + ox,
                                  oy * q->ow + ox, CD_MIN(NR, x1 - ox));
                }
        if (runs == 1) conv_epilogue(c, p0, p1, oy0 * q->ow, (oy1 - oy0) * q->ow);
        else
            for (int64_t oy = oy0; oy < oy1; oy++) conv_epilogue(c, p0, p1, oy * q->ow + x0, x1 - x0);
    }
    return 0;
}

/* Task t: channel t of the group zero-padded into c->pad. */
static int pad_task(void *vctx, int64_t begin, int64_t end) {
    const panels_conv_ctx *c = vctx;
    const conv_params *q = c->q;
    const float *image = c->x + c->b * c->xs[0] + c->g * (q->cin / q->groups) * c->xs[1];
    for (int64_t ch = begin; ch < end; ch++) {
        float *dst = (float *)c->pad + ch * c->pad_plane;
        memset(dst, 0, (size_t)c->pad_plane * sizeof(float));
        for (int64_t y = 0; y < q->h; y++) {
            const float *src = image + ch * c->xs[1] + y * c->xs[2];
            float *row = dst + (y + q->ph) * c->pad_w + q->pw;
            if (c->xs[3] == 1) memcpy(row, src, (size_t)q->w * sizeof(float));
            else for (int64_t xx = 0; xx < q->w; xx++) row[xx] = src[xx * c->xs[3]];
        }
    }
    return 0;
}

/* Runs each output row is split into: one where the rows and panels make tasks enough for the pool
 * (IMPLICIT_TASKS a thread), else as many as make them, each of a tile's columns or more (a 1-d
 * convolution is one long row: without runs, as many tasks as its panels' groups, often one). */
#define IMPLICIT_TASKS 4
static int64_t implicit_runs(const conv_params *q, int64_t tasks) {
    const int64_t want = IMPLICIT_TASKS * cd_num_threads(), tiles = (q->ow + cd_ops.tile_nr - 1) / cd_ops.tile_nr;
    if (tasks >= want || want == IMPLICIT_TASKS) return 1; /* one thread: no split */
    return CD_MAX(1, CD_MIN(tiles, (want + tasks - 1) / tasks));
}

/* A stride-1 convolution of one image's group without im2col: its input padded once,
 * B's rows the taps' rows in it. */
static int conv_group_implicit(panels_conv_ctx *c) {
    const conv_params *q = c->q;
    const int64_t cin_g = q->cin / q->groups, K = cin_g * q->kh * q->kw;
    const int64_t panels_g = (q->cout / q->groups + CD_PANEL - 1) / CD_PANEL;
    c->pad_w = q->w + 2 * q->pw;
    c->pad_plane = (q->h + 2 * q->ph) * c->pad_w;
    float *pad = cd_scratch(cin_g * c->pad_plane * (int64_t)sizeof(float) + 64);
    int64_t *rows = cd_scratch(K * (int64_t)sizeof(int64_t));
    int rc = pad && rows ? 0 : -1;
    for (int64_t p = 0; rc == 0 && p < K; p++) { /* p = (channel, i, j): the tap's row in the padded plane */
        const int64_t j = p % q->kw, i = p / q->kw % q->kh, ch = p / (q->kw * q->kh);
        rows[p] = ch * c->pad_plane + i * q->dh * c->pad_w + j * q->dw;
    }
    c->pad = pad;
    c->b_rows = rows;
    if (rc == 0) rc = cd_parallel_for(cin_g, 1, pad_task, c);
    const int64_t row_tasks = (q->oh + ROWS_PER_TASK - 1) / ROWS_PER_TASK;
    const int64_t panel_tasks = (panels_g + PANELS_PER_TASK - 1) / PANELS_PER_TASK;
    const int64_t NR = cd_ops.tile_nr, tiles = (q->ow + NR - 1) / NR, split = implicit_runs(q, row_tasks * panel_tasks);
    c->row_cols = (tiles + split - 1) / split * NR; /* whole tiles a run */
    const int64_t runs = (q->ow + c->row_cols - 1) / c->row_cols;
    if (rc == 0) rc = cd_parallel_for(row_tasks * runs * panel_tasks, 1, conv_implicit_task, c);
    cd_scratch_free(pad);
    cd_scratch_free(rows);
    return rc;
}

typedef struct {
    const conv_params *q;
    const int64_t *xs;
    const char *image;
    float *col;
} im2col_ctx;

static int im2col_task(void *vctx, int64_t begin, int64_t end) {
    const im2col_ctx *c = vctx;
    cd_conv_im2col(CD_f32, CD_f32, c->q, c->xs, c->image, c->col, begin, end, 0, c->q->oh);
    return 0;
}

/* Planes with fewer outputs than this go DW_BLOCK channels at a time (dw_block). */
#define SMALL_PLANE 32
#define DW_BLOCK 16

static cd_dw_geom dw_geometry(const panels_conv_ctx *c) {
    const conv_params *q = c->q;
    return (cd_dw_geom){q->h, q->w, q->kh, q->kw, q->sh, q->sw, q->ph, q->pw, q->dh, q->dw, q->oh, q->ow,
                        c->xs[2], c->xs[3]};
}

/* Scratch floats a depthwise task keeps on its stack (a plane of up to about 60 x 60): planes
 * are small, and an allocation per task cost as much as a 5 x 80 plane's sums. */
#define DW_STACK_FLOATS 4096

/* Task t: one plane (or, for small planes, DW_BLOCK of them). */
static int depthwise_task(void *vctx, int64_t begin, int64_t end) {
    const panels_conv_ctx *c = vctx;
    const conv_params *q = c->q;
    const cd_dw_geom g = dw_geometry(c);
    const int64_t N = q->oh * q->ow, K = q->kh * q->kw, blocks = (q->cout + DW_BLOCK - 1) / DW_BLOCK;
    const int small = N < SMALL_PLANE;
    const int64_t floats = small ? cd_ops.dw_block_scratch_f32(&g) : cd_ops.dw_scratch_f32(&g);
    float stack[DW_STACK_FLOATS] __attribute__((aligned(64)));
    float *scratch = floats <= DW_STACK_FLOATS ? stack : cd_scratch(floats * (int64_t)sizeof(float));
    if (!scratch) return -1;
    for (int64_t t = begin; t < end; t++) {
        const int64_t b = small ? t / blocks : t / q->cout, ch = small ? t % blocks * DW_BLOCK : t % q->cout;
        const int64_t planes = small ? CD_MIN(DW_BLOCK, q->cout - ch) : 1, first = b * q->cout + ch;
        /* the taps of channel ch: lane ch % 16 of panel ch / 16 (one panel holds sixteen channels' taps) */
        const float *x = c->x + b * c->xs[0] + ch * c->xs[1];
        const float *taps = c->wp + ch / CD_PANEL * K * CD_PANEL + ch % CD_PANEL;
        float *out = c->out + first * N;
        if (small)
            cd_ops.dw_block_f32(&g, x, c->xs[1], planes, taps, 1, CD_PANEL, c->bias ? c->bias + ch : NULL, out,
                                scratch);
        else
            cd_ops.dw_plane_f32(&g, x, taps, CD_PANEL, c->bias ? c->bias[ch] : 0.0f, out, scratch);
        if (has_epilogue(&c->act) || c->res)
            cd_ops.epilogue_f32(out, 1, planes * N, 0, c->res ? c->res + first * N : NULL, &c->act);
    }
    if (scratch != stack) cd_scratch_free(scratch);
    return 0;
}

/* Whether a pointwise convolution reads its columns in the image: its planes' pixels are contiguous. */
static int reads_image(const conv_params *q, const int64_t *xs) {
    return q->kh == 1 && q->kw == 1 && q->sh == 1 && q->sw == 1 && q->ph == 0 && q->pw == 0 && xs[3] == 1 &&
           xs[2] == q->w;
}

/* A group with fewer pixels than a panel has rows runs transposed: T (pixels x
 * c_out/g) = col^T @ W^T, vectors along the output channels, as a linear
 * product; then T goes to the output planes with the residual and activation. */
static int conv_group_transposed(const panels_conv_ctx *c, const float *cols, int64_t cols_step) {
    const conv_params *q = c->q;
    const int64_t cout_g = q->cout / q->groups, K = q->cin / q->groups * q->kh * q->kw, N = q->oh * q->ow;
    const int64_t panels_g = (cout_g + CD_PANEL - 1) / CD_PANEL;
    float *t = cd_scratch(N * cout_g * (int64_t)sizeof(float));
    if (!t) return -1;
    lin_ctx lc = {cols, c->wp + c->g * panels_g * K * CD_PANEL, c->bias ? c->bias + c->g * cout_g : NULL, t, N,
                  cout_g, K, 1, cols_step, 0, 0, {CD_ACT_none, 0, 0, 1, 0}, NULL};
    int rc = run_linear(&lc);
    const int64_t first = (c->b * q->cout + c->g * cout_g) * N;
    for (int64_t ch = 0; ch < cout_g && rc == 0; ch++) {
        float *row = c->out + first + ch * N;
        for (int64_t i = 0; i < N; i++) row[i] = t[i * cout_g + ch];
        if (has_epilogue(&c->act) || c->res)
            cd_ops.epilogue_f32(row, 1, N, 0, c->res ? c->res + first + ch * N : NULL, &c->act);
    }
    cd_scratch_free(t);
    return rc;
}

/* One image's group: its columns (the image itself when reads_image, else
 * its im2col into col), then the tiles. */
static int conv_group(panels_conv_ctx *c, float *col) {
    const conv_params *q = c->q;
    const int64_t cin_g = q->cin / q->groups, N = q->oh * q->ow, K = cin_g * q->kh * q->kw;
    const float *image = c->x + c->b * c->xs[0] + c->g * cin_g * c->xs[1];
    int64_t step = N;
    if (!col) {
        c->cols = image;
        step = c->xs[1];
    } else {
        im2col_ctx ic = {q, c->xs, (const char *)image, col};
        int rc = cd_parallel_for(K, CD_MAX(1, 4096 / CD_MAX(N, 1)), im2col_task, &ic);
        if (rc) return rc;
        c->cols = col;
    }
    if (N < CD_PANEL) return conv_group_transposed(c, c->cols, step);
    int64_t *rows = row_table(K, step);
    if (!rows) return -1;
    c->b_rows = rows;
    int rc = cd_parallel_for(c->panel_groups * c->col_blocks, 1, conv_tiles_task, c);
    cd_scratch_free(rows);
    return rc;
}

int cd_conv2d_panels(int32_t dtype, const int64_t *p, const int64_t *lay, const void *x, const void *wp,
                     const void *bias, const void *res, void *out, int32_t act, double alpha, double beta,
                     double scale, double shift) {
    if (dtype != CD_f32) return cd_fail("conv2d_panels is implemented for f32, got %s", cd_dtype_name(dtype));
    conv_params q;
    if (cd_conv_parse(p, &q)) return -1;
    panels_conv_ctx c = {&q, lay, x, wp, bias, res, NULL, out, 0, 0, NULL, NULL, 0, 0, 0, 0, 0, {0, 0, 0, 1, 0}, 0};
    if (check_act(act, alpha, beta, scale, shift, &c.act)) return -1;
    const int64_t cin_g = q.cin / q.groups, cout_g = q.cout / q.groups, N = q.oh * q.ow;
    if (q.b == 0 || q.cout == 0 || N == 0) return 0;
    if (cin_g == 1 && cout_g == 1) {
        const int64_t units = N < SMALL_PLANE ? (q.cout + DW_BLOCK - 1) / DW_BLOCK : q.cout;
        /* several small planes a task: a task's start is not free either */
        return cd_parallel_for(q.b * units, CD_MAX(1, 2048 / (N * (N < SMALL_PLANE ? DW_BLOCK : 1))),
                               depthwise_task, &c);
    }
    const int64_t panels_g = (cout_g + CD_PANEL - 1) / CD_PANEL;
    c.panel_groups = (panels_g + PANELS_PER_TASK - 1) / PANELS_PER_TASK;
    c.col_blocks = (N + COL_TILES * cd_ops.tile_nr - 1) / (COL_TILES * cd_ops.tile_nr);
    /* Stride-1 rows of a vector or more read the padded image; else an im2col, a few output rows at a
     * time when that makes more than one block (it stays in cache). */
    const int64_t K = cin_g * q.kh * q.kw, direct = reads_image(&q, lay);
    const int implicit = !direct && q.sw == 1 && q.ow >= CD_PANEL;
    c.rows_per_task = CD_MAX((ROW_BLOCK_MIN_COLS + q.ow - 1) / q.ow, ROW_BLOCK_FLOATS / (K * q.ow));
    const int64_t row_tasks = (q.oh + c.rows_per_task - 1) / c.rows_per_task;
    const int by_rows = !direct && !implicit && N >= CD_PANEL && row_tasks > 1;
    float *col = NULL;
    if (!direct && !implicit && !by_rows && !(col = cd_scratch(K * N * (int64_t)sizeof(float) + 64))) return -1;
    int rc = 0;
    for (c.b = 0; c.b < q.b && rc == 0; c.b++)
        for (c.g = 0; c.g < q.groups && rc == 0; c.g++)
            rc = implicit ? conv_group_implicit(&c)
                 : by_rows ? cd_parallel_for(row_tasks, 1, conv_rows_task, &c) : conv_group(&c, col);
    cd_scratch_free(col);
    return rc;
}
