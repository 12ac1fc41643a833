/* GGML block formats: the block layouts (as ggml's C structs, little-endian),
 * the table of types (kernels/quant_codec.c) and the dot products of a
 * quantized weight row with a row of activations quantized on the fly
 * (arch/<set>/qdot_<set>.c, chosen through cd_ops). Not part of the ABI: the
 * exported functions are in runtime/candle_cpu.h. */
#ifndef CANDLE_CPU_QUANT_H
#define CANDLE_CPU_QUANT_H

#include <assert.h>
#include <stdint.h>

/* ggml's type ids, as stored in GGUF files. */
enum {
    CD_Q_F32 = 0, CD_Q_F16 = 1, CD_Q4_0 = 2, CD_Q4_1 = 3, CD_Q5_0 = 6, CD_Q5_1 = 7, CD_Q8_0 = 8, CD_Q8_1 = 9,
    CD_Q2_K = 10, CD_Q3_K = 11, CD_Q4_K = 12, CD_Q5_K = 13, CD_Q6_K = 14, CD_Q8_K = 15,
    CD_IQ4_NL = 20, CD_IQ4_XS = 23, CD_Q_BF16 = 30, CD_MXFP4 = 39,
    CD_QTYPE_COUNT = 40 /* ids are below this */
};

#define CD_QK 32    /* values per block of the simple types */
#define CD_QK_K 256 /* values per super-block of the K and IQ4_XS types */
#define CD_K_SCALE_SIZE 12

typedef struct { uint16_t d; uint8_t qs[CD_QK / 2]; } cd_block_q4_0;
typedef struct { uint16_t d, m; uint8_t qs[CD_QK / 2]; } cd_block_q4_1;
typedef struct { uint16_t d; uint8_t qh[4]; uint8_t qs[CD_QK / 2]; } cd_block_q5_0;
typedef struct { uint16_t d, m; uint8_t qh[4]; uint8_t qs[CD_QK / 2]; } cd_block_q5_1;
typedef struct { uint16_t d; int8_t qs[CD_QK]; } cd_block_q8_0;
typedef struct { uint16_t d, s; int8_t qs[CD_QK]; } cd_block_q8_1; /* s = d * sum(qs) */
typedef struct { uint8_t scales[CD_QK_K / 16]; uint8_t qs[CD_QK_K / 4]; uint16_t d, dmin; } cd_block_q2_K;
typedef struct { uint8_t hmask[CD_QK_K / 8]; uint8_t qs[CD_QK_K / 4]; uint8_t scales[12]; uint16_t d; } cd_block_q3_K;
typedef struct { uint16_t d, dmin; uint8_t scales[CD_K_SCALE_SIZE]; uint8_t qs[CD_QK_K / 2]; } cd_block_q4_K;
typedef struct {
    uint16_t d, dmin;
    uint8_t scales[CD_K_SCALE_SIZE];
    uint8_t qh[CD_QK_K / 8];
    uint8_t qs[CD_QK_K / 2];
} cd_block_q5_K;
typedef struct { uint8_t ql[CD_QK_K / 2]; uint8_t qh[CD_QK_K / 4]; int8_t scales[CD_QK_K / 16]; uint16_t d; } cd_block_q6_K;
typedef struct { float d; int8_t qs[CD_QK_K]; int16_t bsums[CD_QK_K / 16]; } cd_block_q8_K;
typedef struct { uint16_t d; uint8_t qs[CD_QK / 2]; } cd_block_iq4_nl;
typedef struct { uint16_t d; uint16_t scales_h; uint8_t scales_l[CD_QK_K / 64]; uint8_t qs[CD_QK_K / 2]; } cd_block_iq4_xs;
typedef struct { uint8_t e; uint8_t qs[CD_QK / 2]; } cd_block_mxfp4; /* e: an E8M0 scale */

static_assert(sizeof(cd_block_q4_0) == 18, "q4_0 block");
static_assert(sizeof(cd_block_q4_1) == 20, "q4_1 block");
static_assert(sizeof(cd_block_q5_0) == 22, "q5_0 block");
static_assert(sizeof(cd_block_q5_1) == 24, "q5_1 block");
static_assert(sizeof(cd_block_q8_0) == 34, "q8_0 block");
static_assert(sizeof(cd_block_q8_1) == 36, "q8_1 block");
static_assert(sizeof(cd_block_q2_K) == 84, "q2_K block");
static_assert(sizeof(cd_block_q3_K) == 110, "q3_K block");
static_assert(sizeof(cd_block_q4_K) == 144, "q4_K block");
static_assert(sizeof(cd_block_q5_K) == 176, "q5_K block");
static_assert(sizeof(cd_block_q6_K) == 210, "q6_K block");
static_assert(sizeof(cd_block_q8_K) == 292, "q8_K block");
static_assert(sizeof(cd_block_iq4_nl) == 18, "iq4_nl block");
static_assert(sizeof(cd_block_iq4_xs) == 136, "iq4_xs block");
static_assert(sizeof(cd_block_mxfp4) == 17, "mxfp4 block");

/* The non-linear 4-bit levels of IQ4_NL and IQ4_XS, and MXFP4's E2M1 values doubled. */
extern const int8_t cd_kvalues_iq4nl[16];
extern const int8_t cd_kvalues_mxfp4[16];

/* An activation row quantized for the dot products of the 32-value types
 * (Q8_0 or Q8_1 blocks) is preceded by two tables, one entry per block: its
 * scale as f32, then the sum of its int8 levels (int32). The SIMD kernels
 * read these instead of converting each block's f16 fields; the portable
 * ones ignore them. */
static inline const float *cd_act_scales(const void *act, int64_t nb) { return (const float *)act - 2 * nb; }
static inline const int32_t *cd_act_sums(const void *act, int64_t nb) { return (const int32_t *)act - nb; }

/* n values (a whole number of blocks) of one row from and to blocks. */
typedef void cd_dequant_row_fn(const void *blocks, float *y, int64_t n);
typedef void cd_quant_row_fn(const float *x, void *blocks, int64_t n);
/* The dot product of n values: one weight row (blocks of its type) with one
 * activation row quantized in the type's act_type. */
typedef float cd_qdot_fn(int64_t n, const void *w, const void *act);

typedef struct {
    const char *name;       /* candle's spelling: "q4_0", "q4k", "iq4_xs" */
    int32_t id;             /* ggml's type id */
    int32_t block_size;     /* values per block */
    int32_t type_size;      /* bytes per block */
    int32_t act_type;       /* the type activations are quantized to for the dot product (-1: none,
                               the matmul dequantizes the weights instead) */
    cd_dequant_row_fn *dequantize;
    cd_quant_row_fn *quantize; /* bit-exact with the quantizer ggml writes files with */
} cd_qtype_info;

/* The type with ggml id `id`, or NULL when candle-api does not handle it. */
const cd_qtype_info *cd_qtype(int32_t id);

/* ---- the packed layout (candle_api/quantized/packed.py) ----------------------------------------------
 * Rows in groups of 16, each group one block column after another; in the tile of a column's 16 blocks
 * each field of the block struct follows the one before, its 16 copies arranged by the field's kind: */
#define CD_QPACK_GROUP 16
enum {
    CD_QF_ROWS,   /* the 16 rows' fields one after another */
    CD_QF_WORDS,  /* runs of 4 bytes: run j of row r at 64 j + 4 r */
    CD_QF_PLANES, /* byte i of the 16 rows' fields together */
    CD_QF_BITS    /* q5's fifth bits as 8 64-bit masks: mask 2j + h, bit 4r + i = the bit of value 16h + 4j + i */
};
typedef struct { uint8_t kind, offset, size; } cd_qfield;
typedef struct {
    int nfields;
    cd_qfield field[4]; /* in struct order; a field's tile offset is 16 times its block offset */
} cd_qpack_layout;

/* The packed layout of type `id`, or NULL when it has none. */
const cd_qpack_layout *cd_qpack_layout_of(int32_t id);
/* The 16 rows of one group (nb tiles) back in their own layout: row r's blocks at rows + r * nb * type_size. */
void cd_qunpack_group(const cd_qtype_info *t, const cd_qpack_layout *l, const char *tiles, int64_t nb, char *rows);

/* A packed group's products with activation rows: y[i * ldy + r] = row r of the group . activation row i,
 * for r < 16 and i < m; activation row i (in the type's act_type, with the tables of the 32-value types
 * before it) at act + i * act_row. */
typedef void cd_qgroup_fn(const void *tiles, int64_t nb, const char *act, int64_t act_row, int64_t m, float *y,
                          int64_t ldy);
/* The same for one activation row (decode, m = 1): y[r] for r < 16. */
typedef void cd_qrow_fn(const void *tiles, int64_t nb, const char *act, float *y);

/* E8M0 to float as MXFP4 uses it: 2^(e - 127) / 2 (the values are E2M1 doubled). */
static inline float cd_e8m0_to_f32_half(uint8_t e) {
    union { uint32_t u; float f; } v;
    v.u = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    return v.f;
}

#endif
