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

static void fill_avx512(cd_isa_ops *ops) {
    ops->bf16_dot = __builtin_cpu_supports("avx512bf16"); /* before the vector math, which reads it */
    ops->gemm = cd_gemm_avx512;
    ops->panels = &cd_gemm_avx512_panels;
    cd_vmath_avx512(ops);
    cd_panels_avx512(ops);
    if (__builtin_cpu_supports("avx512vnni")) {
        cd_qdot_avx512vnni(ops);
        cd_qpacked_avx512vnni(ops);
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
    cd_qpacked_avx2(ops);
}

const cd_isa_set cd_arch_sets[] = {
    {"avx512", avx512_supported, fill_avx512},
    {"avx2", avx2_supported, fill_avx2},
    {NULL, NULL, NULL},
};
