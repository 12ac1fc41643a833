/* What the x86 sources put into the ISA table: a GEMM (gemm_<set>.c) and the
 * vector math (vmath_<set>.c) per instruction set; isa_x86.c lists the sets. */
#ifndef CANDLE_CPU_ISA_X86_H
#define CANDLE_CPU_ISA_X86_H

#include "runtime/isa.h"

cd_gemm_fn cd_gemm_avx2, cd_gemm_avx512;
void cd_vmath_avx2(cd_isa_ops *ops);
void cd_vmath_avx512(cd_isa_ops *ops);

#endif
