// A batched matrix product on any strides, tiled through shared memory: the
// kernel for integer dtypes (which wrap), and for floats where cuBLASLt is
// not used (CANDLE_CUDA_GEMM=kernel, the CPU emulation). Floats cuBLASLt
// serves go through matmul.py's cuBLASLt path instead.
//
// out (batch, m, n) contiguous = a (batch, m, k) @ b (batch, k, n); a's and
// b's row and column strides are arguments, their batch offsets come from
// the Strided<2> `batch` (operand 0: a, 1: b) over the flattened batch.
#include "scalar.cuh"

#define TILE 16

template <typename T> struct Mac { typedef typename Acc<T>::type type; };
template <> struct Mac<u8> { typedef u64 type; };
template <> struct Mac<u32> { typedef u64 type; };
template <> struct Mac<i16> { typedef u64 type; };
template <> struct Mac<i32> { typedef u64 type; };
template <> struct Mac<i64> { typedef u64 type; };

template <typename T>
__device__ void matmul_impl(T* out, const T* a, const T* b, i64 nbatch, i64 m, i64 n, i64 k, i64 sam, i64 sak,
                            i64 sbk, i64 sbn, const Strided<2>& batch) {
    typedef typename Mac<T>::type M;
    __shared__ M ta[TILE][TILE];
    __shared__ M tb[TILE][TILE + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const i64 row = (i64)blockIdx.y * TILE + ty, col = (i64)blockIdx.x * TILE + tx;
    for (i64 z = blockIdx.z; z < nbatch; z += gridDim.z) {
        i64 off[2];
        offsets(batch, z, off);
        const T* pa = a + off[0];
        const T* pb = b + off[1];
        M acc = M(0);
        for (i64 k0 = 0; k0 < k; k0 += TILE) {
            ta[ty][tx] = (row < m && k0 + tx < k) ? (M)load(pa[row * sam + (k0 + tx) * sak]) : M(0);
            tb[ty][tx] = (k0 + ty < k && col < n) ? (M)load(pb[(k0 + ty) * sbk + col * sbn]) : M(0);
            __syncthreads();
            for (int j = 0; j < TILE; ++j) acc = acc + ta[ty][j] * tb[j][tx];
            __syncthreads();
        }
        if (row < m && col < n) {
            if constexpr (IsFloat<T>::value) out[(z * m + row) * n + col] = store<T>(acc);
            else out[(z * m + row) * n + col] = (T)acc;
        }
    }
}
#define MATMUL(T)                                                                                         \
    KERNEL(matmul_##T, T* out, const T* a, const T* b, i64 nbatch, i64 m, i64 n, i64 k, i64 sam, i64 sak,  \
           i64 sbk, i64 sbn, Strided<2> batch) {                                                           \
        matmul_impl<T>(out, a, b, nbatch, m, n, k, sam, sak, sbk, sbn, batch);                             \
    }
FOR_ALL(MATMUL)
