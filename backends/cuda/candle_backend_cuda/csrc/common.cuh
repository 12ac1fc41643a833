// What every kernel file shares: integer and float types, the strided
// layouts kernels take by value, loads and stores in the compute type,
// the launch-loop helpers and the device-side error word.
//
// Every kernel is declared with KERNEL(name, params...): an extern "C"
// __global__ function (a plain name for cuModuleGetFunction), which the CPU
// emulation (emu/, CANDLE_EMU) also registers by name. The sources compile
// with nvcc (fatbins), NVRTC (no host headers: only cuda_fp16.h and
// cuda_bf16.h, from the nvidia-cuda-runtime wheel) and, for the emulation,
// g++.
#pragma once

#ifdef CANDLE_EMU
#include "emu.h"
#else
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#define EMU_REGISTER(name)
#endif

// A block's dynamic shared memory (the launch's sharedMemBytes) as a T array.
#ifdef CANDLE_EMU
#define DYNAMIC_SHARED(T, name) T* name = reinterpret_cast<T*>(emu::dynamic_shared())
#else
#define DYNAMIC_SHARED(T, name)                                   \
    extern __shared__ __align__(16) unsigned char candle_smem[];  \
    T* name = reinterpret_cast<T*>(candle_smem)
#endif

#define KERNEL(name, ...)                            \
    extern "C" __global__ void name(__VA_ARGS__);    \
    EMU_REGISTER(name)                               \
    extern "C" __global__ void name(__VA_ARGS__)

// KERNEL for launches of at most `threads` threads a block, which lets ptxas use more registers.
#define KERNEL_BOUNDED(threads, name, ...)                                   \
    extern "C" __global__ void __launch_bounds__(threads) name(__VA_ARGS__); \
    EMU_REGISTER(name)                                                       \
    extern "C" __global__ void __launch_bounds__(threads) name(__VA_ARGS__)

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef short i16;
typedef int i32;
typedef long long i64;
typedef __half f16;
typedef __nv_bfloat16 bf16;
typedef float f32;
typedef double f64;

// The dtypes, for instantiating a kernel template once per dtype: M(type).
#define FOR_INTS(M) M(u8) M(u32) M(i16) M(i32) M(i64)
#define FOR_FLOATS(M) M(bf16) M(f16) M(f32) M(f64)
#define FOR_ALL(M) FOR_INTS(M) FOR_FLOATS(M)
#define FOR_NO_I64(M) M(u8) M(u32) M(i16) M(i32) FOR_FLOATS(M)

// ---- layouts ---------------------------------------------------------------------------------------
// The host merges dims before a launch (launch.py): more than MAXD dims left
// run as several launches over the outer ones.
#define MAXD 8

// K operands sharing one shape: element i of the shape sits at
// sum_d coord_d * st[k][d] in operand k (zero strides broadcast, negative
// ones reverse). rank 0 means "contiguous": element i at i in every operand.
template <int K>
struct Strided {
    i64 shape[MAXD];
    i64 st[K][MAXD];
    i32 rank;
};

// Element i's offset in each operand, its coordinates found by division in the index's type I: a u32
// index (from a caller that knows i and every dim are under 2^31) divides in a few instructions where
// a 64-bit division is a long subroutine.
// (binary_f32 averaged 16.6 us a call on an H200 in a MiniLM-shaped model, torch's add 4.7 us:
// most of those calls add a bias broadcast along a matrix's rows.)
template <int K, typename I = i64>
__device__ __forceinline__ void offsets(const Strided<K>& l, I i, i64 (&off)[K]) {
    if (l.rank == 0) {
        for (int k = 0; k < K; ++k) off[k] = (i64)i;
        return;
    }
    for (int k = 0; k < K; ++k) off[k] = 0;
    for (int d = l.rank - 1; d >= 0; --d) {
        const I n = (I)l.shape[d], c = i % n;
        i /= n;
        for (int k = 0; k < K; ++k) off[k] += (i64)c * l.st[k][d];
    }
}

// ---- the compute type: f16 and bf16 compute in f32 and round once --------------------------------
template <typename T> struct Acc { typedef T type; };
template <> struct Acc<f16> { typedef float type; };
template <> struct Acc<bf16> { typedef float type; };

template <typename T> __device__ __forceinline__ typename Acc<T>::type load(const T& v) { return v; }
template <> __device__ __forceinline__ float load<f16>(const f16& v) { return __half2float(v); }
template <> __device__ __forceinline__ float load<bf16>(const bf16& v) { return __bfloat162float(v); }

template <typename T> __device__ __forceinline__ T store(typename Acc<T>::type v) { return v; }
template <> __device__ __forceinline__ f16 store<f16>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ bf16 store<bf16>(float v) { return __float2bfloat16_rn(v); }

template <typename T> struct IsFloat { static const bool value = false; };
template <> struct IsFloat<f16> { static const bool value = true; };
template <> struct IsFloat<bf16> { static const bool value = true; };
template <> struct IsFloat<f32> { static const bool value = true; };
template <> struct IsFloat<f64> { static const bool value = true; };

template <typename A, typename B> struct IsSame { static const bool value = false; };
template <typename A> struct IsSame<A, A> { static const bool value = true; };

template <typename T> struct IsSigned { static const bool value = T(-1) < T(0); };

// x < 0, without the compiler's warning about unsigned types
template <typename T> __device__ __forceinline__ bool negative(T x) {
    if constexpr (IsSigned<T>::value) return x < T(0);
    else return false;
}

// ---- loops ----------------------------------------------------------------------------------------
__device__ __forceinline__ i64 thread_index() { return blockIdx.x * (i64)blockDim.x + threadIdx.x; }
__device__ __forceinline__ i64 thread_count() { return (i64)blockDim.x * gridDim.x; }

#define GRID_LOOP(i, n) for (i64 i = thread_index(); i < (n); i += thread_count())

// The element-wise loop: write(i, off, compute(i, off)) for each element i of n, off its offsets in
// the K operands. Contiguous operands (rank 0) go four elements a thread at a time, all four computed
// (their loads issued) before the first is written: one load in flight per thread left an H200's
// memory two-fifths idle (a copy moved 2.5 of its 4.2 TB/s).
template <int K, typename Compute, typename Write>
__device__ __forceinline__ void each_element(i64 n, const Strided<K>& l, Compute compute, Write write) {
    const i64 step = thread_count();
    i64 i = thread_index();
    if (l.rank == 0) {
        for (; i + 3 * step < n; i += 4 * step) {
            i64 o[4][K];
            for (int u = 0; u < 4; ++u)
                for (int k = 0; k < K; ++k) o[u][k] = i + u * step;
            auto v0 = compute(i, o[0]);
            auto v1 = compute(i + step, o[1]);
            auto v2 = compute(i + 2 * step, o[2]);
            auto v3 = compute(i + 3 * step, o[3]);
            write(i, o[0], v0);
            write(i + step, o[1], v1);
            write(i + 2 * step, o[2], v2);
            write(i + 3 * step, o[3], v3);
        }
    }
    const bool narrow = n <= 0x7fffffff;
    for (; i < n; i += step) {
        i64 o[K];
        if (narrow) offsets(l, (u32)i, o);
        else offsets(l, i, o);
        write(i, o, compute(i, o));
    }
}

// N elements of T moved as one access of N * sizeof(T) bytes (ld.global.v4 and st.global.v4 at 16).
template <typename T, int N>
struct alignas(sizeof(T) * N) Vec {
    T v[N];
};

__device__ __forceinline__ bool aligned16(const void* p) { return ((u64)p & 15) == 0; }

template <typename... T>
__device__ constexpr int widest() {
    int w = 1;
    ((w = (int)sizeof(T) > w ? (int)sizeof(T) : w), ...);
    return w;
}

template <int... I> struct Seq {};
template <int N, int... I> struct MakeSeq : MakeSeq<N - 1, N - 1, I...> {};
template <int... I> struct MakeSeq<0, I...> { typedef Seq<I...> type; };

// out[i] = op(i, in[i]...) for i < n when every pointer is 16-byte aligned, false (nothing done)
// otherwise. A thread moves packs of N elements, N making the widest operand's pack 16 bytes (the
// narrower ones' are N elements too), two packs computed (loaded) before either is stored: the
// element loop's one scalar access a thread left the memory system short of requests.
template <typename Op, typename Out, typename... In>
__device__ __forceinline__ bool each_pack(i64 n, Op op, Out* out, const In*... in) {
    if (!(aligned16(out) && ... && aligned16(in))) return false;
    constexpr int N = 16 / widest<Out, In...>();
    auto compute = [&](i64 p) {
        Vec<Out, N> r;
        auto apply = [&](Vec<In, N>... v) {  // by value: each a 16-byte (or narrower) load
            for (int e = 0; e < N; ++e) r.v[e] = op(p * N + e, v.v[e]...);
        };
        apply(reinterpret_cast<const Vec<In, N>*>(in)[p]...);
        return r;
    };
    const i64 packs = n / N, step = thread_count();
    i64 p = thread_index();
    Vec<Out, N>* o = reinterpret_cast<Vec<Out, N>*>(out);
    for (; p + step < packs; p += 2 * step) {
        Vec<Out, N> r0 = compute(p), r1 = compute(p + step);
        o[p] = r0;
        o[p + step] = r1;
    }
    if (p < packs) o[p] = compute(p);
    for (i64 i = packs * N + thread_index(); i < n; i += step) out[i] = op(i, in[i]...);
    return true;
}

template <int K, typename Op, typename Out, int... I, typename... In>
__device__ __forceinline__ void map_strided(i64 n, const Strided<K>& l, Op op, Out* out, Seq<I...>, const In*... in) {
    each_element(n, l, [&](i64 i, const auto& o) { return op(i, in[o[I]]...); },
                 [&](i64 i, const auto&, Out v) { out[i] = v; });
}

// each_pack for a layout of rows (rank 2) that every input reads contiguously within a row, a row
// stride apart (0: broadcast, as a bias added along a matrix's rows); false (nothing done) unless the
// row length, every pointer and every row stride allow 16-byte packs. A pack a thread a step.
template <int K, typename Op, typename Out, int... I, typename... In>
__device__ __forceinline__ bool each_pack_rows(i64 n, const Strided<K>& l, Op op, Out* out, Seq<I...>,
                                               const In*... in) {
    constexpr int N = 16 / widest<Out, In...>();
    const i64 cols = l.shape[1];
    if (cols % N || n / N > 0x7fffffff || !(aligned16(out) && ... && aligned16(in))) return false;
    if (((l.st[I][1] != 1 || l.st[I][0] * (i64)sizeof(In) % 16) || ...)) return false;
    const u32 packs = (u32)(n / N), row_packs = (u32)(cols / N);
    Vec<Out, N>* o = reinterpret_cast<Vec<Out, N>*>(out);
    for (i64 p = thread_index(); p < packs; p += thread_count()) {
        const u32 r = (u32)p / row_packs, c = ((u32)p - r * row_packs) * N;
        Vec<Out, N> res;
        auto apply = [&](Vec<In, N>... v) {
            for (int e = 0; e < N; ++e) res.v[e] = op(p * N + e, v.v[e]...);
        };
        apply(*reinterpret_cast<const Vec<In, N>*>(in + r * l.st[I][0] + c)...);
        o[p] = res;
    }
    return true;
}

// out[i] = op(i, the K inputs' element i) for i < n, out contiguous, the inputs on layout l:
// each_pack's 16-byte packs when l is contiguous and every pointer aligned, each_pack_rows' on rows,
// else the element loop.
template <int K, typename Op, typename Out, typename... In>
__device__ __forceinline__ void map_elements(i64 n, const Strided<K>& l, Op op, Out* out, const In*... in) {
    static_assert(sizeof...(In) == K, "one layout operand per input");
    if (l.rank == 0 && each_pack(n, op, out, in...)) return;
    if (l.rank == 2 && each_pack_rows(n, l, op, out, typename MakeSeq<K>::type(), in...)) return;
    map_strided(n, l, op, out, typename MakeSeq<K>::type(), in...);
}

// IEEE infinity and NaN in f32 or f64 (no math.h macros under NVRTC).
template <typename C> __device__ __forceinline__ C infinity();
template <> __device__ __forceinline__ float infinity<float>() { return __int_as_float(0x7f800000); }
template <> __device__ __forceinline__ double infinity<double>() { return __longlong_as_double(0x7ff0000000000000LL); }
template <typename C> __device__ __forceinline__ C quiet_nan() { return infinity<C>() - infinity<C>(); }

template <typename T> __device__ __forceinline__ T mn(T a, T b) { return b < a ? b : a; }
template <typename T> __device__ __forceinline__ T mx(T a, T b) { return a < b ? b : a; }
// The larger of a and b, NaN winning (a running max that a NaN turns NaN).
template <typename T> __device__ __forceinline__ T max_nan(T a, T b) { return (b > a || b != b) ? b : a; }

// ---- reductions within a block ------------------------------------------------------------------
template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
    for (int m = 16; m > 0; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
    return v;
}

template <typename T>
__device__ __forceinline__ T warp_max(T v) {
    for (int m = 16; m > 0; m >>= 1) {
        v = max_nan(v, __shfl_xor_sync(0xffffffffu, v, m));
    }
    return v;
}

// The sum of v over the block (blockDim.x a multiple of 32, at most 1024), in
// every thread; the order is fixed, so the result is too. Starts and ends with
// __syncthreads, so consecutive calls may reuse the scratch.
template <typename T>
__device__ T block_sum(T v) {
    __shared__ T scratch[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    T total = lane < warps ? scratch[lane] : T(0);
    return warp_sum(total);
}

template <typename T>
__device__ T block_max(T v) {
    __shared__ T scratch[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    T m = lane < warps ? scratch[lane] : scratch[0];
    return warp_max(m);
}

// ---- the device-side error word -----------------------------------------------------------------
// err (host-mapped memory, err.py) holds {code, position}: the first code a
// kernel reports and the lowest position that reported it. The host reads it
// after the launch and raises (KernelError, IndexOutOfRangeError).
#define ERR_DIV_ZERO 1
#define ERR_NEG_POW 2
#define ERR_INDEX 3

__device__ __forceinline__ void report(i64* err, i64 code, i64 pos) {
    atomicCAS((unsigned long long*)&err[0], 0ull, (unsigned long long)code);
    atomicMin((long long*)&err[1], (long long)pos);
}
