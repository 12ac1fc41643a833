/* What the CPU offers: the instruction set the kernels use, chosen once when
 * the library loads (the best this CPU supports, or the one CANDLE_CPU_ISA
 * names, so every code path can be tested on one machine), and its caches. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/internal.h"
#include "runtime/isa.h"

cd_isa_ops cd_ops;

/* The portable code, which every CPU runs. */
static const char SCALAR[] = "scalar";

/* The set to use: NULL for the portable code. */
static const cd_isa_set *pick(void) {
    const cd_isa_set *best = NULL;
    for (const cd_isa_set *s = cd_arch_sets; s->name && !best; s++)
        if (s->supported()) best = s;
    const char *env = getenv("CANDLE_CPU_ISA");
    if (!env || !*env) return best;
    if (strcmp(env, SCALAR) == 0) return NULL;
    for (const cd_isa_set *s = cd_arch_sets; s->name; s++) {
        if (strcmp(env, s->name) != 0) continue;
        if (s->supported()) return s;
        fprintf(stderr, "candle-backend-cpu: CANDLE_CPU_ISA=%s is not supported here, using %s\n", env,
                best ? best->name : SCALAR);
        return best;
    }
    char names[128] = "";
    for (const cd_isa_set *s = cd_arch_sets; s->name; s++)
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", s->name, s[1].name ? ", " : " ");
    fprintf(stderr, "candle-backend-cpu: ignoring CANDLE_CPU_ISA=%s (%sor %s)\n", env, names, SCALAR);
    return best;
}

__attribute__((constructor)) static void fill_ops(void) {
    const cd_isa_set *set = pick();
    cd_isa_fill_generic(&cd_ops);
    cd_ops.name = SCALAR;
    if (set) {
        set->fill(&cd_ops);
        cd_ops.name = set->name;
    }
}

const char *cd_isa(void) { return cd_ops.name; }

int cd_has_avx512bf16(void) { return cd_ops.bf16_dot; }

/* The kernel's view of cpu0's data caches (0 when unknown). Preferred over
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
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/type", index);
        if ((f = fopen(path, "r"))) { /* level 1 lists the instruction cache too */
            got = fgets(text, sizeof text, f) && strncmp(text, "Instruction", 11) != 0;
            fclose(f);
            if (!got) continue;
        }
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
    const int name = level == 1 ? _SC_LEVEL1_DCACHE_SIZE : level == 2 ? _SC_LEVEL2_CACHE_SIZE : _SC_LEVEL3_CACHE_SIZE;
    long v = sysconf(name);
    return v > 0 ? v : level == 1 ? 32 * 1024 : level == 2 ? 512 * 1024 : 8 * 1024 * 1024;
}
