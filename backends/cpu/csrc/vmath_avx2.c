/* The vector math for AVX2 + FMA + F16C (see vmath_impl.h). */
#define VMATH_REGISTER cd_vmath_register_avx2
#include "vmath_impl.h"
