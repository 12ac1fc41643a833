/* The quantized dot products with AVX-512 VNNI (see templates/qdot_impl.h):
 * one vpdpbusd per 32 byte products. A CPU with AVX-512 but no VNNI keeps the
 * AVX2 kernels (isa_x86.c). */
#pragma GCC target("avx512vnni")
#include "arch/x86/isa_x86.h"

#define QD_NAME(name) name##_avx512
#define QD_VNNI 1
#define QDOT_FILL cd_qdot_avx512vnni
#define QD_DPBUSD(acc, u, s) _mm256_dpbusd_epi32((acc), (u), (s))
#include "templates/qdot_impl.h"
