/* Ordering packed sort items, included by kernels/sort.c once per item width.
 *
 * An item holds a row element's key (an unsigned image of its value whose
 * order is the order wanted) above the element's index. Items are distinct,
 * and their plain unsigned order is the stable order of the keys: equal keys
 * fall to the lower index. So any sort of the items, stable or not, gives the
 * stable order, and so does a selection of the k smallest.
 *
 * Defined by the includer:
 *   SORT_ITEM   the item type (uint64_t for keys of up to 32 bits, cd_u128 for 64-bit keys)
 *   SORT_SHIFT  the bit the key starts at (32 or 64)
 *   SORT_SFX    the suffix of the generated functions
 */
#define SORT_CAT_(a, b) a##_##b
#define SORT_CAT(a, b) SORT_CAT_(a, b)
#define SORT_FN(name) SORT_CAT(name, SORT_SFX)

/* Rows this short are sorted by insertion: a radix pass costs its histograms. */
#define SORT_INSERTION_MAX 48

static void SORT_FN(insertion)(SORT_ITEM *a, int64_t n) {
    for (int64_t i = 1; i < n; i++) {
        SORT_ITEM v = a[i];
        int64_t j = i;
        for (; j > 0 && a[j - 1] > v; j--) a[j] = a[j - 1];
        a[j] = v;
    }
}

/* Least significant digit first radix sort on the key's bytes (the index
 * below them is already in order, and each pass is stable). Bytes on which
 * every key agrees are skipped. Returns the buffer holding the result: a or tmp. */
static SORT_ITEM *SORT_FN(radix)(SORT_ITEM *a, SORT_ITEM *tmp, int64_t n, int key_bytes) {
    uint32_t count[8][256];
    memset(count, 0, sizeof(count[0]) * (size_t)key_bytes);
    for (int64_t i = 0; i < n; i++) {
        SORT_ITEM key = a[i] >> SORT_SHIFT;
        for (int b = 0; b < key_bytes; b++) count[b][(unsigned)(key >> (8 * b)) & 255u]++;
    }
    for (int b = 0; b < key_bytes; b++) {
        const int shift = SORT_SHIFT + 8 * b;
        if (count[b][(unsigned)(a[0] >> shift) & 255u] == (uint32_t)n) continue; /* one digit for all */
        uint32_t start[256], sum = 0;
        for (int d = 0; d < 256; d++) {
            start[d] = sum;
            sum += count[b][d];
        }
        for (int64_t i = 0; i < n; i++) tmp[start[(unsigned)(a[i] >> shift) & 255u]++] = a[i];
        SORT_ITEM *t = a;
        a = tmp;
        tmp = t;
    }
    return a;
}

/* The whole row in order; returns the buffer holding it (a or tmp). */
static SORT_ITEM *SORT_FN(sort_all)(SORT_ITEM *a, SORT_ITEM *tmp, int64_t n, int key_bytes) {
    if (n <= SORT_INSERTION_MAX) {
        SORT_FN(insertion)(a, n);
        return a;
    }
    return SORT_FN(radix)(a, tmp, n, key_bytes);
}

static void SORT_FN(sift_down)(SORT_ITEM *heap, int64_t size, int64_t i) {
    SORT_ITEM v = heap[i];
    for (;;) {
        int64_t child = 2 * i + 1;
        if (child >= size) break;
        if (child + 1 < size && heap[child + 1] > heap[child]) child++;
        if (heap[child] <= v) break;
        heap[i] = heap[child];
        i = child;
    }
    heap[i] = v;
}

/* The k smallest items of a[0..n) moved to a[0..k), in order (0 < k <= n): a
 * max-heap of the best k so far, which a later item enters only when it is
 * smaller than the heap's largest; then the heap sorted in place. */
static void SORT_FN(select)(SORT_ITEM *a, int64_t n, int64_t k) {
    for (int64_t i = k / 2 - 1; i >= 0; i--) SORT_FN(sift_down)(a, k, i);
    for (int64_t i = k; i < n; i++) {
        if (a[i] < a[0]) {
            a[0] = a[i];
            SORT_FN(sift_down)(a, k, 0);
        }
    }
    for (int64_t end = k - 1; end > 0; end--) {
        SORT_ITEM top = a[0];
        a[0] = a[end];
        a[end] = top;
        SORT_FN(sift_down)(a, end, 0);
    }
}

#undef SORT_ITEM
#undef SORT_SHIFT
#undef SORT_SFX
#undef SORT_FN
#undef SORT_CAT
#undef SORT_CAT_
#undef SORT_INSERTION_MAX
