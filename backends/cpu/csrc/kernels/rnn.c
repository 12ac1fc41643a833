/* Fused recurrent layers: one LSTM or GRU layer in one direction over every
 * time step in one call (the lstm_layer and gru_layer rows of the contract).
 *
 * The caller has already projected the inputs of every step, xw = x @ W_ih^T
 * (one large GEMM through the matmul row). What is left is serial in time: at
 * step s the gates are xw[t] + biases + h @ W_hh^T, then the cell's pointwise
 * update. W_hh is packed once per call into the GEMM's panels (cd_ops.panels,
 * the instruction set's microkernel), by blocks of U hidden units, U the
 * panel width: block u's panels hold its units' rows of every gate, so a work
 * item (step, block) computes its own gates and finishes its units' update
 * without waiting for another block. A step is one phase; ONNX's GRU without
 * linear_before_reset needs r * h of every unit before the candidate's
 * product, so its steps take two. Packing the panels is the first phase.
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
enum { MAX_GATES = 4, DESC_LEN = 19 };

typedef struct {
    int cell, dtype, ct, csz;       /* the cell, storage dtype, compute dtype and its size */
    int64_t T, B, H, G;             /* steps, batch, hidden units, gates */
    int64_t U, nblocks, steps;      /* units per block, blocks, steps run (the longest sequence) */
    int64_t xs[3], ws[2];           /* xw strides (time, batch, column), W_hh's (row, column) */
    int reverse, two_phase, input_forget;
    double clip;                    /* > 0: gate inputs are clipped to [-clip, clip] */
    int gate[MAX_GATES];            /* the storage slot of i, f, g, o (LSTM) or r, z, n (GRU) */
    const char *xw, *w;
    const int64_t *lens;            /* sequence lengths, or NULL */
    char *out;
    cd_unary_fn sigmoid, tanh_;
    const cd_panel_ops *pan;
    /* compute-type buffers */
    char *panels, *bias, *bias_hn, *peep, *h[2], *c, *rh, *z;
    char *per;                      /* per participant: packed A, tiles, a row */
    int64_t per_bytes, apack_bytes, tile_bytes;
    int64_t participants;
    atomic_llong done;              /* items finished, all phases */
    atomic_llong *claimed;          /* per block: the last phase whose item was taken */
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

static inline const void *panel(const rnn_ctx *x, int64_t block, int slot) {
    return x->panels + (block * x->G + slot) * x->H * x->U * x->csz;
}

/* Asks for the cache lines of the step's inputs of the block's units in gates [first, first + count): the
 * rows of a step are far apart in xw, where no prefetcher guesses them, and the products that come first
 * leave time to fetch them. */
static void prefetch_inputs(const rnn_ctx *x, int64_t s, const unit_block *ub, int first, int count) {
    const int isz = cd_dtype_size(x->dtype);
    const int64_t step = x->xs[2] * isz, span = (ub->n - 1) * step;
    for (int64_t r = 0; r < x->B; r++) {
        const int64_t t = time_of(x, s, r);
        if (t < 0) continue;
        for (int g = first; g < first + count; g++) {
            const char *p = x->xw + (t * x->xs[0] + r * x->xs[1] + (g * x->H + ub->u0) * x->xs[2]) * isz;
            if (step > 64 || step < 0)
                for (int64_t j = 0; j < ub->n; j++) __builtin_prefetch(p + j * step, 0, 3);
            else
                for (int64_t off = 0; off <= span + 63; off += 64) __builtin_prefetch(p + CD_MIN(off, span), 0, 3);
        }
    }
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

/* ---- scheduling ---------------------------------------------------------------------- */
static inline void relax(int64_t *spins) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
    if (++*spins % 4096 == 0) sched_yield(); /* more threads than cores: let the one we wait for run */
}

static inline void wait_for(rnn_ctx *x, int64_t target) {
    int64_t spins = 0;
    while (atomic_load_explicit(&x->done, memory_order_acquire) < target) relax(&spins);
}

static inline int claim(rnn_ctx *x, int64_t phase, int64_t block) {
    long long expected = phase - 1;
    return atomic_compare_exchange_strong_explicit(&x->claimed[block], &expected, phase, memory_order_relaxed,
                                                   memory_order_relaxed);
}

static int64_t phases_per_step(const rnn_ctx *x) { return x->two_phase ? 2 : 1; }

/* Phase 1 packs block b's panels; phase 2 + k is stage k % phases_per_step of step k / phases_per_step. */
static void run_item(rnn_ctx *x, int64_t phase, int64_t block, char *mine, int64_t *packed_for) {
    unit_block ub = {block, block * x->U, CD_MIN(x->U, x->H - block * x->U)};
    if (phase == 1) {
        const int isz = cd_dtype_size(x->dtype);
        for (int g = 0; g < x->G; g++)
            x->pan->pack_b(x->dtype, x->H, ub.n, x->w + (g * x->H + ub.u0) * x->ws[0] * isz, x->ws[1], x->ws[0],
                           (void *)panel(x, block, g));
    } else {
        const int64_t k = phase - 2, s = k / phases_per_step(x);
        const int stage = (int)(k % phases_per_step(x));
        if (*packed_for != phase) { /* this participant's first item of the phase: A = h, or r * h */
            x->pan->pack_a(x->ct, x->B, x->H, stage ? x->rh : x->h[s & 1], x->H, mine);
            *packed_for = phase;
        }
        char *tiles = mine + x->apack_bytes, *row = tiles + x->tile_bytes;
        if (x->ct == CD_f64) run_step_f64(x, s, stage, &ub, mine, tiles, row);
        else run_step_f32(x, s, stage, &ub, mine, tiles, row);
    }
    atomic_fetch_add_explicit(&x->done, 1, memory_order_release);
}

static int participant(void *vctx, int64_t p, int64_t end) {
    CD_UNUSED(end);
    rnn_ctx *x = vctx;
    char *mine = x->per + p * x->per_bytes;
    const int64_t lo = x->nblocks * p / x->participants, hi = x->nblocks * (p + 1) / x->participants;
    const int64_t nphases = 1 + x->steps * phases_per_step(x);
    int64_t packed_for = -1;
    /* A participant starting late skips the phases already complete. */
    int64_t phase = atomic_load_explicit(&x->done, memory_order_acquire) / x->nblocks + 1;
    for (; phase <= nphases; phase++) {
        wait_for(x, (phase - 1) * x->nblocks);
        for (int64_t b = lo; b < hi; b++)
            if (claim(x, phase, b)) run_item(x, phase, b, mine, &packed_for);
        for (int64_t b = x->nblocks - 1; b >= 0; b--) /* others' items nobody has taken yet */
            if ((b < lo || b >= hi) && claim(x, phase, b)) run_item(x, phase, b, mine, &packed_for);
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
    for (int64_t r = 0; r < x->B; r++) cd_load_ct(x->dtype, src + r * st[0] * isz, x->H, st[1], dst + r * x->H * x->csz);
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

static int parse(rnn_ctx *x, int32_t dtype, int32_t cell, const int64_t *d) {
    if (dtype != CD_f32 && dtype != CD_f64 && dtype != CD_bf16 && dtype != CD_f16)
        return cd_fail("recurrent layers need a float dtype, got %s", cd_dtype_name(dtype));
    if (cell != CELL_LSTM && cell != CELL_GRU) return cd_fail("unknown recurrent cell %d", cell);
    x->cell = cell;
    x->dtype = dtype;
    x->ct = dtype == CD_f64 ? CD_f64 : CD_f32;
    x->csz = cd_ct_size(dtype);
    x->T = d[0], x->B = d[1], x->H = d[2];
    x->G = cell == CELL_LSTM ? 4 : 3;
    if (x->T < 0 || x->B < 0 || x->H < 0) return cd_fail("negative recurrent layer sizes");
    memcpy(x->xs, d + 3, sizeof x->xs);
    memcpy(x->ws, d + 6, sizeof x->ws);
    x->reverse = d[15] != 0;
    x->input_forget = d[17] != 0;
    x->two_phase = cell == CELL_GRU && d[18] == 0;
    gate_slots(x, d[16] != 0);
    x->pan = cd_ops.panels;
    x->U = x->pan->width(x->ct);
    x->nblocks = (x->H + x->U - 1) / x->U;
    x->sigmoid = cd_unary_loop(CD_UNARY_sigmoid, x->ct);
    x->tanh_ = cd_unary_loop(CD_UNARY_tanh, x->ct);
    return 0;
}

/* Carves the compute-type buffers out of one allocation (returned, to free). */
static char *allocate(rnn_ctx *x) {
    const int64_t bh = round64(x->B * x->H * x->csz), gh = round64(x->G * x->H * x->csz);
    const int64_t panels = x->nblocks * x->G * x->H * x->U * x->csz, mr = x->pan->height(x->ct);
    x->apack_bytes = round64((x->B + mr - 1) / mr * mr * x->H * x->csz);
    x->tile_bytes = round64(5 * x->B * x->U * x->csz);
    x->per_bytes = x->apack_bytes + x->tile_bytes + round64(x->U * x->csz);
    const int64_t zeroed = x->participants * x->per_bytes + round64(x->nblocks * 8);
    char *base = cd_scratch(panels + 3 * gh + 5 * bh + zeroed), *p = base;
    if (!base) return NULL;
    x->panels = p, p += panels;
    x->bias = p, p += gh;
    x->bias_hn = p, p += gh;
    x->peep = p, p += gh;
    x->h[0] = p, p += bh;
    x->h[1] = p, p += bh;
    x->c = p, p += bh;
    x->rh = p, p += bh;
    x->z = p, p += bh;
    memset(p, 0, (size_t)zeroed); /* the tiles' columns past a block's units stay zeros */
    x->per = p, p += x->participants * x->per_bytes;
    x->claimed = (atomic_llong *)p;
    for (int64_t b = 0; b < x->nblocks; b++) atomic_init(&x->claimed[b], 0);
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

int cd_rnn(int32_t dtype, int32_t cell, const int64_t *desc, const void *xw, const void *w, const void *b_ih,
           const void *b_hh, const void *h0, const void *c0, const void *peep, const int64_t *lens, void *out,
           double clip) {
    rnn_ctx x = {0};
    if (parse(&x, dtype, cell, desc)) return -1;
    x.xw = xw, x.w = w, x.lens = lens, x.out = out, x.clip = clip > 0 ? clip : 0;
    if (x.B == 0 || x.H == 0) return 0;
    if (check_lengths(&x)) return -1;
    x.participants = CD_MAX(1, CD_MIN(cd_num_threads(), x.nblocks));
    char *base = allocate(&x);
    if (!base) return -1;
    load_biases(&x, b_ih, desc[12], b_hh, desc[13], x.peep); /* the peepholes' buffer is free until loaded */
    if (peep) cd_load_ct(dtype, peep, 3 * x.H, desc[14], x.peep);
    else x.peep = NULL;
    load_rows(&x, h0, desc + 8, x.h[0]);
    if (cell == CELL_LSTM) load_rows(&x, c0, desc + 10, x.c);
    int rc = x.participants == 1 ? participant(&x, 0, 1) : cd_parallel_for(x.participants, 1, participant, &x);
    if (rc == 0) write_finals(&x);
    cd_scratch_free(base);
    return rc;
}
