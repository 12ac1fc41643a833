/* Runtime: ABI version, errors, names, dtype facts, the caching allocator,
 * strided iteration and compute-type rows. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "runtime/internal.h"
#include "runtime/isa.h"

int cd_abi_version(void) { return CD_ABI_VERSION; }

/* ---- errors ------------------------------------------------------------ */
static __thread char tls_error[512];

const char *cd_last_error(void) { return tls_error; }

int cd_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tls_error, sizeof tls_error, fmt, ap);
    va_end(ap);
    return -1;
}

/* ---- names ------------------------------------------------------------- */
#define CD_NAME_X(name, ints) #name ","
#define CD_DTYPE_NAME_X(name, code, type) #name ","
static const char NAMES_DTYPES[] = CD_DTYPES(CD_DTYPE_NAME_X);
static const char NAMES_UNARY[] = CD_UNARY_OPS(CD_NAME_X);
static const char NAMES_PARAM[] = CD_PARAM_OPS(CD_NAME_X);
static const char NAMES_BINARY[] = CD_BINARY_OPS(CD_NAME_X);
static const char NAMES_CMP[] = CD_CMP_OPS(CD_NAME_X);
static const char NAMES_REDUCE[] = CD_REDUCE_OPS(CD_NAME_X);
static const char NAMES_ACT[] = CD_ACT_OPS(CD_NAME_X);

const char *cd_names(const char *table) {
    static const struct { const char *key, *names; } tables[] = {
        {"dtypes", NAMES_DTYPES}, {"unary", NAMES_UNARY}, {"param", NAMES_PARAM},
        {"binary", NAMES_BINARY}, {"cmp", NAMES_CMP},     {"reduce", NAMES_REDUCE},
        {"act", NAMES_ACT},
    };
    if (!table) return NULL;
    for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++)
        if (strcmp(table, tables[i].key) == 0) return tables[i].names;
    return NULL;
}

const char *cd_dtype_name(int dtype) {
    switch (dtype) {
#define CD_X(name, code, type) \
    case code: return #name;
        CD_DTYPES(CD_X)
#undef CD_X
    }
    return "unknown";
}

int cd_dtype_size(int dtype) {
    switch (dtype) {
#define CD_X(name, code, type) \
    case code: return (int)sizeof(type);
        CD_DTYPES(CD_X)
#undef CD_X
    }
    return 0;
}

int cd_dtype_is_float(int dtype) {
    return dtype == CD_bf16 || dtype == CD_f16 || dtype == CD_f32 || dtype == CD_f64;
}

int cd_dtype_is_index(int dtype) {
    return dtype == CD_u8 || dtype == CD_u32 || dtype == CD_i16 || dtype == CD_i32 || dtype == CD_i64;
}

int64_t cd_load_index(int32_t id_dtype, const void *ids, int64_t i) {
    switch (id_dtype) {
    case CD_u8: return ((const uint8_t *)ids)[i];
    case CD_u32: return ((const uint32_t *)ids)[i];
    case CD_i16: return ((const int16_t *)ids)[i];
    case CD_i32: return ((const int32_t *)ids)[i];
    default: return ((const int64_t *)ids)[i];
    }
}

/* ---- allocator -------------------------------------------------------------
 * Every block carries a 64-byte header holding its capacity, so cd_free knows
 * the size and can refuse a pointer it did not make. Blocks of at least
 * CACHE_MIN bytes are kept on free (up to CACHE_LIMIT in total) and handed out
 * again: re-faulting fresh pages costs more than the kernels themselves for
 * large tensors. Large blocks are their own memory maps, advised as huge pages:
 * from malloc's heap, an aligned request can cost milliseconds (its pages,
 * already huge, are touched and split). CACHE_MIN is below glibc's mmap
 * threshold (128 KiB at first): malloc maps and unmaps blocks above it, or
 * trims its heap under them, so that a model's forward of a prompt re-faulted
 * ~50 MB of pages (13k faults) each time with a cache from 1 MiB, 0.4k now. */
#define HEADER 64
#define CACHE_MIN (64 << 10)
#define CACHE_SLOTS 64
#define HUGE_ALIGN (2 << 20)
static const int64_t CACHE_LIMIT = (int64_t)1 << 30;
static const uint64_t MAGIC = 0xca9d1e5a110cb10cull;

typedef struct {
    uint64_t magic;
    int64_t capacity;
    void *map;       /* the memory map holding the block, or NULL for malloc'd ones */
    size_t map_len;
} block_header;

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static void *cache_ptr[CACHE_SLOTS];
static int64_t cache_cap[CACHE_SLOTS];
static int64_t cache_bytes;

static int64_t round_capacity(int64_t nbytes) {
    if (nbytes < CACHE_MIN) return (nbytes + 63) & ~(int64_t)63;
    /* Sizes round up to 1/8 of their power of two so near sizes share blocks. */
    int64_t p = 1;
    while (p < nbytes) p <<= 1;
    int64_t step = CD_MAX(p / 8, 64);
    return (nbytes + step - 1) / step * step;
}

/* A block in a memory map of its own, its header on a 2 MiB boundary. */
static block_header *map_block(int64_t cap) {
    size_t len = (size_t)cap + HEADER + HUGE_ALIGN;
    char *map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) return NULL;
    char *start = (char *)(((uintptr_t)map + HUGE_ALIGN - 1) & ~(uintptr_t)(HUGE_ALIGN - 1));
    madvise(start, (size_t)cap + HEADER, MADV_HUGEPAGE);
    block_header *h = (block_header *)start;
    h->map = map;
    h->map_len = len;
    return h;
}

void *cd_alloc(int64_t nbytes) {
    if (nbytes < 0 || nbytes > ((int64_t)1 << 46)) {
        cd_fail("cannot allocate %lld bytes", (long long)nbytes);
        return NULL;
    }
    int64_t cap = round_capacity(nbytes);
    block_header *h = NULL;
    if (cap >= CACHE_MIN) {
        pthread_mutex_lock(&cache_lock);
        for (int i = 0; i < CACHE_SLOTS; i++) {
            if (cache_ptr[i] && cache_cap[i] == cap) {
                void *p = cache_ptr[i];
                cache_ptr[i] = NULL;
                cache_bytes -= cap;
                pthread_mutex_unlock(&cache_lock);
                return p;
            }
        }
        pthread_mutex_unlock(&cache_lock);
        h = map_block(cap);
    } else if (posix_memalign((void **)&h, 64, (size_t)cap + HEADER) == 0) {
        h->map = NULL;
    } else {
        h = NULL;
    }
    if (!h) {
        cd_fail("out of memory allocating %lld bytes", (long long)nbytes);
        return NULL;
    }
    h->magic = MAGIC;
    h->capacity = cap;
    return (char *)h + HEADER;
}

static void release(void *p) {
    block_header *h = (block_header *)((char *)p - HEADER);
    h->magic = 0;
    if (h->map) munmap(h->map, h->map_len);
    else free(h);
}

void cd_free(void *p) {
    if (!p) return;
    block_header *h = (block_header *)((char *)p - HEADER);
    if (h->magic != MAGIC) {
        /* Not one of ours: freeing it would corrupt the heap. */
        fprintf(stderr, "candle-backend-cpu: cd_free of a foreign pointer %p ignored\n", p);
        return;
    }
    int64_t cap = h->capacity;
    if (cap >= CACHE_MIN) {
        pthread_mutex_lock(&cache_lock);
        if (cache_bytes + cap <= CACHE_LIMIT) {
            for (int i = 0; i < CACHE_SLOTS; i++) {
                if (!cache_ptr[i]) {
                    cache_ptr[i] = p;
                    cache_cap[i] = cap;
                    cache_bytes += cap;
                    pthread_mutex_unlock(&cache_lock);
                    return;
                }
            }
        }
        pthread_mutex_unlock(&cache_lock);
    }
    release(p);
}

void *cd_scratch(int64_t nbytes) { return cd_alloc(nbytes); }
void cd_scratch_free(void *p) { cd_free(p); }

/* ---- strided iteration ------------------------------------------------------ */
int cd_iter_init(cd_iter *it, const int64_t *lay, int nops, int with_contig_out) {
    int64_t ndim = lay[0];
    int total = nops + (with_contig_out ? 1 : 0);
    if (ndim < 0 || ndim > CD_MAX_DIMS) return cd_fail("rank %lld is out of range", (long long)ndim);
    if (total > CD_ITER_OPS) return cd_fail("too many operands");
    const int64_t *shape = lay + 1;
    int64_t numel = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0) return cd_fail("negative dimension %lld", (long long)shape[d]);
        numel *= shape[d];
    }
    it->numel = numel;
    it->nops = total;
    /* Contiguous output strides, computed over the original dims. */
    int64_t out_strides[CD_MAX_DIMS];
    int64_t acc = 1;
    for (int d = (int)ndim - 1; d >= 0; d--) {
        out_strides[d] = acc;
        acc *= shape[d];
    }
    /* Keep dims of size > 1, then merge neighbours that are contiguous for all operands. */
    int n = 0;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] == 1) continue;
        it->shape[n] = shape[d];
        for (int o = 0; o < nops; o++) it->strides[o][n] = lay[1 + ndim * (1 + o) + d];
        if (with_contig_out) it->strides[nops][n] = out_strides[d];
        n++;
    }
    if (n == 0) {
        it->shape[0] = 1;
        for (int o = 0; o < total; o++) it->strides[o][0] = 0;
        n = 1;
    }
    int m = 0;
    for (int d = 1; d < n; d++) {
        int mergeable = 1;
        for (int o = 0; o < total; o++)
            if (it->strides[o][m] != it->strides[o][d] * it->shape[d]) mergeable = 0;
        if (mergeable) {
            it->shape[m] *= it->shape[d];
            for (int o = 0; o < total; o++) it->strides[o][m] = it->strides[o][d];
        } else {
            m++;
            it->shape[m] = it->shape[d];
            for (int o = 0; o < total; o++) it->strides[o][m] = it->strides[o][d];
        }
    }
    it->ndim = m + 1;
    return 0;
}

void cd_iter_seek(const cd_iter *it, cd_pos *pos, int64_t start) {
    for (int o = 0; o < it->nops; o++) pos->off[o] = 0;
    if (it->numel == 0) { /* nothing to visit, and no dim to divide by */
        for (int d = 0; d < it->ndim; d++) pos->idx[d] = 0;
        return;
    }
    for (int d = it->ndim - 1; d >= 0; d--) {
        int64_t i = start % it->shape[d];
        start /= it->shape[d];
        pos->idx[d] = i;
        for (int o = 0; o < it->nops; o++) pos->off[o] += i * it->strides[o][d];
    }
}

void cd_iter_advance(const cd_iter *it, cd_pos *pos, int64_t steps) {
    int d = it->ndim - 1;
    pos->idx[d] += steps;
    for (int o = 0; o < it->nops; o++) pos->off[o] += steps * it->strides[o][d];
    while (d > 0 && pos->idx[d] >= it->shape[d]) {
        for (int o = 0; o < it->nops; o++) pos->off[o] -= pos->idx[d] * it->strides[o][d];
        pos->idx[d] = 0;
        d--;
        pos->idx[d]++;
        for (int o = 0; o < it->nops; o++) pos->off[o] += it->strides[o][d];
    }
}

void cd_gather_run(int isz, int64_t n, const char *src, int64_t stride, char *dst) {
    if (stride == 0 && isz == 4) { /* a broadcast value (a per-channel scale, say): a fill */
        uint32_t v;
        memcpy(&v, src, sizeof v);
        for (int64_t i = 0; i < n; i++) ((uint32_t *)dst)[i] = v;
        return;
    }
    switch (isz) {
    case 1: for (int64_t i = 0; i < n; i++) dst[i] = src[i * stride]; break;
    case 2: for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = ((const uint16_t *)src)[i * stride]; break;
    case 4: for (int64_t i = 0; i < n; i++) ((uint32_t *)dst)[i] = ((const uint32_t *)src)[i * stride]; break;
    default: for (int64_t i = 0; i < n; i++) ((uint64_t *)dst)[i] = ((const uint64_t *)src)[i * stride]; break;
    }
}

void cd_scatter_run(int isz, int64_t n, const char *src, char *dst, int64_t stride) {
    switch (isz) {
    case 1: for (int64_t i = 0; i < n; i++) dst[i * stride] = src[i]; break;
    case 2: for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i * stride] = ((const uint16_t *)src)[i]; break;
    case 4: for (int64_t i = 0; i < n; i++) ((uint32_t *)dst)[i * stride] = ((const uint32_t *)src)[i]; break;
    default: for (int64_t i = 0; i < n; i++) ((uint64_t *)dst)[i * stride] = ((const uint64_t *)src)[i]; break;
    }
}

/* ---- compute-type rows ---------------------------------------------------------- */
int cd_ct_size(int dtype) { return dtype == CD_f64 ? 8 : 4; }

void cd_load_ct(int dtype, const char *x, int64_t n, int64_t s, void *dst) {
    switch (dtype) {
    case CD_bf16:
        for (int64_t i = 0; i < n; i++) ((float *)dst)[i] = cd_bf16_to_f32(((const uint16_t *)x)[i * s]);
        break;
    case CD_f16:
        for (int64_t i = 0; i < n; i++) ((float *)dst)[i] = cd_f16_to_f32(((const uint16_t *)x)[i * s]);
        break;
    case CD_f32:
        if (s == 1) memcpy(dst, x, (size_t)n * 4);
        else cd_gather_run(4, n, x, s, dst);
        break;
    default:
        if (s == 1) memcpy(dst, x, (size_t)n * 8);
        else cd_gather_run(8, n, x, s, dst);
        break;
    }
}

void cd_store_ct(int dtype, const void *src, int64_t n, char *out) {
    switch (dtype) {
    case CD_bf16: cd_ops.f32_to_bf16(n, src, (uint16_t *)out); break;
    case CD_f16: cd_ops.f32_to_f16(n, src, (uint16_t *)out); break;
    default: memcpy(out, src, (size_t)(n * cd_dtype_size(dtype))); break;
    }
}
