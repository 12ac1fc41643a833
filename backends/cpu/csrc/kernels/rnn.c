/* Fused recurrent layers: one LSTM or GRU layer in one direction over every
 * time step in one call (the lstm_layer and gru_layer rows of the contract).
 *
 * At step s the gates are x[t] @ W_ih^T + biases + h @ W_hh^T, then the
 * cell's pointwise update. Only the h @ W_hh^T part is serial in time. Both
 * weights are packed once per call into the GEMM's panels (cd_ops.panels,
 * the instruction set's microkernel), by blocks of U hidden units, U the
 * panel width: block b's panels hold its units' rows of every gate, so a
 * work item (step, block) computes its own gates and finishes its units'
 * update without waiting for another block.
 *
 * The input projections are computed a chunk of steps at a time (C steps of
 * B rows, at most about half a MiB of them), block by block, just before the
 * chunk's steps use them: each block's projections lie together, where the
 * steps read them from the cache. (Projecting every step first, as one large
 * product, sends them to memory and back: the rows a block reads at a step
 * lie 4H apart, and fetching them back cost 15% of the call at batch 16.)
 * When x is in the compute type with a step's rows evenly spaced, a chunk's
 * rows are packed from x in place, in time order (no gathered copy).
 *
 * An f32 LSTM without sequence lengths adds each step's recurrent product to
 * the projections in place and finishes its cells in one vector pass
 * (cd_ops.lstm_step_f32: biases, gates, c and h in registers); other cases
 * go through gate tiles and the portable loops of templates/rnn_cell.h.
 *
 * The call is a sequence of phases of one item per block: packing; then per
 * chunk, its projection and its steps. A step is one phase; ONNX's GRU
 * without linear_before_reset needs r * h of every unit before the
 * candidate's product, so its steps take two.
 *
 * Threads: one pool job for the whole call. Participant p owns a fixed range
 * of blocks, whose panels it packed and which stay in its core's caches from
 * step to step; it runs its items of a phase once the previous phase is
 * complete, then takes any item of that phase still unclaimed (the pool may
 * start a participant late, or only after another has returned), so no one
 * ever waits for a participant that is not running. Every item does the same
 * operations whoever runs it, so results do not depend on the thread count.
 * Nothing is allocated after the setup. */
#define _GNU_SOURCE
#include <sched.h>
#include <stdatomic.h>

#include "runtime/internal.h"
#include "runtime/isa.h"

enum { CELL_LSTM, CELL_GRU };
enum { MAX_GATES = 4 };
/* A block's claim, on a cache line of its own: the thread that owns the block takes it at every phase
 * without pulling the line from another core. */
typedef struct {
    _Alignas(64) atomic_llong phase;
} claim_slot;

/* Bytes of a chunk's projections (and of its gathered inputs) the chunk length aims at. */
#define CHUNK_BYTES (1 << 19)

typedef struct {
    int cell, dtype, ct, csz;       /* the cell, storage dtype, compute dtype and its size */
    int64_t T, B, H, I, G;          /* steps, batch, hidden units, input features, gates */
    int64_t U, nblocks, steps;      /* units per block, blocks, steps run (the longest sequence) */
    int64_t C, per_chunk;           /* steps per chunk, phases per chunk (its projection and steps) */
    int64_t xs[3], wis[2], whs[2];  /* strides: x (time, batch, feature), W_ih and W_hh (row, column) */
    int reverse, two_phase, input_forget;
    int fused;                      /* LSTM steps through cd_ops.lstm_step_f32 (lstm_fused) */
    int in_place;                   /* x in compute type, a step's rows evenly spaced: packed from x directly */
    double clip;                    /* > 0: gate inputs are clipped to [-clip, clip] */
    int gate[MAX_GATES];            /* the storage slot of i, f, g, o (LSTM) or r, z, n (GRU) */
    const char *x, *w_ih, *w_hh;
    const int64_t *lens;            /* sequence lengths, or NULL */
    char *out;
    cd_unary_fn sigmoid, tanh_;
    const cd_panel_ops *pan;
    /* compute-type buffers */
    char *hpanels, *ipanels;        /* W_hh and W_ih packed, G panels a block */
    char *xwc;                      /* a chunk's projections, block by block: (C B rows) x (G U) */
    char *bias, *bias_hn, *peep, *h[2], *c, *rh, *z;
    char *per;                      /* per participant: packed h, the chunk's inputs gathered and packed, tiles */
    int64_t per_bytes, apack_bytes, xrows_bytes, xpack_bytes;
    int64_t participants;
    atomic_llong done;              /* items finished, all phases */
    claim_slot *claimed;            /* per block: the last phase whose item was taken */
} rnn_ctx;

/* The units of one block: index, first unit, count. */
typedef struct {
    int64_t index, u0, n;
} unit_block;

/* The time index row r processes at step s, or -1 when its sequence has ended. */
static inline int64_t time_of(const rnn_ctx *x, int64_t s, int64_t r) {
    const int64_t len = x->lens ? x->lens[r] : x->T;
    if (s >= len) return -1;
    return x->reverse ? len - 1 - s : s;
}

static inline const void *hpanel(const rnn_ctx *x, int64_t block, int slot) {
    return x->hpanels + (block * x->G + slot) * x->H * x->U * x->csz;
}

static inline const void *ipanel(const rnn_ctx *x, int64_t block, int slot) {
    return x->ipanels + (block * x->G + slot) * x->I * x->U * x->csz;
}

/* Where step s lies in its chunk's rows: in step order, or in time order when the chunk's inputs are
 * packed in place from x (a reverse layer's steps then run from the chunk's last rows up). */
static inline int64_t chunk_step(const rnn_ctx *x, int64_t s) {
    if (!x->in_place || !x->reverse) return s % x->C;
    const int64_t s0 = s - s % x->C;
    return CD_MIN(x->C, x->steps - s0) - 1 - s % x->C;
}

/* Block b's projections of gate slot `slot` at step s: row r at + r * G * U. */
static inline char *projections(const rnn_ctx *x, int64_t block, int64_t s, int slot) {
    return x->xwc + ((block * x->C + chunk_step(x, s)) * x->B * x->G * x->U + slot * x->U) * x->csz;
}

/* y[t, r, the block's units] = src (compute type), or zeros when src is NULL. */
static void write_output(const rnn_ctx *x, int64_t t, int64_t r, const unit_block *ub, const void *src) {
    const int isz = cd_dtype_size(x->dtype);
    char *dst = x->out + ((t * x->B + r) * x->H + ub->u0) * isz;
    if (src) cd_store_ct(x->dtype, src, ub->n, dst);
    else memset(dst, 0, (size_t)(ub->n * isz));
}

#define CELL_T float
#define CELL_SFX _f32
#include "templates/rnn_cell.h"
#define CELL_T double
#define CELL_SFX _f64
#include "templates/rnn_cell.h"

/* An LSTM item in f32 with every row active (no sequence lengths): the recurrent product is added to
 * the block's input projections in place, and one vector pass makes the cells' update and writes h
 * and the output (no tiles, no separate passes per gate). */
static void lstm_fused(const rnn_ctx *x, int64_t s, const unit_block *ub, const void *apack) {
    const int64_t H = x->H, U = x->U, t = x->reverse ? x->T - 1 - s : s;
    float *pre = (float *)projections(x, ub->index, s, 0);
    x->pan->product(CD_f32, x->B, H, apack, hpanel(x, ub->index, 0), 4, (int)ub->n, pre, x->G * U, U, 1);
    const float *bias = (const float *)x->bias + ub->u0, *peep = (const float *)x->peep; /* i, o, f */
    cd_lstm_step st = {.rows = x->B, .n = ub->n, .ldp = x->G * U, .ld = H, .c = (float *)x->c + ub->u0,
                       .h = (float *)x->h[(s + 1) & 1] + ub->u0, .y = (float *)x->out + t * x->B * H + ub->u0,
                       .clip = (float)x->clip, .input_forget = x->input_forget};
    for (int k = 0; k < 4; k++) st.pre[k] = pre + x->gate[k] * U, st.bias[k] = bias + x->gate[k] * H;
    if (peep) st.peep[0] = peep + ub->u0, st.peep[1] = peep + 2 * H + ub->u0, st.peep[2] = peep + H + ub->u0;
    cd_ops.lstm_step_f32(&st);
}

/* ---- scheduling ---------------------------------------------------------------------- */
static inline void relax(int64_t *spins) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
    if (++*spins % 1024 == 0) sched_yield(); /* more threads than cores: let the one we wait for run */
}

static inline void wait_for(rnn_ctx *x, int64_t target) {
    int64_t spins = 0;
    while (atomic_load_explicit(&x->done, memory_order_acquire) < target) relax(&spins);
}

static inline int claim(rnn_ctx *x, int64_t phase, int64_t block) {
    long long expected = phase - 1;
    return atomic_compare_exchange_strong_explicit(&x->claimed[block].phase, &expected, phase, memory_order_relaxed,
                                                   memory_order_relaxed);
}

/* Block b's weights packed: G panels of W_hh (H deep) and of W_ih (I deep). */
static void pack_weights(const rnn_ctx *x, const unit_block *ub) {
    const int isz = cd_dtype_size(x->dtype);
    for (int g = 0; g < x->G; g++) {
        const int64_t row = g * x->H + ub->u0;
        x->pan->pack_b(x->dtype, x->H, ub->n, x->w_hh + row * x->whs[0] * isz, x->whs[1], x->whs[0],
                       (void *)hpanel(x, ub->index, g));
        x->pan->pack_b(x->dtype, x->I, ub->n, x->w_ih + row * x->wis[0] * isz, x->wis[1], x->wis[0],
                       (void *)ipanel(x, ub->index, g));
    }
}

/* The rows (step, batch entry) of the chunk starting at step s0, gathered from x in compute type (zeros for
 * rows whose sequence has ended) and packed for the projection product; returns their number. */
static int64_t pack_inputs(const rnn_ctx *x, int64_t s0, char *rows, char *packed) {
    const int isz = cd_dtype_size(x->dtype);
    const int64_t n = CD_MIN(x->C, x->steps - s0) * x->B;
    if (x->in_place) { /* the chunk's times form one run of rows of x */
        const int64_t t0 = x->reverse ? x->T - s0 - n / x->B : s0;
        x->pan->pack_a(x->ct, n, x->I, x->x + t0 * x->xs[0] * isz, x->B == 1 ? x->xs[0] : x->xs[1], packed);
        return n;
    }
    for (int64_t k = 0; k < n; k++) {
        const int64_t t = time_of(x, s0 + k / x->B, k % x->B);
        char *dst = rows + k * x->I * x->csz;
        if (t < 0) memset(dst, 0, (size_t)(x->I * x->csz));
        else cd_load_ct(x->dtype, x->x + (t * x->xs[0] + k % x->B * x->xs[1]) * isz, x->I, x->xs[2], dst);
    }
    x->pan->pack_a(x->ct, n, x->I, rows, x->I, packed);
    return n;
}

/* A participant's scratch, and which phase's A it holds packed. */
typedef struct {
    char *apack, *xrows, *xpack, *tiles;
    int64_t packed_h, packed_x; /* the phase whose h (or r * h), the chunk whose inputs are packed */
    int64_t xrows_n;
} scratch;

/* Phase 1 packs block b's weights; then chunk by chunk, its projection and its steps (each
 * phases_per_step phases). */
static void run_item(rnn_ctx *x, int64_t phase, int64_t block, scratch *m) {
    unit_block ub = {block, block * x->U, CD_MIN(x->U, x->H - block * x->U)};
    const int64_t pps = x->two_phase ? 2 : 1, chunk = (phase - 2) / x->per_chunk, k = (phase - 2) % x->per_chunk;
    if (phase == 1) {
        pack_weights(x, &ub);
    } else if (k == 0) { /* the chunk's projections of the block's units: (C B rows) x (G U) */
        if (m->packed_x != chunk) {
            m->xrows_n = pack_inputs(x, chunk * x->C, m->xrows, m->xpack);
            m->packed_x = chunk;
        }
        x->pan->product(x->ct, m->xrows_n, x->I, m->xpack, ipanel(x, block, 0), (int)x->G, (int)ub.n,
                        x->xwc + block * x->C * x->B * x->G * x->U * x->csz, x->G * x->U, x->U, 0);
    } else {
        const int64_t s = chunk * x->C + (k - 1) / pps;
        const int stage = (int)((k - 1) % pps);
        if (m->packed_h != phase) { /* this participant's first item of the phase: A = h, or r * h */
            x->pan->pack_a(x->ct, x->B, x->H, stage ? x->rh : x->h[s & 1], x->H, m->apack);
            m->packed_h = phase;
        }
        if (x->fused) lstm_fused(x, s, &ub, m->apack);
        else if (x->ct == CD_f64) run_step_f64(x, s, stage, &ub, m->apack, m->tiles);
        else run_step_f32(x, s, stage, &ub, m->apack, m->tiles);
    }
}

static int participant(void *vctx, int64_t p, int64_t end) {
    CD_UNUSED(end);
    rnn_ctx *x = vctx;
    char *mine = x->per + p * x->per_bytes;
    scratch m = {mine, mine + x->apack_bytes, mine + x->apack_bytes + x->xrows_bytes,
                 mine + x->apack_bytes + x->xrows_bytes + x->xpack_bytes, -1, -1, 0};
    const int64_t lo = x->nblocks * p / x->participants, hi = x->nblocks * (p + 1) / x->participants;
    const int64_t chunks = (x->steps + x->C - 1) / x->C, nphases = 1 + chunks + x->steps * (x->two_phase ? 2 : 1);
    /* A participant starting late skips the phases already complete. */
    int64_t phase = atomic_load_explicit(&x->done, memory_order_acquire) / x->nblocks + 1;
    for (; phase <= nphases; phase++) {
        wait_for(x, (phase - 1) * x->nblocks);
        int64_t ran = 0;
        for (int64_t b = lo; b < hi; b++)
            if (claim(x, phase, b)) run_item(x, phase, b, &m), ran++;
        for (int64_t b = x->nblocks - 1; b >= 0; b--) /* others' items nobody has taken yet */
            if ((b < lo || b >= hi) && claim(x, phase, b)) run_item(x, phase, b, &m), ran++;
        if (ran) atomic_fetch_add_explicit(&x->done, ran, memory_order_release); /* once a phase: one shared line */
    }
    return 0;
}

/* ---- setup ----------------------------------------------------------------------------- */
static int64_t round64(int64_t n) { return (n + 63) / 64 * 64; }

/* n elements of dtype at src (stride s) into dst (compute type), or zeros when src is NULL. */
static void load_or_zero(const rnn_ctx *x, const void *src, int64_t n, int64_t s, char *dst) {
    if (src) cd_load_ct(x->dtype, src, n, s, dst);
    else memset(dst, 0, (size_t)(n * x->csz));
}

static double ct_at(const rnn_ctx *x, const char *buf, int64_t i) {
    return x->ct == CD_f64 ? ((const double *)buf)[i] : ((const float *)buf)[i];
}

static void ct_set(const rnn_ctx *x, char *buf, int64_t i, double v) {
    if (x->ct == CD_f64) ((double *)buf)[i] = v;
    else ((float *)buf)[i] = (float)v;
}

/* bias = b_ih + b_hh, but for GRU's candidate, whose recurrent bias goes to bias_hn (inside r * (...)). */
static void load_biases(rnn_ctx *x, const void *b_ih, int64_t sih, const void *b_hh, int64_t shh, char *tmp) {
    const int64_t n = x->G * x->H;
    load_or_zero(x, b_ih, n, sih, x->bias);
    load_or_zero(x, b_hh, n, shh, tmp);
    for (int64_t i = 0; i < n; i++) {
        const int64_t slot = i / x->H;
        if (x->cell == CELL_GRU && slot == x->gate[2]) ct_set(x, x->bias_hn, i % x->H, ct_at(x, tmp, i));
        else ct_set(x, x->bias, i, ct_at(x, x->bias, i) + ct_at(x, tmp, i));
    }
}

static void load_rows(const rnn_ctx *x, const char *src, const int64_t *st, char *dst) {
    const int isz = cd_dtype_size(x->dtype);
    for (int64_t r = 0; r < x->B; r++)
        cd_load_ct(x->dtype, src + r * st[0] * isz, x->H, st[1], dst + r * x->H * x->csz);
}

static int check_lengths(rnn_ctx *x) {
    x->steps = x->lens ? 0 : x->T;
    for (int64_t r = 0; x->lens && r < x->B; r++) {
        if (x->lens[r] < 0 || x->lens[r] > x->T)
            return cd_fail("sequence length %lld of batch entry %lld is out of range [0, %lld]",
                           (long long)x->lens[r], (long long)r, (long long)x->T);
        x->steps = CD_MAX(x->steps, x->lens[r]);
    }
    return 0;
}

/* Gate slots in storage order: PyTorch's (LSTM i f g o, GRU r z n) or ONNX's (i o f c, z r h). */
static void gate_slots(rnn_ctx *x, int onnx) {
    static const int lstm[2][4] = {{0, 1, 2, 3}, {0, 2, 3, 1}}, gru[2][3] = {{0, 1, 2}, {1, 0, 2}};
    for (int k = 0; k < x->G; k++) x->gate[k] = x->cell == CELL_LSTM ? lstm[onnx][k] : gru[onnx][k];
}

/* desc: see cd_rnn in runtime/candle_cpu.h. */
static int parse(rnn_ctx *x, int32_t dtype, int32_t cell, const int64_t *d) {
    if (dtype != CD_f32 && dtype != CD_f64 && dtype != CD_bf16 && dtype != CD_f16)
        return cd_fail("recurrent layers need a float dtype, got %s", cd_dtype_name(dtype));
    if (cell != CELL_LSTM && cell != CELL_GRU) return cd_fail("unknown recurrent cell %d", cell);
    x->cell = cell;
    x->dtype = dtype;
    x->ct = dtype == CD_f64 ? CD_f64 : CD_f32;
    x->csz = cd_ct_size(dtype);
    x->T = d[0], x->B = d[1], x->H = d[2], x->I = d[3];
    x->G = cell == CELL_LSTM ? 4 : 3;
    if (x->T < 0 || x->B < 0 || x->H < 0 || x->I < 0) return cd_fail("negative recurrent layer sizes");
    memcpy(x->xs, d + 4, sizeof x->xs);
    memcpy(x->wis, d + 7, sizeof x->wis);
    memcpy(x->whs, d + 9, sizeof x->whs);
    x->reverse = d[18] != 0;
    x->input_forget = d[20] != 0;
    x->two_phase = cell == CELL_GRU && d[21] == 0;
    gate_slots(x, d[19] != 0);
    x->pan = cd_ops.panels;
    x->U = x->pan->width(x->ct);
    x->nblocks = (x->H + x->U - 1) / x->U;
    x->sigmoid = cd_unary_loop(CD_UNARY_sigmoid, x->ct);
    x->tanh_ = cd_unary_loop(CD_UNARY_tanh, x->ct);
    return 0;
}

/* Steps per chunk: projections and gathered inputs of about CHUNK_BYTES, at least one step. */
static void size_chunks(rnn_ctx *x) {
    const int64_t step_bytes = x->B * CD_MAX(x->G * x->nblocks * x->U, x->I) * x->csz;
    x->C = CD_MAX(1, CD_MIN(CD_MAX(x->steps, 1), CHUNK_BYTES / CD_MAX(step_bytes, 1)));
    x->per_chunk = 1 + x->C * (x->two_phase ? 2 : 1);
}

/* Carves the compute-type buffers out of one allocation (returned, to free). */
static char *allocate(rnn_ctx *x) {
    const int64_t bh = round64(x->B * x->H * x->csz), gh = round64(x->G * x->H * x->csz);
    const int64_t mr = x->pan->height(x->ct), rows = x->C * x->B, panel = x->G * x->U * x->csz;
    const int64_t hpanels = round64(x->nblocks * x->H * panel), ipanels = round64(x->nblocks * x->I * panel);
    const int64_t xwc = round64(x->nblocks * rows * panel);
    x->apack_bytes = round64((x->B + mr - 1) / mr * mr * x->H * x->csz);
    x->xrows_bytes = x->in_place ? 0 : round64(rows * x->I * x->csz);
    x->xpack_bytes = round64((rows + mr - 1) / mr * mr * x->I * x->csz);
    const int64_t tiles = round64(5 * x->B * x->U * x->csz);
    x->per_bytes = x->apack_bytes + x->xrows_bytes + x->xpack_bytes + tiles;
    const int64_t total = hpanels + ipanels + xwc + 3 * gh + 5 * bh + x->participants * x->per_bytes;
    char *base = cd_scratch(total + x->nblocks * (int64_t)sizeof(claim_slot)), *p = base;
    if (!base) return NULL;
    x->hpanels = p, p += hpanels;
    x->ipanels = p, p += ipanels;
    x->xwc = p, p += xwc;
    x->bias = p, p += gh;
    x->bias_hn = p, p += gh;
    x->peep = p, p += gh;
    x->h[0] = p, p += bh;
    x->h[1] = p, p += bh;
    x->c = p, p += bh;
    x->rh = p, p += bh;
    x->z = p, p += bh;
    x->per = p, p += x->participants * x->per_bytes;
    for (int64_t q = 0; q < x->participants; q++) /* the tiles' columns past a block's units stay zeros */
        memset(x->per + q * x->per_bytes + x->per_bytes - tiles, 0, (size_t)tiles);
    x->claimed = (claim_slot *)p; /* 64-byte aligned, as every buffer before it is */
    for (int64_t b = 0; b < x->nblocks; b++) atomic_init(&x->claimed[b].phase, 0);
    atomic_init(&x->done, 0);
    return base;
}

/* y past the longest sequence is zeros; then the final h (and c) after the steps. */
static void write_finals(const rnn_ctx *x) {
    const int isz = cd_dtype_size(x->dtype);
    const int64_t row = x->B * x->H * isz;
    memset(x->out + x->steps * row, 0, (size_t)((x->T - x->steps) * row));
    cd_store_ct(x->dtype, x->h[x->steps & 1], x->B * x->H, x->out + x->T * row);
    if (x->cell == CELL_LSTM) cd_store_ct(x->dtype, x->c, x->B * x->H, x->out + (x->T + 1) * row);
}

int cd_rnn(int32_t dtype, int32_t cell, const int64_t *desc, const void *x_in, const void *w_ih, const void *w_hh,
           const void *b_ih, const void *b_hh, const void *h0, const void *c0, const void *peep, const int64_t *lens,
           void *out, double clip) {
    rnn_ctx x = {0};
    if (parse(&x, dtype, cell, desc)) return -1;
    x.x = x_in, x.w_ih = w_ih, x.w_hh = w_hh, x.lens = lens, x.out = out, x.clip = clip > 0 ? clip : 0;
    if (x.B == 0 || x.H == 0) return 0;
    x.fused = cell == CELL_LSTM && dtype == CD_f32 && !lens && cd_ops.lstm_step_f32;
    x.in_place = dtype == x.ct && !lens && x.xs[2] == 1 && (x.B == 1 || x.xs[0] == x.B * x.xs[1]);
    if (check_lengths(&x)) return -1;
    size_chunks(&x);
    x.participants = CD_MAX(1, CD_MIN(cd_num_threads(), x.nblocks));
    char *base = allocate(&x);
    if (!base) return -1;
    load_biases(&x, b_ih, desc[15], b_hh, desc[16], x.peep); /* the peepholes' buffer is free until loaded */
    if (peep) cd_load_ct(dtype, peep, 3 * x.H, desc[17], x.peep);
    else x.peep = NULL;
    load_rows(&x, h0, desc + 11, x.h[0]);
    if (cell == CELL_LSTM) load_rows(&x, c0, desc + 13, x.c);
    int rc = x.participants == 1 ? participant(&x, 0, 1) : cd_parallel_for(x.participants, 1, participant, &x);
    if (rc == 0) write_finals(&x);
    cd_scratch_free(base);
    return rc;
}
