/* One block of queries of the fused attention (kernels/attention.c), for one
 * compute type. The including file defines
 *
 *   ATTEND_T              the compute type (float, double), which names the
 *                         functions: attend_float...
 *   ATTEND_GEMM_DT        its dtype code for the GEMM (CD_f32, CD_f64)
 *   ATTEND_EXP_ROW(x, n)  x[j] = exp(x[j]) for j < n, in place
 *   ATTEND_DOT_ROWS       1 when T is float: few query rows take cd_ops.dot_rows_f32 and axpy_rows_f32
 *
 * and what attention.c defines before it: sdpa_ctx, operand, block(),
 * batch_offsets(), BQ and BK. */
#define T ATTEND_T
#define ATTEND_CAT_(a, b) a##_##b
#define ATTEND_CAT(a, b) ATTEND_CAT_(a, b)
#define ATTEND_NAME(name) ATTEND_CAT(name, ATTEND_T)

static void ATTEND_NAME(exp_row)(T *x, int64_t n) { ATTEND_EXP_ROW(x, n); }

/* Scales row r of a score block and applies the mask and causality. */
static void ATTEND_NAME(mask_row)(const sdpa_ctx *c, int64_t moff, int64_t i, int64_t s0, int64_t bk, T *srow,
                                  T *tmp) {
    const T scale = (T)c->scale;
    for (int64_t j = 0; j < bk; j++) srow[j] *= scale;
    if (c->has_mask) {
        const int64_t rs = c->st[M][c->nb], cs = c->st[M][c->nb + 1];
        const char *m = c->ptr[M] + (moff + i * rs + s0 * cs) * cd_dtype_size(c->mdtype);
        if (c->mdtype == CD_u8) {
            for (int64_t j = 0; j < bk; j++)
                if (!((const uint8_t *)m)[j * cs]) srow[j] = -INFINITY;
        } else {
            cd_load_ct(c->mdtype, m, bk, cs, tmp);
            for (int64_t j = 0; j < bk; j++) srow[j] += tmp[j];
        }
    }
    if (c->causal)
        for (int64_t j = CD_MAX(0, i + 1 - s0); j < bk; j++) srow[j] = -INFINITY;
}

/* sc (rows x bk, leading dim BK) = q @ k^T. A few rows of f32 (a decoding step's query heads) take dot
 * products with the key rows as they lie; the GEMM would first transpose the key block into its panels. */
static int ATTEND_NAME(scores)(int64_t rows, int64_t bk, int64_t E, operand q, operand k, T *sc) {
    if (ATTEND_DOT_ROWS && rows <= 4 && q.cs == 1 && q.rs == E && k.cs == 1 && k.rs == E) {
        for (int64_t j = 0; j < bk; j += 4)
            cd_ops.dot_rows_f32((const float *)k.p + j * E, (int)CD_MIN(4, bk - j), q.p, rows, E, (float *)sc + j, BK);
        return 0;
    }
    return cd_ops.gemm(ATTEND_GEMM_DT, rows, bk, E, q.p, q.rs, q.cs, k.p, k.cs, k.rs, sc, BK);
}

/* acc (rows x Ev) += p (rows x bk, leading dim BK) @ v. A few rows of f32 (a decoding step's query heads)
 * add the value rows, scaled, as they lie (cd_ops.axpy_rows_f32); the GEMM would first pack the value
 * block into its panels, which costs more than the product at this size. */
static int ATTEND_NAME(values)(int64_t rows, int64_t bk, int64_t Ev, const T *p, operand v, T *pv, T *acc) {
    if (ATTEND_DOT_ROWS && rows <= 4 && v.cs == 1) {
        cd_ops.axpy_rows_f32((const float *)p, BK, rows, bk, v.p, v.rs, Ev, (float *)acc);
        return 0;
    }
    if (cd_ops.gemm(ATTEND_GEMM_DT, rows, Ev, bk, p, BK, 1, v.p, v.rs, v.cs, pv, Ev)) return -1;
    for (int64_t e = 0; e < rows * Ev; e++) acc[e] += pv[e];
    return 0;
}

/* Rows [i0, i0 + rows) of batch entry bi. ws holds the block buffers. */
static int ATTEND_NAME(attend)(const sdpa_ctx *c, int64_t bi, int64_t i0, int64_t rows, T *ws) {
    const int64_t E = c->E, Ev = c->Ev;
    T *sc = ws, *acc = sc + BQ * BK, *pv = acc + BQ * Ev, *mx = pv + BQ * Ev, *sum = mx + BQ;
    T *tmp = sum + BQ;
    float *conv = (float *)(tmp + BK); /* f16/bf16 blocks: Q, then K or V */
    int64_t off[4];
    batch_offsets(c, bi, off);
    const operand q = block(c, Q, off[Q], i0, rows, E, conv);
    float *kv_buf = conv + BQ * E;
    for (int64_t r = 0; r < rows; r++) mx[r] = -INFINITY, sum[r] = 0;
    memset(acc, 0, (size_t)(rows * Ev) * sizeof(T));
    const int64_t s_end = c->causal ? CD_MIN(c->S, i0 + rows) : c->S;
    for (int64_t s0 = 0; s0 < s_end; s0 += BK) {
        const int64_t bk = CD_MIN(BK, s_end - s0);
        const operand kt = block(c, K, off[K], s0, bk, E, kv_buf); /* read as k^T */
        if (ATTEND_NAME(scores)(rows, bk, E, q, kt, sc)) return -1;
        for (int64_t r = 0; r < rows; r++) {
            T *srow = sc + r * BK, *arow = acc + r * Ev;
            ATTEND_NAME(mask_row)(c, off[M], i0 + r, s0, bk, srow, tmp);
            T m_new = mx[r];
            for (int64_t j = 0; j < bk; j++) m_new = srow[j] > m_new || srow[j] != srow[j] ? srow[j] : m_new;
            if (m_new == -INFINITY) { /* nothing visible yet */
                memset(srow, 0, (size_t)bk * sizeof(T));
                continue;
            }
            const T alpha = (T)exp((double)(mx[r] - m_new));
            for (int64_t j = 0; j < bk; j++) srow[j] -= m_new;
            ATTEND_NAME(exp_row)(srow, bk);
            T s = 0;
            for (int64_t j = 0; j < bk; j++) s += srow[j];
            sum[r] = sum[r] * alpha + s;
            mx[r] = m_new;
            if (alpha != 1)
                for (int64_t e = 0; e < Ev; e++) arow[e] *= alpha;
        }
        const operand v = block(c, V, off[V], s0, bk, Ev, kv_buf);
        if (ATTEND_NAME(values)(rows, bk, Ev, sc, v, pv, acc)) return -1;
    }
    const int isz = cd_dtype_size(c->dtype);
    for (int64_t r = 0; r < rows; r++) {
        T *arow = acc + r * Ev, inv = sum[r] == 0 ? 0 : 1 / sum[r];
        for (int64_t e = 0; e < Ev; e++) arow[e] *= inv;
        cd_store_ct(c->dtype, arow, Ev, c->out + ((bi * c->L + i0 + r) * Ev) * isz);
    }
    return 0;
}

#undef T
#undef ATTEND_CAT_
#undef ATTEND_CAT
#undef ATTEND_NAME
#undef ATTEND_T
#undef ATTEND_GEMM_DT
#undef ATTEND_EXP_ROW
#undef ATTEND_DOT_ROWS
