/* A small persistent thread pool.
 *
 * One caller at a time owns the pool (a trylock); a second Python thread that
 * calls a kernel meanwhile, or a kernel nested inside a pool task, runs its work
 * on its own thread instead of waiting. Work is cut into chunks whose size
 * depends only on n and grain, never on the thread count, and chunks are taken
 * dynamically, so results are identical whatever the number of threads.
 * Workers spin briefly after a job before sleeping, so back-to-back ops do not
 * pay a wake-up each. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "internal.h"

#define MAX_THREADS 256
#define MAX_CHUNKS 256
#define SPIN_ITERS 20000

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

typedef struct {
    cd_task_fn fn;
    void *ctx;
    int64_t n, chunk, nchunks;
    atomic_llong next;
    atomic_int status;
    char err[512];
} job_t;

typedef struct {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_ullong go;   /* generation this worker was asked to run */
    atomic_ullong done; /* last generation it finished */
    job_t *job;
} worker_t;

static pthread_mutex_t pool_owner = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t config_lock = PTHREAD_MUTEX_INITIALIZER;
static worker_t workers[MAX_THREADS];
static int n_workers;         /* threads started */
static atomic_int n_threads;  /* configured, including the caller; 0 = not read yet */
static unsigned long long generation;
static __thread int inside_task;

static int default_threads(void) {
    const char *env = getenv("CANDLE_NUM_THREADS");
    if (env && *env) {
        int v = atoi(env);
        if (v >= 1) return CD_MIN(v, MAX_THREADS);
        fprintf(stderr, "candle-backend-cpu: ignoring CANDLE_NUM_THREADS=%s\n", env);
    }
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) return CD_MAX(1, CD_MIN(CPU_COUNT(&set), MAX_THREADS));
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)CD_MIN(n, MAX_THREADS) : 1;
}

int cd_num_threads(void) {
    int n = atomic_load(&n_threads);
    if (n == 0) {
        int d = default_threads();
        int expected = 0;
        atomic_compare_exchange_strong(&n_threads, &expected, d);
        n = atomic_load(&n_threads);
    }
    return n;
}

int cd_get_num_threads(void) { return cd_num_threads(); }

int cd_set_num_threads(int n) {
    if (n < 1 || n > MAX_THREADS) return cd_fail("number of threads must be in [1, %d], got %d", MAX_THREADS, n);
    atomic_store(&n_threads, n);
    return 0;
}

static void run_chunks(job_t *job) {
    for (;;) {
        int64_t c = atomic_fetch_add(&job->next, 1);
        if (c >= job->nchunks) return;
        int64_t begin = c * job->chunk, end = CD_MIN(job->n, begin + job->chunk);
        int rc = job->fn(job->ctx, begin, end);
        if (rc != 0) {
            int expected = 0;
            if (atomic_compare_exchange_strong(&job->status, &expected, rc))
                snprintf(job->err, sizeof job->err, "%s", cd_last_error());
        }
    }
}

static void *worker_main(void *arg) {
    worker_t *w = arg;
    /* go was 0 when the thread was created; the first job may already be
     * posted by the time this runs, so never read the start value from go. */
    unsigned long long seen = 0;
    inside_task = 1;
    for (;;) {
        unsigned long long g;
        int spins = 0;
        while ((g = atomic_load_explicit(&w->go, memory_order_acquire)) == seen && spins < SPIN_ITERS) {
            cpu_relax();
            spins++;
        }
        if (g == seen) {
            pthread_mutex_lock(&w->mu);
            while ((g = atomic_load(&w->go)) == seen) pthread_cond_wait(&w->cv, &w->mu);
            pthread_mutex_unlock(&w->mu);
        }
        seen = g;
        run_chunks(w->job);
        atomic_store_explicit(&w->done, g, memory_order_release);
    }
    return NULL;
}

/* Start workers up to `want`; returns how many are running. */
static int ensure_workers(int want) {
    pthread_mutex_lock(&config_lock);
    while (n_workers < want) {
        worker_t *w = &workers[n_workers];
        pthread_mutex_init(&w->mu, NULL);
        pthread_cond_init(&w->cv, NULL);
        atomic_store(&w->go, 0);
        atomic_store(&w->done, 0);
        if (pthread_create(&w->thread, NULL, worker_main, w) != 0) break;
        pthread_detach(w->thread);
        n_workers++;
    }
    int n = n_workers;
    pthread_mutex_unlock(&config_lock);
    return n;
}

/* A forked child has none of the parent's threads: start again from scratch. */
static void after_fork_child(void) {
    n_workers = 0;
    generation = 0;
    pthread_mutex_init(&pool_owner, NULL);
    pthread_mutex_init(&config_lock, NULL);
}

__attribute__((constructor)) static void register_fork_handler(void) {
    pthread_atfork(NULL, NULL, after_fork_child);
}

int64_t cd_chunk_size(int64_t n, int64_t grain) {
    if (grain < 1) grain = 1;
    int64_t nchunks = CD_MIN((n + grain - 1) / grain, MAX_CHUNKS);
    return nchunks > 0 ? (n + nchunks - 1) / nchunks : 1;
}

int cd_parallel_for(int64_t n, int64_t grain, cd_task_fn fn, void *ctx) {
    if (n <= 0) return 0;
    int64_t chunk = cd_chunk_size(n, grain);
    int64_t nchunks = (n + chunk - 1) / chunk;
    int threads = cd_num_threads();
    if (nchunks == 1 || threads == 1 || inside_task || pthread_mutex_trylock(&pool_owner) != 0) {
        /* Same chunking on one thread, so chunk-wise partial results agree. */
        for (int64_t c = 0; c < nchunks; c++) {
            int rc = fn(ctx, c * chunk, CD_MIN(n, (c + 1) * chunk));
            if (rc != 0) return rc;
        }
        return 0;
    }
    job_t job;
    job.fn = fn;
    job.ctx = ctx;
    job.n = n;
    job.chunk = chunk;
    job.nchunks = nchunks;
    atomic_init(&job.next, 0);
    atomic_init(&job.status, 0);
    job.err[0] = 0;
    int helpers = (int)CD_MIN((int64_t)threads - 1, nchunks - 1);
    helpers = CD_MIN(helpers, ensure_workers(helpers));
    unsigned long long g = ++generation;
    for (int i = 0; i < helpers; i++) {
        worker_t *w = &workers[i];
        w->job = &job;
        pthread_mutex_lock(&w->mu);
        atomic_store_explicit(&w->go, g, memory_order_release);
        pthread_cond_signal(&w->cv);
        pthread_mutex_unlock(&w->mu);
    }
    inside_task = 1;
    run_chunks(&job);
    inside_task = 0;
    for (int i = 0; i < helpers; i++)
        while (atomic_load_explicit(&workers[i].done, memory_order_acquire) != g) cpu_relax();
    pthread_mutex_unlock(&pool_owner);
    int rc = atomic_load(&job.status);
    if (rc != 0) cd_fail("%s", job.err);
    return rc;
}
