/* The packed layout of quantized weights (kernels/quant.h; specified, with
 * its reference, in candle_api/quantized/packed.py) and the exported cd_qpack.
 *
 * A weight is packed once, at load: the rows of a group of 16 are stored
 * together, block column by block column, each field of the 16 blocks
 * arranged for the vector kernels (arch/<machine>/qpacked_<set>.c) to read
 * one 4-byte run of 16 rows per load. A matrix-vector product then streams
 * the weight as one run of memory in the order it is consumed, where the
 * blocks' own layout would take 16 rows at once from 16 places. */
#include "kernels/quant.h"
#include "runtime/internal.h"

#define FIELD(T, name, kind) {kind, (uint8_t)offsetof(cd_block_##T, name), (uint8_t)sizeof(((cd_block_##T *)0)->name)}

static const cd_qpack_layout LAYOUTS[CD_QTYPE_COUNT] = {
    [CD_Q4_0] = {2, {FIELD(q4_0, d, CD_QF_ROWS), FIELD(q4_0, qs, CD_QF_WORDS)}},
    [CD_Q4_1] = {3, {FIELD(q4_1, d, CD_QF_ROWS), FIELD(q4_1, m, CD_QF_ROWS), FIELD(q4_1, qs, CD_QF_WORDS)}},
    [CD_Q5_0] = {3, {FIELD(q5_0, d, CD_QF_ROWS), FIELD(q5_0, qh, CD_QF_BITS), FIELD(q5_0, qs, CD_QF_WORDS)}},
    [CD_Q5_1] = {4, {FIELD(q5_1, d, CD_QF_ROWS), FIELD(q5_1, m, CD_QF_ROWS), FIELD(q5_1, qh, CD_QF_BITS),
                     FIELD(q5_1, qs, CD_QF_WORDS)}},
    [CD_Q8_0] = {2, {FIELD(q8_0, d, CD_QF_ROWS), FIELD(q8_0, qs, CD_QF_WORDS)}},
    [CD_IQ4_NL] = {2, {FIELD(iq4_nl, d, CD_QF_ROWS), FIELD(iq4_nl, qs, CD_QF_WORDS)}},
    [CD_MXFP4] = {2, {FIELD(mxfp4, e, CD_QF_ROWS), FIELD(mxfp4, qs, CD_QF_WORDS)}},
    [CD_Q4_K] = {4, {FIELD(q4_K, d, CD_QF_ROWS), FIELD(q4_K, dmin, CD_QF_ROWS), FIELD(q4_K, scales, CD_QF_PLANES),
                     FIELD(q4_K, qs, CD_QF_WORDS)}},
    [CD_IQ4_XS] = {4, {FIELD(iq4_xs, d, CD_QF_ROWS), FIELD(iq4_xs, scales_h, CD_QF_ROWS),
                       FIELD(iq4_xs, scales_l, CD_QF_ROWS), FIELD(iq4_xs, qs, CD_QF_WORDS)}},
};

const cd_qpack_layout *cd_qpack_layout_of(int32_t id) {
    return id >= 0 && id < CD_QTYPE_COUNT && LAYOUTS[id].nfields ? &LAYOUTS[id] : NULL;
}

/* The 16 rows' fifth bits (32 per row) as the 8 masks of CD_QF_BITS, and back. */
static void bits_to_masks(const uint8_t *const *qh, uint8_t *out) {
    uint64_t masks[8] = {0};
    for (int r = 0; r < CD_QPACK_GROUP; r++) {
        uint32_t q;
        memcpy(&q, qh[r], 4);
        for (int j = 0; j < 4; j++)
            for (int h = 0; h < 2; h++) masks[2 * j + h] |= (uint64_t)(q >> (16 * h + 4 * j) & 15) << (4 * r);
    }
    memcpy(out, masks, sizeof masks); /* little-endian, as the layout says */
}

static void masks_to_bits(const uint8_t *in, uint8_t *const *qh) {
    uint64_t masks[8];
    memcpy(masks, in, sizeof masks);
    for (int r = 0; r < CD_QPACK_GROUP; r++) {
        uint32_t q = 0;
        for (int j = 0; j < 4; j++)
            for (int h = 0; h < 2; h++) q |= (uint32_t)(masks[2 * j + h] >> (4 * r) & 15) << (16 * h + 4 * j);
        memcpy(qh[r], &q, 4);
    }
}

/* Copies n bytes from a to b (pack) or from b to a (unpack). */
static inline void move(uint8_t *a, uint8_t *b, int n, int pack) {
    if (pack)
        memcpy(b, a, (size_t)n);
    else
        memcpy(a, b, (size_t)n);
}

/* One tile from the 16 blocks src[r] (pack), or the blocks back from it (!pack). */
static void convert_tile(const cd_qpack_layout *l, uint8_t *const *blocks, uint8_t *tile, int pack) {
    for (int f = 0; f < l->nfields; f++) {
        const cd_qfield fd = l->field[f];
        uint8_t *part = tile + CD_QPACK_GROUP * fd.offset;
        if (fd.kind == CD_QF_BITS) {
            uint8_t *qh[CD_QPACK_GROUP];
            for (int r = 0; r < CD_QPACK_GROUP; r++) qh[r] = blocks[r] + fd.offset;
            if (pack)
                bits_to_masks((const uint8_t *const *)qh, part);
            else
                masks_to_bits(part, qh);
            continue;
        }
        for (int r = 0; r < CD_QPACK_GROUP; r++) {
            uint8_t *field = blocks[r] + fd.offset;
            if (fd.kind == CD_QF_ROWS) {
                move(field, part + r * fd.size, fd.size, pack);
            } else if (fd.kind == CD_QF_WORDS) { /* run j of row r at 64 j + 4 r */
                for (int j = 0; j < fd.size / 4; j++) move(field + 4 * j, part + 4 * (CD_QPACK_GROUP * j + r), 4, pack);
            } else { /* CD_QF_PLANES: byte i of row r at 16 i + r */
                for (int i = 0; i < fd.size; i++) move(field + i, part + CD_QPACK_GROUP * i + r, 1, pack);
            }
        }
    }
}

/* The tiles of one group from rows (row r's blocks at rows + r * row_bytes), or back. */
static void convert_group(const cd_qtype_info *t, const cd_qpack_layout *l, char *rows, char *tiles, int64_t nb,
                          int pack) {
    const int64_t row_bytes = nb * t->type_size;
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *blocks[CD_QPACK_GROUP];
        for (int r = 0; r < CD_QPACK_GROUP; r++) blocks[r] = (uint8_t *)rows + r * row_bytes + b * t->type_size;
        convert_tile(l, blocks, (uint8_t *)tiles + b * CD_QPACK_GROUP * t->type_size, pack);
    }
}

void cd_qunpack_group(const cd_qtype_info *t, const cd_qpack_layout *l, const char *tiles, int64_t nb, char *rows) {
    convert_group(t, l, rows, (char *)tiles, nb, 0);
}

typedef struct {
    const cd_qtype_info *t;
    const cd_qpack_layout *l;
    int64_t nb;
    const char *src;
    char *dst;
} pack_ctx;

static int pack_task(void *vctx, int64_t g0, int64_t g1) {
    const pack_ctx *c = vctx;
    const int64_t group_bytes = CD_QPACK_GROUP * c->nb * c->t->type_size;
    for (int64_t g = g0; g < g1; g++)
        convert_group(c->t, c->l, (char *)c->src + g * group_bytes, c->dst + g * group_bytes, c->nb, 1);
    return 0;
}

CD_API int cd_qpack(int32_t type, int64_t n, int64_t k, const void *src, void *dst) {
    const cd_qtype_info *t = cd_qtype(type);
    const cd_qpack_layout *l = cd_qpack_layout_of(type);
    if (!t || !l) return cd_fail("qpack: GGML type id %d has no packed layout", (int)type);
    if (n < 0 || k < 0) return cd_fail("qpack: negative size (%lld rows of %lld values)", (long long)n, (long long)k);
    if (k % t->block_size)
        return cd_fail("qpack: %s stores rows in blocks of %d values, and a row of %lld values is not a whole "
                       "number of them", t->name, (int)t->block_size, (long long)k);
    if (src == dst) return cd_fail("qpack: the packed blocks cannot overwrite their source");
    const int64_t nb = k / t->block_size, groups = n / CD_QPACK_GROUP;
    const int64_t packed = groups * CD_QPACK_GROUP * nb * t->type_size;
    pack_ctx c = {t, l, nb, src, dst};
    const int rc = cd_parallel_for(groups, CD_MAX(1, CD_GRAIN / CD_MAX(1, CD_QPACK_GROUP * nb * t->type_size)),
                                   pack_task, &c);
    /* the rows past the last whole group stay as they are */
    if (rc == 0) memcpy((char *)dst + packed, (const char *)src + packed, (size_t)((n * nb * t->type_size) - packed));
    return rc;
}
