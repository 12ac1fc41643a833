/* GEMM microkernels for AVX2 + FMA (the driver is templates/gemm_impl.h).
 *
 * f32: a 6 x 16 tile in 12 ymm accumulators; per k, two B vectors and one
 * broadcast of A per row, 12 FMAs (with the two B vectors and the broadcast,
 * 15 of the 16 registers). f64: 6 x 8 likewise. C's rows are prefetched
 * before the K loop; the loop is unrolled four times, so the pointer updates
 * and the branch are amortized over 48 FMAs. Edge tiles load and store C
 * through lane masks; tiles of fewer rows run a shorter kernel. */
#include <immintrin.h>

#include "arch/x86/isa_x86.h"
#include "runtime/internal.h"

#define OP(op, S) _mm256_##op##_##S
#define VEC_ps __m256
#define VEC_pd __m256d
#define VEC_(S) VEC_##S
#define VEC(S) VEC_(S)
#define A_AT(i) a[(i) * ars]
#include "arch/x86/gemm_micro.h"

#define LANES(S) ((int)(32 / sizeof(ELEM(S))))
/* The lanes below n of a vector of S, as the sign bits maskload/maskstore read. */
#define LANE_MASK_ps(n) _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))
#define LANE_MASK_pd(n) _mm256_cmpgt_epi64(_mm256_set1_epi64x(n), _mm256_setr_epi64x(0, 1, 2, 3))
#define LANE_MASK_(S, n) LANE_MASK_##S(n)
#define LANE_MASK(S, n) LANE_MASK_(S, n)

#define STORE_PART(i, S)                                                       \
    if ((i) < mr) {                                                            \
        ELEM(S) *ci = c + (i) * ldc;                                           \
        if (accumulate) {                                                      \
            c##i##_0 = OP(add, S)(c##i##_0, OP(maskload, S)(ci, m0));          \
            c##i##_1 = OP(add, S)(c##i##_1, OP(maskload, S)(ci + W, m1));      \
        }                                                                      \
        OP(maskstore, S)(ci, m0, c##i##_0);                                    \
        OP(maskstore, S)(ci + W, m1, c##i##_1);                                \
    }
/* The tile body (see gemm_micro.h), B's rows ldb apart. */
#define MICRO_BODY_SAVE(R, S, ACS, SAVE)                                                        \
    const int W = LANES(S);                                                                     \
    ROWS##R(PREF, S)                                                                            \
    ROWS##R(DECL, S)                                                                            \
    _Pragma("GCC unroll 4") for (int64_t p = 0; p < kc; p++, a += (ACS), b += ldb) {            \
        const VEC(S) b0 = OP(loadu, S)(b), b1 = OP(loadu, S)(b + W);                            \
        SAVE(S)                                                                                 \
        ROWS##R(STEP, S)                                                                        \
    }                                                                                           \
    if (mr == R && nr == 2 * W) {                                                               \
        ROWS##R(STORE_FULL, S)                                                                  \
    } else {                                                                                    \
        const __m256i m0 = LANE_MASK(S, nr), m1 = LANE_MASK(S, nr - W);                         \
        ROWS##R(STORE_PART, S)                                                                  \
    }
#define MICRO_BODY(R, S, ACS) MICRO_BODY_SAVE(R, S, ACS, NO_SAVE)
/* Kernels of 6, 4 and 2 rows over packed panels (6 wide), the entry that picks one, the
 * in-place kernel, and the two that pack B as they go. */
#define GEN_MICROS(NAME, S)                                                                     \
    GEN_MICRO(NAME, 6, S, 6) GEN_MICRO(NAME, 4, S, 6) GEN_MICRO(NAME, 2, S, 6)                   \
    static void NAME(int64_t kc, const ELEM(S) *a, const ELEM(S) *b, int64_t ldb, ELEM(S) *c,     \
                     int64_t ldc, int mr, int nr, int acc) {                                      \
        if (mr > 4) NAME##_6(kc, a, b, ldb, c, ldc, mr, nr, acc);                                 \
        else if (mr > 2) NAME##_4(kc, a, b, ldb, c, ldc, mr, nr, acc);                            \
        else NAME##_2(kc, a, b, ldb, c, ldc, mr, nr, acc);                                        \
    }                                                                                             \
    GEN_MICRO_ROWS(NAME, 6, S)                                                                    \
    GEN_MICRO_PACKING(NAME, 6, S, 6)

GEN_MICROS(micro_f32, ps)
GEN_MICROS(micro_f64, pd)

/* ---- transposing pack: dst[p * W + i] = src[i * ld + p], i < w <= W, p < kc ----
 * 8 x 8 blocks transposed in registers, partial blocks element by element. */
static inline void transpose8(__m256 *r) {
    __m256 t[8], u[8];
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 2; i++) {
        u[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
        u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
        u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
        u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
    }
    for (int i = 0; i < 4; i++) {
        r[i] = _mm256_permute2f128_ps(u[i], u[4 + i], 0x20);
        r[4 + i] = _mm256_permute2f128_ps(u[i], u[4 + i], 0x31);
    }
}

/* Blocks of 8 k are transposed in registers (rows past w read as zero) and
 * stored W wide: a panel narrower than a vector (A's, 6 wide) stores 8 lanes,
 * the two past its row landing where the next k's store goes next, but for
 * the panel's last k, which is stored through a mask. */
static void tpack_f32(const float *src, int64_t ld, int w, int64_t kc, int W, float *dst) {
    for (int i0 = 0; i0 < W; i0 += 8) {
        const int rows = CD_MAX(0, CD_MIN(8, w - i0)), lanes = CD_MIN(8, W - i0);
        const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(lanes), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        const int spill = lanes < 8 && W <= 8; /* the extra lanes land in the next k's row */
        int64_t p0 = 0;
        for (; p0 + 8 <= kc && (lanes == 8 || spill); p0 += 8) {
            __m256 r[8];
            for (int i = 0; i < 8; i++) r[i] = i < rows ? _mm256_loadu_ps(src + (i0 + i) * ld + p0) : _mm256_setzero_ps();
            transpose8(r);
            for (int j = 0; j < 8; j++) {
                float *d = dst + (p0 + j) * W + i0;
                if (lanes == 8 || p0 + j + 1 < kc) _mm256_storeu_ps(d, r[j]);
                else _mm256_maskstore_ps(d, mask, r[j]);
            }
        }
        for (; p0 < kc; p0++)
            for (int i = 0; i < lanes; i++) dst[p0 * W + i0 + i] = i < rows ? src[(i0 + i) * ld + p0] : 0.0f;
    }
}

/* The deepest K slice whose micro-panel (bytes_per_k a row) fills half of L1d:
 * - B's (NR columns: 256 for a 32 KiB L1d), where a task packs the B panels it
 *   uses (products of few rows): each stays there while A's panels stream past
 *   from L2. Deeper slices (384-1024) measured no faster with the B panel held
 *   in L1 (Zen 4), and up to 3% slower at 8-128 rows on Zen 1.
 * - A's (MR rows: 512), where B's panels are shared (F32_KC_SHARED): they stream
 *   from L2 past an A panel held in L1 (GEMM_B_L2_SHARE below), and a deeper
 *   slice halves the passes over C, whose rows come from memory. On Zen 1, 1
 *   thread, square products 512-4096 +1-2% (with GEMM_B_L3_SHARE). */
static int64_t kc_from_l1(int64_t bytes_per_k) {
    return CD_MAX(128, CD_MIN(512, cd_cache_bytes(1) / 2 / bytes_per_k / 8 * 8));
}

#define GEMM_ENTRY cd_gemm_avx2
/* A's block may take a third of L2: each B panel fetched from L3 then serves
 * twice as many tiles as with a sixth (+2-3% on 4096 columns in a sweep of the
 * microkernel on Zen 4). */
#define GEMM_A_L2_SHARE 3
/* The tiles of a shared packed B walk along C's rows, an A panel held in L1 and
 * B's panels streamed from a chunk of a third of L2: walking down C's columns
 * instead (B's panel in L1, A's streamed) puts the six rows of a tile, a power
 * of two apart in the usual shapes, in one L1 set, where they evict the panel
 * held there (on Zen 4, with C in cache: 116 against 110 GFLOP/s per core for
 * rows 8 KiB apart; 512-4096 square products +0-3%). */
#define GEMM_B_L2_SHARE 3
/* A block of B may take a quarter of L3, where AVX-512 keeps an eighth: at KC 512 that is 1024
 * columns on an 8 MiB L3, so A's blocks are packed half as often (Zen 1, 1 thread: 2048-square
 * +0.8% over KC 512 alone). */
#define GEMM_B_L3_SHARE 4
/* A read in place when its K slice fits half of L2 (use_in_place): 512-square
 * products +2-4% on Zen 4, where A's packing was a twentieth of the time. */
#define GEMM_A_SLICE_IN_PLACE 1
/* GEMV's axpy form (templates/gemm_impl.h) streams four rows at a time, prefetched 128 bytes ahead,
 * non-temporal. Rows a multiple of 4 KiB apart (4096 f32 columns) fall in one set of a 32 KiB 8-way L1
 * (AVX2 machines': Zen 1-3, Intel's client cores), where eight rows leave no way for y's line. On Zen 1
 * (2-vCPU EPYC, 1x4096 @ 4096x4096 f32, a fresh process per library, 9 interleaved runs) 1 thread: 8 rows
 * 5.2 ms, 6 rows 4.2, 4 rows 3.8, NumPy's OpenBLAS 4.0; 2 threads 3.3, 2.9, 2.8, 3.3. In a C harness of
 * the loop alone, 4 rows read 19 GB/s with the prefetch 128-256 bytes ahead, 16 at 1 KiB, and 17-18 with
 * prefetcht0/t1 in place of nta. */
#define GEMV_ROWS 4
#define GEMV_AHEAD 128
#define GEMV_HINT 0
#define F32_MR 6
#define F32_NR 16
#define F32_KC kc_from_l1(F32_NR * sizeof(float))
#define F32_KC_SHARED kc_from_l1(F32_MR * sizeof(float))
#define F64_MR 6
#define F64_NR 8
#define F64_KC kc_from_l1(F64_NR * sizeof(double))
#include "templates/gemm_impl.h"
