/* How instruction-set specific files (vmath_<isa>.c) install faster loops into
 * the kernel tables. Called once, when the library loads (see isa.c). */
#ifndef CANDLE_CPU_KERNEL_HOOKS_H
#define CANDLE_CPU_KERNEL_HOOKS_H

#include <stdint.h>

typedef int (*cd_unary_loop)(int64_t n, const void *x, void *y);
typedef void (*cd_half_to_f32)(int64_t n, const uint16_t *src, float *dst);
typedef void (*cd_f32_to_half)(int64_t n, const float *src, uint16_t *dst);
typedef void (*cd_softmax_row_fn)(const float *x, float *y, int64_t n, int take_log);
typedef double (*cd_sum_f32_fn)(const float *x, int64_t n);
typedef float (*cd_extreme_f32_fn)(const float *x, int64_t n, int is_max);
typedef void (*cd_norm_row_fn)(const float *x, float *y, int64_t n, const float *w, const float *b, float eps, int rms);

/* elementwise.c: the serial contiguous loop of a unary (op, dtype), and the
 * one in use (for kernels that apply exp & co to their own buffers). */
void cd_set_unary_loop(int op, int dtype, cd_unary_loop loop);
cd_unary_loop cd_get_unary_loop(int op, int dtype);
/* runtime.c: the block conversions behind cd_f16_to_f32_n and friends. */
void cd_set_half_converters(cd_half_to_f32 f16_up, cd_f32_to_half f16_down, cd_half_to_f32 bf16_up,
                            cd_f32_to_half bf16_down);
/* nn.c: the f32 row kernels of softmax and the norms. */
void cd_set_row_kernels(cd_softmax_row_fn softmax, cd_norm_row_fn norm);
/* reduce.c: sum (in double) and max/min of contiguous f32 runs. */
void cd_set_reduce_kernels(cd_sum_f32_fn sum, cd_extreme_f32_fn extreme);

void cd_vmath_register_avx512(void);
void cd_vmath_register_avx2(void);

#endif
