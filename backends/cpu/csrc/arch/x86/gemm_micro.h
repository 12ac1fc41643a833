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
 * added to. From it, a kernel for tiles of at most R rows of a packed A panel
 * (PANEL wide), and one for tiles of all R rows with A read in place from rows
 * ars apart. */
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
