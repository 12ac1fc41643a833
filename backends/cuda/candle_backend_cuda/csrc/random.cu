// Seeded random numbers: Philox4x32-10 (Salmon et al., SC'11), the
// counter-based generator of cuRAND and JAX. Element i of a draw is the
// generator at counter offset + i under the key seed, so a draw depends only
// on (seed, offset + i), as the contract asks. Uniform values take 24 random
// bits (f32 and narrower) or 53 (f64); normal ones come from Box-Muller.
#include "common.cuh"

__device__ __forceinline__ void philox(u32 (&c)[4], u32 k0, u32 k1) {
    for (int round = 0; round < 10; ++round) {
        u32 hi0 = __umulhi(0xD2511F53u, c[0]), lo0 = 0xD2511F53u * c[0];
        u32 hi1 = __umulhi(0xCD9E8D57u, c[2]), lo1 = 0xCD9E8D57u * c[2];
        u32 n0 = hi1 ^ c[1] ^ k0, n2 = hi0 ^ c[3] ^ k1;
        c[0] = n0; c[1] = lo1; c[2] = n2; c[3] = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
}

// dist 0: uniform in [p0, p1); 1: normal with mean p0 and standard deviation p1.
template <typename T>
__device__ void random_impl(T* out, i64 n, i32 dist, f64 p0, f64 p1, u64 seed, u64 offset) {
    typedef typename Acc<T>::type C;
    GRID_LOOP(i, n) {
        u64 ctr = offset + (u64)i;
        u32 c[4] = {(u32)ctr, (u32)(ctr >> 32), 0u, 0u};
        philox(c, (u32)seed, (u32)(seed >> 32));
        double u1, u2;
        if (sizeof(T) == 8) {
            u1 = (double)((((u64)c[0] << 32) | c[1]) >> 11) * 0x1.0p-53;
            u2 = (double)((((u64)c[2] << 32) | c[3]) >> 11) * 0x1.0p-53;
        } else {
            u1 = (double)(c[0] >> 8) * 0x1.0p-24;
            u2 = (double)(c[1] >> 8) * 0x1.0p-24;
        }
        double v;
        if (dist == 0) {
            v = p0 + (p1 - p0) * u1;
        } else {  // 1 - u1 lies in (0, 1]: the log is finite
            v = p0 + p1 * sqrt(-2.0 * log(1.0 - u1)) * cos(6.283185307179586 * u2);
        }
        T r = store<T>((C)v);
        // rounding must not reach the open upper bound (f32, f64: the largest value below it)
        if (dist == 0 && p1 > p0 && (double)load(r) >= p1) {
            if constexpr (IsSame<T, f32>::value) {
                float t = (float)p1;
                r = (double)t >= p1 ? nextafterf(t, -3.0e38f) : t;
            } else if constexpr (IsSame<T, f64>::value) {
                r = nextafter(p1, -1.0e308);
            }
        }
        out[i] = r;
    }
}
#define RANDOM(T) \
    KERNEL(random_##T, T* out, i64 n, i32 dist, f64 p0, f64 p1, u64 seed, u64 offset) { random_impl<T>(out, n, dist, p0, p1, seed, offset); }
FOR_FLOATS(RANDOM)
