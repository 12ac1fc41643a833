/* The portable quantized dot products: both rows decoded to floats a
 * super-block at a time by the types' own dequantizers (kernels/quant_codec.c),
 * then a float dot product. Slower than the integer kernels of arch/<machine>,
 * and the same sum up to rounding. */
#include "kernels/quant.h"
#include "runtime/internal.h"
#include "runtime/isa.h"

static float qdot_decoded(int32_t type, int64_t n, const void *w, const void *act) {
    const cd_qtype_info *wt = cd_qtype(type), *at = cd_qtype(wt->act_type);
    float wf[CD_QK_K], af[CD_QK_K], sum = 0;
    /* A step of at most 256 values is a whole number of blocks of both types: their block sizes divide 256. */
    for (int64_t i = 0; i < n; i += CD_QK_K) {
        const int64_t len = CD_MIN(CD_QK_K, n - i);
        wt->dequantize((const char *)w + i / wt->block_size * wt->type_size, wf, len);
        at->dequantize((const char *)act + i / at->block_size * at->type_size, af, len);
        for (int64_t j = 0; j < len; j++) sum += wf[j] * af[j];
    }
    return sum;
}

/* The reference quantizer, then the tables of the 32-value types from the blocks. */
static void quantize_act(int32_t act_type, const float *x, int64_t k, char *blocks) {
    const cd_qtype_info *at = cd_qtype(act_type);
    at->quantize(x, blocks, k);
    if (at->block_size != CD_QK) return;
    const int64_t nb = k / CD_QK;
    float *scales = (float *)cd_act_scales(blocks, nb);
    int32_t *sums = (int32_t *)cd_act_sums(blocks, nb);
    const int levels = act_type == CD_Q8_1 ? 4 : 2; /* the levels follow d (and s) */
    for (int64_t b = 0; b < nb; b++) {
        const char *block = blocks + b * at->type_size;
        uint16_t d;
        memcpy(&d, block, 2);
        scales[b] = cd_f16_to_f32(d);
        int32_t sum = 0;
        for (int j = 0; j < CD_QK; j++) sum += ((const int8_t *)block + levels)[j];
        sums[b] = sum;
    }
}

#define QDOT_GENERIC(type) \
    static float qdot_##type(int64_t n, const void *w, const void *act) { return qdot_decoded(CD_##type, n, w, act); }
#define QDOT_TYPES(X) \
    X(Q4_0) X(Q4_1) X(Q5_0) X(Q5_1) X(Q8_0) X(Q2_K) X(Q3_K) X(Q4_K) X(Q5_K) X(Q6_K) X(IQ4_NL) X(IQ4_XS) X(MXFP4)
QDOT_TYPES(QDOT_GENERIC)

void cd_qdot_generic(cd_isa_ops *ops) {
    ops->quantize_act = quantize_act;
#define QDOT_SET(type) ops->qdot[CD_##type] = qdot_##type;
    QDOT_TYPES(QDOT_SET)
#undef QDOT_SET
}
