/* The vector math for AVX2 + FMA + F16C (see templates/vmath_impl.h). */
#include "arch/x86/isa_x86.h"
#include "arch/x86/simd.h"
#define VMATH_FILL cd_vmath_avx2
#include "templates/vmath_impl.h"
