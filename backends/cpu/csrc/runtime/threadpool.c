/* A small persistent thread pool.
 *
 * One caller at a time owns the pool (a trylock); a second Python thread that
 * calls a kernel meanwhile, or a kernel nested inside a pool task, runs its work
 * on its own thread instead of waiting. Work is cut into chunks whose size
 * depends only on n and grain, never on the thread count, so results are
 * identical whatever the number of threads.
 *
 * The job lives in one static slot and workers take chunks from it as they
 * arrive; the caller takes chunks too and returns as soon as every chunk is
 * done. It never waits for a worker to wake up: a worker that arrives late
 * finds no chunk left (waking a sleeping vCPU can take a millisecond in a VM).
 * Workers spin for CANDLE_SPIN_US microseconds (default 5000) after a job
 * before sleeping, so back-to-back ops find them awake. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "runtime/internal.h"

#define MAX_THREADS 256
#define MAX_CHUNKS 256
#define DEFAULT_SPIN_US 5000

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

typedef struct {
    cd_task_fn fn;
    void *ctx;
    int64_t n, chunk;     /* read only after taking a chunk, which orders them */
    atomic_llong nchunks; /* read before: atomic */
    atomic_int helpers;   /* workers 0..helpers-1 take part */
    atomic_llong next;    /* next chunk to take */
    atomic_llong done;    /* chunks finished */
    atomic_int status;
    char err[512];
} job_t;

static job_t job;                          /* the current job (guarded by pool_owner) */
static atomic_ullong job_generation;       /* bumped when a job is posted */
static pthread_mutex_t pool_owner = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t sleep_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t sleep_cv = PTHREAD_COND_INITIALIZER;
static atomic_int sleepers;
static pthread_mutex_t config_lock = PTHREAD_MUTEX_INITIALIZER;
static int n_workers;                      /* threads started */
static atomic_int n_threads;               /* configured, including the caller; 0 = not read yet */
static int64_t spin_ns = -1;
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
        int expected = 0;
        atomic_compare_exchange_strong(&n_threads, &expected, default_threads());
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

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* Takes and runs chunks of the current job until none is left. Fields are read
 * after taking a chunk, so a worker that arrives between two jobs works on
 * whichever job the chunk belongs to. */
static void run_chunks(void) {
    for (;;) {
        int64_t c = atomic_fetch_add(&job.next, 1);
        if (c >= atomic_load_explicit(&job.nchunks, memory_order_relaxed)) return;
        int64_t begin = c * job.chunk, end = CD_MIN(job.n, begin + job.chunk);
        int rc = job.fn(job.ctx, begin, end);
        if (rc != 0) {
            int expected = 0;
            if (atomic_compare_exchange_strong(&job.status, &expected, rc))
                snprintf(job.err, sizeof job.err, "%s", cd_last_error());
        }
        atomic_fetch_add_explicit(&job.done, 1, memory_order_release);
    }
}

static void *worker_main(void *arg) {
    const int index = (int)(intptr_t)arg;
    unsigned long long seen = 0;
    inside_task = 1;
    for (;;) {
        unsigned long long g = atomic_load_explicit(&job_generation, memory_order_acquire);
        if (g == seen) {
            int64_t deadline = now_ns() + spin_ns;
            int spins = 0;
            while ((g = atomic_load_explicit(&job_generation, memory_order_acquire)) == seen) {
                cpu_relax();
                if (++spins == 256) {
                    spins = 0;
                    if (now_ns() > deadline) break;
                }
            }
        }
        if (g == seen) {
            pthread_mutex_lock(&sleep_mu);
            atomic_fetch_add(&sleepers, 1);
            while ((g = atomic_load(&job_generation)) == seen) pthread_cond_wait(&sleep_cv, &sleep_mu);
            atomic_fetch_sub(&sleepers, 1);
            pthread_mutex_unlock(&sleep_mu);
        }
        seen = g;
        if (index < atomic_load_explicit(&job.helpers, memory_order_relaxed)) run_chunks();
    }
    return NULL;
}

/* Starts workers up to `want`; returns how many run. */
static int ensure_workers(int want) {
    pthread_mutex_lock(&config_lock);
    if (spin_ns < 0) {
        const char *env = getenv("CANDLE_SPIN_US");
        spin_ns = (env && *env ? atoll(env) : DEFAULT_SPIN_US) * 1000;
    }
    while (n_workers < want) {
        pthread_t thread;
        if (pthread_create(&thread, NULL, worker_main, (void *)(intptr_t)n_workers) != 0) break;
        pthread_detach(thread);
        n_workers++;
    }
    int n = n_workers;
    pthread_mutex_unlock(&config_lock);
    return n;
}

/* A forked child has none of the parent's threads: start again from scratch. */
static void after_fork_child(void) {
    n_workers = 0;
    atomic_store(&sleepers, 0);
    pthread_mutex_init(&pool_owner, NULL);
    pthread_mutex_init(&config_lock, NULL);
    pthread_mutex_init(&sleep_mu, NULL);
    pthread_cond_init(&sleep_cv, NULL);
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
    int helpers = (int)CD_MIN((int64_t)threads - 1, nchunks - 1);
    helpers = CD_MIN(helpers, ensure_workers(helpers));
    job.fn = fn;
    job.ctx = ctx;
    job.n = n;
    job.chunk = chunk;
    atomic_store_explicit(&job.nchunks, nchunks, memory_order_relaxed);
    atomic_store_explicit(&job.helpers, helpers, memory_order_relaxed);
    atomic_store(&job.status, 0);
    job.err[0] = 0;
    atomic_store(&job.done, 0);
    atomic_store_explicit(&job.next, 0, memory_order_release);
    atomic_fetch_add_explicit(&job_generation, 1, memory_order_release);
    if (atomic_load(&sleepers) > 0) {
        pthread_mutex_lock(&sleep_mu);
        pthread_cond_broadcast(&sleep_cv);
        pthread_mutex_unlock(&sleep_mu);
    }
    inside_task = 1;
    run_chunks();
    inside_task = 0;
    while (atomic_load_explicit(&job.done, memory_order_acquire) < nchunks) cpu_relax();
    int rc = atomic_load(&job.status);
    if (rc != 0) cd_fail("%s", job.err);
    /* Nothing may take a chunk of this job from now on. */
    atomic_store(&job.next, INT64_MAX / 2);
    pthread_mutex_unlock(&pool_owner);
    return rc;
}
