/* The AVX-512 VNNI tile of the int8 products (kernels/int8.c): up to 8 rows x
 * 16 columns of int32 sums, one vpdpbusd (4 u8 x s8 products per lane) per
 * row and group of 4 in k; the group's 4 bytes of a row are broadcast, the
 * panel's 64 bytes are the other operand. Compiled for VNNI by attribute: the
 * set uses it only on CPUs that have it (cd_int8_avx512vnni). */
#include <immintrin.h>
#include <string.h>

#include "arch/x86/isa_x86.h"
#include "runtime/internal.h"

#define MR_MAX 8
#define ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
#define VNNI __attribute__((target("avx512f,avx512vnni")))

static inline __attribute__((always_inline)) VNNI __m512i broadcast_group(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, sizeof v);
    return _mm512_set1_epi32(v);
}

static inline __attribute__((always_inline)) VNNI void tile_body(const int MR, int64_t groups, const uint8_t *a,
                                                                 int64_t lda, const int8_t *b, int32_t *c,
                                                                 int64_t ldc) {
#define INIT(i) __m512i c##i = _mm512_setzero_si512();
    ROWS(INIT)
#undef INIT
    for (int64_t g = 0; g < groups; g++) {
        const __m512i bv = _mm512_loadu_si512((const void *)(b + g * 64));
#define STEP(i) \
    if (i < MR) c##i = _mm512_dpbusd_epi32(c##i, broadcast_group(a + i * lda + 4 * g), bv);
        ROWS(STEP)
#undef STEP
    }
#define STORE(i) \
    if (i < MR) _mm512_storeu_si512((void *)(c + i * ldc), c##i);
    ROWS(STORE)
#undef STORE
}

#define TILE(MR)                                                                                                \
    static VNNI void tile_##MR(int64_t groups, const uint8_t *a, int64_t lda, const int8_t *b, int32_t *c,     \
                               int64_t ldc) {                                                                   \
        tile_body(MR, groups, a, lda, b, c, ldc);                                                               \
    }
TILE(1) TILE(2) TILE(3) TILE(4) TILE(5) TILE(6) TILE(7) TILE(8)

typedef void tile_fixed(int64_t, const uint8_t *, int64_t, const int8_t *, int32_t *, int64_t);
static tile_fixed *const TILES[MR_MAX] = {tile_1, tile_2, tile_3, tile_4, tile_5, tile_6, tile_7, tile_8};

static void tile_int8_vnni(int64_t groups, const uint8_t *a, int64_t lda, const int8_t *b, int32_t *c, int64_t ldc,
                           int64_t mr) {
    TILES[mr - 1](groups, a, lda, b, c, ldc);
}

void cd_int8_avx512vnni(cd_isa_ops *ops) {
    ops->tile_int8 = tile_int8_vnni;
    ops->int8_mr = MR_MAX;
}
