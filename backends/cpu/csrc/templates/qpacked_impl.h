/* The products of packed weights (kernels/quant.h) with rows of quantized
 * activations, written once over a 16-lane vector layer that the including
 * file defines: qp_i (16 int32 lanes, 64 bytes), qp_f (16 floats) and the
 * qp_* functions, QP_VNNI (1 when qp_dp2 takes unsigned bytes up to 255),
 * QP_MR (activation rows per pass) and QPACKED_FILL (the function that fills
 * the ISA table).
 *
 * Lane r of every vector is row r of the group: a 4-byte run of a tile's
 * quants holds 4 levels of each of the 16 rows, and one multiply-add of it
 * against 4 activations broadcast to every lane adds 4 products to each row's
 * sum. A group's tiles stay in L1 while the rows of activations pass QP_MR at
 * a time; each row's sums follow the same order whatever m is, so a row's
 * result does not depend on the rows beside it.
 *
 * The arithmetic is ggml's: integer sums per block (or sub-block), scaled in
 * float by the weight's and the activation's scales; level offsets and the
 * mins of the affine types come off through the activations' block sums. */
#include <string.h>

#include "kernels/quant.h"
#include "runtime/internal.h"
#include "runtime/isa.h"

#define QP_INLINE static inline __attribute__((always_inline))

/* Software prefetch, a distance in bytes for each family of types (0: none). The groups lie end to end, one
 * sequential stream that the hardware prefetcher follows, but on Zen 4 one core streams 64 MiB of weights
 * faster with prefetcht1 16 KiB ahead of each tile where decode has the most work per byte:
 * - QP_PREFETCH_K, the super-block types (Q4_K, IQ4_XS) in decode: on AVX-512, 64 MiB of Q4_K from 0.86 to
 *   1.07 of a plain read's speed and of IQ4_XS from 0.87 to 1.04 (10th percentiles of 220 calls, 1 thread,
 *   thread time); on AVX2 (Zen 4 forced to it), Q4_K from 0.55 to 0.83 of a read against QP_PREFETCH_RUNS;
 * - QP_PREFETCH_RUNS, Zen 1's instead (arch/x86/qpacked_zen1_avx2.c): each run's line as the run is read,
 *   where a tile's 36 prefetches at its start stall the loads behind them on Zen 1, whose few miss buffers
 *   they fill (there Q4_K 7.1 -> 10.3 GB/s, IQ4_XS 5.7 -> 6.8, a plain read 11-13);
 * - QP_PREFETCH_Q8, Q8_0's decode on Zen 1: 64 MiB from 7.0 to 14-15 GB/s (its arithmetic is light); on
 *   Zen 4 it costs a quarter (0.95 of a read without, 0.72 with), AVX-512's borrowed kernel too;
 * - QP_PREFETCH_32, the AVX2 builds' only: Q4_0's tiles, and in decode Q4_1's: Q4_0 from 0.62-0.83 to 0.85-1.03
 *   in three quiet A/Bs, Q4_1 from 0.73-0.82 to 0.84-0.89. The AVX-512 kernels of the 32-value types lost
 *   at every distance (2-32 KiB), locality and grouping tried (Q4_0 10-25%, Q8_0 25-35%): an AVX-512 machine
 *   decodes Q4_0 and Q4_1 with these AVX2 kernels instead (arch/x86/isa_x86.c).
 * A prefetchnta 1 KiB ahead cost 15-25% of the streaming speed of Q4_0 and Q8_0 on both builds. */
#ifndef QP_PREFETCH_K
#define QP_PREFETCH_K 0
#endif
#ifndef QP_PREFETCH_32
#define QP_PREFETCH_32 0
#endif
#ifndef QP_PREFETCH_Q8
#define QP_PREFETCH_Q8 0
#endif
#ifndef QP_PREFETCH_RUNS
#define QP_PREFETCH_RUNS 0
#endif
/* Each line of a tile, `ahead` bytes ahead (none when it is 0); a hint: never faults past the buffer. */
QP_INLINE void prefetch_tile(const char *tile, int bytes, int ahead) {
    for (int o = 0; ahead && o < bytes; o += 64) __builtin_prefetch(tile + ahead + o, 0, 2);
}
/* One line `ahead` bytes ahead of p (none when it is 0), prefetchnta: on Zen 1 a little ahead of prefetcht1 here. */
QP_INLINE void prefetch_line(const char *p, int ahead) {
    if (ahead) __builtin_prefetch(p + ahead, 0, 0);
}
/* QP_ACC16 (set by the AVX2 build): the layer adds vpmaddubsw's pair sums in 16 bits (qp_dp1_16), which the
 * 4-bit types' decode and the unsigned levels' passes of rows use; QP_DECODE_ATTR: what the 4-bit types'
 * decode kernels are compiled with. */
#ifndef QP_ACC16
#define QP_ACC16 0
#endif
#ifndef QP_DECODE_ATTR
#define QP_DECODE_ATTR
#endif

/* 16 levels as a byte table for qp_shuffle (signed; + 128 for unsigned products with VNNI). */
QP_INLINE qp_i qp_levels_table(const int8_t levels[16]) {
    const qp_i t = qp_table16(levels);
    return QP_VNNI ? qp_xor(t, qp_set1_8((char)0x80)) : t;
}

/* ---- 32-value blocks --------------------------------------------------------------------------------
 * A tile's quants are 4 runs of 64 bytes (q8_0: 8); step s gives two vectors of levels: `lo` for the
 * activations 4s..4s+3 of the block, `hi` for 16+4s..16+4s+3 (the low and high nibbles of run s; q8_0's
 * runs s and s + 4). */
typedef struct {
    int type, tile;        /* bytes per tile */
    int min, bits, qs;     /* tile offsets of the f16 mins, the fifth bits, the quants (-1: none) */
    int offset;            /* levels are u - offset */
    int signed_levels;     /* without VNNI q8_0 and the table types multiply signed levels */
    int a_size, a_levels;  /* the activation blocks (q8_0 or q8_1) and where their levels start */
    int hi16;              /* high nibbles kept in place (16 x level): one AND instead of a shift and an AND */
} qp_t32;

QP_INLINE qp_t32 t32(int type) {
    const int vnni = QP_VNNI;
    switch (type) {
    case CD_Q4_0: return (qp_t32){type, 288, -1, -1, 32, 8, 0, 34, 2, vnni};
    case CD_Q4_1: return (qp_t32){type, 320, 32, -1, 64, 0, 0, 36, 4, vnni};
    case CD_Q5_0: return (qp_t32){type, 352, -1, 32, 96, 16, 0, 34, 2, 0};
    case CD_Q5_1: return (qp_t32){type, 384, 32, 64, 128, 0, 0, 36, 4, 0};
    case CD_Q8_0: return (qp_t32){type, 544, -1, -1, 32, vnni ? 128 : 0, !vnni, 34, 2, 0};
    case CD_IQ4_NL: return (qp_t32){type, 288, -1, -1, 32, vnni ? 128 : 0, !vnni, 34, 2, 0};
    default: return (qp_t32){type, 272, -1, -1, 16, vnni ? 128 : 0, !vnni, 34, 2, 0}; /* CD_MXFP4 */
    }
}

QP_INLINE void levels32(qp_t32 t, const char *tile, int s, qp_i table, qp_i *lo, qp_i *hi) {
    if (t.type == CD_Q8_0) {
        *lo = qp_load(tile + t.qs + 64 * s);
        *hi = qp_load(tile + t.qs + 64 * (s + 4));
        if (QP_VNNI) {
            *lo = qp_xor(*lo, qp_set1_8((char)0x80));
            *hi = qp_xor(*hi, qp_set1_8((char)0x80));
        }
        return;
    }
    const qp_i q = qp_load(tile + t.qs + 64 * s), low = qp_set1_8(0x0f);
    *lo = qp_and(q, low);
    /* 16 x level < 256 fits vpdpbusd's unsigned bytes (not vpmaddubsw's 16-bit pair sums) */
    *hi = t.hi16 ? qp_and(q, qp_set1_8((char)0xf0)) : qp_and(qp_srli4(q), low);
    if (t.bits >= 0) { /* masks 2s and 2s + 1 */
        *lo = qp_or(*lo, qp_bits16(tile + t.bits + 16 * s));
        *hi = qp_or(*hi, qp_bits16(tile + t.bits + 16 * s + 8));
    }
    if (t.type == CD_IQ4_NL || t.type == CD_MXFP4) {
        *lo = qp_shuffle(table, *lo);
        *hi = qp_shuffle(table, *hi);
    }
}

/* Prefill: a group's levels decoded once into `dec` (QP_DEC32 bytes a block: lo and hi of steps 0..3 in
 * turn) for every pass of rows to read, instead of unpacking each tile again for every QP_MR rows. */
#define QP_DEC32 512

QP_INLINE void decode32(qp_t32 t, const char *g, int64_t nb, qp_i table, char *dec) {
    for (int64_t b = 0; b < nb; b++)
        for (int s = 0; s < 4; s++) {
            qp_i lo, hi;
            levels32(t, g + b * t.tile, s, table, &lo, &hi);
            qp_store_i((int32_t *)(void *)(dec + b * QP_DEC32 + 128 * s), lo);
            qp_store_i((int32_t *)(void *)(dec + b * QP_DEC32 + 128 * s + 64), hi);
        }
}

/* Worth it where unpacking costs more than loading twice the bytes: the fifth bits and the tables (on
 * AVX2, Q4_1's prompt of 128 rows took 11% longer decoded once, Q5_0's 25% less). */
QP_INLINE int decode_once(qp_t32 t) { return t.bits >= 0 || t.type == CD_IQ4_NL || t.type == CD_MXFP4; }

QP_INLINE void levels_at(qp_t32 t, const char *tile, const char *dec, int s, qp_i table, qp_i *lo, qp_i *hi) {
    if (!dec) {
        levels32(t, tile, s, table, lo, hi);
        return;
    }
    *lo = qp_load(dec + 128 * s);
    *hi = qp_load(dec + 128 * s + 64);
}

#if QP_ACC16
/* A block's sum for one row of activations at y and levels below 16 (Q4_0, Q4_1): its 8 pair sums of each
 * lane add in 16 bits (at most 8 * 2 * 15 * 128 = 30720) before one vpmaddwd, where qp_dp2 spends a
 * vpmaddwd and a vpaddd on every two; a step at a time, so that nothing spills. */
QP_INLINE qp_i block16(qp_t32 t, const char *tile, const int8_t *y) {
    qp_i acc = qp_zero(), lo, hi;
    for (int s = 0; s < 4; s++) {
        levels32(t, tile, s, qp_zero(), &lo, &hi);
        acc = qp_dp1_16(qp_dp1_16(acc, lo, qp_bcast4(y + 4 * s)), hi, qp_bcast4(y + 16 + 4 * s));
    }
    return qp_widen16(acc);
}
#endif

QP_INLINE qp_f scale32(qp_t32 t, const char *tile) { return t.type == CD_MXFP4 ? qp_e8m0(tile) : qp_f16(tile); }

/* y[i * ldy + r] for mr (<= QP_MR <= 4) activation rows at act + i * act_row. */
QP_INLINE qp_i table32(qp_t32 t) {
    return t.type == CD_IQ4_NL ? qp_levels_table(cd_kvalues_iq4nl)
           : t.type == CD_MXFP4 ? qp_levels_table(cd_kvalues_mxfp4) : qp_zero();
}

/* y[i * ldy + r] for mr (<= QP_MR <= 4) activation rows at act + i * act_row; the levels from `dec` when it
 * is not NULL. */
QP_INLINE void group32(int type, int mr, const char *g, int64_t nb, const char *act, int64_t act_row, float *y,
                       int64_t ldy, const char *dec) {
    const qp_t32 t = t32(type);
    const qp_i table = table32(t);
    const char *a[4];
    const float *as[4];
    const int32_t *ys[4];
    qp_f sum[4];
    for (int i = 0; i < mr; i++) {
        a[i] = act + i * act_row;
        as[i] = cd_act_scales(a[i], nb);
        ys[i] = cd_act_sums(a[i], nb);
        sum[i] = qp_zerof();
    }
    for (int64_t b = 0; b < nb; b++) {
        const char *tile = g + b * t.tile;
        if (type == CD_Q4_0 && !dec) prefetch_tile(tile, t.tile, QP_PREFETCH_32);
        if (type == CD_Q8_0 && mr == 1) prefetch_tile(tile, t.tile, QP_PREFETCH_Q8);
        qp_i acc[4][2];
        for (int i = 0; i < mr; i++) acc[i][0] = acc[i][1] = qp_zero();
        const char *db = dec ? dec + b * QP_DEC32 : NULL;
        if (t.signed_levels) { /* a step at a time into one sum a row (see QP_BARRIER): signed products gain
                                  nothing from pairs, and AVX2's 16 registers then hold a step's levels and
                                  two rows' sums */
            for (int s = 0; s < 4; s++) {
                qp_i lo, hi;
                levels_at(t, tile, db, s, table, &lo, &hi);
                for (int i = 0; i < mr; i++) {
                    const int8_t *yb = (const int8_t *)(a[i] + b * t.a_size + t.a_levels) + 4 * s;
                    acc[i][0] = qp_dp2_signed(acc[i][0], lo, qp_bcast4(yb), hi, qp_bcast4(yb + 16));
                    QP_BARRIER(acc[i][0]);
                }
            }
        }
#if QP_ACC16
        else { /* unsigned levels: pair sums add in 16 bits (qp_dp1_16), a block's at once below 16 (Q4_0,
                  Q4_1) and two steps' below 32 (Q5_0, Q5_1), then one vpmaddwd widens them, where qp_dp2
                  spends a vpmaddwd and a vpaddd on every two: the same integer sums, 1.07-1.24x the speed
                  of prompts and batches (m 2-128, 1 thread) on Zen 1 */
            const int widen = t.bits < 0 ? 4 : 2;
            for (int s0 = 0; s0 < 4; s0 += widen) {
                qp_i sums[4];
                for (int i = 0; i < mr; i++) sums[i] = qp_zero();
                for (int s = s0; s < s0 + widen; s++) {
                    qp_i lo, hi;
                    levels_at(t, tile, db, s, table, &lo, &hi);
                    for (int i = 0; i < mr; i++) {
                        const int8_t *yb = (const int8_t *)(a[i] + b * t.a_size + t.a_levels) + 4 * s;
                        sums[i] = qp_dp1_16(qp_dp1_16(sums[i], lo, qp_bcast4(yb)), hi, qp_bcast4(yb + 16));
                        QP_BARRIER(sums[i]); /* gcc otherwise computes a block's products first and spills
                                                them: Q4_0 and Q4_1 1.04-1.10x */
                    }
                }
                for (int i = 0; i < mr; i++) acc[i][0] = qp_add32(acc[i][0], qp_widen16(sums[i]));
            }
        }
#else
        else {
            for (int s = 0; s < 4; s += 2) { /* acc[i][0]: the low levels' products, acc[i][1]: the high ones' */
                qp_i lo[2], hi[2];
                levels_at(t, tile, db, s, table, &lo[0], &hi[0]);
                levels_at(t, tile, db, s + 1, table, &lo[1], &hi[1]);
                for (int i = 0; i < mr; i++) {
                    const int8_t *yb = (const int8_t *)(a[i] + b * t.a_size + t.a_levels) + 4 * s;
                    acc[i][0] = qp_dp2(acc[i][0], lo[0], qp_bcast4(yb), lo[1], qp_bcast4(yb + 4));
                    acc[i][1] = qp_dp2(acc[i][1], hi[0], qp_bcast4(yb + 16), hi[1], qp_bcast4(yb + 20));
                }
            }
        }
#endif
        const qp_f d = scale32(t, tile);
        for (int i = 0; i < mr; i++) {
            qp_i isum = qp_add32(acc[i][0], t.hi16 ? qp_srai32(acc[i][1], 4) : acc[i][1]);
            if (t.offset) isum = qp_sub32(isum, qp_set1_32(t.offset * ys[i][b]));
            sum[i] = qp_fma(qp_cvt(isum), qp_mul(d, qp_set1f(as[i][b])), sum[i]);
            if (t.min >= 0) sum[i] = qp_fma(qp_f16(tile + t.min), qp_set1f(as[i][b] * (float)ys[i][b]), sum[i]);
        }
    }
    for (int i = 0; i < mr; i++) qp_store(y + i * ldy, sum[i]);
}

/* y[r] for one row of activations at act (decode): with QP_ACC16 the 4-bit types by block16, prefetching. */
QP_INLINE void row32(int type, const char *g, int64_t nb, const char *act, float *y) {
#if QP_ACC16
    const qp_t32 t = t32(type);
    if (t.bits < 0 && !t.signed_levels) {
        const float *as = cd_act_scales(act, nb);
        const int32_t *ys = cd_act_sums(act, nb);
        qp_f sum = qp_zerof();
        for (int64_t b = 0; b < nb; b++) {
            const char *tile = g + b * t.tile;
            prefetch_tile(tile, t.tile, QP_PREFETCH_32);
            qp_i isum = block16(t, tile, (const int8_t *)(act + b * t.a_size + t.a_levels));
            /* group32's epilogue, in its order; shared through a function it changed group32's register
             * allocation in prompt passes, which that code is measured sensitive to */
            if (t.offset) isum = qp_sub32(isum, qp_set1_32(t.offset * ys[b]));
            sum = qp_fma(qp_cvt(isum), qp_mul(scale32(t, tile), qp_set1f(as[b])), sum);
            if (t.min >= 0) sum = qp_fma(qp_f16(tile + t.min), qp_set1f(as[b] * (float)ys[b]), sum);
        }
        qp_store(y, sum);
        return;
    }
#endif
    group32(type, 1, g, nb, act, 0, y, 0, NULL);
}

/* ---- 256-value super-blocks (q4k, iq4_xs) with q8_K activations -------------------------------------
 * A tile's quants are 32 runs of 64 bytes; runs 8j..8j+7 hold sub-blocks 2j and 2j + 1 (32 values each):
 * q4k in their low and high nibbles, iq4_xs in runs 8j..8j+3 and 8j+4..8j+7 (low nibbles the first 16
 * values, high ones the next 16). Each sub-block's integer sum is scaled by its 6-bit scale in integers;
 * q4k's mins (and iq4_xs's level offset with VNNI) come off through the activations' sums per sub-block. */
typedef struct {
    int32_t sc[8][CD_QPACK_GROUP]; /* sub-block scales, lane r = row r */
    int32_t co[8][CD_QPACK_GROUP]; /* what the activations' sub-block sums are multiplied by */
} qp_kscales;

/* q4k's 6-bit scale and min of sub-block sb of 16 rows (a byte a row) from the 12 byte planes of their packed
 * fields: sub-blocks 0-3 in the low 6 bits of planes sb and sb + 4; 4-7 their low 4 bits in plane sb + 4 (scale)
 * and its high nibble (min), their high 2 bits in the top bits of planes sb - 4 (scale) and sb (min). */
QP_INLINE void q4k_sub_scale(const char *planes, int sb, __m128i *sc, __m128i *mn) {
    const __m128i m6 = _mm_set1_epi8(63), m4 = _mm_set1_epi8(15), top = _mm_set1_epi8(0x30);
#define QP_PLANE(i) _mm_loadu_si128((const __m128i *)(const void *)(planes + 16 * (i)))
    if (sb < 4) {
        *sc = _mm_and_si128(QP_PLANE(sb), m6);
        *mn = _mm_and_si128(QP_PLANE(sb + 4), m6);
    } else {
        const __m128i p = QP_PLANE(sb + 4);
        *sc = _mm_or_si128(_mm_and_si128(p, m4), _mm_and_si128(_mm_srli_epi16(QP_PLANE(sb - 4), 2), top));
        *mn = _mm_or_si128(_mm_and_si128(_mm_srli_epi16(p, 4), m4), _mm_and_si128(_mm_srli_epi16(QP_PLANE(sb), 2), top));
    }
#undef QP_PLANE
}

/* q4k's 8 scales and 8 mins of 16 rows as lanes. */
QP_INLINE void q4k_scales(const char *planes, qp_kscales *out) {
    for (int sb = 0; sb < 8; sb++) {
        __m128i sc, mn;
        q4k_sub_scale(planes, sb, &sc, &mn);
        qp_store_i(out->sc[sb], qp_from_u8(sc));
        qp_store_i(out->co[sb], qp_from_u8(mn));
    }
}

/* iq4_xs's 8 scales (6 bits, less 32) of 16 rows: 4 low bits from scales_l, 2 high from scales_h; in co too
 * where `co` (gcc keeps the stores to a struct on the stack that nothing reads). */
QP_INLINE void iq4xs_scales(const char *tile, qp_kscales *out, int co) {
    const qp_i h = qp_from_u16(tile + 32), l = qp_load(tile + 64);
    for (int j = 0; j < 8; j++) {
        const qp_i lo = qp_and(qp_srli32(l, 4 * j), qp_set1_32(15));
        const qp_i hi = qp_slli32(qp_and(qp_srli32(h, 2 * j), qp_set1_32(3)), 4);
        const qp_i ls = qp_sub32(qp_or(lo, hi), qp_set1_32(32));
        qp_store_i(out->sc[j], ls);
        if (co) qp_store_i(out->co[j], ls);
    }
}

/* The tiles' sizes and where their quants (32 runs of 64 bytes) start: q4k's after d, dmin and 12 planes of
 * scales, iq4_xs's after d, scales_h and scales_l. */
#define QP_Q4K_TILE 2304
#define QP_Q4K_QS 256
#define QP_IQ4XS_TILE 2176
#define QP_IQ4XS_QS 128

/* A super-block's integer sums added to a row's float sums: tot times the tile's d and, where cor is given (q4k's
 * mins term), cor times its dmin, each times the activations' scale dy (negated for the mins). */
QP_INLINE qp_f ksum(qp_f sum, const char *tile, float dy, qp_i tot, const qp_i *cor) {
    sum = qp_fma(qp_cvt(tot), qp_mul(qp_f16(tile), qp_set1f(dy)), sum);
    if (cor) sum = qp_fma(qp_cvt(*cor), qp_mul(qp_f16(tile + 32), qp_set1f(-dy)), sum);
    return sum;
}

/* The levels of a run of iq4_xs quants q: its low nibbles' and its high nibbles' looked up in table. */
QP_INLINE void iq4xs_levels(qp_i q, qp_i table, qp_i *lo, qp_i *hi) {
    const qp_i low = qp_set1_8(0x0f);
    *lo = qp_shuffle(table, qp_and(q, low));
    *hi = qp_shuffle(table, qp_and(qp_srli4(q), low));
}

/* Prompts of iq4_xs without VNNI, where the table lookups cost more than a load: each tile's levels and
 * scales decoded once into QP_DECK bytes (32 runs' low and high levels, then from QP_DECK_SCALES its
 * qp_kscales) for every pass of rows to read, as group32 does for its table types. */
#define QP_DECK_SCALES (32 * 128)
#define QP_DECK (QP_DECK_SCALES + (int)sizeof(qp_kscales))

QP_INLINE void decodek(const char *g, int64_t nb, char *dec) {
    const qp_i table = qp_levels_table(cd_kvalues_iq4nl);
    for (int64_t b = 0; b < nb; b++) {
        const char *tile = g + b * QP_IQ4XS_TILE;
        char *d = dec + b * QP_DECK;
        for (int r = 0; r < 32; r++) {
            qp_i lo, hi;
            iq4xs_levels(qp_load(tile + QP_IQ4XS_QS + 64 * r), table, &lo, &hi);
            qp_store_i((int32_t *)(void *)(d + 128 * r), lo);
            qp_store_i((int32_t *)(void *)(d + 128 * r + 64), hi);
        }
        iq4xs_scales(tile, (qp_kscales *)(void *)(d + QP_DECK_SCALES), 0);
    }
}

/* iq4_xs: the products of one sub-block (4 runs from `runs`, or their levels decoded at `dec`: low and high
 * of each run in turn) with row i's activations at a[i]->qs + y0, as acc[i]. A sub-block a call, not an
 * index: accumulators indexed by a loop variable would live on the stack. */
QP_INLINE void iq4xs_sub(int mr, const char *runs, const char *dec, qp_i table, const cd_block_q8_K *const a[4],
                         int y0, qp_i acc[4]) {
    for (int i = 0; i < mr; i++) acc[i] = qp_zero();
    for (int w = 0; w < 4; w++) {
        qp_i lo, hi;
        if (dec) {
            lo = qp_load(dec + 128 * w);
            hi = qp_load(dec + 128 * w + 64);
        } else {
            iq4xs_levels(qp_load(runs + 64 * w), table, &lo, &hi);
        }
        for (int i = 0; i < mr; i++) {
            const int8_t *y = a[i]->qs + y0 + 4 * w;
            acc[i] = QP_VNNI ? qp_dp2(acc[i], lo, qp_bcast4(y), hi, qp_bcast4(y + 16))
                             : qp_dp2_signed(acc[i], lo, qp_bcast4(y), hi, qp_bcast4(y + 16));
            if (!QP_VNNI) QP_BARRIER(acc[i]); /* signed levels */
        }
    }
}

#if QP_ACC16
/* q4k's scales of sub-blocks 2j and 2j + 1 of 16 rows in 16 bits, each in both halves of its lane (vpmaddwd's
 * operand for their pair sums), and their mins as one lane's two halves (for the activations' sums of both). */
QP_INLINE void q4k_pair_scales16(const char *tile, int j, qp_i *sc0, qp_i *sc1, qp_i *mins) {
    __m128i s0, s1, m0, m1;
    q4k_sub_scale(tile + 64, 2 * j, &s0, &m0);
    q4k_sub_scale(tile + 64, 2 * j + 1, &s1, &m1);
    *sc0 = qp_pairs16(s0, s0);
    *sc1 = qp_pairs16(s1, s1);
    *mins = qp_pairs16(m0, m1);
}

/* The activations' sums of sub-blocks 2j and 2j + 1 (32 values each, |sum| < 2^12) as one 32-bit lane's two
 * 16-bit halves, broadcast: vpmaddwd with q4k_pair_scales16's mins gives the two mins terms of each row. */
QP_INLINE qp_i q4k_pair_sums16(const cd_block_q8_K *a, int j) {
    const int16_t *s = a->bsums + 4 * j;
    return qp_set1_32((int)((uint16_t)(s[0] + s[1]) | (uint32_t)(uint16_t)(s[2] + s[3]) << 16));
}

/* q4k for one row of activations (decode): each sub-block's 8 pair sums of a lane add in 16 bits (see block16),
 * one vpmaddwd applies its 6-bit scale, and one the mins of two sub-blocks times their activation sums, where
 * the 32-bit path spends 4 vpmaddwd and a vpmulld on each sub-block. The scales are made in registers as each
 * pair of sub-blocks needs them: a tile's stored to memory and read back cost Zen 1's one store port about a
 * fifth of the kernel's time. The same integer sums as groupk's, so the same result. */
QP_INLINE void q4k_row16(const char *g, int64_t nb, const char *act, float *y) {
    const qp_i low = qp_set1_8(0x0f);
    qp_f sum = qp_zerof();
    for (int64_t b = 0; b < nb; b++) {
        const char *tile = g + b * QP_Q4K_TILE;
        const cd_block_q8_K *a = (const cd_block_q8_K *)(const void *)act + b;
        qp_i tot = qp_zero(), cor = qp_zero();
        prefetch_tile(tile, QP_Q4K_TILE, QP_PREFETCH_K);
        for (int j = 0; j < 4; j++) { /* sub-blocks 2j and 2j + 1: runs 8j..8j+7, their low and high nibbles */
            const char *runs = tile + QP_Q4K_QS + 512 * j;
            prefetch_line(tile + 64 * j, QP_PREFETCH_RUNS); /* the tile's 4 lines of scales */
            qp_i lo = qp_zero(), hi = qp_zero();
            for (int u = 0; u < 8; u++) { /* a run at a time, so that nothing spills */
                prefetch_line(runs + 64 * u, QP_PREFETCH_RUNS);
                const qp_i q = qp_load(runs + 64 * u);
                const int8_t *yy = a->qs + 64 * j + 4 * u;
                lo = qp_dp1_16(lo, qp_and(q, low), qp_bcast4(yy));
                hi = qp_dp1_16(hi, qp_and(qp_srli4(q), low), qp_bcast4(yy + 32));
            }
            qp_i sc0, sc1, unused;
            q4k_pair_scales16(tile, j, &sc0, &sc1, &unused);
            tot = qp_add32(tot, qp_madd16(lo, sc0));
            tot = qp_add32(tot, qp_madd16(hi, sc1));
        }
        for (int j = 0; j < 4; j++) { /* after the runs, with registers to spare */
            qp_i unused0, unused1, mins;
            q4k_pair_scales16(tile, j, &unused0, &unused1, &mins);
            cor = qp_add32(cor, qp_madd16(mins, q4k_pair_sums16(a, j)));
        }
        sum = ksum(sum, tile, a->d, tot, &cor);
    }
    qp_store(y, sum);
}
#endif

#if QP_ACC16
/* iq4_xs's 8 scales (6 bits, less 32) of 16 rows in 16 bits, each in both halves of its lane (pair16, for
 * vpmaddwd): byte j / 2 of scales_l and byte j / 4 of scales_h spread by one shuffle each, then the fields. */
QP_INLINE void iq4xs_scales16(const char *tile, qp_i sc[8]) {
    const qp_i l = qp_load(tile + 64), low = qp_set1_16(15), top = qp_set1_16(0x30), offset = qp_set1_16(32);
    for (int j = 0; j < 8; j++) {
        const qp_i lb = qp_lane_byte_pair16(l, j / 2), hb = qp_u16_byte_pair16(tile + 32, j / 4);
        const qp_i lo = j % 2 ? qp_srli16(lb, 4) : qp_and(lb, low);
        const int up = 4 - 2 * (j % 4); /* scales_h's 2 bits of sub-block j to bits 4-5 */
        const qp_i hi = qp_and(up > 0 ? qp_slli16(hb, up) : up < 0 ? qp_srli16(hb, -up) : hb, top);
        sc[j] = qp_sub16(qp_or(lo, hi), offset);
    }
}

/* iq4_xs for one row of activations (decode): a run's 16-bit pair sums widened by the vpmaddwd that applies
 * their sub-block's scale, where groupk widens them by ones, totals each sub-block and scales the total with
 * a vpmulld. The same integer sum a tile (at most 256 * 127 * 127 * 32 < 2^31), so the same result. */
QP_INLINE void iq4xs_row16(const char *g, int64_t nb, const char *act, float *y) {
    const qp_i table = qp_levels_table(cd_kvalues_iq4nl);
    qp_f sum = qp_zerof();
    for (int64_t b = 0; b < nb; b++) {
        const char *tile = g + b * QP_IQ4XS_TILE;
        const cd_block_q8_K *a = (const cd_block_q8_K *)(const void *)act + b;
        qp_i sc[8], tot = qp_zero();
        prefetch_tile(tile, QP_IQ4XS_TILE, QP_PREFETCH_K);
        iq4xs_scales16(tile, sc);
        for (int sb = 0; sb < 8; sb++) /* sub-block sb: runs 4 sb..4 sb + 3, activations 32 sb.. */
            for (int w = 0; w < 4; w++) {
                qp_i lo, hi;
                if (sb < 2 && w == 0) prefetch_line(tile + 64 * sb, QP_PREFETCH_RUNS); /* the tile's 2 lines of scales */
                prefetch_line(tile + QP_IQ4XS_QS + 64 * (4 * sb + w), QP_PREFETCH_RUNS);
                iq4xs_levels(qp_load(tile + QP_IQ4XS_QS + 64 * (4 * sb + w)), table, &lo, &hi);
                const qp_i ylo = qp_bcast4(a->qs + 32 * sb + 4 * w), yhi = qp_bcast4(a->qs + 32 * sb + 4 * w + 16);
                tot = qp_add32(tot, qp_madd16(qp_dp1_signed16(lo, ylo, qp_abs8(ylo)), sc[sb]));
                tot = qp_add32(tot, qp_madd16(qp_dp1_signed16(hi, yhi, qp_abs8(yhi)), sc[sb]));
                QP_BARRIER(tot);
            }
        sum = ksum(sum, tile, a->d, tot, NULL);
    }
    qp_store(y, sum);
}
#endif

/* (dec: iq4_xs's levels and scales decoded by decodek, or NULL) */
QP_INLINE void groupk(int type, int mr, const char *g, int64_t nb, const char *act, int64_t act_row, float *y,
                      int64_t ldy, const char *dec) {
    const int q4k = type == CD_Q4_K, tile_bytes = q4k ? QP_Q4K_TILE : QP_IQ4XS_TILE,
              qs = q4k ? QP_Q4K_QS : QP_IQ4XS_QS;
    const int sums = q4k || QP_VNNI; /* a term through the activations' sub-block sums */
    const qp_i table = q4k ? qp_zero() : qp_levels_table(cd_kvalues_iq4nl), low = qp_set1_8(0x0f);
    qp_f sum[4];
    for (int i = 0; i < mr; i++) sum[i] = qp_zerof();
    qp_kscales own;
    for (int64_t b = 0; b < nb; b++) {
        const char *tile = g + b * tile_bytes, *db = dec ? dec + b * QP_DECK : NULL;
        const qp_kscales *ks = db ? (const qp_kscales *)(const void *)(db + QP_DECK_SCALES) : &own;
        if (mr == 1 && !db) prefetch_tile(tile, tile_bytes, QP_PREFETCH_K);
        if (q4k && !QP_ACC16)
            q4k_scales(tile + 64, &own);
        else if (!q4k && !db)
            iq4xs_scales(tile, &own, sums);
        const cd_block_q8_K *a[4];
        qp_i tot[4], cor[4];
        for (int i = 0; i < mr; i++) {
            a[i] = (const cd_block_q8_K *)(act + i * act_row) + b;
            tot[i] = cor[i] = qp_zero();
        }
        for (int j = 0; j < 4; j++) {
            qp_i acc[4][2]; /* sub-blocks 2j and 2j + 1 */
            for (int i = 0; i < mr; i++) acc[i][0] = acc[i][1] = qp_zero();
            if (q4k) {
#if QP_ACC16 /* as q4k_row16: a sub-block's 8 pair sums of a lane add in 16 bits, then the vpmaddwd that widens
                them applies the sub-block's scale, and one the mins of two sub-blocks times the activations' sums,
                where the 32-bit path widens by ones and spends 2 vpmulld on each: the same integer sums, 1.29-1.36x
                the speed of prompts and batches (m 2-128, 1 thread) on Zen 1, whose vpmulld takes 4 cycles */
#pragma GCC unroll 8 /* acc in registers */
                for (int u = 0; u < 8; u++) {
                    const qp_i q = qp_load(tile + qs + 64 * (8 * j + u));
                    for (int h = 0; h < 2; h++) { /* the low nibbles, then the high ones */
                        const qp_i lv = qp_and(h ? qp_srli4(q) : q, low);
                        for (int i = 0; i < mr; i++) {
                            acc[i][h] = qp_dp1_16(acc[i][h], lv, qp_bcast4(a[i]->qs + 64 * j + 32 * h + 4 * u));
                            QP_BARRIER(acc[i][h]); /* the sums in order: gcc otherwise spills the products */
                        }
                    }
                }
                qp_i sc0, sc1, mins;
                q4k_pair_scales16(tile, j, &sc0, &sc1, &mins);
                for (int i = 0; i < mr; i++) {
                    tot[i] = qp_add32(tot[i], qp_add32(qp_madd16(acc[i][0], sc0), qp_madd16(acc[i][1], sc1)));
                    cor[i] = qp_add32(cor[i], qp_madd16(mins, q4k_pair_sums16(a[i], j)));
                }
                continue; /* scaled */
#else
                for (int u = 0; u < 8; u += 2) {
                    qp_i lo[2], hi[2];
                    for (int v = 0; v < 2; v++) {
                        const qp_i q = qp_load(tile + qs + 64 * (8 * j + u + v));
                        lo[v] = qp_and(q, low);
                        hi[v] = qp_and(qp_srli4(q), low);
                    }
                    for (int i = 0; i < mr; i++) {
                        const int8_t *ya = a[i]->qs + 64 * j;
                        acc[i][0] = qp_dp2(acc[i][0], lo[0], qp_bcast4(ya + 4 * u), lo[1], qp_bcast4(ya + 4 * u + 4));
                        acc[i][1] = qp_dp2(acc[i][1], hi[0], qp_bcast4(ya + 32 + 4 * u), hi[1],
                                           qp_bcast4(ya + 36 + 4 * u));
                    }
                }
#endif
            } else {
                qp_i lo[4], hi[4];
                iq4xs_sub(mr, tile + qs + 64 * 8 * j, db ? db + 128 * 8 * j : NULL, table, a, 64 * j, lo);
                iq4xs_sub(mr, tile + qs + 64 * (8 * j + 4), db ? db + 128 * (8 * j + 4) : NULL, table, a, 64 * j + 32,
                          hi);
                for (int i = 0; i < mr; i++) {
                    acc[i][0] = lo[i];
                    acc[i][1] = hi[i];
                }
            }
            for (int i = 0; i < mr; i++)
                for (int h = 0; h < 2; h++) {
                    const int sb = 2 * j + h;
                    tot[i] = qp_add32(tot[i], qp_mullo(acc[i][h], qp_load(ks->sc[sb])));
                    if (sums)
                        cor[i] = qp_add32(cor[i], qp_mullo(qp_load(ks->co[sb]),
                                                           qp_set1_32(a[i]->bsums[2 * sb] + a[i]->bsums[2 * sb + 1])));
                }
        }
        for (int i = 0; i < mr; i++)
            sum[i] = q4k ? ksum(sum[i], tile, a[i]->d, tot[i], &cor[i])
                         : ksum(sum[i], tile, a[i]->d, sums ? qp_sub32(tot[i], qp_slli32(cor[i], 7)) : tot[i],
                                NULL); /* iq4_xs: levels + 128 with VNNI */
    }
    for (int i = 0; i < mr; i++) qp_store(y + i * ldy, sum[i]);
}

/* y[r] for one row of activations at act (decode): with QP_ACC16 by q4k_row16 and iq4xs_row16, as row32 takes
 * block16 for the 4-bit types. */
QP_INLINE void rowk(int type, const char *g, int64_t nb, const char *act, float *y) {
#if QP_ACC16
    if (type == CD_IQ4_XS) {
        iq4xs_row16(g, nb, act, y);
        return;
    }
    if (type == CD_Q4_K) {
        q4k_row16(g, nb, act, y);
        return;
    }
#endif
    groupk(type, 1, g, nb, act, 0, y, 0, NULL);
}

/* ---- the entries: rows of activations in passes of QP_MR ------------------------------------------------ */
/* Rows of activations in passes of QP_MR; each remainder its own code, so the loops over rows unroll.
 * KERNEL(mr, act, y) runs one pass. */
#define QP_PASSES(KERNEL)                                                                                      \
    do {                                                                                                       \
        int64_t i = 0;                                                                                         \
        for (; i + QP_MR <= m; i += QP_MR) KERNEL(QP_MR, act + i * act_row, y + i * ldy);                      \
        switch (m - i) {                                                                                       \
        case 1: KERNEL(1, act + i * act_row, y + i * ldy); break;                                              \
        case 2: KERNEL(2, act + i * act_row, y + i * ldy); break;                                              \
        case 3: KERNEL(3, act + i * act_row, y + i * ldy); break;                                              \
        default: break;                                                                                        \
        }                                                                                                      \
    } while (0)

/* The passes over levels decoded once into dec by DECODE, or read from the tiles where dec is NULL (scratch
 * memory, freed after): the passes written twice, so that each copy loses the per-step test of dec that the
 * compiler keeps in the inner loop otherwise (prompts of Q5_0 on AVX2: 1.35x). */
#define QP_PASSES_OVER(dec, DECODE, KERNEL)                                                                    \
    do {                                                                                                       \
        if (dec) {                                                                                             \
            DECODE;                                                                                            \
            QP_PASSES(KERNEL);                                                                                 \
        } else {                                                                                               \
            QP_PASSES(KERNEL);                                                                                 \
        }                                                                                                      \
        cd_scratch_free(dec);                                                                                  \
    } while (0)

/* Decode (m = 1) in a function of its own, compiled with ATTR: the ISA table's qrow (qmatmul_packed's choice
 * for one row); the group's passes of rows otherwise, which unpack each tile without memory for its levels. */
#define QP_GROUP32(T, ATTR)                                                                                    \
    static ATTR void row32_##T(const void *g, int64_t nb, const char *act, float *y) {               \
        row32(CD_##T, g, nb, act, y);                                                                          \
    }                                                                                                          \
    static void group32_##T(const void *g, int64_t nb, const char *act, int64_t act_row, int64_t m, float *y,  \
                               int64_t ldy) {                                                                  \
        const qp_t32 t = t32(CD_##T);                                                                          \
        char *dec = m > QP_MR && decode_once(t) ? cd_scratch(nb * QP_DEC32) : NULL;                            \
        QP_PASSES_OVER(dec, decode32(t, g, nb, table32(t), dec), QP_PASS32);                                   \
    }
#define QP_PASS32(mr, a, yy) group32(t.type, mr, g, nb, a, act_row, yy, ldy, dec)

#define QP_GROUPK(T, ATTR)                                                                                     \
    static ATTR void rowk_##T(const void *g, int64_t nb, const char *act, float *y) {                \
        rowk(CD_##T, g, nb, act, y);                                                                           \
    }                                                                                                          \
    static void groupk_##T(const void *g, int64_t nb, const char *act, int64_t act_row, int64_t m, float *y,   \
                              int64_t ldy) {                                                                   \
        const int ty = CD_##T;                                                                                 \
        char *dec = !QP_VNNI && ty == CD_IQ4_XS && m > QP_MR ? cd_scratch(nb * QP_DECK) : NULL;                \
        QP_PASSES_OVER(dec, decodek(g, nb, dec), QP_PASSK);                                                    \
    }
#define QP_PASSK(mr, a, yy) groupk(ty, mr, g, nb, a, act_row, yy, ldy, dec)

/* QP_DECODE_ATTR for the 4-bit types' decode (on AVX2 the others' measured no gain, or a loss) */
QP_GROUP32(Q4_0, QP_DECODE_ATTR)
QP_GROUP32(Q4_1, QP_DECODE_ATTR)
QP_GROUP32(Q5_0, )
QP_GROUP32(Q5_1, )
QP_GROUP32(Q8_0, )
QP_GROUP32(IQ4_NL, )
QP_GROUP32(MXFP4, )
QP_GROUPK(Q4_K, QP_DECODE_ATTR)
QP_GROUPK(IQ4_XS, __attribute__((noinline)))

void QPACKED_FILL(cd_isa_ops *ops) {
    ops->qgroup[CD_Q4_0] = group32_Q4_0;
    ops->qgroup[CD_Q4_1] = group32_Q4_1;
    ops->qgroup[CD_Q5_0] = group32_Q5_0;
    ops->qgroup[CD_Q5_1] = group32_Q5_1;
    ops->qgroup[CD_Q8_0] = group32_Q8_0;
    ops->qgroup[CD_IQ4_NL] = group32_IQ4_NL;
    ops->qgroup[CD_MXFP4] = group32_MXFP4;
    ops->qgroup[CD_Q4_K] = groupk_Q4_K;
    ops->qgroup[CD_IQ4_XS] = groupk_IQ4_XS;
    ops->qrow[CD_Q4_0] = row32_Q4_0;
    ops->qrow[CD_Q4_1] = row32_Q4_1;
    ops->qrow[CD_Q5_0] = row32_Q5_0;
    ops->qrow[CD_Q5_1] = row32_Q5_1;
    ops->qrow[CD_Q8_0] = row32_Q8_0;
    ops->qrow[CD_IQ4_NL] = row32_IQ4_NL;
    ops->qrow[CD_MXFP4] = row32_MXFP4;
    ops->qrow[CD_Q4_K] = rowk_Q4_K;
    ops->qrow[CD_IQ4_XS] = rowk_IQ4_XS;
}
