/* The AVX2 packed-weight kernels again, prefetching as Zen 1 streams them fastest (see the prefetch note in
 * templates/qpacked_impl.h): there a tile's burst of prefetches stalls the loads behind it, where Zen 4
 * forced to AVX2 streams Q4_K faster with the burst and Q8_0 without any. isa_x86.c takes these on a Zen 1
 * (znver1); the arithmetic is the same, and so are the results. */
#define QP_ZEN1 1
#include "arch/x86/qpacked_avx2.c"
