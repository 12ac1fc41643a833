/* Pieces of the register-tiled microkernels shared by gemm_avx512.c and
 * gemm_avx2.c. The including file defines
 *
 *   OP(op, S)    the intrinsic for op on element suffix S (ps: f32, pd: f64),
 *                e.g. _mm512_##op##_##S
 *   VEC(S)       the vector type for S
 *   A_AT(i)      the element of A in row i at the current k
 *
 * A tile is rows x (two vectors) of accumulators c<row>_0, c<row>_1; per k,
 * one broadcast of A per row times the two B vectors b0, b1. A_AT(i), from
 * the including file, reads row i of A at the current k: a[i * ars], with ars
 * the constant 1 for a packed panel and the matrix's row stride when A is read
 * in place. */
#ifndef CANDLE_CPU_GEMM_MICRO_H
#define CANDLE_CPU_GEMM_MICRO_H

#define GEMM_MICRO_PACKING 1 /* templates/gemm_impl.h: this file's _packing kernels exist */

#define ELEM_ps float
#define ELEM_pd double
#define ELEM_(S) ELEM_##S
#define ELEM(S) ELEM_(S)

#define ROWS2(X, S) X(0, S) X(1, S)
#define ROWS4(X, S) ROWS2(X, S) X(2, S) X(3, S)
#define ROWS6(X, S) ROWS4(X, S) X(4, S) X(5, S)
#define ROWS8(X, S) ROWS6(X, S) X(6, S) X(7, S)
#define ROWS14(X, S) ROWS8(X, S) X(8, S) X(9, S) X(10, S) X(11, S) X(12, S) X(13, S)

#define DECL(i, S) VEC(S) c##i##_0 = OP(setzero, S)(), c##i##_1 = OP(setzero, S)();
#define STEP(i, S)                                    \
    {                                                 \
        const VEC(S) ai = OP(set1, S)(A_AT(i));       \
        c##i##_0 = OP(fmadd, S)(ai, b0, c##i##_0);    \
        c##i##_1 = OP(fmadd, S)(ai, b1, c##i##_1);    \
    }

/* The including file's MICRO_BODY(R, S, ACS) is the tile body: kc steps of A
 * (row i at a[i * ars], the next k ACS further on) times B, then C stored or
 * added to; MICRO_BODY_SAVE(R, S, ACS, SAVE) the same with SAVE(S) run after
 * each step's loads of B. From it, a
 * kernel for tiles of at most R rows of a packed A panel (PANEL wide), and one
 * for tiles of all R rows with A read in place from rows ars apart. */
#define GEN_MICRO(NAME, R, S, PANEL)                                                            \
    static void NAME##_##R(int64_t kc, const ELEM(S) *restrict a, const ELEM(S) *restrict b,     \
                           int64_t ldb, ELEM(S) *restrict c, int64_t ldc, int mr, int nr,         \
                           int accumulate) {                                                      \
        const int64_t ars = 1;                                                                    \
        MICRO_BODY(R, S, PANEL)                                                                   \
    }
#define GEN_MICRO_ROWS(NAME, R, S)                                                              \
    static void NAME##_rows(int64_t kc, const ELEM(S) *restrict a, int64_t ars,                  \
                            const ELEM(S) *restrict b, int64_t ldb, ELEM(S) *restrict c,          \
                            int64_t ldc, int nr, int accumulate) {                                \
        const int mr = R;                                                                         \
        MICRO_BODY(R, S, 1)                                                                       \
    }

/* Whole tiles that pack B as they read it from its source, so that the copy's loads and
 * stores ride along the multiply-adds instead of taking a pass of their own; the same
 * operations in the same order as NAME_R and NAME_rows. They read B's rows (ldb apart,
 * columns contiguous) and store them into the packed panel bdst (NR wide). The same row of
 * the panel to the right is prefetched meanwhile, for the next first tile: a column of rows
 * a power of two apart, all in one or two L1 sets, would otherwise wait on L2 at each k. */
#define SAVE_B(S)                                                          \
    _mm_prefetch((const char *)(b + 2 * W), _MM_HINT_T0);                  \
    _mm_prefetch((const char *)(b + 4 * W) - 1, _MM_HINT_T0);              \
    OP(storeu, S)(bdst, b0);                                               \
    OP(storeu, S)(bdst + W, b1);                                           \
    bdst += 2 * W;
#define NO_SAVE(S)
#define GEN_MICRO_PACKING(NAME, R, S, PANEL)                                                    \
    __attribute__((noinline)) static void NAME##_packing(                                        \
        int64_t kc, const ELEM(S) *restrict a, const ELEM(S) *restrict b, int64_t ldb,            \
        ELEM(S) *restrict bdst, ELEM(S) *restrict c, int64_t ldc, int accumulate) {               \
        const int64_t ars = 1;                                                                    \
        const int mr = R, nr = 2 * LANES(S);                                                      \
        MICRO_BODY_SAVE(R, S, PANEL, SAVE_B)                                                      \
    }                                                                                             \
    __attribute__((noinline)) static void NAME##_rows_packing(                                   \
        int64_t kc, const ELEM(S) *restrict a, int64_t ars, const ELEM(S) *restrict b,            \
        int64_t ldb, ELEM(S) *restrict bdst, ELEM(S) *restrict c, int64_t ldc, int accumulate) {  \
        const int mr = R, nr = 2 * LANES(S);                                                      \
        MICRO_BODY_SAVE(R, S, 1, SAVE_B)                                                          \
    }

/* C's rows of the tile into L1 before the K loop. W: lanes per vector. */
#define PREF(i, S)                                                     \
    _mm_prefetch((const char *)(c + (i) * ldc), _MM_HINT_T0);          \
    _mm_prefetch((const char *)(c + (i) * ldc + W), _MM_HINT_T0);
/* Row i of a whole tile stored to C, or added to it. */
#define STORE_FULL(i, S)                                                 \
    {                                                                    \
        ELEM(S) *ci = c + (i) * ldc;                                     \
        if (accumulate) {                                                \
            c##i##_0 = OP(add, S)(c##i##_0, OP(loadu, S)(ci));           \
            c##i##_1 = OP(add, S)(c##i##_1, OP(loadu, S)(ci + W));       \
        }                                                                \
        OP(storeu, S)(ci, c##i##_0);                                     \
        OP(storeu, S)(ci + W, c##i##_1);                                 \
    }

#endif
