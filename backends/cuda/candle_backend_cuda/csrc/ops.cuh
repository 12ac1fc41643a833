// Op codes shared by the kernels and the host: the kernel glue (kernels/codes.py) reads
// this file, so a code is written once. A family's codes count from 0.
#pragma once

#define UNARY_abs 0
#define UNARY_neg 1
#define UNARY_sign 2
#define UNARY_ceil 3
#define UNARY_floor 4
#define UNARY_round 5
#define UNARY_trunc 6
#define UNARY_sqr 7
#define UNARY_relu 8
#define UNARY_recip 9
#define UNARY_sqrt 10
#define UNARY_exp 11
#define UNARY_expm1 12
#define UNARY_log 13
#define UNARY_log1p 14
#define UNARY_sin 15
#define UNARY_cos 16
#define UNARY_tan 17
#define UNARY_asin 18
#define UNARY_acos 19
#define UNARY_atan 20
#define UNARY_sinh 21
#define UNARY_cosh 22
#define UNARY_tanh 23
#define UNARY_asinh 24
#define UNARY_acosh 25
#define UNARY_atanh 26
#define UNARY_erf 27
#define UNARY_gelu 28
#define UNARY_gelu_erf 29
#define UNARY_rsqrt 30
#define UNARY_sigmoid 31
#define UNARY_silu 32
#define UNARY_softplus 33

#define PARAM_affine 0
#define PARAM_powf 1
#define PARAM_elu 2
#define PARAM_leaky_relu 3
#define PARAM_clamp 4

#define BINARY_add 0
#define BINARY_sub 1
#define BINARY_mul 2
#define BINARY_div 3
#define BINARY_maximum 4
#define BINARY_minimum 5
#define BINARY_pow 6
#define BINARY_rem 7
#define BINARY_fmod 8

#define CMP_eq 0
#define CMP_ne 1
#define CMP_lt 2
#define CMP_le 3
#define CMP_gt 4
#define CMP_ge 5

#define REDUCE_sum 0
#define REDUCE_prod 1
#define REDUCE_max 2
#define REDUCE_min 3
#define REDUCE_argmax 4
#define REDUCE_argmin 5

// dtype codes: candle_api.dtype's DType.code
#define DT_u8 0
#define DT_u32 1
#define DT_i16 2
#define DT_i32 3
#define DT_i64 4
#define DT_bf16 5
#define DT_f16 6
#define DT_f32 7
#define DT_f64 8
