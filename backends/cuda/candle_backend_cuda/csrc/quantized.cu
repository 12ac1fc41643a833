// The quantized rows on GGML blocks (a flat u8 storage): dequantize,
// qembedding and qmatmul, each decoding the values it reads, so weights stay
// quantized on the GPU.
//
// dq() decodes value j of one block of any type candle-api knows (Q4_0 to
// Q8_1, Q2_K to Q8_K, IQ4_NL, IQ4_XS, MXFP4, and f32, f16, bf16 as blocks of
// one), following the reference dequantizers operation for operation in f32
// with every multiply and add rounded on its own (__fmul_rn and friends: no
// contraction into fused multiply-adds, which round once where ggml rounds
// twice), so dequantize is bit-exact with ggml.
#include "common.cuh"

__device__ __forceinline__ float h2f(const u8* p) {
    __half_raw r;
    r.x = (u16)(p[0] | (p[1] << 8));
    return __half2float(__half(r));
}
__device__ __forceinline__ float f32_at(const u8* p) {
    return __uint_as_float((u32)p[0] | ((u32)p[1] << 8) | ((u32)p[2] << 16) | ((u32)p[3] << 24));
}
// Value j (< 32) of 16 bytes of nibbles: the low nibbles hold 0-15, the high 16-31.
__device__ __forceinline__ int nib32(const u8* q, int j) { return j < 16 ? q[j] & 15 : q[j - 16] >> 4; }
// 2-bit value j of 128 packed as four crumbs per byte over 32 bytes.
__device__ __forceinline__ int crumb128(const u8* q, int j) { return (q[j % 32] >> (2 * (j / 32))) & 3; }
// Bit j of 256 as eight planes of 32 bytes.
__device__ __forceinline__ int plane256(const u8* q, int j) { return (q[j % 32] >> (j / 32)) & 1; }
__device__ __forceinline__ float mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ float sub(float a, float b) { return __fsub_rn(a, b); }
__device__ __forceinline__ float add(float a, float b) { return __fadd_rn(a, b); }

// Q4_K and Q5_K: the 6-bit scale (first) and min (second) of sub-block s (0-7) from 12 bytes.
__device__ __forceinline__ void scale_min_k4(const u8* s, int j, float& sc, float& mn) {
    if (j < 4) {
        sc = (float)(s[j] & 63);
        mn = (float)(s[j + 4] & 63);
    } else {
        sc = (float)((s[j + 4] & 15) | ((s[j - 4] >> 6) << 4));
        mn = (float)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

__device__ __forceinline__ float iq4(int q) {
    const signed char grid[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
    return (float)grid[q];
}

__device__ float dq(int qtype, const u8* b, int j) {
    switch (qtype) {
        case 0: return f32_at(b);                                                      // f32
        case 1: return h2f(b);                                                         // f16
        case 30: return __uint_as_float((u32)(b[0] | (b[1] << 8)) << 16);              // bf16
        case 2: return mul((float)(nib32(b + 2, j) - 8), h2f(b));                      // q4_0
        case 3: return add(mul((float)nib32(b + 4, j), h2f(b)), h2f(b + 2));           // q4_1
        case 6: {                                                                      // q5_0
            int q = nib32(b + 6, j) | (((b[2 + j / 8] >> (j % 8)) & 1) << 4);
            return mul((float)(q - 16), h2f(b));
        }
        case 7: {                                                                      // q5_1
            int q = nib32(b + 8, j) | (((b[4 + j / 8] >> (j % 8)) & 1) << 4);
            return add(mul((float)q, h2f(b)), h2f(b + 2));
        }
        case 8: return mul((float)(signed char)b[2 + j], h2f(b));                     // q8_0
        case 9: return mul((float)(signed char)b[4 + j], h2f(b));                     // q8_1
        case 10: {                                                                     // q2k
            int sc = b[j / 16], q = crumb128(b + 16 + (j / 128) * 32, j % 128);
            return sub(mul(mul(h2f(b + 80), (float)(sc & 15)), (float)q), mul(h2f(b + 82), (float)(sc >> 4)));
        }
        case 11: {                                                                     // q3k
            int s = j / 16;
            int nib = s < 8 ? b[96 + s] & 15 : b[88 + s] >> 4;
            int level = nib | (((b[104 + s % 4] >> (2 * (s / 4))) & 3) << 4);
            int q = crumb128(b + 32 + (j / 128) * 32, j % 128) - (plane256(b, j) ? 0 : 4);
            return mul(mul(h2f(b + 108), (float)(level - 32)), (float)q);
        }
        case 12: case 13: {                                                            // q4k, q5k
            float sc, mn;
            scale_min_k4(b + 4, j / 32, sc, mn);
            const u8* qs = b + (qtype == 12 ? 16 : 48);
            u8 byte = qs[(j / 64) * 32 + j % 32];
            int q = j % 64 >= 32 ? byte >> 4 : byte & 15;
            if (qtype == 13) q |= plane256(b + 16, j) << 4;
            return sub(mul(mul(h2f(b), sc), (float)q), mul(h2f(b + 2), mn));
        }
        case 14: {                                                                     // q6k
            int w = j % 128;
            u8 byte = b[(j / 128) * 64 + w % 64];
            int low = w >= 64 ? byte >> 4 : byte & 15;
            int q = (low | (crumb128(b + 128 + (j / 128) * 32, w) << 4)) - 32;
            return mul(mul(h2f(b + 208), (float)(signed char)b[192 + j / 16]), (float)q);
        }
        case 15: return mul(f32_at(b), (float)(signed char)b[4 + j]);                 // q8k (d * q)
        case 20: return mul(h2f(b), iq4(nib32(b + 2, j)));                           // iq4_nl
        case 23: {                                                                     // iq4_xs
            int s = j / 32;
            int lo = (b[4 + s / 2] >> (4 * (s % 2))) & 15, hi = ((b[2] | (b[3] << 8)) >> (2 * s)) & 3;
            return mul(mul(h2f(b), (float)((lo | (hi << 4)) - 32)), iq4(nib32(b + 8 + s * 16, j % 32)));
        }
        case 39: {                                                                     // mxfp4
            const signed char grid[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
            u32 e = b[0];
            float scale = __uint_as_float(e < 2 ? 0x00200000u << e : (e - 1) << 23);
            return mul((float)grid[nib32(b + 1, j)], scale);
        }
        default: return 0.0f;
    }
}

// n values of blocks of bs values, ts bytes each
KERNEL(dequantize, f32* out, const u8* blocks, i64 n, i32 qtype, i32 bs, i32 ts) {
    GRID_LOOP(i, n) out[i] = dq(qtype, blocks + (i / bs) * ts, (int)(i % bs));
}

// rows ids (checked i64) of W (rows, k): out (nids, k)
KERNEL(qembedding, f32* out, const u8* blocks, const i64* ids, i64 nids, i64 k, i32 qtype, i32 bs, i32 ts) {
    GRID_LOOP(i, nids * k) {
        i64 row = ids[i / k], e = i % k;
        out[i] = dq(qtype, blocks + (row * (k / bs) + e / bs) * ts, (int)(e % bs));
    }
}

// out (m, n) = x (m, k) @ W^T with W (n, k) in blocks: a warp per output column and up to
// ROWS rows of x at a time, each decoded weight used for all of them; lanes split k.
#define ROWS 8
KERNEL(qmatmul, f32* out, const f32* x, const u8* blocks, i64 m, i64 n, i64 k, i32 qtype, i32 bs, i32 ts) {
    const int lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    const i64 col = (i64)blockIdx.x * warps + (threadIdx.x >> 5);
    if (col >= n) return;  // whole warps leave together
    const u8* row = blocks + col * (k / bs) * ts;
    for (i64 r0 = (i64)blockIdx.y * ROWS; r0 < m; r0 += (i64)gridDim.y * ROWS) {
        const int rows = (int)mn<i64>(ROWS, m - r0);
        float acc[ROWS];
        for (int r = 0; r < ROWS; ++r) acc[r] = 0.0f;
        for (i64 e = lane; e < k; e += 32) {
            float w = dq(qtype, row + (e / bs) * ts, (int)(e % bs));
            for (int r = 0; r < rows; ++r) acc[r] += w * x[(r0 + r) * k + e];
        }
        for (int r = 0; r < rows; ++r) {
            float s = warp_sum(acc[r]);
            if (lane == 0) out[(r0 + r) * n + col] = s;
        }
    }
}
