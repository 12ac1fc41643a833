/* Measures the FMA peak of this machine in GFLOP/s: 12 independent chains of
 * 256-bit FMAs per thread (enough to cover the FMA latency on two pipes).
 * Usage: peak_fma THREADS. Built and run by cpu_vs_numpy.py. */
#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define ITERS 20000000L

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

#define CHAINS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
#define DECL(i) __m256 a##i = _mm256_set1_ps((float)(i));
#define STEP(i) a##i = _mm256_fmadd_ps(a##i, m, b);
#define SUM(i) s = _mm256_add_ps(s, a##i);

static void *run(void *out) {
    const __m256 m = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
    CHAINS(DECL)
    for (long it = 0; it < ITERS; it++) {
        CHAINS(STEP)
    }
    __m256 s = _mm256_setzero_ps();
    CHAINS(SUM)
    float tmp[8];
    _mm256_storeu_ps(tmp, s);
    *(float *)out = tmp[0];
    return NULL;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 1;
    if (threads < 1 || threads > 64) return 1;
    pthread_t t[64];
    float sink[64];
    double best = 1e30;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = now();
        for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, run, &sink[i]);
        for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
        double dt = now() - t0;
        if (dt < best) best = dt;
    }
    printf("%.1f GFLOP/s (%g)\n", threads * ITERS * 12.0 * 8 * 2 / best / 1e9, (double)sink[0]);
    return 0;
}
