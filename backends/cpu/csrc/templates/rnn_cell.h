/* The work items of the fused recurrent layers (kernels/rnn.c), written once
 * over the compute type and included once per type. The including file
 * defines
 *
 *   CELL_T     the compute type (float or double)
 *   CELL_SFX   the suffix of the functions it defines (_f32, _f64)
 *
 * An item is one block of U hidden units at one step: its gates' products
 * with the packed recurrent weights land in tiles of B rows x U columns (the
 * columns past the block's last unit stay zero), the step's input
 * projections and biases are added, and the cell's pointwise update writes
 * the block's units of the next state and of the output. Rows whose sequence
 * has ended keep their state and output zeros. */
#define CELL_CAT_(a, b) a##b
#define CELL_CAT(a, b) CELL_CAT_(a, b)
#define FN(name) CELL_CAT(name, CELL_SFX)
#define T_ CELL_T

/* tile[r][j] (+)= the projection of gate slot `slot` for unit u0 + j of row r
 * at step s, plus its bias, over the rows active at step s; `assign` starts
 * from them instead of adding. */
static void FN(add_inputs)(const rnn_ctx *x, int64_t s, int slot, const unit_block *ub, T_ *tile, int assign) {
    const T_ *bias = (const T_ *)x->bias + slot * x->H + ub->u0;
    const T_ *in = (const T_ *)projections(x, ub->index, s, slot);
    for (int64_t r = 0; r < x->B; r++) {
        if (time_of(x, s, r) < 0) continue;
        const T_ *v = in + r * x->G * x->U;
        T_ *dst = tile + r * x->U;
        if (assign) {
#pragma omp simd
            for (int64_t j = 0; j < ub->n; j++) dst[j] = v[j] + bias[j];
        } else {
#pragma omp simd
            for (int64_t j = 0; j < ub->n; j++) dst[j] += v[j] + bias[j];
        }
    }
}

/* The tiles of the count gates stored from `first` on, in storage order (tile q
 * at tiles + q * B * U): A @ the block's panels of those gates, plus the inputs. */
static void FN(gate_tiles)(const rnn_ctx *x, int64_t s, const unit_block *ub, const void *apack, int first, int count,
                           T_ *tiles) {
    const int64_t n = x->B * x->U;
    x->pan->product(x->ct, x->B, x->H, apack, hpanel(x, ub->index, first), count, (int)ub->n, tiles, x->U, n, 0);
    for (int q = 0; q < count; q++) FN(add_inputs)(x, s, first + q, ub, tiles + q * n, 0);
}

static void FN(clip)(const rnn_ctx *x, T_ *v, int64_t n) {
    if (x->clip <= 0) return;
    const T_ hi = (T_)x->clip, lo = -hi;
    for (int64_t i = 0; i < n; i++) v[i] = v[i] < lo ? lo : v[i] > hi ? hi : v[i];
}

/* The block's units of h at step s: from `hn` (B x U, rows U apart) for the
 * active rows, unchanged for the others; and the output row of each. */
static void FN(finish)(const rnn_ctx *x, int64_t s, const unit_block *ub, const T_ *hn) {
    const T_ *hp = (const T_ *)x->h[s & 1];
    T_ *h = (T_ *)x->h[(s + 1) & 1];
    for (int64_t r = 0; r < x->B; r++) {
        const int64_t t = time_of(x, s, r), at = r * x->H + ub->u0;
        if (t >= 0) memcpy(h + at, hn + r * x->U, (size_t)ub->n * sizeof(T_));
        else memcpy(h + at, hp + at, (size_t)ub->n * sizeof(T_));
        write_output(x, t >= 0 ? t : s, r, ub, t >= 0 ? h + at : NULL);
    }
}

/* LSTM: i, f, g, o; c = f * c + i * g, h = o * tanh(c). ONNX's peepholes add
 * p_i * c and p_f * c to i and f, p_o * c_new to o; input_forget couples
 * f = 1 - i. */
static void FN(lstm_item)(const rnn_ctx *x, int64_t s, const unit_block *ub, const void *apack, T_ *tiles) {
    const int64_t B = x->B, H = x->H, U = x->U, n = B * U;
    T_ *gi = tiles + x->gate[0] * n, *gf = tiles + x->gate[1] * n, *gg = tiles + x->gate[2] * n;
    T_ *go = tiles + x->gate[3] * n, *tc = tiles + 4 * n;
    FN(gate_tiles)(x, s, ub, apack, 0, 4, tiles);
    T_ *c = (T_ *)x->c;
    const T_ *peep = (const T_ *)x->peep; /* (i, o, f), H each */
    if (peep)
        for (int64_t r = 0; r < B; r++)
            for (int64_t j = 0; j < ub->n; j++) {
                const T_ cp = c[r * H + ub->u0 + j];
                gi[r * U + j] += peep[ub->u0 + j] * cp;
                gf[r * U + j] += peep[2 * H + ub->u0 + j] * cp;
            }
    FN(clip)(x, gi, n);
    FN(clip)(x, gf, n);
    FN(clip)(x, gg, n);
    x->sigmoid(n, gi, gi);
    if (!x->input_forget) x->sigmoid(n, gf, gf);
    x->tanh_(n, gg, gg);
    for (int64_t r = 0; r < B; r++) {
        if (time_of(x, s, r) < 0) continue;
        T_ *cr = c + r * H + ub->u0;
        const T_ *pi = gi + r * U, *pf = gf + r * U, *pg = gg + r * U;
        T_ *pc = tc + r * U;
        if (x->input_forget) {
#pragma omp simd
            for (int64_t j = 0; j < ub->n; j++) pc[j] = cr[j] = (1 - pi[j]) * cr[j] + pi[j] * pg[j];
        } else {
#pragma omp simd
            for (int64_t j = 0; j < ub->n; j++) pc[j] = cr[j] = pf[j] * cr[j] + pi[j] * pg[j];
        }
        if (peep)
            for (int64_t j = 0; j < ub->n; j++) go[r * U + j] += peep[H + ub->u0 + j] * pc[j];
    }
    FN(clip)(x, go, n);
    x->sigmoid(n, go, go);
    x->tanh_(n, tc, tc);
#pragma omp simd
    for (int64_t k = 0; k < n; k++) tc[k] *= go[k];
    FN(finish)(x, s, ub, tc);
}

/* GRU's reset and update gates r, z (sigmoid) of the block; with the reset
 * applied after the product (linear_before_reset: PyTorch's GRU) the
 * candidate follows in the same item, n = tanh(x_n + r * (h @ W_n^T + b_hn)).
 * Without it (ONNX's default), r * h of every unit is needed before the
 * candidate's product: this item stores r * h and z for gru_candidate. */
static void FN(gru_item)(const rnn_ctx *x, int64_t s, const unit_block *ub, const void *apack, T_ *tiles) {
    const int64_t B = x->B, H = x->H, U = x->U, n = B * U;
    /* r and z are the first two slots in either order, the candidate the third */
    T_ *gr = tiles + x->gate[0] * n, *gz = tiles + x->gate[1] * n, *gn = tiles + 2 * n, *xn = tiles + 3 * n;
    FN(gate_tiles)(x, s, ub, apack, 0, 2, tiles);
    FN(clip)(x, tiles, 2 * n);
    x->sigmoid(2 * n, tiles, tiles);
    const T_ *hp = (const T_ *)x->h[s & 1];
    if (x->two_phase) {
        T_ *rh = (T_ *)x->rh, *z = (T_ *)x->z;
        for (int64_t r = 0; r < B; r++)
            for (int64_t j = 0; j < ub->n; j++) {
                const int64_t at = r * H + ub->u0 + j;
                rh[at] = gr[r * U + j] * hp[at];
                z[at] = gz[r * U + j];
            }
        return;
    }
    x->pan->product(x->ct, B, H, apack, hpanel(x, ub->index, 2), 1, (int)ub->n, gn, U, n, 0);
    FN(add_inputs)(x, s, 2, ub, xn, 1);
    const T_ *bn = (const T_ *)x->bias_hn + ub->u0;
    for (int64_t r = 0; r < B; r++)
        for (int64_t j = 0; j < ub->n; j++) {
            const int64_t k = r * U + j;
            gn[k] = xn[k] + gr[k] * (gn[k] + bn[j]);
        }
    FN(clip)(x, gn, n);
    x->tanh_(n, gn, gn);
    for (int64_t r = 0; r < B; r++)
        for (int64_t j = 0; j < ub->n; j++) {
            const int64_t k = r * U + j;
            gn[k] += gz[k] * (hp[r * H + ub->u0 + j] - gn[k]); /* (1 - z) n + z h */
        }
    FN(finish)(x, s, ub, gn);
}

/* The second phase of a GRU step without linear_before_reset: n = tanh(x_n +
 * (r * h) @ W_n^T + b_hn) with apack holding r * h, then h = (1 - z) n + z h. */
static void FN(gru_candidate)(const rnn_ctx *x, int64_t s, const unit_block *ub, const void *apack, T_ *tiles) {
    const int64_t B = x->B, H = x->H, U = x->U, n = B * U;
    T_ *gn = tiles, *xn = tiles + n;
    x->pan->product(x->ct, B, H, apack, hpanel(x, ub->index, 2), 1, (int)ub->n, gn, U, n, 0);
    FN(add_inputs)(x, s, 2, ub, xn, 1);
    const T_ *bn = (const T_ *)x->bias_hn + ub->u0, *hp = (const T_ *)x->h[s & 1], *z = (const T_ *)x->z;
    for (int64_t r = 0; r < B; r++)
        for (int64_t j = 0; j < ub->n; j++) gn[r * U + j] += xn[r * U + j] + bn[j];
    FN(clip)(x, gn, n);
    x->tanh_(n, gn, gn);
    for (int64_t r = 0; r < B; r++)
        for (int64_t j = 0; j < ub->n; j++) {
            const int64_t k = r * U + j, at = r * H + ub->u0 + j;
            gn[k] += z[at] * (hp[at] - gn[k]);
        }
    FN(finish)(x, s, ub, gn);
}

/* Runs one step item of the call's cell; stage 1 is the candidate phase of a two-phase GRU step. */
static void FN(run_step)(const rnn_ctx *x, int64_t s, int stage, const unit_block *ub, const void *apack, void *tiles) {
    if (x->cell == CELL_LSTM) FN(lstm_item)(x, s, ub, apack, tiles);
    else if (stage == 0) FN(gru_item)(x, s, ub, apack, tiles);
    else FN(gru_candidate)(x, s, ub, apack, tiles);
}

#undef CELL_CAT_
#undef CELL_CAT
#undef FN
#undef T_
#undef CELL_T
#undef CELL_SFX
