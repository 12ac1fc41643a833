/* Philox4x32-10 counter-based random numbers (Salmon et al., SC'11). Element i of
 * a call draws from counter (offset + i) under key seed, so any thread may
 * compute any element and the stream is the same on every thread count. */
#include "runtime/internal.h"

typedef struct {
    uint32_t v[4];
} philox_block;

static philox_block philox(uint64_t counter, uint64_t seed) {
    uint32_t c0 = (uint32_t)counter, c1 = (uint32_t)(counter >> 32), c2 = 0, c3 = 0;
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1;
        c3 = (uint32_t)p0;
        c0 = n0;
        c2 = n2;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    return (philox_block){{c0, c1, c2, c3}};
}

/* Uniform doubles in [0, 1) with 53 random bits, and in (0, 1] for logs. */
static double u53(uint32_t hi, uint32_t lo) {
    return (double)(((uint64_t)hi << 21) ^ (uint64_t)(lo >> 11)) * (1.0 / 9007199254740992.0);
}

typedef struct {
    int dtype, dist;
    uint64_t seed, offset;
    double p0, p1;
    char *out;
} random_ctx;

static int random_task(void *vctx, int64_t begin, int64_t end) {
    const random_ctx *c = vctx;
    for (int64_t i = begin; i < end; i++) {
        philox_block b = philox(c->offset + (uint64_t)i, c->seed);
        double v;
        if (c->dist == 0) {
            v = c->p0 + (c->p1 - c->p0) * u53(b.v[0], b.v[1]);
        } else {
            double u1 = 1.0 - u53(b.v[0], b.v[1]), u2 = u53(b.v[2], b.v[3]);
            v = c->p0 + c->p1 * sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
        }
        switch (c->dtype) {
        case CD_bf16: ((uint16_t *)c->out)[i] = cd_f32_to_bf16((float)v); break;
        case CD_f16: ((uint16_t *)c->out)[i] = cd_f32_to_f16((float)v); break;
        case CD_f32: {
            float f = (float)v;
            /* Rounding to f32 must not reach the open upper bound. */
            if (c->dist == 0 && f >= (float)c->p1 && c->p1 > c->p0) f = nextafterf((float)c->p1, -INFINITY);
            ((float *)c->out)[i] = f;
            break;
        }
        default: ((double *)c->out)[i] = v; break;
        }
    }
    return 0;
}

int cd_random(int32_t dtype, int32_t dist, int64_t n, void *out, uint64_t seed, uint64_t offset, double p0,
              double p1) {
    if (!cd_dtype_is_float(dtype)) return cd_fail("random values need a float dtype, got %s", cd_dtype_name(dtype));
    if (dist != 0 && dist != 1) return cd_fail("bad distribution %d", dist);
    random_ctx c = {dtype, dist, seed, offset, p0, p1, out};
    return cd_parallel_for(n, CD_GRAIN / 4, random_task, &c);
}
