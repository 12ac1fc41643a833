/* An external BLAS's single-threaded products run on this library's pool.
 *
 * A kernel plugin that brings its own BLAS (the mkl plugin) would otherwise
 * bring its own threads too: a second runtime whose idle threads either spin
 * on the cores the pool needs next, or sleep and take a vCPU wake-up (up to a
 * millisecond in a VM) at every product. Here the plugin hands over the
 * sequential build's function and the pool runs it on tiles of the output:
 * one set of threads in the process, with the pool's own spin-then-sleep.
 *
 * Tiles cut the output's rows and columns (and the batch), never k, and
 * their bounds depend only on the shapes, so every element is computed by
 * the same call whatever the thread count: results do not depend on it. */
#include "runtime/internal.h"

enum { EXT_SGEMM, EXT_DGEMM, EXT_BF16GEMM };
enum { ROW_MAJOR = 101, NO_TRANS = 111 };

/* cblas_?gemm_64 and cblas_gemm_bf16bf16f32_64 (float alpha and beta), cblas_dgemm_64 (double). */
typedef void (*gemm_f)(int, int, int, int64_t, int64_t, int64_t, float, const void *, int64_t, const void *,
                       int64_t, float, void *, int64_t);
typedef void (*gemm_d)(int, int, int, int64_t, int64_t, int64_t, double, const void *, int64_t, const void *,
                       int64_t, double, void *, int64_t);
/* cblas_?gemv_64: layout, trans, rows, cols, alpha, a, lda, x, incx, beta, y, incy */
typedef void (*gemv_f)(int, int, int64_t, int64_t, float, const void *, int64_t, const void *, int64_t, float,
                       void *, int64_t);
typedef void (*gemv_d)(int, int, int64_t, int64_t, double, const void *, int64_t, const void *, int64_t, double,
                       void *, int64_t);

/* A tile holds at least this many multiply-adds: below it, the call costs more than a thread saves. */
#define MIN_TILE_WORK (1 << 18)
/* Tiles (blocks of a matrix-vector product) per product aimed at: enough that a thread arriving late
 * finds work (the pool never waits). A GEMM's tiles fewer, so that they stay large: each call packs its
 * own slices of A and B, and on Zen 4 one thread's sequential sgemm over 1024^3 in tiles of 256 took 7%
 * longer than in tiles of 512 (512^3 in tiles of 256: 10% longer than whole). */
#define AIM_BLOCKS 16
#define AIM_TILES 4

typedef struct {
    int kind, ta, tb;
    void *fn;
    int64_t m, n, k, lda, ldb, ldc, sa, sb, sc;
    int64_t tm, tn, mt, nt;   /* tile rows and columns; tiles along m and n */
    int asz, csz;             /* element bytes of A/B and of C */
    const char *a, *b;
    char *c;
} gemm_job;

/* Edge e of square tiles: halved from 512 while the product has fewer than AIM_TILES tiles and a tile
 * keeps at least 64 of a dim that has them (MKL's kernels lose their blocking below); tiles of 1024 were
 * no faster than 512 (2048^3 and 4096^3). */
static int64_t tile_edge(int64_t m, int64_t n, int64_t batch) {
    int64_t e = 512;
    while (e > 64 && batch * ((m + e - 1) / e) * ((n + e - 1) / e) < AIM_TILES) e /= 2;
    return e;
}

static int gemm_tile(void *ctx, int64_t t0, int64_t t1) {
    const gemm_job *j = ctx;
    for (int64_t t = t0; t < t1; t++) {
        int64_t per = j->mt * j->nt, bi = t / per, i0 = (t % per) / j->nt * j->tm, c0 = (t % per) % j->nt * j->tn;
        int64_t rows = CD_MIN(j->tm, j->m - i0), cols = CD_MIN(j->tn, j->n - c0);
        /* op(A)'s rows i0.. start at row i0 of A, or column i0 when A is stored transposed; likewise B's columns. */
        const char *a = j->a + (bi * j->sa + (j->ta == NO_TRANS ? i0 * j->lda : i0)) * j->asz;
        const char *b = j->b + (bi * j->sb + (j->tb == NO_TRANS ? c0 : c0 * j->ldb)) * j->asz;
        char *c = j->c + (bi * j->sc + i0 * j->ldc + c0) * j->csz;
        if (j->kind == EXT_DGEMM)
            ((gemm_d)j->fn)(ROW_MAJOR, j->ta, j->tb, rows, cols, j->k, 1.0, a, j->lda, b, j->ldb, 0.0, c, j->ldc);
        else
            ((gemm_f)j->fn)(ROW_MAJOR, j->ta, j->tb, rows, cols, j->k, 1.0f, a, j->lda, b, j->ldb, 0.0f, c, j->ldc);
    }
    return 0;
}

int cd_pooled_gemm(int32_t kind, void *fn, int32_t ta, int32_t tb, int64_t m, int64_t n, int64_t k, const void *a,
                   int64_t lda, int64_t sa, const void *b, int64_t ldb, int64_t sb, void *c, int64_t ldc, int64_t sc,
                   int64_t batch) {
    if (kind < EXT_SGEMM || kind > EXT_BF16GEMM || !fn)
        return cd_fail("pooled gemm: unknown kind %d or no function", (int)kind);
    if (m < 0 || n < 0 || k < 0 || batch < 0) return cd_fail("pooled gemm: negative size");
    if (m == 0 || n == 0 || batch == 0) return 0;
    gemm_job j = {.kind = kind, .ta = ta, .tb = tb, .fn = fn, .m = m, .n = n, .k = k, .lda = lda, .ldb = ldb,
                  .ldc = ldc, .sa = sa, .sb = sb, .sc = sc, .a = a, .b = b, .c = c};
    j.asz = kind == EXT_DGEMM ? 8 : kind == EXT_BF16GEMM ? 2 : 4;
    j.csz = kind == EXT_DGEMM ? 8 : 4;
    if (m * n * k < MIN_TILE_WORK * 2) {  /* too small to share: one call */
        j.tm = m;
        j.tn = n;
    } else {
        int64_t e = tile_edge(m, n, batch);
        j.tm = CD_MIN(e, m);
        j.tn = CD_MIN(e, n);
    }
    j.mt = (m + j.tm - 1) / j.tm;
    j.nt = (n + j.tn - 1) / j.tn;
    return cd_parallel_for(batch * j.mt * j.nt, 1, gemm_tile, &j);
}

typedef struct {
    int kind, trans, sz;
    void *fn;
    int64_t rows, cols, lda, incx, block;
    const char *a, *x;
    char *y, *part;       /* part: a transposed product's partial sums, a row of cols per block */
    int64_t nparts;
} gemv_job;

static void gemv_call(const gemv_job *j, int trans, int64_t r, int64_t cl, const char *a, const char *x, char *y) {
    if (j->kind == EXT_DGEMM)
        ((gemv_d)j->fn)(ROW_MAJOR, trans, r, cl, 1.0, a, j->lda, x, j->incx, 0.0, y, 1);
    else
        ((gemv_f)j->fn)(ROW_MAJOR, trans, r, cl, 1.0f, a, j->lda, x, j->incx, 0.0f, y, 1);
}

/* y's entries i0..i1 from A's rows i0..i1. */
static int gemv_rows(void *ctx, int64_t i0, int64_t i1) {
    const gemv_job *j = ctx;
    gemv_call(j, NO_TRANS, i1 - i0, j->cols, j->a + i0 * j->lda * j->sz, j->x, j->y + i0 * j->sz);
    return 0;
}

/* y = A^T x: block b of A's rows (and of x) gives partial sums of every entry of y. Cutting y's entries
 * instead would read A in short strided runs, at a fraction of the memory's speed. */
static int gemv_parts(void *ctx, int64_t b0, int64_t b1) {
    const gemv_job *j = ctx;
    for (int64_t b = b0; b < b1; b++) {
        int64_t r0 = b * j->block, r = CD_MIN(j->block, j->rows - r0);
        gemv_call(j, j->trans, r, j->cols, j->a + r0 * j->lda * j->sz, j->x + r0 * j->incx * j->sz,
                  j->part + b * j->cols * j->sz);
    }
    return 0;
}

/* y's entries i0..i1: the blocks' partial sums, added in block order. */
#define GEN_GEMV_SUM(T)                                                              \
    static void gemv_sum_##T(const gemv_job *j, int64_t i0, int64_t i1) {            \
        const T *p = (const T *)j->part;                                             \
        for (int64_t i = i0; i < i1; i++) {                                          \
            T acc = p[i];                                                            \
            for (int64_t b = 1; b < j->nparts; b++) acc += p[b * j->cols + i];        \
            ((T *)j->y)[i] = acc;                                                    \
        }                                                                            \
    }
GEN_GEMV_SUM(float)
GEN_GEMV_SUM(double)

static int gemv_sum(void *ctx, int64_t i0, int64_t i1) {
    const gemv_job *j = ctx;
    if (j->sz == 8) gemv_sum_double(j, i0, i1);
    else gemv_sum_float(j, i0, i1);
    return 0;
}

/* Rows per block: at least 64 and MIN_TILE_WORK multiply-adds, at most AIM_BLOCKS blocks, a multiple of 16. */
static int64_t gemv_block_rows(int64_t rows, int64_t depth) {
    int64_t b = CD_MAX(CD_MAX(64, MIN_TILE_WORK / CD_MAX(depth, 1)), (rows + AIM_BLOCKS - 1) / AIM_BLOCKS);
    return (b + 15) / 16 * 16;
}

int cd_pooled_gemv(int32_t kind, void *fn, int32_t trans, int64_t rows, int64_t cols, const void *a, int64_t lda,
                   const void *x, int64_t incx, void *y) {
    if ((kind != EXT_SGEMM && kind != EXT_DGEMM) || !fn)
        return cd_fail("pooled gemv: unknown kind %d or no function", (int)kind);
    if (rows < 0 || cols < 0 || incx <= 0) return cd_fail("pooled gemv: negative size or stride");
    gemv_job j = {.kind = kind, .trans = trans, .sz = kind == EXT_DGEMM ? 8 : 4, .fn = fn, .rows = rows,
                  .cols = cols, .lda = lda, .incx = incx, .a = a, .x = x, .y = y};
    if (trans == NO_TRANS) return cd_parallel_for(rows, gemv_block_rows(rows, cols), gemv_rows, &j);
    if (cols == 0) return 0;
    j.block = gemv_block_rows(rows, cols);
    j.nparts = (rows + j.block - 1) / j.block;
    if (j.nparts <= 1) {
        gemv_call(&j, trans, rows, cols, a, x, y);
        return 0;
    }
    j.part = cd_scratch(j.nparts * cols * j.sz);
    if (!j.part) return -1;
    int rc = cd_parallel_for(j.nparts, 1, gemv_parts, &j);
    if (rc == 0) rc = cd_parallel_for(cols, 4096, gemv_sum, &j);
    cd_scratch_free(j.part);
    return rc;
}

/* vm?Func_64(n, a, r, mode), vm?Powx_64(n, a, scalar, r, mode), vm?Pow_64(n, a, b, r, mode). */
enum { EXT_VM_UNARY, EXT_VM_POWX, EXT_VM_POW };
typedef void (*vm1_f)(int64_t, const void *, void *, int64_t);
typedef void (*vmx_s)(int64_t, const void *, float, void *, int64_t);
typedef void (*vmx_d)(int64_t, const void *, double, void *, int64_t);
typedef void (*vm2_f)(int64_t, const void *, const void *, void *, int64_t);

typedef struct {
    int form, size;
    void *fn;
    const char *a, *b;
    double scalar;
    char *r;
    int64_t mode;
} vm_job;

static int vm_block(void *ctx, int64_t i0, int64_t i1) {
    const vm_job *j = ctx;
    int64_t off = i0 * j->size, n = i1 - i0;
    if (j->form == EXT_VM_UNARY)
        ((vm1_f)j->fn)(n, j->a + off, j->r + off, j->mode);
    else if (j->form == EXT_VM_POW)
        ((vm2_f)j->fn)(n, j->a + off, j->b + off, j->r + off, j->mode);
    else if (j->size == 8)
        ((vmx_d)j->fn)(n, j->a + off, j->scalar, j->r + off, j->mode);
    else
        ((vmx_s)j->fn)(n, j->a + off, (float)j->scalar, j->r + off, j->mode);
    return 0;
}

int cd_pooled_vm(int32_t form, void *fn, int32_t size, int64_t n, const void *a, const void *b, double scalar,
                 void *r, int64_t mode) {
    if (form < EXT_VM_UNARY || form > EXT_VM_POW || (size != 4 && size != 8) || !fn)
        return cd_fail("pooled vector math: unknown form %d, element size %d or no function", (int)form, (int)size);
    if (n < 0) return cd_fail("pooled vector math: negative length");
    vm_job j = {.form = form, .size = size, .fn = fn, .a = a, .b = b, .scalar = scalar, .r = r, .mode = mode};
    return cd_parallel_for(n, 1 << 14, vm_block, &j);  /* 16K elements a chunk: a few microseconds each */
}
