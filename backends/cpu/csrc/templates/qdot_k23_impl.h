/* Q2_K and Q3_K for templates/qdot_impl.h, which includes this file after its helpers: their dot products
 * with q8_K activations and their rows decoded to f32.
 *
 * Both keep 2-bit crumbs (Q3_K a third bit in hmask) in runs of 32 values, 4 runs to 32 bytes, and one
 * scale per group of 16 values. A run's dot_us lanes 0-3 sum its first group, lanes 4-7 its second, and
 * every lane fits in int16: two runs' lanes packed to int16 meet their four groups' scales in one
 * madd_epi16. A super-block's integer sum so takes 4 packs and 4 madds; Q2_K's mins and Q3_K's offset
 * of 4 go through the activations' bsums, and the float work is a multiply-add per super-block (two for
 * Q2_K: d and dmin). */

/* Sixteen group scales (bytes, -128..127) as int16: the even groups in the low 128-bit lane, the odd
 * ones in the high lane, as a run's two groups lie in dot_us's lanes. */
static inline __m256i QD_NAME(even_odd16)(__m128i s) {
    const __m128i order = _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
    return _mm256_cvtepi8_epi16(_mm_shuffle_epi8(s, order));
}

/* The scales of runs 2m and 2m + 1 where packs_epi32 puts their sums: groups 4m and 4m + 2 (four int16
 * each) in the low lane, 4m + 1 and 4m + 3 in the high one; in even_odd16's order both are entries 2m
 * and 2m + 1 of their lane. */
static inline __m256i QD_NAME(pair_scales)(__m256i eo, int m) {
    const long long lo = 0x0100010001000100LL + 0x0404040404040404LL * m, hi = lo + 0x0202020202020202LL;
    return _mm256_shuffle_epi8(eo, _mm256_set_epi64x(hi, lo, hi, lo));
}

/* The 8 int32 lanes of sum over the 16 groups of scale * sum(u * y), for the 8 runs' unsigned levels u
 * (< 8: a lane's 4 products stay within int16) and 256 activations y. */
static inline __m256i QD_NAME(k23_sum)(const __m256i u[8], const int8_t *y, __m256i eo) {
    __m256i sum = _mm256_setzero_si256();
    for (int m = 0; m < 4; m++) {
        const __m256i p0 = QD_NAME(dot_us)(u[2 * m], QD_NAME(load)(y + 64 * m));
        const __m256i p1 = QD_NAME(dot_us)(u[2 * m + 1], QD_NAME(load)(y + 64 * m + 32));
        sum = _mm256_add_epi32(sum, _mm256_madd_epi16(_mm256_packs_epi32(p0, p1), QD_NAME(pair_scales)(eo, m)));
    }
    return sum;
}

/* The crumbs of run r: bits 2 (r % 4) and 2 (r % 4) + 1 of the 32 bytes of its half. */
static inline __m256i QD_NAME(crumbs)(__m256i half, int r) {
    return _mm256_and_si256(_mm256_srli_epi16(half, 2 * (r % 4)), _mm256_set1_epi8(3));
}

/* Q3_K's high bits of run r (bit r of hmask's bytes) as 4 or 0. A 16-bit shift of at most 5 brings no
 * bit of the neighbouring byte to bit 2. */
static inline __m256i QD_NAME(high4)(__m256i hm, int r) {
    const __m256i b = r < 2 ? _mm256_slli_epi16(hm, 2 - r) : _mm256_srli_epi16(hm, r - 2);
    return _mm256_and_si256(b, _mm256_set1_epi8(4));
}

/* Q2_K's levels q (0..3) and Q3_K's q + 4 (0..7; the level is that - 4), run by run. */
static inline void QD_NAME(q2_levels)(const cd_block_q2_K *b, __m256i u[8]) {
    const __m256i h0 = QD_NAME(load)(b->qs), h1 = QD_NAME(load)(b->qs + 32);
    for (int r = 0; r < 8; r++) u[r] = QD_NAME(crumbs)(r < 4 ? h0 : h1, r);
}

static inline void QD_NAME(q3_levels)(const cd_block_q3_K *b, __m256i u[8]) {
    const __m256i h0 = QD_NAME(load)(b->qs), h1 = QD_NAME(load)(b->qs + 32), hm = QD_NAME(load)(b->hmask);
    for (int r = 0; r < 8; r++) u[r] = _mm256_or_si256(QD_NAME(crumbs)(r < 4 ? h0 : h1, r), QD_NAME(high4)(hm, r));
}

/* Q3_K's 16 scales as signed bytes (6-bit levels - 32). Group j's low 4 bits are a nibble of byte j % 8
 * (the low one for j < 8), its top 2 bits are bits 2 (j / 4) and up of byte 8 + j % 4: the 32-bit word of
 * bytes 8-11 shifted by 0, 2, 4 and 6 in the result's four words lines them up with groups 0-3, 4-7, 8-11
 * and 12-15. */
static inline __m128i QD_NAME(q3_scales)(const uint8_t s[12]) {
    uint32_t top;
    memcpy(&top, s + 8, 4);
    const __m128i nib = _mm_loadl_epi64((const __m128i *)s);
    const __m128i low = _mm_and_si128(_mm_unpacklo_epi64(nib, _mm_srli_epi16(nib, 4)), _mm_set1_epi8(0x0f));
    const __m128i high = _mm_srlv_epi32(_mm_set1_epi32((int)top), _mm_setr_epi32(0, 2, 4, 6));
    const __m128i levels = _mm_or_si128(low, _mm_slli_epi16(_mm_and_si128(high, _mm_set1_epi8(3)), 4));
    return _mm_sub_epi8(levels, _mm_set1_epi8(32));
}

static float QD_NAME(dot_q2_K)(int64_t n, const void *vw, const void *va) {
    const cd_block_q2_K *w = vw;
    const cd_block_q8_K *a = va;
    const __m128i low = _mm_set1_epi8(0x0f);
    __m256 acc = _mm256_setzero_ps(), mins = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / CD_QK_K; i++) {
        const __m128i packed = _mm_loadu_si128((const __m128i *)w[i].scales); /* scale | min << 4 */
        const __m256i eo = QD_NAME(even_odd16)(_mm_and_si128(packed, low));
        const __m256i mn = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(packed, 4), low));
        __m256i u[8];
        QD_NAME(q2_levels)(&w[i], u);
        const __m256i sum = QD_NAME(k23_sum)(u, a[i].qs, eo);
        const __m256i msum = _mm256_madd_epi16(mn, QD_NAME(load)(a[i].bsums));
        const float dy = a[i].d;
        acc = _mm256_fmadd_ps(_mm256_set1_ps(QD_NAME(h2f)(w[i].d) * dy), _mm256_cvtepi32_ps(sum), acc);
        mins = _mm256_fmadd_ps(_mm256_set1_ps(QD_NAME(h2f)(w[i].dmin) * dy), _mm256_cvtepi32_ps(msum), mins);
    }
    return QD_NAME(hsum)(_mm256_sub_ps(acc, mins));
}

static float QD_NAME(dot_q3_K)(int64_t n, const void *vw, const void *va) {
    const cd_block_q3_K *w = vw;
    const cd_block_q8_K *a = va;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / CD_QK_K; i++) {
        const __m128i sc = QD_NAME(q3_scales)(w[i].scales);
        __m256i u[8];
        QD_NAME(q3_levels)(&w[i], u);
        const __m256i sum = QD_NAME(k23_sum)(u, a[i].qs, QD_NAME(even_odd16)(sc));
        /* The levels are u - 4: take 4 * scale * bsum off each group. */
        const __m256i offset = _mm256_madd_epi16(_mm256_cvtepi8_epi16(sc), QD_NAME(load)(a[i].bsums));
        const __m256i isum = _mm256_sub_epi32(sum, _mm256_slli_epi32(offset, 2));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(QD_NAME(h2f)(w[i].d) * a[i].d), _mm256_cvtepi32_ps(isum), acc);
    }
    return QD_NAME(hsum)(acc);
}

/* The 16 groups' factors d * s from their bytes s (scales, or Q2_K's mins), rounded as the codec does. */
static inline void QD_NAME(group_scales)(__m128i s, float d, float out[16]) {
    const __m256 vd = _mm256_set1_ps(d);
    _mm256_storeu_ps(out, _mm256_mul_ps(vd, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(s))));
    _mm256_storeu_ps(out + 8, _mm256_mul_ps(vd, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(s, 8)))));
}

/* y[0..32) = q * dl - ml for run r's 32 levels q (signed bytes), groups 2r and 2r + 1. */
static inline void QD_NAME(store_run)(__m256i q, const float dl[16], const float ml[16], int r, float *y) {
    const __m128i halves[2] = {_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1)};
    for (int h = 0; h < 2; h++) {
        const __m256 d = _mm256_set1_ps(dl[2 * r + h]), m = _mm256_set1_ps(ml[2 * r + h]);
        const __m256 lo = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(halves[h]));
        const __m256 hi = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(halves[h], 8)));
        _mm256_storeu_ps(y + 16 * h, _mm256_fmsub_ps(lo, d, m));
        _mm256_storeu_ps(y + 16 * h + 8, _mm256_fmsub_ps(hi, d, m));
    }
}

static void QD_NAME(decode_q2_K)(const void *vb, float *y, int64_t n) {
    const cd_block_q2_K *b = vb;
    const __m128i low = _mm_set1_epi8(0x0f);
    for (int64_t i = 0; i < n / CD_QK_K; i++, y += CD_QK_K) {
        const __m128i packed = _mm_loadu_si128((const __m128i *)b[i].scales);
        float dl[16], ml[16];
        QD_NAME(group_scales)(_mm_and_si128(packed, low), QD_NAME(h2f)(b[i].d), dl);
        QD_NAME(group_scales)(_mm_and_si128(_mm_srli_epi16(packed, 4), low), QD_NAME(h2f)(b[i].dmin), ml);
        __m256i u[8];
        QD_NAME(q2_levels)(&b[i], u);
        for (int r = 0; r < 8; r++) QD_NAME(store_run)(u[r], dl, ml, r, y + 32 * r);
    }
}

static void QD_NAME(decode_q3_K)(const void *vb, float *y, int64_t n) {
    const cd_block_q3_K *b = vb;
    const float zero[16] = {0};
    for (int64_t i = 0; i < n / CD_QK_K; i++, y += CD_QK_K) {
        float dl[16];
        QD_NAME(group_scales)(QD_NAME(q3_scales)(b[i].scales), QD_NAME(h2f)(b[i].d), dl);
        __m256i u[8];
        QD_NAME(q3_levels)(&b[i], u);
        for (int r = 0; r < 8; r++)
            QD_NAME(store_run)(_mm256_sub_epi8(u[r], _mm256_set1_epi8(4)), dl, zero, r, y + 32 * r);
    }
}

static void QD_NAME(fill_k23)(cd_isa_ops *ops) {
    ops->qdot[CD_Q2_K] = QD_NAME(dot_q2_K);
    ops->qdot[CD_Q3_K] = QD_NAME(dot_q3_K);
    ops->qdecode[CD_Q2_K] = QD_NAME(decode_q2_K);
    ops->qdecode[CD_Q3_K] = QD_NAME(decode_q3_K);
}
