/* Instruction-set selection: the best set this CPU supports, or the one named
 * by CANDLE_CPU_ISA (avx512, avx2 or scalar) so every code path can be tested
 * on one machine. Chosen once, at first use. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gemm.h"
#include "internal.h"
#include "kernel_hooks.h"

static int supported(int isa) {
    __builtin_cpu_init();
    switch (isa) {
    case CD_ISA_AVX512:
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    case CD_ISA_AVX2:
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    default:
        return 1;
    }
}

static const char *const NAMES[] = {"scalar", "avx2", "avx512"};
static int chosen = -1, bf16_dot;
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* The best set, or CANDLE_CPU_ISA's when this CPU supports it. */
static int pick(void) {
    const char *env = getenv("CANDLE_CPU_ISA");
    int best = supported(CD_ISA_AVX512) ? CD_ISA_AVX512 : supported(CD_ISA_AVX2) ? CD_ISA_AVX2 : CD_ISA_SCALAR;
    if (!env || !*env) return best;
    for (int i = 0; i < 3; i++) {
        if (strcmp(env, NAMES[i]) == 0) {
            if (supported(i)) return i;
            fprintf(stderr, "candle-backend-cpu: CANDLE_CPU_ISA=%s is not supported here, using %s\n", env,
                    NAMES[best]);
            return best;
        }
    }
    fprintf(stderr, "candle-backend-cpu: ignoring CANDLE_CPU_ISA=%s (avx512, avx2 or scalar)\n", env);
    return best;
}

static void choose(void) {
    chosen = pick();
    bf16_dot = chosen == CD_ISA_AVX512 && __builtin_cpu_supports("avx512bf16");
}

int cd_isa_level(void) {
    pthread_once(&once, choose);
    return chosen;
}

int cd_has_avx512bf16(void) {
    pthread_once(&once, choose);
    return bf16_dot;
}

const char *cd_isa(void) { return NAMES[cd_isa_level()]; }

/* Installs the vector loops of the chosen set when the library loads. */
__attribute__((constructor)) static void install_vector_kernels(void) {
    switch (cd_isa_level()) {
    case CD_ISA_AVX512: cd_vmath_register_avx512(); break;
    case CD_ISA_AVX2: cd_vmath_register_avx2(); break;
    default: break;
    }
}

/* The kernel's view of cpu0's caches (0 when unknown). Preferred over
 * sysconf, which under some hypervisors reports the L3 of a whole package. */
static int64_t sysfs_cache_bytes(int level) {
    char path[96], text[32];
    for (int index = 0; index < 8; index++) {
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", index);
        FILE *f = fopen(path, "r");
        if (!f) break;
        int lvl = 0, got = fscanf(f, "%d", &lvl) == 1;
        fclose(f);
        if (!got || lvl != level) continue;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", index);
        if (!(f = fopen(path, "r"))) continue;
        long kib = 0;
        got = fgets(text, sizeof text, f) && sscanf(text, "%ldK", &kib) == 1;
        fclose(f);
        if (got && kib > 0) return (int64_t)kib * 1024;
    }
    return 0;
}

/* A typical size when neither source says. */
int64_t cd_cache_bytes(int32_t level) {
    int64_t s = sysfs_cache_bytes(level);
    if (s > 0) return s;
    long v = sysconf(level == 2 ? _SC_LEVEL2_CACHE_SIZE : _SC_LEVEL3_CACHE_SIZE);
    return v > 0 ? v : level == 2 ? 512 * 1024 : 8 * 1024 * 1024;
}

const cd_gemm_ops *cd_gemm_best(void) {
    switch (cd_isa_level()) {
    case CD_ISA_AVX512: return &cd_gemm_avx512;
    case CD_ISA_AVX2: return &cd_gemm_avx2;
    default: return &cd_gemm_generic;
    }
}

int cd_gemm(int32_t dtype, int64_t m, int64_t n, int64_t k, const void *a, int64_t ars, int64_t acs,
            const void *b, int64_t brs, int64_t bcs, void *c, int64_t ldc) {
    return cd_gemm_best()->gemm(dtype, m, n, k, a, ars, acs, b, brs, bcs, c, ldc);
}
