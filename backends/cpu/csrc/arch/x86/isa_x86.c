/* The x86 instruction sets, best first: what the CPU must support for each,
 * and what each puts into the ISA table (see runtime/isa.h). */
#include <stddef.h>

#include "arch/x86/isa_x86.h"

static int avx512_supported(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
}

static int avx2_supported(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
}

/* Decode of Q4_0, Q4_1 and Q8_0 by the AVX2 kernels: on Zen 4 one thread streams 64 MiB of weights
 * 1.12-1.33x (Q4_0), 0.97-1.20x (Q4_1) and 1.05-1.10x (Q8_0) as fast as with the AVX-512 ones (Q4_0 and
 * Q4_1 prefetching, which the AVX-512 kernels lose by); two threads Q4_0 and Q4_1 6-9% slower, still above
 * a plain read's speed, Q8_0 alike. The other types' AVX-512 kernels stream faster (Q5_0, Q5_1, IQ4_NL,
 * MXFP4: 1.12-1.49x; IQ4_XS 1.49x; Q4_K alike). Prompts stay on AVX-512. */
static void borrow_avx2_rows(cd_isa_ops *ops) {
    static const int32_t types[] = {CD_Q4_0, CD_Q4_1, CD_Q8_0};
    cd_isa_ops avx2 = {0};
    cd_qpacked_avx2(&avx2);
    for (size_t i = 0; i < sizeof types / sizeof *types; i++) ops->qrow[types[i]] = avx2.qrow[types[i]];
}

static void fill_avx512(cd_isa_ops *ops) {
    ops->bf16_dot = __builtin_cpu_supports("avx512bf16"); /* before the vector math, which reads it */
    ops->gemm = cd_gemm_avx512;
    ops->panels = &cd_gemm_avx512_panels;
    cd_vmath_avx512(ops);
    cd_panels_avx512(ops);
    if (__builtin_cpu_supports("avx512vnni")) {
        cd_qdot_avx512vnni(ops);
        cd_qpacked_avx512vnni(ops);
        borrow_avx2_rows(ops);
        cd_int8_avx512vnni(ops);
    } else {
        cd_qdot_avx2(ops);
        cd_qpacked_avx2(ops);
        cd_int8_avx2(ops);
    }
}

static void fill_avx2(cd_isa_ops *ops) {
    ops->gemm = cd_gemm_avx2;
    ops->panels = &cd_gemm_avx2_panels;
    cd_vmath_avx2(ops);
    cd_panels_avx2(ops);
    cd_int8_avx2(ops);
    cd_qdot_avx2(ops);
    if (__builtin_cpu_is("znver1"))
        cd_qpacked_zen1_avx2(ops);
    else
        cd_qpacked_avx2(ops);
}

const cd_isa_set cd_arch_sets[] = {
    {"avx512", avx512_supported, fill_avx512},
    {"avx2", avx2_supported, fill_avx2},
    {NULL, NULL, NULL},
};
