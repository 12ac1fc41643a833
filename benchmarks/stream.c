/* Memory-bandwidth references for cpu_vs_numpy.py, which compiles this into a
 * shared library and calls it through ctypes: a plain read and a plain copy of
 * a buffer, split over OMP_NUM_THREADS threads in contiguous slices. They are
 * the walls for kernels that stream memory: a decode matrix-vector product
 * reads its matrix once per call, an element-wise op reads and writes once. */
#include <immintrin.h>
#include <omp.h>
#include <stdint.h>

/* This thread's contiguous slice [begin, end) of n elements. */
static void my_slice(int64_t n, int64_t *begin, int64_t *end) {
    const int64_t t = omp_get_thread_num(), threads = omp_get_num_threads();
    *begin = n * t / threads;
    *end = n * (t + 1) / threads;
}

/* The sum of x[0..n): four vector accumulators per thread, so the adds keep
 * up with the loads. */
double stream_read(const float *x, int64_t n) {
    double total = 0;
#pragma omp parallel reduction(+ : total)
    {
        int64_t i, end;
        my_slice(n, &i, &end);
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (; i + 32 <= end; i += 32) {
            a0 = _mm256_add_ps(a0, _mm256_loadu_ps(x + i));
            a1 = _mm256_add_ps(a1, _mm256_loadu_ps(x + i + 8));
            a2 = _mm256_add_ps(a2, _mm256_loadu_ps(x + i + 16));
            a3 = _mm256_add_ps(a3, _mm256_loadu_ps(x + i + 24));
        }
        float lanes[8];
        _mm256_storeu_ps(lanes, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
        for (int l = 0; l < 8; l++) total += lanes[l];
        for (; i < end; i++) total += x[i];
    }
    return total;
}

/* dst[0..n) = src[0..n), each thread copying one contiguous slice with plain
 * vector stores, as the element-wise kernels write (memcpy's streaming stores
 * do not scale with threads here). */
void stream_copy(float *dst, const float *src, int64_t n) {
#pragma omp parallel
    {
        int64_t i, end;
        my_slice(n, &i, &end);
        for (; i + 32 <= end; i += 32) {
            _mm256_storeu_ps(dst + i, _mm256_loadu_ps(src + i));
            _mm256_storeu_ps(dst + i + 8, _mm256_loadu_ps(src + i + 8));
            _mm256_storeu_ps(dst + i + 16, _mm256_loadu_ps(src + i + 16));
            _mm256_storeu_ps(dst + i + 24, _mm256_loadu_ps(src + i + 24));
        }
        for (; i < end; i++) dst[i] = src[i];
    }
}
