/* Sorting along the last dim: the first k elements of each row's stable order
 * (k = n sorts the row), their values and u32 indices.
 *
 * Each element becomes an item: an unsigned key whose order is the order
 * wanted, above the element's index (templates/sort_items.h). Floats map to
 * keys as their IEEE bits made monotonic, with -0.0 equal to 0.0 and every
 * NaN one key above +inf (PyTorch's order); descending order complements the
 * keys, so ties still fall to the lower index and NaN comes first. Items of
 * keys up to 32 bits are 64-bit integers, those of i64/f64 128-bit ones.
 * A row is sorted by insertion when short, else by an LSD radix sort over the
 * key's bytes; a small k is a heap selection over the row instead. Values are
 * copied from the input at the chosen indices, bit for bit.
 *
 * Rows are independent and spread over the threads; the stable order is
 * unique, so the result does not depend on the thread count. */
#include "runtime/internal.h"

__extension__ typedef unsigned __int128 cd_u128;

#define SORT_ITEM uint64_t
#define SORT_SHIFT 32
#define SORT_SFX narrow
#include "templates/sort_items.h"
#define SORT_ITEM cd_u128
#define SORT_SHIFT 64
#define SORT_SFX wide
#include "templates/sort_items.h"

/* Rows below this many elements share a thread's chunk. */
#define SORT_GRAIN 4096

/* ---- keys: unsigned images of the values, in the values' order ------------------------------- */
static inline uint32_t key_u8(uint8_t v) { return v; }
static inline uint32_t key_u32(uint32_t v) { return v; }
static inline uint32_t key_i16(int16_t v) { return (uint16_t)v ^ 0x8000u; }
static inline uint32_t key_i32(int32_t v) { return (uint32_t)v ^ 0x80000000u; }
static inline uint64_t key_i64(int64_t v) { return (uint64_t)v ^ 0x8000000000000000ull; }

/* A float's bits (sign bit `top`, positive NaNs above `inf`) as a key: zeros alike, NaNs alike and above inf. */
#define FLOAT_KEY(bits, top, inf, all)                                            \
    (((bits) & ~(top)) > (inf)   ? (all)                                          \
     : ((bits) & ~(top)) == 0    ? (top)                                          \
     : ((bits) & (top))          ? (~(bits) & (all))                              \
                                 : ((bits) | (top)))

static inline uint32_t key_f16(uint16_t h) { return FLOAT_KEY((uint32_t)h, 0x8000u, 0x7c00u, 0xffffu); }
static inline uint32_t key_bf16(uint16_t h) { return FLOAT_KEY((uint32_t)h, 0x8000u, 0x7f80u, 0xffffu); }

static inline uint32_t key_f32(float v) {
    uint32_t b;
    memcpy(&b, &v, 4);
    return FLOAT_KEY(b, 0x80000000u, 0x7f800000u, 0xffffffffu);
}

static inline uint64_t key_f64(double v) {
    uint64_t b;
    memcpy(&b, &v, 8);
    return FLOAT_KEY(b, 0x8000000000000000ull, 0x7ff0000000000000ull, ~0ull);
}

/* items[i] = (key(x[i * xs]) ^ flip) << SHIFT | i */
#define FILL_ITEMS(ITEM, SHIFT, T, KEY)                                                          \
    do {                                                                                         \
        const T *p = (const T *)x;                                                               \
        for (int64_t i = 0; i < n; i++) items[i] = (ITEM)(KEY(p[i * xs]) ^ flip) << SHIFT | (ITEM)i; \
    } while (0)

static void narrow_items(int dtype, const char *x, int64_t n, int64_t xs, uint32_t flip, uint64_t *items) {
    switch (dtype) {
    case CD_u8: FILL_ITEMS(uint64_t, 32, uint8_t, key_u8); break;
    case CD_u32: FILL_ITEMS(uint64_t, 32, uint32_t, key_u32); break;
    case CD_i16: FILL_ITEMS(uint64_t, 32, int16_t, key_i16); break;
    case CD_i32: FILL_ITEMS(uint64_t, 32, int32_t, key_i32); break;
    case CD_f16: FILL_ITEMS(uint64_t, 32, uint16_t, key_f16); break;
    case CD_bf16: FILL_ITEMS(uint64_t, 32, uint16_t, key_bf16); break;
    case CD_f32: FILL_ITEMS(uint64_t, 32, float, key_f32); break;
    default: break;
    }
}

static void wide_items(int dtype, const char *x, int64_t n, int64_t xs, uint64_t flip, cd_u128 *items) {
    if (dtype == CD_i64) FILL_ITEMS(cd_u128, 64, int64_t, key_i64);
    else FILL_ITEMS(cd_u128, 64, double, key_f64);
}

/* ---- rows -------------------------------------------------------------------------------------- */
typedef struct {
    int dtype, isz, key_bytes, descending;
    cd_iter rows;      /* the leading dims: x strides */
    int64_t n, xs, k;  /* row length and stride, elements kept */
    const char *x;
    char *values;
    uint32_t *indices;
} sort_ctx;

/* A heap selection beats sorting the row when k is this small a part of it. */
static int selects(int64_t n, int64_t k) { return k < n && k * 16 <= n; }

/* values[j] = x[idx[j] * xs] and indices[j] = idx[j], for the k indices in items (low bits). */
#define WRITE_OUT(T)                                                                     \
    do {                                                                                 \
        const T *src = (const T *)x;                                                     \
        T *dst = (T *)values;                                                            \
        for (int64_t j = 0; j < c->k; j++) {                                             \
            uint32_t i = (uint32_t)items[j];                                             \
            indices[j] = i;                                                              \
            dst[j] = src[(int64_t)i * c->xs];                                            \
        }                                                                                \
    } while (0)

#define ROW_FN(SFX, ITEM, FILL, FLIP)                                                            \
    static void row_##SFX(const sort_ctx *c, const char *x, ITEM *buf, char *values, uint32_t *indices) { \
        ITEM *items = buf;                                                                       \
        FILL(c->dtype, x, c->n, c->xs, FLIP, items);                                             \
        if (selects(c->n, c->k)) select_##SFX(items, c->n, c->k);                                \
        else items = sort_all_##SFX(items, buf + c->n, c->n, c->key_bytes);                       \
        switch (c->isz) {                                                                        \
        case 1: WRITE_OUT(uint8_t); break;                                                       \
        case 2: WRITE_OUT(uint16_t); break;                                                      \
        case 4: WRITE_OUT(uint32_t); break;                                                      \
        default: WRITE_OUT(uint64_t); break;                                                     \
        }                                                                                        \
    }
ROW_FN(narrow, uint64_t, narrow_items, c->descending ? (uint32_t)((1ull << (8 * c->key_bytes)) - 1) : 0u)
ROW_FN(wide, cd_u128, wide_items, c->descending ? ~0ull : 0ull)

static int sort_task(void *vctx, int64_t begin, int64_t end) {
    const sort_ctx *c = vctx;
    const int wide = c->key_bytes == 8;
    const int64_t item = wide ? (int64_t)sizeof(cd_u128) : (int64_t)sizeof(uint64_t);
    void *buf = cd_scratch(item * c->n * (selects(c->n, c->k) ? 1 : 2));
    if (!buf) return -1;
    cd_pos pos;
    cd_iter_seek(&c->rows, &pos, begin);
    for (int64_t r = begin; r < end; r++) {
        const char *x = c->x + pos.off[0] * c->isz;
        char *values = c->values + r * c->k * c->isz;
        uint32_t *indices = c->indices + r * c->k;
        if (wide) row_wide(c, x, buf, values, indices);
        else row_narrow(c, x, buf, values, indices);
        cd_iter_advance(&c->rows, &pos, 1);
    }
    cd_scratch_free(buf);
    return 0;
}

static int key_bytes(int dtype) {
    switch (dtype) {
    case CD_u8: return 1;
    case CD_i16: case CD_f16: case CD_bf16: return 2;
    case CD_i64: case CD_f64: return 8;
    default: return 4;
    }
}

int cd_sort(int32_t dtype, const int64_t *lay, const void *x, int64_t k, int32_t descending, void *values,
            uint32_t *indices) {
    int64_t ndim = lay[0];
    if (ndim < 1 || ndim > CD_MAX_DIMS) return cd_fail("sort needs a rank of at least 1");
    if (dtype < 0 || dtype >= CD_NUM_DTYPES) return cd_fail("sort: unknown dtype code %d", dtype);
    sort_ctx c = {.dtype = dtype, .isz = cd_dtype_size(dtype), .key_bytes = key_bytes(dtype),
                  .descending = descending != 0, .n = lay[ndim], .xs = lay[2 * ndim], .k = k,
                  .x = x, .values = values, .indices = indices};
    if (c.n > (int64_t)UINT32_MAX) return cd_fail("sort: a row of %lld elements is longer than u32 indices reach",
                                                  (long long)c.n);
    if (k < 0 || k > c.n) return cd_fail("sort: k = %lld is out of range for rows of %lld", (long long)k,
                                         (long long)c.n);
    int64_t sub[1 + 2 * CD_MAX_DIMS];
    sub[0] = ndim - 1;
    for (int64_t d = 0; d < ndim - 1; d++) {
        sub[1 + d] = lay[1 + d];
        sub[ndim + d] = lay[1 + ndim + d];
    }
    if (cd_iter_init(&c.rows, sub, 1, 0)) return -1;
    if (c.rows.numel == 0 || k == 0) return 0;
    return cd_parallel_for(c.rows.numel, CD_MAX(1, SORT_GRAIN / c.n), sort_task, &c);
}
