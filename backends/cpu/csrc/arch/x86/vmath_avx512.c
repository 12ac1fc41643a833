/* The vector math for AVX-512 (see templates/vmath_impl.h). */
#include "arch/x86/isa_x86.h"
#include "arch/x86/simd.h"
#define VMATH_FILL cd_vmath_avx512
#include "templates/vmath_impl.h"
