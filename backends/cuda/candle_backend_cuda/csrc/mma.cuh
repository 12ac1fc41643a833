// Tensor-core and shared-memory copy instructions (sm_80+) as device
// functions: mma.sync m16n8k16 (bf16/f16 in, f32 accumulate), ldmatrix x4
// (plain and .trans) and cp.async of 16 bytes with its commit and wait.
//
// Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16"), with
// g = lane / 4 (groupID) and t = lane % 4 (threadID_in_group); a 32-bit
// register holds two 16-bit elements, the lower-indexed one in its low half:
//   A (16x16, row): reg r holds A[g + 8 (r & 1)][2t + 8 (r >> 1) + {0, 1}]
//   B (16x8, col):  reg r holds B[2t + 8 r + {0, 1}][g]
//   C, D (16x8 f32): c[i] is C[g + 8 (i >> 1)][2t + (i & 1)]
// ldmatrix .x4: lanes 8m .. 8m + 7 give the row addresses of 8x8 matrix m
// (8 16-bit elements each); reg m of lane l gets row l / 4, columns
// 2 (l % 4) + {0, 1} of matrix m, or with .trans rows 2 (l % 4) + {0, 1},
// column l / 4.
//
// Under the CPU emulation (CANDLE_EMU) each instruction is a warp collective
// that follows these layouts: the lanes post their operands in a per-warp
// staging area, and each computes its own part of the result from all of
// them. Products of bf16/f16 values are exact in double; their sum and the
// accumulator round once to f32 (the hardware rounds about as closely).
// Blocks must be one-dimensional (warp = threadIdx.x / 32).
#pragma once

#include "common.cuh"

__device__ __forceinline__ u16 bits16(bf16 x) { return __bfloat16_as_ushort(x); }
__device__ __forceinline__ u16 bits16(f16 x) { return __half_as_ushort(x); }

// Two values rounded to T, packed: lo in the low half.
template <typename T>
__device__ __forceinline__ u32 pack2(float lo, float hi) {
    return (u32)bits16(store<T>(lo)) | ((u32)bits16(store<T>(hi)) << 16);
}

#ifdef CANDLE_EMU
#include <cstdlib>
#include <deque>
#include <vector>

namespace mma_emu {
// The staging area of each warp of the running block (one block runs at a time).
inline u64 (&stage())[32][32][10] {
    static u64 s[32][32][10];
    return s;
}
inline int warp_id() { return (int)(threadIdx.x >> 5); }
template <typename T>
inline float half_value(u64 reg, int half) {
    const u16 b = (u16)(reg >> (16 * half));
    if constexpr (IsSame<T, bf16>::value) return load<T>(__ushort_as_bfloat16(b));
    else return load<T>(__ushort_as_half(b));
}
}  // namespace mma_emu

// d = A B + c, in place in c.
template <typename T>
inline void mma_16816(float (&c)[4], const u32 (&a)[4], const u32 (&b)[2]) {
    auto& st = mma_emu::stage()[mma_emu::warp_id()];
    const int l = emu::lane();
    for (int r = 0; r < 4; ++r) st[l][r] = a[r];
    for (int r = 0; r < 2; ++r) st[l][4 + r] = b[r];
    __syncwarp();
    const int g = l >> 2, t = l & 3;
    float d[4];
    for (int i = 0; i < 4; ++i) {
        const int row = g + 8 * (i >> 1), col = 2 * t + (i & 1);
        double sum = 0;
        for (int k = 0; k < 16; ++k) {
            // A[row][k]: lane (row % 8) * 4 + (k % 8) / 2, reg (row / 8) + 2 (k / 8), half k % 2
            const int al = (row & 7) * 4 + ((k & 7) >> 1), ar = (row >> 3) + 2 * (k >> 3);
            // B[k][col]: lane col * 4 + (k % 8) / 2, reg k / 8, half k % 2
            const int bl = col * 4 + ((k & 7) >> 1), br = k >> 3;
            sum += (double)mma_emu::half_value<T>(st[al][ar], k & 1) *
                   (double)mma_emu::half_value<T>(st[bl][4 + br], k & 1);
        }
        d[i] = (float)(sum + (double)c[i]);
    }
    __syncwarp();
    for (int i = 0; i < 4; ++i) c[i] = d[i];
}

// ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16: row is this lane's row address.
template <bool TRANS>
inline void ldmatrix_x4(u32 (&r)[4], const void* row) {
    auto& st = mma_emu::stage()[mma_emu::warp_id()];
    const int l = emu::lane();
    st[l][0] = (u64)(uintptr_t)row;
    __syncwarp();
    for (int m = 0; m < 4; ++m) {
        u16 e[2];
        for (int h = 0; h < 2; ++h) {
            const int src = TRANS ? 8 * m + 2 * (l & 3) + h : 8 * m + (l >> 2);
            const int col = TRANS ? (l >> 2) : 2 * (l & 3) + h;
            e[h] = ((const u16*)(uintptr_t)st[src][0])[col];
        }
        r[m] = (u32)e[0] | ((u32)e[1] << 16);
    }
    __syncwarp();
}

// cp.async.cg.shared.global of 16 bytes; with valid false, 16 zero bytes (src-size 0). A copy lands at
// once, or, with CANDLE_EMU_CP_ASYNC=late in the environment, as late as the instruction allows: at the
// cp.async.wait_group that its group must have finished by (so that a read before the wait sees stale
// data). The first catches a copy issued while other warps still read the buffer, the second a missing
// wait.
namespace mma_emu {
struct Copy {
    void* dst;
    const void* src;
    bool valid;
    void land() const {
        if (valid) std::memcpy(dst, src, 16);
        else std::memset(dst, 0, 16);
    }
};
struct Groups {
    std::vector<Copy> open;
    std::deque<std::vector<Copy>> committed;
};
inline Groups& groups() {
    static Groups g[1024];
    return g[threadIdx.x];
}
inline bool late() {
    static const bool on = [] {
        const char* v = std::getenv("CANDLE_EMU_CP_ASYNC");
        return v && std::strcmp(v, "late") == 0;
    }();
    return on;
}
}  // namespace mma_emu

inline void cp_async_16(void* dst, const void* src, bool valid) {
    const mma_emu::Copy c{dst, src, valid};
    if (mma_emu::late()) mma_emu::groups().open.push_back(c);
    else c.land();
}
inline void cp_async_commit() {
    auto& g = mma_emu::groups();
    g.committed.push_back(std::move(g.open));
    g.open.clear();
}
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
inline void cp_async_wait() {
    auto& g = mma_emu::groups();
    while (g.committed.size() > (size_t)N) {
        for (const auto& c : g.committed.front()) c.land();
        g.committed.pop_front();
    }
}

#else

// The instructions need sm_80 (cp.async, bf16 mma): an older GPU compiles a trap in their place (NVRTC
// compiles the whole module for it), and the host never launches these kernels there.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define MMA_SM80(...) __trap()
#else
#define MMA_SM80(...) __VA_ARGS__
#endif

template <typename T>
__device__ __forceinline__ void mma_16816(float (&c)[4], const u32 (&a)[4], const u32 (&b)[2]);

#define MMA_16816(T, ptx)                                                                                 \
    template <>                                                                                           \
    __device__ __forceinline__ void mma_16816<T>(float (&c)[4], const u32 (&a)[4], const u32 (&b)[2]) {   \
        MMA_SM80(asm volatile(                                                                            \
            "mma.sync.aligned.m16n8k16.row.col.f32." ptx "." ptx ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "    \
            "{%8,%9}, {%0,%1,%2,%3};\n"                                                                   \
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])                                              \
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1])));                         \
    }
MMA_16816(bf16, "bf16")
MMA_16816(f16, "f16")
#undef MMA_16816

__device__ __forceinline__ u32 shared_address(const void* p) { return (u32)__cvta_generic_to_shared(p); }

template <bool TRANS>
__device__ __forceinline__ void ldmatrix_x4(u32 (&r)[4], const void* row) {
    if constexpr (TRANS)
        MMA_SM80(asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(shared_address(row))
                     : "memory"));
    else
        MMA_SM80(asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(shared_address(row))
                     : "memory"));
}

__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool valid) {
    MMA_SM80(asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(dst)), "l"(src),
                 "r"(valid ? 16 : 0)
                 : "memory"));
}
__device__ __forceinline__ void cp_async_commit() { MMA_SM80(asm volatile("cp.async.commit_group;\n" ::: "memory")); }
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    MMA_SM80(asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"));
}

#endif
