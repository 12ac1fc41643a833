/* The AVX2 tile of the int8 products (kernels/int8.c): up to 3 rows x 16
 * columns. A group of 4 in k of a row, widened to 16 bits, is broadcast; the
 * panel's 64 bytes, widened to 16 bits in four vectors of 4 columns x 4 k,
 * meet it in vpmaddwd (pairs of 16 x 16-bit products summed into 32 bits:
 * exact, where vpmaddubsw would saturate). Each column's two pair sums are
 * added at the end. */
#include <immintrin.h>
#include <string.h>

#include "arch/x86/isa_x86.h"
#include "runtime/internal.h"

#define MR_MAX 3

/* The 4 bytes of a group of a row, zero-extended to 16 bits, in every 64-bit lane. */
static inline __m256i broadcast_group(const uint8_t *p) {
    const int64_t v = (int64_t)p[0] | (int64_t)p[1] << 16 | (int64_t)p[2] << 32 | (int64_t)p[3] << 48;
    return _mm256_set1_epi64x(v);
}

static void tile_int8_avx2(int64_t groups, const uint8_t *a, int64_t lda, const int8_t *b, int32_t *c, int64_t ldc,
                           int64_t mr) {
    __m256i acc[MR_MAX][4];
    for (int64_t i = 0; i < MR_MAX; i++)
        for (int q = 0; q < 4; q++) acc[i][q] = _mm256_setzero_si256();
    for (int64_t g = 0; g < groups; g++) {
        __m256i bw[4];
        for (int q = 0; q < 4; q++) /* columns 4q..4q+3, their 4 k each */
            bw[q] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(b + g * 64 + 16 * q)));
        for (int64_t i = 0; i < mr; i++) {
            const __m256i av = broadcast_group(a + i * lda + 4 * g);
            for (int q = 0; q < 4; q++) acc[i][q] = _mm256_add_epi32(acc[i][q], _mm256_madd_epi16(bw[q], av));
        }
    }
    for (int64_t i = 0; i < mr; i++)
        for (int q = 0; q < 4; q++) { /* lanes: column 4q + l's pair sums at 2l and 2l + 1 */
            int32_t pairs[8];
            _mm256_storeu_si256((__m256i *)pairs, acc[i][q]);
            for (int l = 0; l < 4; l++) c[i * ldc + 4 * q + l] = pairs[2 * l] + pairs[2 * l + 1];
        }
}

void cd_int8_avx2(cd_isa_ops *ops) {
    ops->tile_int8 = tile_int8_avx2;
    ops->int8_mr = MR_MAX;
}
