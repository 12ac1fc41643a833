/* The GEMM, compiled once per instruction set around its microkernels
 * (included by arch/generic/gemm_generic.c, arch/x86/gemm_avx2.c and
 * gemm_avx512.c). The including file defines:
 *
 *   GEMM_ENTRY            the cd_gemm_fn to define (cd_gemm_avx512...)
 *   F32_MR, F32_NR        the f32 register tile, and micro_f32()
 *   F64_MR, F64_NR        the f64 register tile, and micro_f64()
 *   F32_KC, F64_KC        the deepest K slice (an expression, evaluated once)
 *   F32_KC_SHARED         (optional) f32's deepest K slice where B's panels are shared
 *                         (rows past one MC block of F32_KC's blocking)
 *   micro_f32_rows(), micro_f64_rows()  full-height tiles with A read in place
 *   GEMM_MICRO_PACKING    (optional) micro_T_packing() and micro_T_rows_packing():
 *                         whole tiles that copy B's panel from its rows as they
 *                         read it (arch/x86/gemm_micro.h), so B's pass of packing
 *                         is folded into the first tiles down each panel
 *   GEMM_BF16_DOT         (optional) micro_bf16() and the pair packers of the
 *                         bf16 dot-product path
 *   GEMM_A_L2_SHARE       (optional, default 6) the part of L2 an A block takes
 *   GEMM_B_L2_SHARE       (optional) the part of L2 a chunk of shared B panels
 *                         takes, each A panel then running along the chunk's
 *                         panels (C's rows); without it each B panel runs down
 *                         the A block's panels (C's columns)
 *   GEMM_B_L3_SHARE       (optional, default 8) the part of L3 a block of B takes
 *
 * MC and NC are sized at run time from this CPU's caches (cd_cache_bytes):
 * an MC x KC block of A takes a sixth of L2 (GEMM_A_L2_SHARE), leaving room
 * for the B micro-panels streaming through it and for C; a KC x NC block of B takes an eighth
 * of L3 (GEMM_B_L3_SHARE). KC is the instruction set's: for AVX-512, a sweep on Zen 4 (1 MiB
 * L2) found the deepest that keeps these blocks in their caches fastest
 * (KC 1024, MC 42 for f32): fewer passes over C; AVX2's smaller tile keeps
 * its B micro-panel in L1d where a task packs its own, whose size sets KC, and
 * its A panel there where B's panels are shared (F32_KC_SHARED, gemm_avx2.c). K is cut into
 * slices of equal depth up to KC (k_slice).
 *
 * micro_T(kc, a_panel, b_panel, ldb, c, ldc, mr, nr, accumulate) computes an
 * mr x nr (<= MR x NR) tile of C = (accumulate ? C : 0) + A_panel @ B_panel,
 * B's rows ldb apart (NR when packed).
 *
 * Blocking follows BLIS: for each NC-wide block of columns and KC-deep slice
 * of K, B is packed into NR-wide panels (shared by all threads); each thread
 * then packs MC-row blocks of A into MR-row panels and runs the microkernel
 * over its share of the tiles (templates/gemm_driver.h); a row split deals
 * out at least one task per MC block, so a thread the OS keeps waiting
 * leaves its blocks to the others. When all rows fit
 * one MC block, each B panel is used once, so each task packs the panels it
 * uses just before using them. A B whose rows are contiguous (f32, f64) is
 * packed by the first tile down each panel instead, which reads it from its
 * rows and stores it into the panel as it multiplies (micro_T_packing): a
 * task's own panels always, shared ones when no other task reads them and
 * B's rows are less than a page apart and line-aligned (gemm_driver.h, plan_).
 * Small operands skip packing (use_in_place). Threads split M or N, never K,
 * so every element of C is computed by the same sequence of operations
 * whatever the thread count. Rows or columns of one (m == 1 or n == 1) take
 * a GEMV path that streams the matrix without packing it (f32, f64, and bf16
 * for a row times a row-major matrix: LLM decoding). */
#include <pthread.h>
#include <stdlib.h>

#include "runtime/internal.h"
#include "runtime/isa.h"

/* Per-thread buffers for packed blocks (A, the shared B block, a B panel packed
 * by its task), kept between calls (small products are frequent) and freed
 * when the thread exits. */
enum { BUF_A, BUF_B, BUF_PANEL, BUF_SLOTS };
static pthread_key_t buf_key;
static pthread_once_t buf_once = PTHREAD_ONCE_INIT;

typedef struct {
    void *ptr[BUF_SLOTS];
    int64_t cap[BUF_SLOTS];
} tl_buffers;

static void free_tl_buffers(void *p) {
    tl_buffers *b = p;
    for (int i = 0; i < BUF_SLOTS; i++) cd_scratch_free(b->ptr[i]);
    free(b);
}

static void make_buf_key(void) { pthread_key_create(&buf_key, free_tl_buffers); }

static void *thread_buffer(int slot, int64_t nbytes) {
    pthread_once(&buf_once, make_buf_key);
    tl_buffers *b = pthread_getspecific(buf_key);
    if (!b) {
        b = calloc(1, sizeof *b);
        if (!b) {
            cd_fail("out of memory");
            return NULL;
        }
        pthread_setspecific(buf_key, b);
    }
    if (b->cap[slot] < nbytes) {
        cd_scratch_free(b->ptr[slot]);
        b->ptr[slot] = cd_scratch(nbytes);
        b->cap[slot] = b->ptr[slot] ? nbytes : 0;
    }
    return b->ptr[slot];
}

/* ---- packing -------------------------------------------------------------------
 * Panels are k-major: an A panel holds MR values per k, a B panel NR values per
 * k, zero-padded past the matrix edge. Loops read along whichever dimension of
 * the source is contiguous. */
#define GEN_PACK(T, MR, NR, SRC, SRCT, LD)                                                           \
    static void pack_a_##T##_##SRC(const SRCT *a, int64_t rs, int64_t cs, int64_t mc, int64_t kc,    \
                                   T *dst) {                                                         \
        for (int64_t i = 0; i < mc; i += MR, dst += MR * kc) {                                       \
            int64_t mr = CD_MIN(MR, mc - i);                                                         \
            const SRCT *ai = a + i * rs;                                                             \
            if (cs == 1) {                                                                           \
                for (int64_t r = 0; r < mr; r++)                                                     \
                    for (int64_t p = 0; p < kc; p++) dst[p * MR + r] = (T)LD(ai[r * rs + p]);       \
                for (int64_t r = mr; r < MR; r++)                                                    \
                    for (int64_t p = 0; p < kc; p++) dst[p * MR + r] = 0;                            \
            } else {                                                                                 \
                for (int64_t p = 0; p < kc; p++) {                                                   \
                    int64_t r = 0;                                                                   \
                    for (; r < mr; r++) dst[p * MR + r] = (T)LD(ai[r * rs + p * cs]);                \
                    for (; r < MR; r++) dst[p * MR + r] = 0;                                         \
                }                                                                                    \
            }                                                                                        \
        }                                                                                            \
    }                                                                                                \
    static void pack_b_##T##_##SRC(const SRCT *b, int64_t rs, int64_t cs, int64_t kc, int64_t nc,    \
                                   T *dst) {                                                         \
        for (int64_t j = 0; j < nc; j += NR, dst += NR * kc) {                                       \
            int64_t nr = CD_MIN(NR, nc - j);                                                         \
            const SRCT *bj = b + j * cs;                                                             \
            if (cs == 1 || rs != 1) {                                                                \
                for (int64_t p = 0; p < kc; p++) {                                                   \
                    int64_t c = 0;                                                                   \
                    for (; c < nr; c++) dst[p * NR + c] = (T)LD(bj[p * rs + c * cs]);                \
                    for (; c < NR; c++) dst[p * NR + c] = 0;                                         \
                }                                                                                    \
            } else {                                                                                 \
                for (int64_t c = 0; c < nr; c++)                                                     \
                    for (int64_t p = 0; p < kc; p++) dst[p * NR + c] = (T)LD(bj[c * cs + p]);       \
                for (int64_t c = nr; c < NR; c++)                                                    \
                    for (int64_t p = 0; p < kc; p++) dst[p * NR + c] = 0;                            \
            }                                                                                        \
        }                                                                                            \
    }

#define LD_SAME(v) (v)
GEN_PACK(float, F32_MR, F32_NR, f32_any, float, LD_SAME)

/* f32 panels from a contiguous dimension: plain copies, or the including file's
 * tpack_f32 (a register transpose) when the contiguous dim runs along k. */
static inline __attribute__((always_inline)) void copy_rows(const float *src, int64_t stride, int64_t kc, int w,
                                                            const int W, float *dst) {
    if (w == W) { /* W is a constant here: the copies become vector moves, not calls */
        for (int64_t p = 0; p < kc; p++) memcpy(dst + p * W, src + p * stride, (size_t)W * sizeof(float));
        return;
    }
    for (int64_t p = 0; p < kc; p++) {
        memcpy(dst + p * W, src + p * stride, (size_t)w * sizeof(float));
        memset(dst + p * W + w, 0, (size_t)(W - w) * sizeof(float));
    }
}

static void pack_a_float_f32(const float *a, int64_t rs, int64_t cs, int64_t mc, int64_t kc, float *dst) {
    if (cs != 1 && rs != 1) {
        pack_a_float_f32_any(a, rs, cs, mc, kc, dst);
        return;
    }
    for (int64_t i = 0; i < mc; i += F32_MR, dst += F32_MR * kc) {
        int mr = (int)CD_MIN(F32_MR, mc - i);
        if (cs == 1) tpack_f32(a + i * rs, rs, mr, kc, F32_MR, dst);
        else copy_rows(a + i, cs, kc, mr, F32_MR, dst);
    }
}

static void pack_b_float_f32(const float *b, int64_t rs, int64_t cs, int64_t kc, int64_t nc, float *dst) {
    if (cs != 1 && rs != 1) {
        pack_b_float_f32_any(b, rs, cs, kc, nc, dst);
        return;
    }
    if (cs == 1) {
        /* 8 rows at a time across all panels: the reads run along B's rows, not down its columns. */
        for (int64_t p0 = 0; p0 < kc; p0 += 8)
            for (int64_t j = 0; j < nc; j += F32_NR)
                copy_rows(b + p0 * rs + j, rs, CD_MIN(8, kc - p0), (int)CD_MIN(F32_NR, nc - j), F32_NR,
                          dst + j * kc + p0 * F32_NR);
        return;
    }
    for (int64_t j = 0; j < nc; j += F32_NR, dst += F32_NR * kc)
        tpack_f32(b + j * cs, cs, (int)CD_MIN(F32_NR, nc - j), kc, F32_NR, dst);
}
GEN_PACK(float, F32_MR, F32_NR, bf16_any, uint16_t, cd_bf16_to_f32)
GEN_PACK(float, F32_MR, F32_NR, f16_any, uint16_t, cd_f16_to_f32)

/* Half-precision panels: runs along the source's contiguous dimension widened
 * to f32 by the instruction set's block converter (cd_ops), a small block at a
 * time, then packed as f32 ones (the element-wise loops above serve the other
 * strides). HALF_RUN: k per block; HALF_COLS: B columns per block. */
enum { HALF_RUN = 64, HALF_COLS = 256 };
/* Panels W wide from `count` rows of the source, each contiguous along k and
 * ld apart (A's rows; B's columns when B is a transposed Linear weight). */
static void pack_half_panels(const uint16_t *src, int64_t ld, int64_t count, int64_t kc, int W, float *dst,
                             cd_half_to_f32 widen) {
    float tmp[(CD_MAX(F32_MR, F32_NR) + 7) / 8 * 8 * HALF_RUN]; /* whole 8-row blocks, as tpack_f32 reads */
    for (int64_t i = 0; i < count; i += W, dst += W * kc) {
        const int w = (int)CD_MIN(W, count - i);
        for (int64_t p0 = 0; p0 < kc; p0 += HALF_RUN) {
            const int64_t len = CD_MIN(HALF_RUN, kc - p0);
            for (int r = 0; r < w; r++) widen(len, src + (i + r) * ld + p0, tmp + r * HALF_RUN);
            tpack_f32(tmp, HALF_RUN, w, len, W, dst + p0 * W);
        }
    }
}

/* B's rows contiguous: 8 rows at a time across the panels, as pack_b_float_f32. */
static void pack_b_half_rows(const uint16_t *b, int64_t rs, int64_t kc, int64_t nc, float *dst, cd_half_to_f32 widen) {
    float tmp[8 * HALF_COLS];
    for (int64_t p0 = 0; p0 < kc; p0 += 8) {
        const int64_t rows = CD_MIN(8, kc - p0);
        for (int64_t j0 = 0; j0 < nc; j0 += HALF_COLS) {
            const int64_t cols = CD_MIN(HALF_COLS, nc - j0);
            for (int64_t r = 0; r < rows; r++) widen(cols, b + (p0 + r) * rs + j0, tmp + r * HALF_COLS);
            for (int64_t j = j0; j < j0 + cols; j += F32_NR)
                copy_rows(tmp + (j - j0), HALF_COLS, rows, (int)CD_MIN(F32_NR, nc - j), F32_NR, dst + j * kc + p0 * F32_NR);
        }
    }
}

#define GEN_HALF_PACK(SRC)                                                                              \
    static void pack_a_float_##SRC(const uint16_t *a, int64_t rs, int64_t cs, int64_t mc, int64_t kc,  \
                                   float *dst) {                                                       \
        if (cs == 1) pack_half_panels(a, rs, mc, kc, F32_MR, dst, cd_ops.SRC##_to_f32);               \
        else pack_a_float_##SRC##_any(a, rs, cs, mc, kc, dst);                                         \
    }                                                                                                  \
    static void pack_b_float_##SRC(const uint16_t *b, int64_t rs, int64_t cs, int64_t kc, int64_t nc,  \
                                   float *dst) {                                                       \
        if (cs == 1) pack_b_half_rows(b, rs, kc, nc, dst, cd_ops.SRC##_to_f32);                        \
        else if (rs == 1) pack_half_panels(b, cs, nc, kc, F32_NR, dst, cd_ops.SRC##_to_f32);          \
        else pack_b_float_##SRC##_any(b, rs, cs, kc, nc, dst);                                         \
    }
GEN_HALF_PACK(bf16)
GEN_HALF_PACK(f16)
GEN_PACK(double, F64_MR, F64_NR, f64, double, LD_SAME)

/* ---- GEMV: a single row or column ----------------------------------------------
 * Memory-bound, so the matrix is streamed once, without packing, threads
 * taking ranges of outputs (each output is computed the same way whatever
 * the split):
 * - axpy form, y = x @ M with M's rows contiguous: GEMV_ROWS rows at a time
 *   (8; the AVX2 build sets its own);
 * - dot form, y[j] = x . M[:, j] with M's columns contiguous: four dot products
 *   at a time, so four streams are in flight.
 * The axpy form prefetches each row stream into L2 GEMV_AHEAD bytes ahead, one
 * line per row per step: with the hardware prefetchers alone one core draws
 * ~10% less bandwidth (1x4096 @ 4096x4096 f32, 1 thread, Zen 4: 1.05-1.13x
 * OpenBLAS's sgemv with it, 0.96-1.01x without, paired in one process). A
 * matrix that stays in the L3 between calls pays ~15% for them instead (1x576
 * @ 576x1536: 0.85x with, 1.0x without), but a model's decode reads each
 * matrix from memory (the same product over 40 matrices in turn: 1.07x with,
 * 0.98x without). GEMV_HINT is the prefetch's locality hint (2: prefetcht1);
 * the including file may set both (the AVX2 build does, for Zen 1). */
#ifndef GEMV_AHEAD
#define GEMV_AHEAD 1024
#endif
#ifndef GEMV_HINT
#define GEMV_HINT 2
#endif
#ifndef GEMV_ROWS
#define GEMV_ROWS 8
#endif
/* y[j] += the GEMV_ROWS rows' terms at column j of rows r (ms apart), loaded through LD, summed in
 * row order. */
#define AXPY_AT(y, r, j, LD)                                                                         \
    {                                                                                                \
        __typeof__(w[0]) s_ = w[0] * LD((r)[j]);                                                     \
        _Pragma("GCC unroll 16")                                                                     \
        for (int i_ = 1; i_ < GEMV_ROWS; i_++) s_ += w[i_] * LD((r)[i_ * ms + (j)]);                 \
        (y)[j] += s_;                                                                                \
    }
/* y[j0..j1) += the rows' terms. */
#define AXPY_RANGE(j0, j1, LD) _Pragma("omp simd") for (int64_t j = j0; j < j1; j++) AXPY_AT(y, r, j, LD)
/* The same over one cache line at j0, its length a constant. */
#define AXPY_LINE(j0, len, LD)                                                                       \
    {                                                                                                \
        __typeof__(y) yl = y + (j0);                                                                 \
        __typeof__(r) rl = r + (j0);                                                                 \
        _Pragma("omp simd") for (int v = 0; v < (len); v++) AXPY_AT(yl, rl, v, LD)                   \
    }
/* AXPY_RANGE over columns j0..n of rows of TE, a cache line at a time, with
 * the prefetches ahead (kept inside the rows). */
#define AXPY_STREAM(TE, LD, j0, n)                                                                  \
    {                                                                                                \
        enum { LINE = 64 / sizeof(TE), AHEAD = GEMV_AHEAD / sizeof(TE) };                            \
        int64_t jl = j0;                                                                             \
        for (; jl + LINE <= n; jl += LINE) {                                                         \
            if (jl + AHEAD < n)                                                                      \
                for (int i = 0; i < GEMV_ROWS; i++)                                                  \
                    __builtin_prefetch(r + i * ms + jl + AHEAD, 0, GEMV_HINT);                       \
            AXPY_LINE(jl, LINE, LD)                                                                  \
        }                                                                                            \
        AXPY_RANGE(jl, n, LD)                                                                        \
    }
/* y = x @ M over k rows of n elements of TE, loaded through LD into TA (the
 * type of x's weights and of y). */
#define GEN_AXPY_ROWS(NAME, TE, TA, LD)                                                              \
    static void axpy_rows_##NAME(int64_t n, const TE *x, int64_t xs, const TE *m, int64_t ms,        \
                                 int64_t k, TA *y) {                                                 \
        for (int64_t j = 0; j < n; j++) y[j] = 0;                                                    \
        int64_t p = 0;                                                                               \
        for (; p + GEMV_ROWS <= k; p += GEMV_ROWS) { /* GEMV_ROWS row streams in flight */            \
            const TE *r = m + p * ms;                                                                \
            TA w[GEMV_ROWS];                                                                         \
            for (int i = 0; i < GEMV_ROWS; i++) w[i] = LD(x[(p + i) * xs]);                          \
            /* a few leading columns, so the row loads of the rest are aligned */                    \
            const int64_t head = CD_MIN(n, (int64_t)((64 - (uintptr_t)r % 64) % 64 / sizeof(TE)));    \
            AXPY_RANGE(0, head, LD)                                                                  \
            AXPY_STREAM(TE, LD, head, n)                                                             \
        }                                                                                            \
        for (; p < k; p++) {                                                                         \
            const TA xp = LD(x[p * xs]);                                                             \
            const TE *mp = m + p * ms;                                                               \
            _Pragma("omp simd")                                                                      \
            for (int64_t j = 0; j < n; j++) y[j] += xp * LD(mp[j]);                                  \
        }                                                                                            \
    }
#define GEN_GEMV(T)                                                                                  \
    GEN_AXPY_ROWS(T, T, T, LD_SAME)                                                                  \
    static void dot4_##T(int64_t k, const T *x, const T *v, int64_t vs, int64_t count, T *y, int64_t ys) { \
        int64_t j = 0;                                                                               \
        for (; j + 4 <= count; j += 4) {                                                             \
            const T *v0 = v + j * vs, *v1 = v0 + vs, *v2 = v1 + vs, *v3 = v2 + vs;                   \
            T s0 = 0, s1 = 0, s2 = 0, s3 = 0;                                                        \
            _Pragma("omp simd reduction(+ : s0, s1, s2, s3)")                                        \
            for (int64_t p = 0; p < k; p++) {                                                        \
                s0 += x[p] * v0[p];                                                                  \
                s1 += x[p] * v1[p];                                                                  \
                s2 += x[p] * v2[p];                                                                  \
                s3 += x[p] * v3[p];                                                                  \
            }                                                                                        \
            y[j * ys] = s0, y[(j + 1) * ys] = s1, y[(j + 2) * ys] = s2, y[(j + 3) * ys] = s3;        \
        }                                                                                            \
        for (; j < count; j++) {                                                                     \
            const T *vj = v + j * vs;                                                                \
            T s = 0;                                                                                 \
            _Pragma("omp simd reduction(+ : s)")                                                     \
            for (int64_t p = 0; p < k; p++) s += x[p] * vj[p];                                       \
            y[j * ys] = s;                                                                           \
        }                                                                                            \
    }

GEN_GEMV(float)
GEN_GEMV(double)

/* bf16 rows widened to f32 as they stream (a 16-bit shift), accumulated in f32:
 * decoding with bf16 weights reads half the bytes of f32 ones. */
GEN_AXPY_ROWS(bf16, uint16_t, float, cd_bf16_to_f32)

/* The axpy form splits K into slices of at most GEMV_KSLICE rows, of equal
 * size, each summed into its own partial row and the partials added in slice
 * order: a thread then streams whole rows of M (contiguous memory, which the
 * prefetchers follow across pages), and the result still does not depend on
 * the thread count. */
#define GEMV_KSLICE 512

typedef struct {
    int esz, dot_form; /* esz: bytes per input element; 2 means bf16 in, f32 out (axpy form only) */
    int64_t n, k;
    const char *x, *m;
    int64_t xs, ms;     /* x stride; stride between M's rows (axpy) or vectors (dot) */
    char *y;
    int64_t ys;         /* output stride */
    int64_t parts;      /* output ranges, in multiples of 64 */
    int64_t kparts;     /* K slices (axpy form) */
    int64_t slice;      /* rows per K slice, a multiple of GEMV_ROWS but in the last */
    char *partial;      /* kparts rows of n partial sums, when kparts > 1 */
} gemv_ctx;

/* Bytes per output (and partial sum) element. */
static int out_size(const gemv_ctx *g) { return g->esz == 2 ? 4 : g->esz; }

static void gemv_cols(const gemv_ctx *g, int64_t t, int64_t *j0, int64_t *j1) {
    *j0 = (g->n * t / g->parts) & ~(int64_t)63;
    *j1 = t + 1 == g->parts ? g->n : (g->n * (t + 1) / g->parts) & ~(int64_t)63;
}

static int gemv_task(void *vctx, int64_t begin, int64_t end) {
    const gemv_ctx *g = vctx;
    for (int64_t t = begin; t < end; t++) {
        int64_t j0, j1, kp = t / g->parts;
        gemv_cols(g, t % g->parts, &j0, &j1);
        if (j0 >= j1) continue;
        if (g->dot_form) {
            if (g->esz == 4)
                dot4_float(g->k, (const float *)g->x, (const float *)g->m + j0 * g->ms, g->ms, j1 - j0,
                           (float *)g->y + j0 * g->ys, g->ys);
            else
                dot4_double(g->k, (const double *)g->x, (const double *)g->m + j0 * g->ms, g->ms, j1 - j0,
                            (double *)g->y + j0 * g->ys, g->ys);
            continue;
        }
        int64_t p0 = kp * g->slice, rows = CD_MIN(g->k, p0 + g->slice) - p0;
        char *y = g->kparts > 1 ? g->partial + kp * g->n * out_size(g) : g->y;
        if (g->esz == 2)
            axpy_rows_bf16(j1 - j0, (const uint16_t *)g->x + p0 * g->xs, g->xs,
                           (const uint16_t *)g->m + p0 * g->ms + j0, g->ms, rows, (float *)y + j0);
        else if (g->esz == 4)
            axpy_rows_float(j1 - j0, (const float *)g->x + p0 * g->xs, g->xs, (const float *)g->m + p0 * g->ms + j0,
                            g->ms, rows, (float *)y + j0);
        else
            axpy_rows_double(j1 - j0, (const double *)g->x + p0 * g->xs, g->xs,
                             (const double *)g->m + p0 * g->ms + j0, g->ms, rows, (double *)y + j0);
    }
    return 0;
}

/* y = the partial rows added in slice order. */
static int gemv_sum_task(void *vctx, int64_t begin, int64_t end) {
    const gemv_ctx *g = vctx;
    for (int64_t kp = 0; kp < g->kparts; kp++) {
        const char *src = g->partial + kp * g->n * out_size(g);
        if (out_size(g) == 4) {
            float *y = (float *)g->y;
            const float *v = (const float *)src;
            if (kp == 0) memcpy(y + begin, v + begin, (size_t)(end - begin) * 4);
            else for (int64_t j = begin; j < end; j++) y[j] += v[j];
        } else {
            double *y = (double *)g->y;
            const double *v = (const double *)src;
            if (kp == 0) memcpy(y + begin, v + begin, (size_t)(end - begin) * 8);
            else for (int64_t j = begin; j < end; j++) y[j] += v[j];
        }
    }
    return 0;
}

static int64_t gcd(int64_t a, int64_t b) { return b ? gcd(b, a % b) : a; }

/* Tries the GEMV forms; returns 1 when it handled the product. esz 2: bf16
 * operands and an f32 c, the axpy form only. */
static int try_gemv(int esz, int64_t m, int64_t n, int64_t k, const char *a, int64_t ars, int64_t acs,
                    const char *b, int64_t brs, int64_t bcs, char *c, int64_t ldc, int *rc) {
    gemv_ctx g;
    if (esz == 2 && !(m == 1 && bcs == 1)) return 0;
    if (m == 1 && bcs == 1) /* c = a @ B, B's rows contiguous */
        g = (gemv_ctx){esz, 0, n, k, a, b, acs, brs, c, 1, 0, 1, k, NULL};
    else if (m == 1 && brs == 1 && acs == 1) /* c[j] = a . B[:, j] */
        g = (gemv_ctx){esz, 1, n, k, a, b, 1, bcs, c, 1, 0, 1, k, NULL};
    else if (n == 1 && acs == 1 && brs == 1) /* c[i] = A[i, :] . b */
        g = (gemv_ctx){esz, 1, m, k, b, a, 1, ars, c, ldc, 0, 1, k, NULL};
    else
        return 0;
    /* Slicing depends on the size alone, not on the thread count, so the sums are the same on any. */
    if (!g.dot_form && g.n * k >= 2 << 16) {
        const int64_t slices = (k + GEMV_KSLICE - 1) / GEMV_KSLICE;
        g.slice = ((k + slices - 1) / slices + GEMV_ROWS - 1) / GEMV_ROWS * GEMV_ROWS;
        g.kparts = (k + g.slice - 1) / g.slice;
    }
    /* Output ranges (whose bounds change no result) make the tasks a multiple
     * of the threads: 3 slices on 2 threads would leave one idle a third of the time. */
    int64_t threads = CD_MAX(1, CD_MIN(cd_num_threads(), g.n * k / (1 << 16)));
    g.parts = CD_MAX(1, CD_MIN(threads / gcd(g.kparts, threads), g.n / 64));
    if (g.kparts == 1) {
        *rc = cd_parallel_for(g.parts, 1, gemv_task, &g);
        return 1;
    }
    g.partial = cd_scratch(g.kparts * g.n * out_size(&g));
    if (!g.partial) {
        *rc = -1;
        return 1;
    }
    *rc = cd_parallel_for(g.kparts * g.parts, 1, gemv_task, &g);
    if (*rc == 0) *rc = cd_parallel_for(g.n, CD_GRAIN, gemv_sum_task, &g);
    cd_scratch_free(g.partial);
    return 1;
}

/* ---- the blocked driver ------------------------------------------------------------ */
typedef struct {
    int64_t kc, mc, nc; /* the deepest K slice, the rows of an A block, the columns of a B block */
    int64_t nb;         /* columns of packed B per pass of an A panel, or 0: a B panel per pass of A */
    int64_t in_place;   /* bytes an operand read in place may span (use_in_place) */
    int64_t a_near;     /* bytes of A whose packing reads from L2 (split_rows_cheaper) */
    int64_t a_slice;    /* bytes of A's K slice read in place whatever its span, or 0 (use_in_place) */
} blocking;

#ifndef GEMM_A_L2_SHARE
#define GEMM_A_L2_SHARE 6
#endif
#ifndef GEMM_A_SLICE_IN_PLACE
#define GEMM_A_SLICE_IN_PLACE 0
#endif
#ifndef GEMM_B_L3_SHARE
#define GEMM_B_L3_SHARE 8
#endif
static blocking size_blocks(int64_t esz, int64_t mr, int64_t nr, int64_t kc) {
    int64_t l2 = cd_cache_bytes(2), mc = l2 / GEMM_A_L2_SHARE / (kc * esz) / mr * mr;
    int64_t nc = cd_cache_bytes(3) / GEMM_B_L3_SHARE / (kc * esz) / nr * nr;
#ifdef GEMM_B_L2_SHARE
    int64_t nb = CD_MAX(nr, l2 / GEMM_B_L2_SHARE / (kc * esz) / nr * nr);
#else
    int64_t nb = 0;
#endif
    return (blocking){kc, CD_MAX(mr, CD_MIN(mc, 64 * mr)), CD_MAX(nr, CD_MIN(nc, 256 * nr)), nb, l2 / 8, l2 / 2,
                      GEMM_A_SLICE_IN_PLACE ? l2 / 2 : 0};
}

/* The depth of K slices: K cut into as few slices as kc_max allows, of equal
 * depth (a multiple of `step`, the last shorter): 300 deep with kc_max 256
 * runs as 152 + 148, not 256 + 44, whose shallow tiles would spend as long
 * loading and storing C as multiplying. It depends on k alone, so every
 * element of C sums its products in the same order whatever the threads. */
static int64_t k_slice(int64_t k, int64_t kc_max, int64_t step) {
    const int64_t slices = (k + kc_max - 1) / kc_max, even = (k + slices - 1) / slices;
    return CD_MIN(kc_max, (even + step - 1) / step * step);
}

/* Tasks for a row split of mpanels row panels on `tasks` threads: at least
 * one per A block (mc_panels panels), and a multiple of the threads so that
 * equal shares stay equal. The pool deals tasks to whichever thread is free,
 * so a thread that the OS keeps waiting leaves its share to the others. */
static int64_t row_tasks(int64_t mpanels, int64_t mc_panels, int64_t tasks) {
    const int64_t blocks = (mpanels + mc_panels - 1) / mc_panels;
    return CD_MIN(mpanels, (CD_MAX(blocks, tasks) + tasks - 1) / tasks * tasks);
}

/* Packing copies an operand into panels the microkernel streams. A small
 * operand whose rows are contiguous is read in place instead (the batched
 * attention products, where the copy is ~10% of the work): A when its MR-row
 * panels are whole rows of a row-major matrix, B when its panels are row
 * segments. "Small" bounds the span of memory read (all of A's rows, one K
 * slice of B), so the rows stay cached between uses; A's row stride must also
 * not send every row to the same few L1 sets (a multiple of 2 KiB would).
 * An instruction set with a short A panel (GEMM_A_SLICE_IN_PLACE: AVX2's 6
 * rows) also reads A in place when its K slice takes at most blk.a_slice bytes
 * of L2, whatever the span, and the nc columns of the block take at most two
 * chunks of B panels (blk.nb): each A panel is then read once per chunk
 * instead of copied once and read back from L2 (more chunks re-read it from
 * L3 more often than the copy costs). Its stride may be a multiple of 2 KiB
 * (3 rows an L1 set), not of 4 KiB (all 6 in one). */
static void use_in_place(const blocking *blk, int64_t esz, int64_t isz, int64_t mr, int64_t m, int64_t kc,
                         int64_t nc, int64_t ars, int64_t acs, int64_t brs, int64_t bcs, int *direct_a,
                         int *direct_b) {
    const int64_t rowb = ars * esz;
    const int slice = m * kc * esz <= blk->a_slice && nc <= 2 * blk->nb && rowb % 4096 != 0;
    *direct_a = isz == esz && acs == 1 && m >= mr && (slice || (m * rowb <= blk->in_place && rowb % 2048 != 0));
    *direct_b = isz == esz && bcs == 1 && kc * brs * esz <= blk->in_place;
}

/* Task t's share [lo, hi) of `total` panels dealt out to `parts` tasks. */
static void task_range(int64_t total, int64_t parts, int64_t t, int64_t *lo, int64_t *hi) {
    *lo = total * t / parts;
    *hi = total * (t + 1) / parts;
}

/* Whether the tasks split C's rows rather than its columns: whichever leaves
 * the busiest task less work, counted in microkernel tiles (a partial row
 * panel in proportion to its rows) plus the panels it packs, at pack_a and
 * pack_b tiles a panel. A column split has every task pack all of A's panels;
 * a row split within one block of rows, every task all of B's (past it they
 * are packed once and shared). The costs, measured on Zen 4: half a tile a
 * panel from L2 (PACK_NEAR), two for an A that does not fit there (PACK_FAR).
 * With 2 threads this splits the columns of 64..128 x 384 @ 384 x 1536
 * (MiniLM's feed-forward on short sequences), 10-22% faster than rows (which
 * left a task 3 row panels of 5), and keeps rows where A's packing would be
 * repeated (4096 x 256 @ 256 x 384: 39% slower split by columns). */
#define PACK_NEAR 0.5
#define PACK_FAR 2.0
static int split_rows_cheaper(int64_t m, int64_t mr, int64_t tasks, int64_t mpanels, int64_t npanels, double pack_a,
                              double pack_b) {
    const int64_t rt = CD_MIN(tasks, mpanels), ct = CD_MIN(tasks, npanels), mine = (npanels + ct - 1) / ct;
    double rows = 0;
    for (int64_t t = 0; t < rt; t++) {
        int64_t lo, hi;
        task_range(mpanels, rt, t, &lo, &hi);
        const double tiles = (double)(CD_MIN(m, hi * mr) - lo * mr) / (double)mr * (double)npanels;
        rows = CD_MAX(rows, tiles + pack_a * (double)(hi - lo) + pack_b * (double)npanels);
    }
    return rows <= (double)m / (double)mr * (double)mine + pack_a * (double)mpanels + pack_b * (double)mine;
}

#define NO_ROWS(...) ((void)0)
#ifdef GEMM_MICRO_PACKING
#define DRIVER_COPIES 1
#define DRIVER_MICRO_PACKING micro_f32_packing
#define DRIVER_ROWS_PACKING micro_f32_rows_packing
#else
#define DRIVER_COPIES 0
#define DRIVER_MICRO_PACKING NO_ROWS
#define DRIVER_ROWS_PACKING NO_ROWS
#endif
#define DRIVER_NAME float
#define DRIVER_T float
#define DRIVER_P float
#define DRIVER_KS 1
#define DRIVER_MR F32_MR
#define DRIVER_NR F32_NR
#define DRIVER_KC F32_KC
#ifdef F32_KC_SHARED
#define DRIVER_KC_SHARED F32_KC_SHARED
#endif
#define DRIVER_MICRO micro_f32
#define DRIVER_ROWS micro_f32_rows
#include "templates/gemm_driver.h"

#ifdef GEMM_MICRO_PACKING
#define DRIVER_COPIES 1
#define DRIVER_MICRO_PACKING micro_f64_packing
#define DRIVER_ROWS_PACKING micro_f64_rows_packing
#else
#define DRIVER_COPIES 0
#define DRIVER_MICRO_PACKING NO_ROWS
#define DRIVER_ROWS_PACKING NO_ROWS
#endif
#define DRIVER_NAME double
#define DRIVER_T double
#define DRIVER_P double
#define DRIVER_KS 1
#define DRIVER_MR F64_MR
#define DRIVER_NR F64_NR
#define DRIVER_KC F64_KC
#define DRIVER_MICRO micro_f64
#define DRIVER_ROWS micro_f64_rows
#include "templates/gemm_driver.h"

#ifdef GEMM_BF16_DOT
/* bf16 x bf16 with the CPU's bf16 dot product: panels of k pairs, never read in place. */
#define DRIVER_COPIES 0
#define DRIVER_MICRO_PACKING NO_ROWS
#define DRIVER_ROWS_PACKING NO_ROWS
#define DRIVER_NAME bf16dot
#define DRIVER_T float
#define DRIVER_P uint32_t
#define DRIVER_KS 2
#define DRIVER_MR F32_MR
#define DRIVER_NR F32_NR
#define DRIVER_KC (2 * F32_KC)
#define DRIVER_MICRO micro_bf16
#define DRIVER_ROWS NO_ROWS
#include "templates/gemm_driver.h"
#endif

/* The pack functions take typed sources; the driver calls them through void. */
#define PACK_ADAPTER(T, SRC, SRCT)                                                                     \
    static void pa_##T##_##SRC(const void *s, int64_t rs, int64_t cs, int64_t r, int64_t c, T *d) {    \
        pack_a_##T##_##SRC((const SRCT *)s, rs, cs, r, c, d);                                          \
    }                                                                                                  \
    static void pb_##T##_##SRC(const void *s, int64_t rs, int64_t cs, int64_t r, int64_t c, T *d) {    \
        pack_b_##T##_##SRC((const SRCT *)s, rs, cs, r, c, d);                                          \
    }
PACK_ADAPTER(float, f32, float)
PACK_ADAPTER(float, bf16, uint16_t)
PACK_ADAPTER(float, f16, uint16_t)
PACK_ADAPTER(double, f64, double)

int GEMM_ENTRY(int32_t dtype, int64_t m, int64_t n, int64_t k, const void *a, int64_t ars, int64_t acs,
               const void *b, int64_t brs, int64_t bcs, void *c, int64_t ldc) {
    if (m == 0 || n == 0) return 0;
    if (k == 0) {
        int esz = dtype == CD_f64 ? 8 : 4;
        for (int64_t i = 0; i < m; i++) memset((char *)c + i * ldc * esz, 0, (size_t)(n * esz));
        return 0;
    }
    int rc = 0;
    if ((dtype == CD_f32 || dtype == CD_f64 || dtype == CD_bf16) &&
        try_gemv(cd_dtype_size(dtype), m, n, k, a, ars, acs, b, brs, bcs, c, ldc, &rc))
        return rc;
    if (dtype == CD_f64) {
        drv_double d = {.a = a, .b = b, .isz = 8, .m = m, .ars = ars, .acs = acs, .brs = brs, .bcs = bcs,
                        .c = c, .ldc = ldc, .copy_b = bcs == 1, .pack_a = pa_double_f64, .pack_b = pb_double_f64};
        return blocked_double(&d, n, k);
    }
    drv_float d = {.a = a, .b = b, .isz = cd_dtype_size(dtype), .m = m, .ars = ars, .acs = acs, .brs = brs,
                   .bcs = bcs, .c = c, .ldc = ldc};
    switch (dtype) {
    case CD_f32: d.pack_a = pa_float_f32; d.pack_b = pb_float_f32; d.copy_b = bcs == 1; break;
    case CD_bf16:
#ifdef GEMM_BF16_DOT
        if (cd_ops.bf16_dot) {
            drv_bf16dot e = {.a = a, .b = b, .isz = 2, .m = m, .ars = ars, .acs = acs, .brs = brs, .bcs = bcs,
                             .c = c, .ldc = ldc, .pack_a = pack_a_bf16_pairs, .pack_b = pack_b_bf16_pairs};
            return blocked_bf16dot(&e, n, k);
        }
#endif
        d.pack_a = pa_float_bf16;
        d.pack_b = pb_float_bf16;
        break;
    case CD_f16: d.pack_a = pa_float_f16; d.pack_b = pb_float_f16; break;
    default: return cd_fail("gemm: unsupported dtype %s", cd_dtype_name(dtype));
    }
    return blocked_float(&d, n, k);
}

/* ---- products against panels packed once (cd_panel_ops in runtime/isa.h) -------------
 * K runs in one slice whatever its depth: each element of C is the same
 * sequence of fused multiply-adds whichever panels or rows a caller's task
 * takes, and a caller packs its B once for many products. */
static int panel_width(int32_t ct) { return ct == CD_f64 ? F64_NR : F32_NR; }
static int panel_height(int32_t ct) { return ct == CD_f64 ? F64_MR : F32_MR; }

static void pack_panels(int32_t dtype, int64_t k, int64_t n, const void *b, int64_t brs, int64_t bcs, void *dst) {
    switch (dtype) {
    case CD_f64: pack_b_double_f64(b, brs, bcs, k, n, dst); break;
    case CD_bf16: pack_b_float_bf16(b, brs, bcs, k, n, dst); break;
    case CD_f16: pack_b_float_f16(b, brs, bcs, k, n, dst); break;
    default: pack_b_float_f32(b, brs, bcs, k, n, dst); break;
    }
}

/* The first row of A's row panel p of P = ceil(m / mr), each packed mr wide:
 * mr rows a panel, but a last panel of one or two rows (whose microkernel
 * waits on the latency of its few accumulators) shares the rows of the one
 * before it: 16 rows run as 8 + 8, not 14 + 2. */
static int64_t panel_row(int64_t m, int64_t mr, int64_t p) {
    const int64_t panels = (m + mr - 1) / mr, last = m - (panels - 1) * mr;
    if (p >= panels) return m;
    if (panels < 2 || last > 2 || p < panels - 1) return p * mr;
    return (panels - 2) * mr + (mr + last + 1) / 2;
}

static void pack_rows(int32_t ct, int64_t m, int64_t k, const void *a, int64_t lda, void *dst) {
    const int64_t mr = panel_height(ct), esz = ct == CD_f64 ? 8 : 4;
    for (int64_t p = 0, r0 = 0, r1; r0 < m; p++, r0 = r1) {
        r1 = panel_row(m, mr, p + 1);
        const char *src = (const char *)a + r0 * lda * esz;
        char *out = (char *)dst + p * mr * k * esz;
        if (ct == CD_f64) pack_a_double_f64((const double *)src, lda, 1, r1 - r0, k, (double *)out);
        else pack_a_float_f32((const float *)src, lda, 1, r1 - r0, k, (float *)out);
    }
}

/* One row of A (element p at a[p * as]) times NQ panels at once: a row and
 * one panel give the microkernel only two accumulator chains, each waiting
 * on the latency of the last multiply-add; NQ panels give it 2 NQ. */
#define GEN_ROW_PANELS(T, NR)                                                                              \
    static inline __attribute__((always_inline)) void row_panels_##T(                                     \
        const int NQ, int64_t k, const T *restrict a, int64_t as, const T *restrict b, int64_t bstride,    \
        int nr, T *restrict c, int64_t cstride, int accumulate) {                                          \
        T acc[4][NR];                                                                                      \
        for (int q = 0; q < NQ; q++)                                                                       \
            for (int j = 0; j < NR; j++) acc[q][j] = 0;                                                    \
        for (int64_t p = 0; p < k; p++) {                                                                  \
            const T ap = a[p * as];                                                                        \
            for (int q = 0; q < NQ; q++)                                                                   \
                for (int j = 0; j < NR; j++) acc[q][j] += ap * b[q * bstride + p * NR + j];                \
        }                                                                                                  \
        for (int q = 0; q < NQ; q++)                                                                       \
            for (int j = 0; j < nr; j++) c[q * cstride + j] = accumulate ? c[q * cstride + j] + acc[q][j] : acc[q][j]; \
    }                                                                                                      \
    static void row_product_##T(int64_t k, const T *a, int64_t as, const T *b, int count, int nr, T *c,     \
                                int64_t cstride, int accumulate) {                                         \
        const int64_t bs = k * NR;                                                                         \
        int q = 0;                                                                                         \
        for (; q + 4 <= count; q += 4)                                                                     \
            row_panels_##T(4, k, a, as, b + q * bs, bs, nr, c + q * cstride, cstride, accumulate);         \
        switch (count - q) {                                                                               \
        case 3: row_panels_##T(3, k, a, as, b + q * bs, bs, nr, c + q * cstride, cstride, accumulate); break; \
        case 2: row_panels_##T(2, k, a, as, b + q * bs, bs, nr, c + q * cstride, cstride, accumulate); break; \
        case 1: row_panels_##T(1, k, a, as, b + q * bs, bs, nr, c + q * cstride, cstride, accumulate); break; \
        default: break;                                                                                    \
        }                                                                                                  \
    }
GEN_ROW_PANELS(float, F32_NR)
GEN_ROW_PANELS(double, F64_NR)

/* C_q (m x nr, rows ldc apart, at c + q * cstride) = (or +=, accumulate) packed A @ panel q for count
 * consecutive panels. */
static void panel_product(int32_t ct, int64_t m, int64_t k, const void *apack, const void *panels, int count, int nr,
                          void *c, int64_t ldc, int64_t cstride, int accumulate) {
    const int64_t mr = panel_height(ct), bs = k * panel_width(ct);
    if (m == 1) {
        if (ct == CD_f64) row_product_double(k, apack, F64_MR, panels, count, nr, c, cstride, accumulate);
        else row_product_float(k, apack, F32_MR, panels, count, nr, c, cstride, accumulate);
        return;
    }
    for (int q = 0; q < count; q++)
        for (int64_t p = 0, r0 = 0, r1; r0 < m; p++, r0 = r1) {
            r1 = panel_row(m, mr, p + 1);
            if (ct == CD_f64)
                micro_f64(k, (const double *)apack + p * mr * k, (const double *)panels + q * bs, F64_NR,
                          (double *)c + q * cstride + r0 * ldc, ldc, (int)(r1 - r0), nr, accumulate);
            else
                micro_f32(k, (const float *)apack + p * mr * k, (const float *)panels + q * bs, F32_NR,
                          (float *)c + q * cstride + r0 * ldc, ldc, (int)(r1 - r0), nr, accumulate);
        }
}

#define PANELS_CAT_(a, b) a##b
#define PANELS_CAT(a, b) PANELS_CAT_(a, b)
const cd_panel_ops PANELS_CAT(GEMM_ENTRY, _panels) = {panel_width, panel_height, pack_panels, pack_rows, panel_product};
#undef PANELS_CAT_
#undef PANELS_CAT
