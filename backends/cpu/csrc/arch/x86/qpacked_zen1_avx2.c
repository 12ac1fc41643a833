/* The AVX2 packed-weight kernels again, prefetching as Zen 1 streams them fastest (see the prefetch note in
 * templates/qpacked_impl.h): Zen 1 splits each 256-bit operation in two and has few miss buffers, so a
 * tile's burst of prefetches stalls the loads behind it, where Zen 3 and 4 gain by the burst. isa_x86.c
 * takes these on a Zen 1 (znver1), the others elsewhere; the arithmetic is the same, and so are the results. */
#define QP_PREFETCH_RUNS 4096
#define QP_PREFETCH_Q8 8192
#define QPACKED_FILL cd_qpacked_zen1_avx2
#include "arch/x86/qpacked_avx2.c"
