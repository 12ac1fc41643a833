// Strided copy and fill, in place on any layout of the destination. Both
// move bits: one kernel per element width. A destination narrower than the
// memory's access granule is still written element by element (byte and
// 16-bit stores are native on NVIDIA GPUs). Contiguous and 16-byte aligned,
// both move 16-byte packs (each_pack).
#include "common.cuh"

template <typename W>
__device__ void copy_impl(W* dst, const W* src, i64 n, const Strided<2>& l) {
    if (l.rank == 0 && each_pack(n, [](i64, W v) { return v; }, dst, src)) return;
    each_element(n, l, [&](i64, const auto& o) { return src[o[1]]; }, [&](i64, const auto& o, W v) { dst[o[0]] = v; });
}
#define COPY(W, bits) \
    KERNEL(copy_##bits, W* dst, const W* src, i64 n, Strided<2> l) { copy_impl<W>(dst, src, n, l); }
COPY(u8, 8) COPY(u16, 16) COPY(u32, 32) COPY(u64, 64)

template <typename W>
__device__ void fill_impl(W* dst, u64 bits, i64 n, const Strided<1>& l) {
    const W value = (W)bits;
    if (l.rank == 0 && each_pack(n, [&](i64) { return value; }, dst)) return;
    each_element(n, l, [&](i64, const auto&) { return value; }, [&](i64, const auto& o, W v) { dst[o[0]] = v; });
}
#define FILL(W, bits) \
    KERNEL(fill_##bits, W* dst, u64 value, i64 n, Strided<1> l) { fill_impl<W>(dst, value, n, l); }
FILL(u8, 8) FILL(u16, 16) FILL(u32, 32) FILL(u64, 64)
