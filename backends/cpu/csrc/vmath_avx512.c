/* The vector math for AVX-512 (see vmath_impl.h). */
#define VMATH_REGISTER cd_vmath_register_avx512
#include "vmath_impl.h"
