/* What kernels/conv.c shares with the other convolutions (kernels/panels.c):
 * the parameters of a 2-d convolution and the im2col of one image's group. */
#ifndef CANDLE_CPU_CONV_H
#define CANDLE_CPU_CONV_H

#include <stdint.h>

typedef struct {
    int64_t b, cin, h, w, cout, kh, kw, sh, sw, ph, pw, dh, dw, groups, oh, ow, oph, opw;
} conv_params;

/* q from the 18 values of the p descriptor (candle_cpu.h, cd_conv2d); -1 + error when invalid. */
int cd_conv_parse(const int64_t *p, conv_params *q);
/* Rows [r0, r1) of the im2col of one image's group (x at the group's first
 * channel, xs its strides) for the output rows [oy0, oy1):
 * col[(ch * kh + i) * kw + j][(oy - oy0) * ow + ox], compute type ct. */
void cd_conv_im2col(int dtype, int ct, const conv_params *q, const int64_t *xs, const char *x, void *col,
                    int64_t r0, int64_t r1, int64_t oy0, int64_t oy1);
/* The output columns [lo, hi) whose input column ox * sw - pw + off lies in [0, w). */
void cd_conv_valid_cols(const conv_params *q, int64_t off, int64_t *lo, int64_t *hi);

#endif
