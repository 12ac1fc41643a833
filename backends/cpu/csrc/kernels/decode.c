/* One decoding step of a Llama-family decoder on quantized weights, in one call
 * (candle_models.decode_step binds it through the cpu device's bind_decode_step).
 *
 * The step's kernels are this library's own entry points called on the inputs
 * the bound Python step gives them (norms, products, rope, the cache's copies,
 * attention, adds, the SwiGLU gate), in the same order: the logits are the
 * same bit for bit. What it saves is the calls: a token of a 30-layer model is
 * ~400 kernel calls from Python, ~1 ms of interpreter and ctypes work on this
 * machine, as much as a second thread saves on the products of a small model. */
#include "runtime/internal.h"

/* One product y (n) = x (k) @ W^T over parts written side by side (a fused q/k/v of mixed types). */
static int product(const cd_dproj *p, int64_t k, const float *x, float *y) {
    for (int64_t i = 0; i < p->nparts; i++) {
        const cd_dpart *part = &p->part[i];
        int rc = part->packed ? cd_qmatmul_packed(part->type, 1, part->n, k, part->w, x, y)
                              : cd_qmatmul(part->type, 1, part->n, k, part->w, x, y);
        if (rc) return rc;
        y += part->n;
    }
    return 0;
}

static int check_proj(const cd_dproj *proj, int64_t layer) {
    if (proj->nparts >= 1 && proj->nparts <= CD_DECODE_MAX_PARTS) return 0;
    return cd_fail("decode_step: a product of %lld parts (layer %lld)", (long long)proj->nparts, (long long)layer);
}

static int check_plan(const cd_dplan *p) {
    if (p->n_layers < 0 || p->hidden <= 0 || p->heads <= 0 || p->kv_heads <= 0 || p->head_dim <= 0 ||
        p->ffn <= 0 || p->heads % p->kv_heads || p->capacity <= 0 || !p->layers || !p->work)
        return cd_fail("decode_step: a plan with bad sizes or no buffers");
    if (check_proj(&p->head, -1)) return -1;
    for (int64_t l = 0; l < p->n_layers; l++) {
        const cd_dlayer *L = &p->layers[l];
        if (check_proj(&L->qkv, l) || check_proj(&L->o, l) || check_proj(&L->gu, l) || check_proj(&L->down, l))
            return -1;
    }
    return 0;
}

/* The layer's attention: q/k/v, rope, the new key and value into the cache at pos, attention over the
 * keys its window sees, into att. */
static int attention(const cd_dplan *p, const cd_dlayer *L, int64_t pos, const float *cos, const float *sin,
                     const float *n, float *qkv, float *qk, float *att) {
    const int64_t h = p->heads, kvh = p->kv_heads, d = p->head_dim, end = pos + 1;
    int rc = product(&L->qkv, p->hidden, n, qkv);
    if (!rc) rc = cd_rope(CD_f32, p->rope_shape, p->rope_strides, qkv, cos, sin, qk, p->interleaved, 0);
    if (rc) return rc;
    for (int64_t j = 0; j < kvh; j++) { /* keys roped (qk's last heads), values as they came (qkv's) */
        const int64_t slot = j * p->cache_head_stride + pos * d;
        memcpy(L->keys + slot, qk + (h + j) * d, (size_t)d * sizeof(float));
        memcpy(L->values + slot, qkv + (h + kvh + j) * d, (size_t)d * sizeof(float));
    }
    const int64_t start = L->window <= 0 || end <= L->window ? 0 : end - L->window;
    int64_t desc[CD_DECODE_SDPA_DESC];
    memcpy(desc, p->sdpa_desc, sizeof desc);
    desc[2] = end - start; /* the keys seen */
    return cd_sdpa(CD_f32, desc, qk, L->keys + start * d, L->values + start * d, NULL, -1, att, L->scale);
}

CD_API int cd_decode_step(const cd_dplan *p, int64_t pos, const float *x, const float *cos, const float *sin,
                          float *logits) {
    if (check_plan(p)) return -1;
    if (pos < 0 || pos >= p->capacity)
        return cd_fail("decode_step: position %lld is outside the cache's %lld", (long long)pos,
                       (long long)p->capacity);
    const int64_t hidden = p->hidden, ffn = p->ffn, qd = p->heads * p->head_dim;
    const int64_t width = (p->heads + 2 * p->kv_heads) * p->head_dim;
    /* the buffers, in the order the plan's work holds them */
    float *xa = p->work, *xb = xa + hidden, *n = xb + hidden, *qkv = n + hidden, *qk = qkv + width;
    float *att = qk + width, *y = att + qd, *gu = y + hidden, *g = gu + 2 * ffn;
    const cd_binary_fn add = cd_binary_kernel(CD_BINARY_add, CD_f32);
    const float *xs = x;
    for (int64_t l = 0; l < p->n_layers; l++) {
        const cd_dlayer *L = &p->layers[l];
        float *x1 = xs == xa ? xb : xa; /* the stream after attention, written from xs */
        int rc = cd_norm_last(CD_f32, p->norm_desc, xs, NULL, L->norm[0], NULL, n, L->eps[0], 1);
        if (!rc) rc = attention(p, L, pos, cos, sin, n, qkv, qk, att);
        if (!rc) rc = product(&L->o, qd, att, y);
        if (!rc) rc = add(hidden, xs, y, x1);
        if (!rc) rc = cd_norm_last(CD_f32, p->norm_desc, x1, NULL, L->norm[1], NULL, n, L->eps[1], 1);
        if (!rc) rc = product(&L->gu, hidden, n, gu);
        if (!rc) rc = cd_silu_mul(CD_f32, 1, ffn, gu, g);
        if (!rc) rc = product(&L->down, ffn, g, y);
        float *x2 = x1 == xa ? xb : xa;
        if (!rc) rc = add(hidden, x1, y, x2);
        if (rc) return rc;
        xs = x2;
    }
    if (cd_norm_last(CD_f32, p->norm_desc, xs, NULL, p->final_norm, NULL, n, p->final_eps, 1)) return -1;
    return product(&p->head, hidden, n, logits);
}
