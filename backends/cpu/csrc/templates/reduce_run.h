/* The fold of one strided run of a reduction (kernels/reduce.c) for one
 * dtype: run_<dtype>(op, x, n, s, base, acc) folds n elements (stride s, the
 * first at flat index base) into acc. The including file defines REDUCE_DT,
 * the dtype (u8, ..., f64), and what reduce.c defines before it: acc_t and
 * is_maxop(). Floats accumulate in double, integers in 64 bits. */
#define REDUCE_CAT_(a, b) a##b
#define REDUCE_CAT(a, b) REDUCE_CAT_(a, b)
#define T REDUCE_CAT(CD_T_, REDUCE_DT)
#define LD(v) REDUCE_CAT(CD_LD_, REDUCE_DT)(v)
#define DT REDUCE_CAT(CD_, REDUCE_DT)
#define FLOAT (DT == CD_bf16 || DT == CD_f16 || DT == CD_f32 || DT == CD_f64)

static void REDUCE_CAT(run_, REDUCE_DT)(int op, const T *x, int64_t n, int64_t s, int64_t base, acc_t *a) {
    switch (op) {
    case CD_REDUCE_sum:
        if (FLOAT) {
            double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
            int64_t i = 0;
            for (; i + 4 <= n; i += 4) {
                s0 += (double)LD(x[i * s]);
                s1 += (double)LD(x[(i + 1) * s]);
                s2 += (double)LD(x[(i + 2) * s]);
                s3 += (double)LD(x[(i + 3) * s]);
            }
            for (; i < n; i++) s0 += (double)LD(x[i * s]);
            a->f += (s0 + s1) + (s2 + s3);
        } else {
            uint64_t t = 0;
            for (int64_t i = 0; i < n; i++) t += (uint64_t)(int64_t)LD(x[i * s]);
            a->i = (int64_t)((uint64_t)a->i + t);
        }
        return;
    case CD_REDUCE_prod:
        for (int64_t i = 0; i < n; i++) {
            if (FLOAT) a->f *= (double)LD(x[i * s]);
            else a->i = (int64_t)((uint64_t)a->i * (uint64_t)(int64_t)LD(x[i * s]));
        }
        return;
    default: break;
    }
    const int mx = is_maxop(op);
    for (int64_t i = 0; i < n; i++) {
        if (FLOAT) {
            double v = (double)LD(x[i * s]);
            if (!a->has || (a->f == a->f && (v != v || (mx ? v > a->f : v < a->f)))) {
                a->f = v;
                a->idx = base + i;
                a->has = 1;
            }
        } else {
            int64_t v = (int64_t)LD(x[i * s]);
            if (!a->has || (mx ? v > a->i : v < a->i)) {
                a->i = v;
                a->idx = base + i;
                a->has = 1;
            }
        }
    }
}

#undef REDUCE_CAT_
#undef REDUCE_CAT
#undef T
#undef LD
#undef DT
#undef FLOAT
#undef REDUCE_DT
