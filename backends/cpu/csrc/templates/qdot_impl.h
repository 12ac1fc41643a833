/* The quantized dot products (kernels/quant.h) in 256-bit integer vectors,
 * written once for AVX2 and for AVX-512 VNNI: the file that includes this
 * defines QDOT_FILL (the name of the function that fills the ISA table),
 * QD_VNNI (1 with VNNI) and QD_DPBUSD(acc, u, s): acc (8 int32) + the sums
 * of 4 adjacent products of the unsigned bytes u (below 128 without VNNI)
 * with the signed bytes s.
 *
 * Every kernel follows ggml's arithmetic: integer sums per block (or
 * sub-block), each scaled in float by the weight's and the activation's
 * scales; q6_K's offset of 32 and the mins of the affine K types are applied
 * through the activation's block sums (q8_K's bsums). */
#include <immintrin.h>
#include <string.h>

#include "kernels/quant.h"
#include "runtime/internal.h"
#include "runtime/isa.h"

static inline float QD_NAME(h2f)(uint16_t h) { return _cvtsh_ss(h); }

static inline float QD_NAME(hsum)(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline int QD_NAME(hsum_i32)(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

/* 16 bytes of nibbles as 32 bytes: the low nibbles, then the high ones (the
 * order of the values in every 32-value block of ggml's 4-bit formats). */
static inline __m256i QD_NAME(nibbles)(const uint8_t *qs) {
    const __m128i b = _mm_loadu_si128((const __m128i *)qs);
    const __m256i v = _mm256_set_m128i(_mm_srli_epi16(b, 4), b);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x0f));
}

/* 32 bits as 32 bytes: 0xff where the bit is set. */
static inline __m256i QD_NAME(bit_bytes)(const uint8_t *bits) {
    uint32_t x;
    memcpy(&x, bits, 4);
    const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32((int)x),
                                               _mm256_set_epi64x(0x0303030303030303LL, 0x0202020202020202LL,
                                                                 0x0101010101010101LL, 0));
    const __m256i mask = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    return _mm256_cmpeq_epi8(_mm256_and_si256(spread, mask), mask);
}

/* The 8 int32 sums of unsigned bytes u (< 128) times signed bytes s, over 4 adjacent pairs. */
static inline __m256i QD_NAME(dot_us)(__m256i u, __m256i s) { return QD_DPBUSD(_mm256_setzero_si256(), u, s); }

/* The same for signed x times signed y (neither -128): |x| times y with x's sign. */
static inline __m256i QD_NAME(dot_ss)(__m256i x, __m256i y) {
    return QD_NAME(dot_us)(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
}

static inline __m256i QD_NAME(load)(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }

/* ---- 32-value blocks -------------------------------------------------------------------------------
 * Eight blocks at a time: their integer sums reduced into one vector, scaled by the eight weight scales
 * and the activations' f32 scales from the row's tables (kernels/quant.h), so the per-block float work
 * is a fraction of an instruction. Levels are taken unsigned (u = level + offset, u < 128 for maddubs;
 * with VNNI up to 255) and the offset comes off through the activations' sums. */
/* 16 signed levels in both 128-bit lanes, for a byte shuffle to look nibbles up in. */
static inline __m256i QD_NAME(levels)(const int8_t table[16]) {
    const __m128i t = _mm_loadu_si128((const __m128i *)table);
    return _mm256_set_m128i(t, t);
}

static inline __m256i QD_NAME(hsum8)(const __m256i p[8]) { /* lane j: the sum of p[j]'s lanes */
    const __m256i ab = _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
    const __m256i cd = _mm256_hadd_epi32(_mm256_hadd_epi32(p[4], p[5]), _mm256_hadd_epi32(p[6], p[7]));
    return _mm256_add_epi32(_mm256_permute2x128_si256(ab, cd, 0x20), _mm256_permute2x128_si256(ab, cd, 0x31));
}

/* Eight f16 values `stride` bytes apart, as floats. */
static inline __m256 QD_NAME(f16x8)(const char *p, int stride) {
    uint16_t h[8];
    for (int j = 0; j < 8; j++) memcpy(&h[j], p + j * stride, 2);
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)h));
}

/* The signed types (q8_0, iq4_nl, mxfp4) take offset 128 with VNNI; without, maddubs would saturate on
 * u >= 128, so they multiply their signed levels through the sign trick (offset 0). */
typedef struct {
    int size;   /* bytes per weight block */
    int offset; /* the levels are u - offset */
    int min;    /* q4_1 / q5_1: an f16 min after the f16 scale */
} QD_NAME(type32);

static inline QD_NAME(type32) QD_NAME(traits32)(int type) {
    const int vnni = QD_VNNI;
    switch (type) {
    case CD_Q4_0: return (QD_NAME(type32)){sizeof(cd_block_q4_0), 8, 0};
    case CD_Q4_1: return (QD_NAME(type32)){sizeof(cd_block_q4_1), 0, 1};
    case CD_Q5_0: return (QD_NAME(type32)){sizeof(cd_block_q5_0), 16, 0};
    case CD_Q5_1: return (QD_NAME(type32)){sizeof(cd_block_q5_1), 0, 1};
    case CD_Q8_0: return (QD_NAME(type32)){sizeof(cd_block_q8_0), vnni ? 128 : 0, 0};
    case CD_IQ4_NL: return (QD_NAME(type32)){sizeof(cd_block_iq4_nl), vnni ? 128 : 0, 0};
    default: return (QD_NAME(type32)){sizeof(cd_block_mxfp4), vnni ? 128 : 0, 0}; /* CD_MXFP4 */
    }
}

/* 16 for each value whose fifth bit (q5_0, q5_1) is set. */
static inline __m256i QD_NAME(fifth_bits)(const uint8_t *qh) {
    return _mm256_and_si256(QD_NAME(bit_bytes)(qh), _mm256_set1_epi8(0x10));
}

/* The lanes of one block's sum of u * y (or of level * y for a signed type without VNNI). */
static inline __m256i QD_NAME(block32)(int type, const char *w, const int8_t *y, __m256i table) {
    const __m256i yv = QD_NAME(load)(y);
    __m256i u;
    switch (type) {
    case CD_Q4_0: u = QD_NAME(nibbles)(((const cd_block_q4_0 *)w)->qs); break;
    case CD_Q4_1: u = QD_NAME(nibbles)(((const cd_block_q4_1 *)w)->qs); break;
    case CD_Q5_0: {
        const cd_block_q5_0 *b = (const cd_block_q5_0 *)w;
        u = _mm256_or_si256(QD_NAME(nibbles)(b->qs), QD_NAME(fifth_bits)(b->qh));
        break;
    }
    case CD_Q5_1: {
        const cd_block_q5_1 *b = (const cd_block_q5_1 *)w;
        u = _mm256_or_si256(QD_NAME(nibbles)(b->qs), QD_NAME(fifth_bits)(b->qh));
        break;
    }
    case CD_Q8_0: {
        const __m256i x = QD_NAME(load)(((const cd_block_q8_0 *)w)->qs);
        if (!QD_VNNI) return QD_NAME(dot_ss)(x, yv);
        u = _mm256_xor_si256(x, _mm256_set1_epi8((char)0x80));
        break;
    }
    default: { /* IQ4_NL and MXFP4: table holds the levels (+ 128 with VNNI) */
        const uint8_t *qs = type == CD_IQ4_NL ? ((const cd_block_iq4_nl *)w)->qs : ((const cd_block_mxfp4 *)w)->qs;
        u = _mm256_shuffle_epi8(table, QD_NAME(nibbles)(qs));
        if (!QD_VNNI) return QD_NAME(dot_ss)(u, yv);
    }
    }
    return QD_NAME(dot_us)(u, yv);
}

/* A weight block's scale (f16 d, or MXFP4's E8M0 exponent), and eight blocks' at once. */
static inline float QD_NAME(scale1)(int type, const char *w) {
    if (type == CD_MXFP4) return cd_e8m0_to_f32_half(((const cd_block_mxfp4 *)w)->e);
    uint16_t d;
    memcpy(&d, w, 2);
    return QD_NAME(h2f)(d);
}

static inline __m256 QD_NAME(scales8)(int type, const char *w, int size) {
    if (type != CD_MXFP4) return QD_NAME(f16x8)(w, size);
    float d[8];
    for (int j = 0; j < 8; j++) d[j] = QD_NAME(scale1)(type, w + j * size);
    return _mm256_loadu_ps(d);
}

static inline float QD_NAME(dot32)(int type, int64_t n, const void *vw, const void *va) {
    const QD_NAME(type32) t = QD_NAME(traits32)(type);
    const int64_t nb = n / CD_QK;
    const int a_size = t.min ? sizeof(cd_block_q8_1) : sizeof(cd_block_q8_0), a_levels = t.min ? 4 : 2;
    const char *w = vw, *a = va;
    const float *as = cd_act_scales(va, nb);
    const int32_t *ys = cd_act_sums(va, nb);
    __m256i table = _mm256_setzero_si256();
    if (type == CD_IQ4_NL || type == CD_MXFP4) {
        table = QD_NAME(levels)(type == CD_IQ4_NL ? cd_kvalues_iq4nl : cd_kvalues_mxfp4);
        if (QD_VNNI) table = _mm256_xor_si256(table, _mm256_set1_epi8((char)0x80));
    }
    __m256 acc = _mm256_setzero_ps(), mins = _mm256_setzero_ps();
    int64_t b = 0;
    for (; b + 8 <= nb; b += 8) {
        __m256i p[8];
        for (int j = 0; j < 8; j++)
            p[j] = QD_NAME(block32)(type, w + (b + j) * t.size, (const int8_t *)(a + (b + j) * a_size + a_levels),
                                    table);
        __m256i sum = QD_NAME(hsum8)(p);
        const __m256i ysum = _mm256_loadu_si256((const __m256i *)(ys + b));
        if (t.offset) sum = _mm256_sub_epi32(sum, _mm256_mullo_epi32(ysum, _mm256_set1_epi32(t.offset)));
        const __m256 ad = _mm256_loadu_ps(as + b);
        acc = _mm256_fmadd_ps(_mm256_mul_ps(QD_NAME(scales8)(type, w + b * t.size, t.size), ad),
                              _mm256_cvtepi32_ps(sum), acc);
        if (t.min) /* + m * (d_y * sum y) */
            mins = _mm256_fmadd_ps(QD_NAME(f16x8)(w + b * t.size + 2, t.size),
                                   _mm256_mul_ps(ad, _mm256_cvtepi32_ps(ysum)), mins);
    }
    float tail = 0;
    for (; b < nb; b++) {
        const char *wb = w + b * t.size;
        const int8_t *y = (const int8_t *)(a + b * a_size + a_levels);
        const int isum = QD_NAME(hsum_i32)(QD_NAME(block32)(type, wb, y, table));
        tail += QD_NAME(scale1)(type, wb) * as[b] * (float)(isum - t.offset * ys[b]);
        if (t.min) tail += QD_NAME(scale1)(type, wb + 2) * as[b] * (float)ys[b]; /* the f16 min after d */
    }
    return QD_NAME(hsum)(_mm256_add_ps(acc, mins)) + tail;
}

#define QD_DOT32(name, type) \
    static float QD_NAME(name)(int64_t n, const void *w, const void *a) { return QD_NAME(dot32)(type, n, w, a); }
QD_DOT32(dot_q4_0, CD_Q4_0)
QD_DOT32(dot_q4_1, CD_Q4_1)
QD_DOT32(dot_q5_0, CD_Q5_0)
QD_DOT32(dot_q5_1, CD_Q5_1)
QD_DOT32(dot_q8_0, CD_Q8_0)
QD_DOT32(dot_iq4_nl, CD_IQ4_NL)
QD_DOT32(dot_mxfp4, CD_MXFP4)

/* ---- 256-value super-blocks, with q8_K activations ------------------------------------------------- */

/* q4_K and q5_K's eight 6-bit scales and eight mins, unpacked from their 12 bytes word-wise. */
static inline void QD_NAME(scales_mins_k4)(const uint8_t *q, __m256i *sc, __m256i *mn) {
    uint32_t u[3];
    memcpy(u, q, 12);
    const __m128i b = _mm_setr_epi32((int)(u[0] & 0x3f3f3f3f),                                   /* scales 0-3 */
                                     (int)((u[2] & 0x0f0f0f0f) | ((u[0] >> 6 & 0x03030303) << 4)), /* 4-7 */
                                     (int)(u[1] & 0x3f3f3f3f),                                   /* mins 0-3 */
                                     (int)((u[2] >> 4 & 0x0f0f0f0f) | ((u[1] >> 6 & 0x03030303) << 4)));
    *sc = _mm256_cvtepu8_epi32(b);
    *mn = _mm256_cvtepu8_epi32(_mm_srli_si128(b, 8));
}

/* The activations' sums over the 8 sub-blocks of 32 (pairs of q8_K's 16-value bsums), as int32. */
static inline __m256i QD_NAME(bsums32)(const int16_t *bsums) {
    return _mm256_madd_epi16(QD_NAME(load)(bsums), _mm256_set1_epi16(1));
}

/* q4_K / q5_K's levels of sub-blocks 2j (lo) and 2j + 1 (hi): the low and high nibbles of 32 bytes, plus
 * q5_K's fifth bits (bits 2j and 2j + 1 of each byte of qh) when `five`. */
static inline void QD_NAME(k45_levels)(const uint8_t *qs, __m256i hbits, int j, int five, __m256i *lo, __m256i *hi) {
    const __m256i low = _mm256_set1_epi8(0x0f), one = _mm256_set1_epi8(1);
    const __m256i q = QD_NAME(load)(qs + 32 * j);
    *lo = _mm256_and_si256(q, low);
    *hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low);
    if (five) {
        *lo = _mm256_add_epi8(*lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hbits, 2 * j), one), 4));
        *hi = _mm256_add_epi8(*hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hbits, 2 * j + 1), one), 4));
    }
}

/* Shared by q4_K and q5_K: the 4 pairs of sub-blocks of 32 values (low nibbles,
 * then high ones, of 32 bytes each), with q5_K's fifth bits from qh. */
static inline float QD_NAME(dot_k45)(int64_t n, const void *vw, const void *va, int five) {
    const cd_block_q8_K *a = va;
    const int64_t nb = n / CD_QK_K;
    const size_t size = five ? sizeof(cd_block_q5_K) : sizeof(cd_block_q4_K);
    __m256 acc = _mm256_setzero_ps();
    float mins = 0;
    for (int64_t i = 0; i < nb; i++) {
        const cd_block_q4_K *b = (const cd_block_q4_K *)((const char *)vw + i * size); /* d, dmin, scales alike */
        const uint8_t *qs = five ? ((const cd_block_q5_K *)b)->qs : b->qs;
        __m256i sc, mn;
        QD_NAME(scales_mins_k4)(b->scales, &sc, &mn);
        const float dy = a[i].d;
        const int mins_dot = QD_NAME(hsum_i32)(_mm256_mullo_epi32(mn, QD_NAME(bsums32)(a[i].bsums)));
        mins += QD_NAME(h2f)(b->dmin) * dy * (float)mins_dot;
        const __m256i hbits = five ? QD_NAME(load)(((const cd_block_q5_K *)b)->qh) : _mm256_setzero_si256();
        __m256i p[8];
        for (int j = 0; j < 4; j++) {
            __m256i lo, hi;
            QD_NAME(k45_levels)(qs, hbits, j, five, &lo, &hi);
            p[2 * j] = QD_NAME(dot_us)(lo, QD_NAME(load)(a[i].qs + 64 * j));
            p[2 * j + 1] = QD_NAME(dot_us)(hi, QD_NAME(load)(a[i].qs + 64 * j + 32));
        }
        const __m256i sum = _mm256_mullo_epi32(QD_NAME(hsum8)(p), sc);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(QD_NAME(h2f)(b->d) * dy), _mm256_cvtepi32_ps(sum), acc);
    }
    return QD_NAME(hsum)(acc) - mins;
}

static float QD_NAME(dot_q4_K)(int64_t n, const void *w, const void *a) { return QD_NAME(dot_k45)(n, w, a, 0); }
static float QD_NAME(dot_q5_K)(int64_t n, const void *w, const void *a) { return QD_NAME(dot_k45)(n, w, a, 1); }

/* q6_K's unsigned 6-bit levels of 128 values: 4 runs of 32 from 64 bytes of low nibbles and 32 of
 * high bit pairs. */
static inline void QD_NAME(q6_levels)(const uint8_t *ql, __m256i qh, __m256i q[4]) {
    const __m256i low = _mm256_set1_epi8(0x0f), top = _mm256_set1_epi8(0x30);
    const __m256i l0 = QD_NAME(load)(ql), l1 = QD_NAME(load)(ql + 32);
    for (int k = 0; k < 4; k++) {
        const __m256i nib = _mm256_and_si256(k < 2 ? (k ? l1 : l0) : _mm256_srli_epi16(k == 2 ? l0 : l1, 4), low);
        /* bit pair k of each byte moved to bits 4-5 by one 16-bit shift: what crosses into the next byte
           lands outside the mask */
        const __m256i pair = k == 0 ? _mm256_slli_epi16(qh, 4) : k == 1 ? _mm256_slli_epi16(qh, 2)
                             : k == 2 ? qh : _mm256_srli_epi16(qh, 2);
        q[k] = _mm256_or_si256(nib, _mm256_and_si256(pair, top));
    }
}

#if !QD_VNNI
/* Words 2k and 2k + 1 of sw (8 scales as 16-bit words, in both 128-bit lanes) broadcast over the low and the
 * high lane: vpmaddwd's operand for the pair sums of a run of 32 values whose two halves have those scales. */
static inline __m256i QD_NAME(q6_pair_scales)(__m256i sw, int k) {
    const __m256i ctl = _mm256_set_m128i(_mm_set1_epi16((short)((4 * k + 3) << 8 | (4 * k + 2))),
                                         _mm_set1_epi16((short)((4 * k + 1) << 8 | 4 * k)));
    return _mm256_shuffle_epi8(sw, ctl);
}
#endif

static float QD_NAME(dot_q6_K)(int64_t n, const void *vw, const void *va) {
    const cd_block_q6_K *w = vw;
    const cd_block_q8_K *a = va;
    __m256 acc = _mm256_setzero_ps();
    float offsets = 0;
    for (int64_t i = 0; i < n / CD_QK_K; i++) {
        const int8_t *sc = w[i].scales;
        const float d = QD_NAME(h2f)(w[i].d) * a[i].d;
        /* The levels are q - 32 with q unsigned: take 32 times the activations' scaled sums off at the end. */
        const __m128i sc8 = _mm_loadu_si128((const __m128i *)(const void *)sc);
        const int offset = QD_NAME(hsum_i32)(_mm256_madd_epi16(_mm256_cvtepi8_epi16(sc8), QD_NAME(load)(a[i].bsums)));
        offsets += d * (float)offset;
        __m256i sum = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) { /* halves of 128 values */
            const uint8_t *ql = w[i].ql + 64 * h;
            const __m256i qh = QD_NAME(load)(w[i].qh + 32 * h);
            __m256i q[4];
            QD_NAME(q6_levels)(ql, qh, q);
#if !QD_VNNI
            const __m256i sw = _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(h ? _mm_srli_si128(sc8, 8) : sc8));
#endif
            for (int k = 0; k < 4; k++) {
                /* 32 values with two scales: the first 16 (low 128-bit lane) and the next 16. */
                const __m256i y = QD_NAME(load)(a[i].qs + 128 * h + 32 * k);
#if QD_VNNI
                const int s0 = sc[8 * h + 2 * k], s1 = sc[8 * h + 2 * k + 1];
                const __m256i p = QD_NAME(dot_us)(q[k], y);
                sum = _mm256_add_epi32(sum, _mm256_mullo_epi32(p, _mm256_setr_epi32(s0, s0, s0, s0, s1, s1, s1, s1)));
#else /* the vpmaddwd that widens vpmaddubsw's pair sums (|sum| <= 2 x 63 x 128) applies the scales, where
         dot_us widens by ones and a vpmulld scales: the same integer sums */
                sum = _mm256_add_epi32(sum, _mm256_madd_epi16(_mm256_maddubs_epi16(q[k], y),
                                                              QD_NAME(q6_pair_scales)(sw, k)));
#endif
            }
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sum), acc);
    }
    return QD_NAME(hsum)(acc) - 32.0f * offsets;
}

/* IQ4_XS's eight 6-bit sub-block scales (offset by 32) as int32: 4 low bits each from scales_l, 2 high
 * from scales_h. */
static inline __m256i QD_NAME(iq4xs_scales)(const cd_block_iq4_xs *b) {
    uint32_t l;
    memcpy(&l, b->scales_l, 4);
    const __m256i lo = _mm256_srlv_epi32(_mm256_set1_epi32((int)l), _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28));
    const __m256i hi = _mm256_srlv_epi32(_mm256_set1_epi32(b->scales_h), _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14));
    const __m256i ls = _mm256_or_si256(_mm256_and_si256(lo, _mm256_set1_epi32(0xf)),
                                       _mm256_slli_epi32(_mm256_and_si256(hi, _mm256_set1_epi32(3)), 4));
    return _mm256_sub_epi32(ls, _mm256_set1_epi32(32));
}

static float QD_NAME(dot_iq4_xs)(int64_t n, const void *vw, const void *va) {
    const cd_block_iq4_xs *w = vw;
    const cd_block_q8_K *a = va;
    /* With VNNI the levels go in as unsigned (+128) and 128 times the activations' sums come off. */
    __m256i table = QD_NAME(levels)(cd_kvalues_iq4nl);
    if (QD_VNNI) table = _mm256_xor_si256(table, _mm256_set1_epi8((char)0x80));
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / CD_QK_K; i++) {
        __m256i p[8];
        for (int j = 0; j < 8; j++) {
            const __m256i x = _mm256_shuffle_epi8(table, QD_NAME(nibbles)(w[i].qs + 16 * j));
            const __m256i y = QD_NAME(load)(a[i].qs + 32 * j);
            p[j] = QD_VNNI ? QD_NAME(dot_us)(x, y) : QD_NAME(dot_ss)(x, y);
        }
        __m256i sum = QD_NAME(hsum8)(p);
        if (QD_VNNI) sum = _mm256_sub_epi32(sum, _mm256_slli_epi32(QD_NAME(bsums32)(a[i].bsums), 7));
        sum = _mm256_mullo_epi32(sum, QD_NAME(iq4xs_scales)(&w[i]));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(QD_NAME(h2f)(w[i].d) * a[i].d), _mm256_cvtepi32_ps(sum), acc);
    }
    return QD_NAME(hsum)(acc);
}

/* ---- rows decoded to f32 for the GEMM path of kernels/quant_matmul.c ------------------------------------ */

/* y[0..32) = q * d + m for 32 signed bytes q, with scale d0 for the first 16 and d1 for the rest. */
static inline void QD_NAME(store16x2)(__m256i q, __m256 d0, __m256 d1, __m256 m, float *y) {
    const __m128i halves[2] = {_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1)};
    for (int h = 0; h < 2; h++) {
        const __m256 d = h ? d1 : d0;
        const __m256 lo = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(halves[h]));
        const __m256 hi = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(halves[h], 8)));
        _mm256_storeu_ps(y + 16 * h, _mm256_fmadd_ps(lo, d, m));
        _mm256_storeu_ps(y + 16 * h + 8, _mm256_fmadd_ps(hi, d, m));
    }
}

static inline void QD_NAME(store32)(__m256i q, __m256 d, __m256 m, float *y) { QD_NAME(store16x2)(q, d, d, m, y); }

static void QD_NAME(decode_q4_0)(const void *vb, float *y, int64_t n) {
    const cd_block_q4_0 *b = vb;
    for (int64_t i = 0; i < n / CD_QK; i++, y += CD_QK)
        QD_NAME(store32)(_mm256_sub_epi8(QD_NAME(nibbles)(b[i].qs), _mm256_set1_epi8(8)),
                         _mm256_set1_ps(QD_NAME(h2f)(b[i].d)), _mm256_setzero_ps(), y);
}

static void QD_NAME(decode_q4_1)(const void *vb, float *y, int64_t n) {
    const cd_block_q4_1 *b = vb;
    for (int64_t i = 0; i < n / CD_QK; i++, y += CD_QK)
        QD_NAME(store32)(QD_NAME(nibbles)(b[i].qs), _mm256_set1_ps(QD_NAME(h2f)(b[i].d)),
                         _mm256_set1_ps(QD_NAME(h2f)(b[i].m)), y);
}

static void QD_NAME(decode_q8_0)(const void *vb, float *y, int64_t n) {
    const cd_block_q8_0 *b = vb;
    for (int64_t i = 0; i < n / CD_QK; i++, y += CD_QK)
        QD_NAME(store32)(QD_NAME(load)(b[i].qs), _mm256_set1_ps(QD_NAME(h2f)(b[i].d)), _mm256_setzero_ps(), y);
}

static void QD_NAME(decode_q5_0)(const void *vb, float *y, int64_t n) {
    const cd_block_q5_0 *b = vb;
    for (int64_t i = 0; i < n / CD_QK; i++, y += CD_QK) {
        const __m256i u = _mm256_or_si256(QD_NAME(nibbles)(b[i].qs), QD_NAME(fifth_bits)(b[i].qh));
        QD_NAME(store32)(_mm256_sub_epi8(u, _mm256_set1_epi8(16)), _mm256_set1_ps(QD_NAME(h2f)(b[i].d)),
                         _mm256_setzero_ps(), y);
    }
}

static void QD_NAME(decode_q5_1)(const void *vb, float *y, int64_t n) {
    const cd_block_q5_1 *b = vb;
    for (int64_t i = 0; i < n / CD_QK; i++, y += CD_QK)
        QD_NAME(store32)(_mm256_or_si256(QD_NAME(nibbles)(b[i].qs), QD_NAME(fifth_bits)(b[i].qh)),
                         _mm256_set1_ps(QD_NAME(h2f)(b[i].d)), _mm256_set1_ps(QD_NAME(h2f)(b[i].m)), y);
}

static void QD_NAME(decode_iq4_nl)(const void *vb, float *y, int64_t n) {
    const cd_block_iq4_nl *b = vb;
    const __m256i table = QD_NAME(levels)(cd_kvalues_iq4nl);
    for (int64_t i = 0; i < n / CD_QK; i++, y += CD_QK)
        QD_NAME(store32)(_mm256_shuffle_epi8(table, QD_NAME(nibbles)(b[i].qs)), _mm256_set1_ps(QD_NAME(h2f)(b[i].d)),
                         _mm256_setzero_ps(), y);
}

static void QD_NAME(decode_mxfp4)(const void *vb, float *y, int64_t n) {
    const cd_block_mxfp4 *b = vb;
    const __m256i table = QD_NAME(levels)(cd_kvalues_mxfp4);
    for (int64_t i = 0; i < n / CD_QK; i++, y += CD_QK)
        QD_NAME(store32)(_mm256_shuffle_epi8(table, QD_NAME(nibbles)(b[i].qs)),
                         _mm256_set1_ps(cd_e8m0_to_f32_half(b[i].e)), _mm256_setzero_ps(), y);
}

/* Shared by q4_K and q5_K (whose fifth bits come from qh), as dot_k45. */
static inline void QD_NAME(decode_k45)(const void *vb, float *y, int64_t n, int five) {
    const size_t size = five ? sizeof(cd_block_q5_K) : sizeof(cd_block_q4_K);
    for (int64_t i = 0; i < n / CD_QK_K; i++) {
        const cd_block_q4_K *b = (const cd_block_q4_K *)((const char *)vb + i * size); /* d, dmin, scales alike */
        const uint8_t *qs = five ? ((const cd_block_q5_K *)b)->qs : b->qs;
        const __m256i hbits = five ? QD_NAME(load)(((const cd_block_q5_K *)b)->qh) : _mm256_setzero_si256();
        __m256i vsc, vmn;
        QD_NAME(scales_mins_k4)(b->scales, &vsc, &vmn);
        float sc[8], mn[8]; /* d times the scales, dmin times the mins */
        _mm256_storeu_ps(sc, _mm256_mul_ps(_mm256_set1_ps(QD_NAME(h2f)(b->d)), _mm256_cvtepi32_ps(vsc)));
        _mm256_storeu_ps(mn, _mm256_mul_ps(_mm256_set1_ps(-QD_NAME(h2f)(b->dmin)), _mm256_cvtepi32_ps(vmn)));
        for (int j = 0; j < 4; j++, y += 64) {
            __m256i lo, hi;
            QD_NAME(k45_levels)(qs, hbits, j, five, &lo, &hi);
            QD_NAME(store32)(lo, _mm256_set1_ps(sc[2 * j]), _mm256_set1_ps(mn[2 * j]), y);
            QD_NAME(store32)(hi, _mm256_set1_ps(sc[2 * j + 1]), _mm256_set1_ps(mn[2 * j + 1]), y + 32);
        }
    }
}

static void QD_NAME(decode_q4_K)(const void *b, float *y, int64_t n) { QD_NAME(decode_k45)(b, y, n, 0); }
static void QD_NAME(decode_q5_K)(const void *b, float *y, int64_t n) { QD_NAME(decode_k45)(b, y, n, 1); }

static void QD_NAME(decode_q6_K)(const void *vb, float *y, int64_t n) {
    const cd_block_q6_K *b = vb;
    const __m256i off = _mm256_set1_epi8(32);
    for (int64_t i = 0; i < n / CD_QK_K; i++) {
        const float d = QD_NAME(h2f)(b[i].d);
        for (int h = 0; h < 2; h++, y += 128) {
            const uint8_t *ql = b[i].ql + 64 * h;
            const int8_t *sc = b[i].scales + 8 * h;
            const __m256i qh = QD_NAME(load)(b[i].qh + 32 * h);
            __m256i q[4];
            QD_NAME(q6_levels)(ql, qh, q);
            for (int k = 0; k < 4; k++)
                QD_NAME(store16x2)(_mm256_sub_epi8(q[k], off), _mm256_set1_ps(d * sc[2 * k]),
                                   _mm256_set1_ps(d * sc[2 * k + 1]), _mm256_setzero_ps(), y + 32 * k);
        }
    }
}

static void QD_NAME(decode_iq4_xs)(const void *vb, float *y, int64_t n) {
    const cd_block_iq4_xs *b = vb;
    const __m256i table = QD_NAME(levels)(cd_kvalues_iq4nl);
    for (int64_t i = 0; i < n / CD_QK_K; i++) {
        float dl[8];
        _mm256_storeu_ps(dl, _mm256_mul_ps(_mm256_set1_ps(QD_NAME(h2f)(b[i].d)),
                                           _mm256_cvtepi32_ps(QD_NAME(iq4xs_scales)(&b[i]))));
        for (int j = 0; j < 8; j++, y += 32)
            QD_NAME(store32)(_mm256_shuffle_epi8(table, QD_NAME(nibbles)(b[i].qs + 16 * j)), _mm256_set1_ps(dl[j]),
                             _mm256_setzero_ps(), y);
    }
}

/* ---- activations quantized for the dot products, bit for bit as the reference quantizers ----------------- */

/* roundf (to nearest, halves away from zero) as int32: v and its distance to its truncation are exact. */
static inline __m256i QD_NAME(round_away)(__m256 v) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m256 half = _mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_sub_ps(v, t)), _mm256_set1_ps(0.5f), _CMP_GE_OQ);
    const __m256 step = _mm256_and_ps(half, _mm256_or_ps(_mm256_set1_ps(1.0f), _mm256_and_ps(v, sign)));
    return _mm256_cvttps_epi32(_mm256_add_ps(t, step));
}

static inline float QD_NAME(hmax)(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}

/* 32 int32 levels (in [-127, 127]) stored as bytes, in order. */
static inline void QD_NAME(store_levels)(const __m256i q[4], int8_t *out) {
    const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    _mm256_storeu_si256((__m256i *)out, _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}

/* q8_0 / q8_1 levels of 32 values (d = absmax / 127, levels x / d rounded half away); returns d, and
 * the levels' sum in *sum. */
static inline float QD_NAME(q8_block)(const float *x, int8_t *out, int32_t *sum) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 v[4], amax = _mm256_setzero_ps();
    for (int i = 0; i < 4; i++) {
        v[i] = _mm256_loadu_ps(x + 8 * i);
        amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[i]));
    }
    const float d = QD_NAME(hmax)(amax) / 127;
    const __m256 id = _mm256_set1_ps(d ? 1.0f / d : 0.0f);
    __m256i q[4];
    for (int i = 0; i < 4; i++) q[i] = QD_NAME(round_away)(_mm256_mul_ps(v[i], id));
    QD_NAME(store_levels)(q, out);
    *sum = QD_NAME(hsum_i32)(_mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3])));
    return d;
}

/* q8_K: levels min(127, nearest_int(x * -127 / max)) for max the first value of largest magnitude. */
static inline void QD_NAME(q8k_block)(const float *x, cd_block_q8_K *y) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 amax = _mm256_setzero_ps();
    for (int i = 0; i < CD_QK_K; i += 8) amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)));
    const float a = QD_NAME(hmax)(amax);
    float max = 0;
    for (int i = 0; i < CD_QK_K && a > 0; i++)
        if (fabsf(x[i]) == a) {
            max = x[i];
            break;
        }
    if (!max) {
        memset(y, 0, sizeof *y);
        return;
    }
    const float iscale = -127.f / max;
    const __m256 s = _mm256_set1_ps(iscale);
    for (int i = 0; i < CD_QK_K; i += 32) {
        __m256i q[4];
        for (int j = 0; j < 4; j++)
            q[j] = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i + 8 * j), s)),
                                    _mm256_set1_epi32(127));
        QD_NAME(store_levels)(q, y->qs + i);
        y->bsums[i / 16] = (int16_t)QD_NAME(hsum_i32)(_mm256_add_epi32(q[0], q[1]));
        y->bsums[i / 16 + 1] = (int16_t)QD_NAME(hsum_i32)(_mm256_add_epi32(q[2], q[3]));
    }
    y->d = 1 / iscale;
}

static void QD_NAME(quantize_act)(int32_t act_type, const float *x, int64_t k, char *blocks) {
    if (act_type == CD_Q8_K) {
        for (int64_t b = 0; b < k / CD_QK_K; b++) QD_NAME(q8k_block)(x + b * CD_QK_K, (cd_block_q8_K *)blocks + b);
        return;
    }
    const int64_t nb = k / CD_QK;
    float *scales = (float *)cd_act_scales(blocks, nb);
    int32_t *sums = (int32_t *)cd_act_sums(blocks, nb);
    for (int64_t b = 0; b < nb; b++) {
        int32_t sum;
        if (act_type == CD_Q8_1) {
            cd_block_q8_1 *y = (cd_block_q8_1 *)blocks + b;
            const float d = QD_NAME(q8_block)(x + b * CD_QK, y->qs, &sum);
            y->d = cd_f32_to_f16(d);
            y->s = cd_f32_to_f16((float)sum * d); /* the f32 d, not the rounded one */
            scales[b] = cd_f16_to_f32(y->d);
        } else {
            cd_block_q8_0 *y = (cd_block_q8_0 *)blocks + b;
            y->d = cd_f32_to_f16(QD_NAME(q8_block)(x + b * CD_QK, y->qs, &sum));
            scales[b] = cd_f16_to_f32(y->d);
        }
        sums[b] = sum;
    }
}

#include "templates/qdot_k23_impl.h"

void QDOT_FILL(cd_isa_ops *ops) {
    ops->quantize_act = QD_NAME(quantize_act);
    ops->qdecode[CD_Q4_0] = QD_NAME(decode_q4_0);
    ops->qdecode[CD_Q4_1] = QD_NAME(decode_q4_1);
    ops->qdecode[CD_Q8_0] = QD_NAME(decode_q8_0);
    ops->qdecode[CD_Q5_0] = QD_NAME(decode_q5_0);
    ops->qdecode[CD_Q5_1] = QD_NAME(decode_q5_1);
    ops->qdecode[CD_IQ4_NL] = QD_NAME(decode_iq4_nl);
    ops->qdecode[CD_MXFP4] = QD_NAME(decode_mxfp4);
    ops->qdecode[CD_Q4_K] = QD_NAME(decode_q4_K);
    ops->qdecode[CD_Q5_K] = QD_NAME(decode_q5_K);
    ops->qdecode[CD_Q6_K] = QD_NAME(decode_q6_K);
    ops->qdecode[CD_IQ4_XS] = QD_NAME(decode_iq4_xs);
    ops->qdot[CD_Q4_0] = QD_NAME(dot_q4_0);
    ops->qdot[CD_Q4_1] = QD_NAME(dot_q4_1);
    ops->qdot[CD_Q5_0] = QD_NAME(dot_q5_0);
    ops->qdot[CD_Q5_1] = QD_NAME(dot_q5_1);
    ops->qdot[CD_Q8_0] = QD_NAME(dot_q8_0);
    ops->qdot[CD_IQ4_NL] = QD_NAME(dot_iq4_nl);
    ops->qdot[CD_MXFP4] = QD_NAME(dot_mxfp4);
    ops->qdot[CD_Q4_K] = QD_NAME(dot_q4_K);
    ops->qdot[CD_Q5_K] = QD_NAME(dot_q5_K);
    ops->qdot[CD_Q6_K] = QD_NAME(dot_q6_K);
    ops->qdot[CD_IQ4_XS] = QD_NAME(dot_iq4_xs);
    QD_NAME(fill_k23)(ops);
}
