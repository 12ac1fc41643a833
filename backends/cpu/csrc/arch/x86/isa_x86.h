/* What the x86 sources put into the ISA table per instruction set: a GEMM
 * (gemm_<set>.c), the vector math (vmath_<set>.c) and the quantized dot
 * products (qdot_<set>.c); isa_x86.c lists the sets. */
#ifndef CANDLE_CPU_ISA_X86_H
#define CANDLE_CPU_ISA_X86_H

#include "runtime/isa.h"

cd_gemm_fn cd_gemm_avx2, cd_gemm_avx512;
extern const cd_panel_ops cd_gemm_avx2_panels, cd_gemm_avx512_panels;
void cd_vmath_avx2(cd_isa_ops *ops);
void cd_vmath_avx512(cd_isa_ops *ops);
/* The quantized dot products (templates/qdot_impl.h). */
void cd_qdot_avx2(cd_isa_ops *ops);
void cd_qdot_avx512vnni(cd_isa_ops *ops);
/* The packed-weight kernels (templates/qpacked_impl.h). */
void cd_qpacked_avx2(cd_isa_ops *ops);
void cd_qpacked_zen1_avx2(cd_isa_ops *ops); /* the same, with Zen 1's prefetch */
void cd_qpacked_avx512vnni(cd_isa_ops *ops);
/* The tiles of the products with packed weights (panels_<set>.c). */
void cd_panels_avx2(cd_isa_ops *ops);
void cd_panels_avx512(cd_isa_ops *ops);
/* The tiles of the int8 products (int8_<set>.c). */
void cd_int8_avx2(cd_isa_ops *ops);
void cd_int8_avx512vnni(cd_isa_ops *ops);

#endif
