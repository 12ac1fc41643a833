/* Helpers shared by the kernel sources: errors, half-precision conversions,
 * per-dtype load/store, the thread pool and strided iteration. Not part of the ABI. */
#ifndef CANDLE_CPU_INTERNAL_H
#define CANDLE_CPU_INTERNAL_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "runtime/candle_cpu.h"

#define CD_UNUSED(x) (void)(x)
#define CD_MIN(a, b) ((a) < (b) ? (a) : (b))
#define CD_MAX(a, b) ((a) > (b) ? (a) : (b))

/* ---- errors: set the thread-local message, return -1 ---------------------- */
int cd_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
const char *cd_dtype_name(int dtype);
int cd_dtype_size(int dtype);
int cd_dtype_is_float(int dtype);
int cd_dtype_is_index(int dtype);
/* Reads index i of an index array of dtype id_dtype as int64. */
int64_t cd_load_index(int32_t id_dtype, const void *ids, int64_t i);

/* ---- half precision (round to nearest even, NaN stays NaN) -------------- */
static inline float cd_bf16_to_f32(uint16_t h) {
    uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

static inline uint16_t cd_f32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

static inline float cd_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu, x;
    float f;
    if (e == 0) {
        f = (float)m * (1.0f / 16777216.0f); /* subnormal: m * 2^-24 */
        memcpy(&x, &f, 4);
        x |= sign;
    } else if (e == 31) {
        x = sign | 0x7f800000u | (m << 13);
    } else {
        x = sign | ((e + 112u) << 23) | (m << 13);
    }
    memcpy(&f, &x, 4);
    return f;
}

static inline uint16_t cd_f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) /* inf or NaN (kept quiet) */
        return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u | ((ax >> 13) & 0x3ffu) : 0u));
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to inf */
    if (ax < 0x38800000u) {                                    /* f16 subnormal or zero */
        float af;
        memcpy(&af, &ax, 4);
        return (uint16_t)(sign | (uint32_t)nearbyintf(af * 16777216.0f));
    }
    ax += 0xc8000fffu + ((ax >> 13) & 1u); /* rebias exponent by -112 and round */
    return (uint16_t)(sign | (ax >> 13));
}

/* ---- per-dtype traits used by the X-macro kernel generators ---------------
 * CD_T_<dt>: storage type, CD_C_<dt>: compute type, CD_LD_/CD_ST_: convert. */
#define CD_T_u8 uint8_t
#define CD_T_u32 uint32_t
#define CD_T_i16 int16_t
#define CD_T_i32 int32_t
#define CD_T_i64 int64_t
#define CD_T_bf16 uint16_t
#define CD_T_f16 uint16_t
#define CD_T_f32 float
#define CD_T_f64 double
#define CD_C_u8 uint8_t
#define CD_C_u32 uint32_t
#define CD_C_i16 int16_t
#define CD_C_i32 int32_t
#define CD_C_i64 int64_t
#define CD_C_bf16 float
#define CD_C_f16 float
#define CD_C_f32 float
#define CD_C_f64 double
#define CD_LD_u8(v) (v)
#define CD_LD_u32(v) (v)
#define CD_LD_i16(v) (v)
#define CD_LD_i32(v) (v)
#define CD_LD_i64(v) (v)
#define CD_LD_bf16(v) cd_bf16_to_f32(v)
#define CD_LD_f16(v) cd_f16_to_f32(v)
#define CD_LD_f32(v) (v)
#define CD_LD_f64(v) (v)
#define CD_ST_u8(v) (v)
#define CD_ST_u32(v) (v)
#define CD_ST_i16(v) (v)
#define CD_ST_i32(v) (v)
#define CD_ST_i64(v) (v)
#define CD_ST_bf16(v) cd_f32_to_bf16(v)
#define CD_ST_f16(v) cd_f32_to_f16(v)
#define CD_ST_f32(v) (v)
#define CD_ST_f64(v) (v)

/* Lists of dtypes for generators: X(dtype name). */
#define CD_INT_DTYPES(X) X(u8) X(u32) X(i16) X(i32) X(i64)
#define CD_NATIVE_FLOAT_DTYPES(X) X(f32) X(f64)
#define CD_HALF_DTYPES(X) X(bf16) X(f16)
#define CD_ALL_DTYPES(X) CD_INT_DTYPES(X) CD_HALF_DTYPES(X) CD_NATIVE_FLOAT_DTYPES(X)

/* Saturating float -> integer conversion (NaN -> 0), the semantics of Rust's
 * `as` that Candle inherits; plain C casts are undefined out of range. */
#define CD_SAT_CAST(T, lo, hi, v) \
    ((v) != (v) ? (T)0 : (v) <= (double)(lo) ? (T)(lo) : (v) >= (double)(hi) ? (T)(hi) : (T)(v))

/* ---- thread pool ---------------------------------------------------------
 * fn runs on [begin, end) sub-ranges of [0, n); ranges are at least grain long.
 * Work is split into fixed ranges that do not depend on the thread count, so
 * results are bitwise identical whatever CANDLE_NUM_THREADS is. Returns the
 * first nonzero status of fn (its error message is carried to the caller). */
typedef int (*cd_task_fn)(void *ctx, int64_t begin, int64_t end);
int cd_parallel_for(int64_t n, int64_t grain, cd_task_fn fn, void *ctx);
/* The chunk length cd_parallel_for uses for (n, grain). */
int64_t cd_chunk_size(int64_t n, int64_t grain);
int cd_num_threads(void);

/* Rows in the compute type (f32, or f64 for f64): its size, a load of n
 * elements (stride s) of dtype into a compute-type buffer, and the store back
 * to n contiguous elements of dtype. */
int cd_ct_size(int dtype);
void cd_load_ct(int dtype, const char *x, int64_t n, int64_t s, void *dst);
void cd_store_ct(int dtype, const void *src, int64_t n, char *out);

/* The serial contiguous loop of a unary (op, dtype) (kernels/elementwise.c),
 * for kernels that apply exp & co to their own buffers. */
cd_unary_fn cd_unary_loop(int op, int dtype);

/* Scratch memory for a kernel (64-byte aligned); NULL + error on failure. */
void *cd_scratch(int64_t nbytes);
void cd_scratch_free(void *p);

/* ---- strided iteration ---------------------------------------------------
 * An iterator over a shape with up to CD_ITER_OPS strided operands. The shape is
 * coalesced (dims of size 1 dropped, dims merged where every operand allows) so
 * contiguous views become one dim. Iteration yields runs along the innermost dim. */
#define CD_ITER_OPS 4
typedef struct {
    int ndim;  /* >= 1 after coalescing */
    int nops;
    int64_t numel;
    int64_t shape[CD_MAX_DIMS];
    int64_t strides[CD_ITER_OPS][CD_MAX_DIMS];
} cd_iter;

/* Reads [ndim, shape, nops stride rows] from lay; a contiguous output can be
 * added as an extra operand with with_contig_out. Fails on bad ndim. */
int cd_iter_init(cd_iter *it, const int64_t *lay, int nops, int with_contig_out);

/* Position at linear index `start`: offsets (in elements) of every operand and
 * the multi-index. */
typedef struct {
    int64_t idx[CD_MAX_DIMS];
    int64_t off[CD_ITER_OPS];
} cd_pos;
void cd_iter_seek(const cd_iter *it, cd_pos *pos, int64_t start);
/* Advance pos by `steps` along the innermost dim (steps never crosses the end
 * of the innermost dim) and carry into outer dims. */
void cd_iter_advance(const cd_iter *it, cd_pos *pos, int64_t steps);

/* Copies n elements of size isz from src (stride in elements) to contiguous dst. */
void cd_gather_run(int isz, int64_t n, const char *src, int64_t stride, char *dst);
/* Copies n contiguous elements of size isz from src to dst with a stride. */
void cd_scatter_run(int isz, int64_t n, const char *src, char *dst, int64_t stride);

/* Elements per chunk for strided kernels: bounds the stack buffers. */
#define CD_CHUNK 1024
/* Default grain: below this many elements an elementwise op stays on one thread. */
#define CD_GRAIN 32768

#endif
