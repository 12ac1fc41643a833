/* The quantized dot products for AVX2 (see templates/qdot_impl.h). */
#include "arch/x86/isa_x86.h"

#define QD_NAME(name) name##_avx2
#define QD_VNNI 0
#define QDOT_FILL cd_qdot_avx2
/* Pairs of byte products summed into int16 (no overflow: u < 128), then pairs of those into int32. */
#define QD_DPBUSD(acc, u, s) \
    _mm256_add_epi32((acc), _mm256_madd_epi16(_mm256_maddubs_epi16((u), (s)), _mm256_set1_epi16(1)))
#include "templates/qdot_impl.h"
