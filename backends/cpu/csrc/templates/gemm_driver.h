/* The blocked GEMM driver for one kind of panel (templates/gemm_impl.h
 * includes it once per kind). The including file defines
 *
 *   DRIVER_NAME            names the driver: drv_<name> (its context),
 *                          blocked_<name>(d, n, k) (the entry)
 *   DRIVER_T, DRIVER_P     the type of C, and of the packed panels: DRIVER_T,
 *                          or pairs of bf16 along k (uint32_t)
 *   DRIVER_KS              k steps per panel element (1, or 2 for pairs)
 *   DRIVER_MR, DRIVER_NR   the register tile
 *   DRIVER_KC              the deepest K slice (evaluated once, at run time)
 *   DRIVER_KC_SHARED       (optional) the deepest K slice of products whose B panels
 *                          are shared (rows past one MC block of DRIVER_KC's blocking)
 *   DRIVER_MICRO(...)      the microkernel over packed panels (micro_f32)
 *   DRIVER_ROWS(...)       the microkernel over rows of A read in place
 *   DRIVER_MICRO_PACKING(...), DRIVER_ROWS_PACKING(...)  the two for whole tiles
 *                          that copy B's panel from its rows as they read it,
 *                          no-ops where DRIVER_COPIES is 0
 *   DRIVER_COPIES          whether a B panel can be such a copy (the panels'
 *                          type is the source's)
 *
 * and gemm_impl.h defines before it the thread buffers, the blocking and the
 * split model (blocking, k_slice, use_in_place, split_rows_cheaper, row_tasks,
 * task_range). */
#define DRIVER_CAT_(a, b) a##b
#define DRIVER_CAT(a, b) DRIVER_CAT_(a, b)
#define NAMED(prefix) DRIVER_CAT(prefix, DRIVER_NAME)
#define T DRIVER_T
#define P DRIVER_P
#define KS DRIVER_KS
#define MR DRIVER_MR
#define NR DRIVER_NR
#define KC DRIVER_KC
#define MICRO DRIVER_MICRO
#define ROWS DRIVER_ROWS
#define MICRO_PACKING DRIVER_MICRO_PACKING
#define ROWS_PACKING DRIVER_ROWS_PACKING

typedef struct {
    const char *a, *b;
    int isz;
    int64_t m, ars, acs, brs, bcs;
    T *c;
    int64_t ldc;
    int64_t j0, nc, p0, kc; /* the current block */
    P *bpack; /* panels hold P: T, or pairs of bf16 along k (KS = 2) */
    int64_t ntasks, pack_tasks, split_rows;
    int own_panels; /* each task packs the B panels of its own columns as it reaches them */
    int direct_a, direct_b; /* operands read in place, unpacked (see use_in_place) */
    int copy_b;             /* B's panels are plain copies of its rows (contiguous along n) */
    int fuse_b;             /* each task packs its B panels in its first tiles (first_tile_) */
    blocking blk;
    void (*pack_a)(const void *, int64_t, int64_t, int64_t, int64_t, P *);
    void (*pack_b)(const void *, int64_t, int64_t, int64_t, int64_t, P *);
} NAMED(drv_);

static int NAMED(packb_task_)(void *vctx, int64_t begin, int64_t end) {
    const NAMED(drv_) *d = vctx;
    const int64_t panels = (d->nc + NR - 1) / NR, steps = (d->kc + KS - 1) / KS;
    for (int64_t t = begin; t < end; t++) {
        int64_t lo, hi;
        task_range(panels, d->pack_tasks, t, &lo, &hi);
        if (lo >= hi) continue;
        int64_t j = lo * NR, cols = CD_MIN(d->nc, hi * NR) - j;
        d->pack_b(d->b + (d->p0 * d->brs + (d->j0 + j) * d->bcs) * d->isz, d->brs, d->bcs, d->kc,
                  cols, d->bpack + j * steps);
    }
    return 0;
}

/* One tile of C: rows i0 + ir of the block (A's panel packed from row packed0 on, or read in
 * place before it) times the B panel bp (rows ldb apart) at column j. */
static inline void NAMED(c_tile_)(const NAMED(drv_) *d, const P *apack, int64_t steps, int64_t i0, int64_t ir,
                                int64_t mc, int64_t packed0, const P *bp, int64_t ldb, int64_t j, int nr) {
    int mr = (int)CD_MIN(MR, mc - ir);
    T *ct = d->c + (i0 + ir) * d->ldc + d->j0 + j;
    if (ir < packed0)
        ROWS(d->kc, (const P *)d->a + d->p0 + (i0 + ir) * d->ars, d->ars, bp, ldb, ct, d->ldc, nr, d->p0 > 0);
    else
        MICRO(steps, apack + (ir - packed0) * steps, bp, ldb, ct, d->ldc, mr, nr, d->p0 > 0);
}

/* The first tile down B's panel j (rows i0.. of the block): with fuse_b and whole tiles, the
 * microkernel reads the panel from B's rows and packs it into bdst as it goes; otherwise the
 * panel is packed first. Either way the tile's sums are the same. */
static inline void NAMED(first_tile_)(const NAMED(drv_) *d, const P *apack, int64_t steps, int64_t i0,
                                    int64_t mc, int64_t packed0, P *bdst, int64_t j, int nr) {
    const char *src = d->b + (d->p0 * d->brs + (d->j0 + j) * d->bcs) * d->isz;
    if (!d->fuse_b || nr < NR || mc < MR) {
        d->pack_b(src, d->brs, d->bcs, d->kc, nr, bdst);
        NAMED(c_tile_)(d, apack, steps, i0, 0, mc, packed0, bdst, NR, j, nr);
    } else if (packed0 > 0) {
        ROWS_PACKING(d->kc, (const P *)d->a + d->p0 + i0 * d->ars, d->ars, (const P *)src, d->brs, bdst,
                     d->c + i0 * d->ldc + d->j0 + j, d->ldc, d->p0 > 0);
    } else {
        MICRO_PACKING(steps, apack, (const P *)src, d->brs, bdst, d->c + i0 * d->ldc + d->j0 + j, d->ldc, d->p0 > 0);
    }
}

static int NAMED(compute_task_)(void *vctx, int64_t begin, int64_t end) {
    const NAMED(drv_) *d = vctx;
    const int64_t mpanels = (d->m + MR - 1) / MR, npanels = (d->nc + NR - 1) / NR;
    const int64_t steps = (d->kc + KS - 1) / KS; /* packed k steps per panel row */
    /* A read in place needs no L2-sized blocks: its rows run as one block. */
    const int64_t MC = d->direct_a ? d->m : d->blk.mc;
    P *apack = thread_buffer(BUF_A, CD_MIN(MC, d->blk.mc) * steps * (int64_t)sizeof(P));
    /* Tasks pack their own B panels, or only the partial one when B is read in place. */
    const int own = d->own_panels || d->direct_b;
    P *panel = own ? thread_buffer(BUF_PANEL, NR * steps * (int64_t)sizeof(P)) : NULL;
    if (!apack || (own && !panel)) return -1;
    const P *b_in = d->direct_b ? (const P *)d->b + d->p0 * d->brs : NULL;
    for (int64_t t = begin; t < end; t++) {
        int64_t r0 = 0, r1 = mpanels, c0 = 0, c1 = npanels;
        if (d->split_rows) task_range(mpanels, d->ntasks, t, &r0, &r1);
        else task_range(npanels, d->ntasks, t, &c0, &c1);
        int64_t row_end = CD_MIN(d->m, r1 * MR), col_end = CD_MIN(d->nc, c1 * NR);
        for (int64_t i0 = r0 * MR; i0 < row_end; i0 += MC) {
            int64_t mc = CD_MIN(MC, row_end - i0);
            /* Rows read in place leave only a partial last panel to pack. */
            int64_t packed0 = d->direct_a ? mc / MR * MR : 0;
            if (packed0 < mc)
                d->pack_a(d->a + ((i0 + packed0) * d->ars + d->p0 * d->acs) * d->isz, d->ars,
                          d->acs, mc - packed0, d->kc, apack);
            /* Whether this block's first tiles pack the B panels: a task's own panels in every
             * block, shared ones in the task's first when it packs them itself (fuse_b). */
            const int packing = own || (d->fuse_b && i0 == r0 * MR);
            if (!own && d->blk.nb) {
                /* Shared packed B, a chunk of panels from L2 at a time: each A panel stays in L1
                 * while the tiles walk along C's rows (see blocking.nb). */
                for (int64_t jb = c0 * NR; jb < col_end; jb += d->blk.nb)
                    for (int64_t ir = 0; ir < mc; ir += MR)
                        for (int64_t j = jb; j < CD_MIN(col_end, jb + d->blk.nb); j += NR) {
                            const int nr = (int)CD_MIN(NR, col_end - j);
                            P *bp = d->bpack + j * steps;
                            if (ir == 0 && packing) NAMED(first_tile_)(d, apack, steps, i0, mc, packed0, bp, j, nr);
                            else NAMED(c_tile_)(d, apack, steps, i0, ir, mc, packed0, bp, NR, j, nr);
                        }
                continue;
            }
            for (int64_t j = c0 * NR; j < col_end; j += NR) {
                const int nr = (int)CD_MIN(NR, col_end - j);
                if (d->direct_b && nr == NR) {
                    for (int64_t ir = 0; ir < mc; ir += MR)
                        NAMED(c_tile_)(d, apack, steps, i0, ir, mc, packed0, b_in + d->j0 + j, d->brs, j, nr);
                    continue;
                }
                P *bp = own ? panel : d->bpack + j * steps;
                int64_t ir = 0;
                if (packing) {
                    NAMED(first_tile_)(d, apack, steps, i0, mc, packed0, bp, j, nr);
                    ir = MR;
                }
                for (; ir < mc; ir += MR) NAMED(c_tile_)(d, apack, steps, i0, ir, mc, packed0, bp, NR, j, nr);
            }
        }
    }
    return 0;
}

static pthread_once_t NAMED(blk_once_) = PTHREAD_ONCE_INIT;
static blocking NAMED(blk_);
#ifdef DRIVER_KC_SHARED
static blocking NAMED(blk_shared_);
#endif
static void NAMED(size_)(void) {
    NAMED(blk_) = size_blocks(sizeof(P), MR, NR, KC / KS);
#ifdef DRIVER_KC_SHARED
    NAMED(blk_shared_) = size_blocks(sizeof(P), MR, NR, DRIVER_KC_SHARED / KS);
#endif
}

/* How the tasks share one block of C: the split (rows or columns) and the task counts. */
static void NAMED(plan_)(NAMED(drv_) *d) {
    const int64_t mpanels = (d->m + MR - 1) / MR, npanels = (d->nc + NR - 1) / NR;
    const int64_t tasks = CD_MAX(1, CD_MIN(cd_num_threads(), d->m * d->nc * d->kc / (1 << 17)));
    /* (pairs of bf16 are never in the source: they are always packed) */
    use_in_place(&d->blk, KS == 1 ? (int64_t)sizeof(P) : 0, d->isz, MR, d->m, d->kc, d->nc, d->ars, d->acs,
                 d->brs, d->bcs, &d->direct_a, &d->direct_b);
    const double pack_a = d->direct_a                             ? 0
                          : d->m * d->kc * d->isz <= d->blk.a_near ? PACK_NEAR
                                                                   : PACK_FAR;
    d->split_rows = split_rows_cheaper(d->m, MR, tasks, mpanels, npanels, pack_a,
                                       d->own_panels && !d->direct_b ? PACK_NEAR : 0);
    d->ntasks = CD_MAX(1, CD_MIN(tasks, d->split_rows ? mpanels : npanels));
    if (d->split_rows && d->ntasks > 1)
        d->ntasks = row_tasks(mpanels, d->direct_a ? mpanels : d->blk.mc / MR, d->ntasks);
    d->pack_tasks = CD_MAX(1, CD_MIN(d->ntasks, npanels));
    /* A task's own panels are packed by their first tiles; shared ones too when no other task
     * reads them, B's rows are less than a page apart and its panels' rows start on cache
     * lines: those tiles read B down its columns, where rows a page or more apart cost a TLB
     * entry and an L1 set each, and rows off the lines a third line each (AVX-512). Measured
     * on Zen 4, 1 thread, fusing all shared panels: 512-square 1% faster, 1024 and 2048 1-2%
     * slower, 512 with B 16 bytes off the lines 7% slower (AVX-512). */
    const int lined = (uintptr_t)d->b % 64 == 0 && d->brs * d->isz % 64 == 0;
    d->fuse_b = DRIVER_COPIES && d->copy_b && !d->direct_b &&
                (d->own_panels || (lined && d->brs * d->isz < 4096 && (d->ntasks == 1 || !d->split_rows)));
}

static int NAMED(blocked_)(NAMED(drv_) *d, int64_t n, int64_t k) {
    pthread_once(&NAMED(blk_once_), NAMED(size_));
    d->blk = NAMED(blk_);
#ifdef DRIVER_KC_SHARED
    /* rows past one block share B's panels (own_panels below stays 0: the deeper slice's blocks are shorter) */
    if (d->m > d->blk.mc) d->blk = NAMED(blk_shared_);
#endif
    const int64_t NC = d->blk.nc, kc_max = k_slice(k, d->blk.kc * KS, 8);
    const int64_t nc_max = CD_MIN(NC, (n + NR - 1) / NR * NR);
    /* Rows that fit one MC block use each B panel once: packed by the task that uses it, it
     * stays in L1 instead of going to memory and back (the small-M products of short batches). */
    d->own_panels = d->m <= d->blk.mc;
    int64_t bpack_bytes = (kc_max + KS - 1) / KS * nc_max * (int64_t)sizeof(P);
    d->bpack = d->own_panels ? NULL : thread_buffer(BUF_B, bpack_bytes);
    if (!d->own_panels && !d->bpack) return -1;
    int rc = 0;
    for (d->j0 = 0; d->j0 < n && rc == 0; d->j0 += NC) {
        d->nc = CD_MIN(NC, n - d->j0);
        for (d->p0 = 0; d->p0 < k && rc == 0; d->p0 += kc_max) {
            d->kc = CD_MIN(kc_max, k - d->p0);
            NAMED(plan_)(d);
            if (!d->own_panels && !d->direct_b && !d->fuse_b)
                rc = cd_parallel_for(d->pack_tasks, 1, NAMED(packb_task_), d);
            if (rc == 0) rc = cd_parallel_for(d->ntasks, 1, NAMED(compute_task_), d);
        }
    }
    return rc;
}

#undef DRIVER_CAT_
#undef DRIVER_CAT
#undef NAMED
#undef T
#undef P
#undef KS
#undef MR
#undef NR
#undef KC
#undef MICRO
#undef ROWS
#undef MICRO_PACKING
#undef ROWS_PACKING
#undef DRIVER_NAME
#undef DRIVER_T
#undef DRIVER_P
#undef DRIVER_KS
#undef DRIVER_MR
#undef DRIVER_NR
#undef DRIVER_KC
#undef DRIVER_KC_SHARED
#undef DRIVER_MICRO
#undef DRIVER_ROWS
#undef DRIVER_MICRO_PACKING
#undef DRIVER_ROWS_PACKING
#undef DRIVER_COPIES
