// The CPU emulation of the CUDA built-ins the kernels use, so that the same
// .cu files compile with g++ (-DCANDLE_EMU) into libcuda_emu.so: a fake
// driver (driver.cpp) that runs every kernel on the host. It checks the
// kernels' logic, the host glue's argument packing and the plugin's use of
// the driver API without a GPU; it says nothing of speed, of the memory
// model, of races between threads, or of what NVIDIA's compiler and
// libdevice do (the math functions here are glibc's).
//
// Each CUDA thread of a block is a fiber (ucontext) on one OS thread;
// __syncthreads and the warp shuffles are barriers that switch fibers, so
// shared memory and warp collectives behave as on a GPU, and a barrier that
// not every thread reaches is reported as a deadlock.
#pragma once

#include <cuda_fp16.h>
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <typeinfo>
#include <utility>

#ifndef __global__
#define __global__
#endif
#ifndef __device__
#define __device__
#endif
#undef __forceinline__
#define __forceinline__ inline
#undef __noinline__
#define __noinline__ __attribute__((noinline))
#undef __shared__
#define __shared__ static
#define __launch_bounds__(...)

namespace emu {

struct Fiber;
extern Fiber* current;
extern dim3 block_idx, block_dim, grid_dim;
const dim3& thread_idx();
void sync_block();
// Warp collectives: every lane of mask posts its value, then reads lane src's.
unsigned long long exchange(unsigned mask, unsigned long long value, int src);
int lane();
void* dynamic_shared();

template <typename T>
T shuffle(unsigned mask, T v, int src) {
    static_assert(sizeof(T) <= 8, "shuffle of a value wider than 8 bytes");
    unsigned long long bits = 0;
    std::memcpy(&bits, &v, sizeof(T));
    bits = exchange(mask, bits, src);
    T out;
    std::memcpy(&out, &bits, sizeof(T));
    return out;
}

// ---- the kernel registry: each KERNEL registers how to call it from a
// parameter buffer laid out as the device ABI lays one (natural alignment).
struct KernelEntry {
    void* fn;
    size_t (*size)();                              // the bytes its parameters take
    void (*invoke)(void* fn, const char* params);  // calls fn with the unpacked parameters
};
void register_kernel(const char* name, KernelEntry entry);

template <typename... A>
struct Signature {
    static size_t offsets(size_t* offs) {
        size_t at = 0, i = 0;
        ((at = (at + alignof(A) - 1) / alignof(A) * alignof(A), offs[i++] = at, at += sizeof(A)), ...);
        return at;
    }
    static size_t size() {
        size_t offs[sizeof...(A) + 1];
        return offsets(offs);
    }
    template <size_t... I>
    static void call(void (*fn)(A...), const char* buf, const size_t* offs, std::index_sequence<I...>) {
        fn(*reinterpret_cast<const A*>(buf + offs[I])...);
    }
    static void invoke(void* fn, const char* buf) {
        size_t offs[sizeof...(A) + 1];
        offsets(offs);
        call(reinterpret_cast<void (*)(A...)>(fn), buf, offs, std::index_sequence_for<A...>{});
    }
};

template <typename... A>
int register_signature(const char* name, void (*fn)(A...)) {
    register_kernel(name, KernelEntry{(void*)fn, &Signature<A...>::size, &Signature<A...>::invoke});
    return 0;
}

}  // namespace emu

#define EMU_REGISTER(name) static int emu_registered_##name = emu::register_signature(#name, &name);

#define threadIdx (emu::thread_idx())
#define blockIdx (emu::block_idx)
#define blockDim (emu::block_dim)
#define gridDim (emu::grid_dim)
#define warpSize 32

inline void __syncthreads() { emu::sync_block(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { emu::exchange(mask, 0, emu::lane()); }

template <typename T> T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
    int base = emu::lane() & ~(width - 1);
    return emu::shuffle(mask, v, base + (src & (width - 1)));
}
template <typename T> T __shfl_xor_sync(unsigned mask, T v, int m, int width = 32) {
    int l = emu::lane(), base = l & ~(width - 1);
    return emu::shuffle(mask, v, base + ((l - base) ^ m));
}
template <typename T> T __shfl_down_sync(unsigned mask, T v, unsigned d, int width = 32) {
    int l = emu::lane(), base = l & ~(width - 1), src = l - base + (int)d;
    return emu::shuffle(mask, v, src < width ? base + src : l);
}
template <typename T> T __shfl_up_sync(unsigned mask, T v, unsigned d, int width = 32) {
    int l = emu::lane(), base = l & ~(width - 1), src = l - base - (int)d;
    return emu::shuffle(mask, v, src >= 0 ? base + src : l);
}
unsigned __ballot_sync(unsigned mask, int predicate);
inline int __any_sync(unsigned mask, int p) { return __ballot_sync(mask, p) != 0; }
inline int __all_sync(unsigned mask, int p) { return __ballot_sync(mask, p) == (mask & __ballot_sync(mask, 1)); }

// Atomics: the fibers of a launch share one OS thread and launches are
// serialized, so a read-modify-write cannot be interleaved.
template <typename T> T atomicAdd(T* p, T v) { T old = *p; *p = old + v; return old; }
template <typename T> T atomicExch(T* p, T v) { T old = *p; *p = v; return old; }
template <typename T> T atomicMin(T* p, T v) { T old = *p; if (v < old) *p = v; return old; }
template <typename T> T atomicMax(T* p, T v) { T old = *p; if (old < v) *p = v; return old; }
template <typename T> T atomicOr(T* p, T v) { T old = *p; *p = old | v; return old; }
template <typename T> T atomicCAS(T* p, T cmp, T v) { T old = *p; if (old == cmp) *p = v; return old; }

// The CUDA-only math and bit functions the kernels may call.
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : x > 1.0f ? 1.0f : x; }
inline int __float_as_int(float x) { int i; std::memcpy(&i, &x, 4); return i; }
inline unsigned __float_as_uint(float x) { unsigned i; std::memcpy(&i, &x, 4); return i; }
inline float __int_as_float(int i) { float x; std::memcpy(&x, &i, 4); return x; }
inline float __uint_as_float(unsigned i) { float x; std::memcpy(&x, &i, 4); return x; }
inline double __longlong_as_double(long long i) { double x; std::memcpy(&x, &i, 8); return x; }
inline long long __double_as_longlong(double x) { long long i; std::memcpy(&i, &x, 8); return i; }
// Arithmetic rounded on its own (no contraction: g++ in ISO C++ mode contracts nothing).
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
    return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}
inline int __dp4a(int a, int b, int c) {
    for (int k = 0; k < 4; ++k) c += (int)(signed char)(a >> (8 * k)) * (int)(signed char)(b >> (8 * k));
    return c;
}
template <typename T> T __ldg(const T* p) { return *p; }
